#!/usr/bin/env bash
# An agent as a shell command: the task arrives as JSON on stdin, the model is asked once with
# curl at $OPENAI_BASE_URL (key $OPENAI_API_KEY), and the reply is the answer, on stdout.
#   ludus eval agent --model oracle --env-args '{"command": "bash examples/agents/ask.sh", "env": "arithmetic"}'
set -euo pipefail
prompt=$(python3 -c 'import json, sys; print(json.load(sys.stdin)["prompt"])')
body=$(PROMPT="$prompt" python3 -c 'import json, os
print(json.dumps({"model": "any", "messages": [{"role": "user", "content": os.environ["PROMPT"]}]}))')
curl --silent --show-error --fail-with-body "$OPENAI_BASE_URL/chat/completions" \
  -H "Authorization: Bearer $OPENAI_API_KEY" -H "Content-Type: application/json" -d "$body" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"] or "")'
