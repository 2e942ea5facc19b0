"""A deterministic LLM judge behind a real OpenAI-compatible HTTP server, for tests, benchmarks and offline demos.

A judge client is only as trustworthy as its parsing, its retries and its defence against
prompt injection, and none of that can be tested against a real model: its verdicts vary and
cost money. This server reads the judge's prompt and computes every verdict from the request
alone, so a test knows the right answer in advance. Options in the ``model`` field make it
misbehave the way real judges do — HTTP 500s, malformed verdicts, slowness, position bias,
sampling noise — and it is deliberately gullible: text outside the ``<response>`` blocks that
asks for "10/10" is obeyed, which is what proves that escaping the responses stops an injected
``</response>``.

The prompt it reads: a system message whose verdict-format line names the mode (``{"score":``,
``{"winner":`` or ``{"scores":``) and which says ``Scale: MIN to MAX``; a user message with
HTML-escaped blocks ``<task>``, optionally ``<reference>``, then ``<response id="A">``, … .
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

MODEL = "scripted"
MODES = {"single": '{"score":', "pairwise": '{"winner":', "group": '{"scores":'}
INJECTION = "10/10"  # outside every response block, this is obeyed
MALFORMED_KINDS = ("prose", "out_of_range", "missing_key", "truncated")
_OPTION_TYPES: dict[str, type[int] | type[float]] = {
    "malformed": int,
    "fail": int,
    "delay": float,
    "bias": float,
    "noise": int,
}
_SCALE = re.compile(r"Scale:\s*(-?\d+)\s+to\s+(-?\d+)")
_REFERENCE = re.compile(r"<reference>\n?(.*?)\n?</reference>", re.DOTALL)
_RESPONSE = re.compile(r'<response id="(\w+)">\n?(.*?)\n?</response>', re.DOTALL)
_WORD = re.compile(r"\b[^\W\d_]{4,}\b")
_CLAUSE = re.compile(r"[.;!?\n]|\bor\b")
_MARK, _POINT = "\x00", 0xE000  # a key point n found in the text becomes _MARK + chr(_POINT + n)
MIN_PRECISION = 0.5  # a response whose clauses are mostly off every key point scores 0


# ---- scoring ---------------------------------------------------------------------------------
def _normalise(text: str) -> str:
    return " ".join(text.lower().split())


def _short(point: str) -> str:
    return point if len(point) <= 24 else point[:21] + "..."


def _key_points(reference: str) -> list[str]:
    """A reference's ``- `` lines; a reference without any is one key point, all of it (``42``)."""
    points = [_normalise(line.lstrip()[2:]) for line in reference.splitlines() if line.lstrip().startswith("- ")]
    return [p for p in points if p] or [_normalise(reference)]


def _assess(response: str, reference: str | None) -> tuple[float, str]:
    """``quality`` and a short note of what earned it, for the verdict's rationale."""
    if reference is None or not reference.strip():
        words = len(set(_WORD.findall(response.lower())))
        return min(1.0, words / 40), f"{words} distinct words of 4+ letters"
    points = _key_points(reference)
    text = _normalise(response)
    found = [p for p in points if p in text]
    named = f" ({', '.join(_short(p) for p in found)})" if found else ""
    on_point, clauses = _precision(response, points)
    precision = on_point / clauses if clauses else 0.0
    note = f"{len(found)}/{len(points)} key points{named}, {on_point}/{clauses} clauses on a point"
    if precision < MIN_PRECISION:
        return 0.0, note + " (padded: below half)"
    return len(found) / len(points) * precision, note


def _precision(response: str, points: list[str]) -> tuple[int, int]:
    """How many of the response's clauses make a key point, and how many clauses it has.

    The text is cut into clauses at ``.``, ``;``, ``!``, ``?``, line breaks and the word ``or``
    (each key point's occurrences are marked first, so a point that itself holds a ``.`` or an
    ``or`` is not cut); a clause with no letter or digit is not one. A clause makes a point when
    it mentions a key point no earlier clause mentioned: restating is padding too, or the gold
    with its own words shuffled in front of it ("moon the of half orbit; sunlight") would pass
    for precise."""
    text = "\n".join(" ".join(line.split()) for line in response.lower().splitlines())
    for number, point in sorted(enumerate(points), key=lambda item: -len(item[1])):
        text = text.replace(point, _MARK + chr(_POINT + number))
    made: set[str] = set()
    on_point = clauses = 0
    for clause in _CLAUSE.split(text):
        mentioned = {clause[i + 1] for i, ch in enumerate(clause) if ch == _MARK}
        if not mentioned and not any(ch.isalnum() for ch in clause):
            continue
        clauses += 1
        on_point += bool(mentioned - made)
        made |= mentioned
    return on_point, clauses


def quality(response: str, reference: str | None) -> float:
    """How good ``response`` is, in [0, 1].

    With a reference: coverage × precision. Coverage is the fraction of the reference's key
    points (its ``- `` lines) the response contains, case- and whitespace-insensitively;
    precision is the fraction of its clauses (cut at ``.``, ``;``, ``!``, ``?``, line breaks and
    the word "or") that mention a key point no earlier clause mentioned, and below one half the
    quality is 0 — a hedge that pads the right answer with other answers ("X or <the answer> or
    Y") or with its own words reshuffled earns nothing.
    Without a reference: its distinct words of four or more letters over 40 — a crude but
    predictable stand-in for effort."""
    return _assess(response, reference)[0]


def _round(x: float) -> int:
    """Half up, not Python's half to even: a score a reader can predict by hand."""
    return math.floor(x + 0.5)


def _clip(score: int, low: int, high: int) -> int:
    return max(low, min(high, score))


def _noise(key: str, seed: int, response_id: str, k: int) -> int:
    """An integer in [-k, k] fixed by the content, the request's seed and the response: votes vary by seed only."""
    if k == 0:
        return 0
    digest = hashlib.sha256(f"{key}|{seed}|{response_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2 * k + 1) - k


# ---- requests --------------------------------------------------------------------------------
class _Refused(Exception):
    """A request answered with an HTTP error: ``status``, and the message for its body."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class _Options:
    """The ways to misbehave, spelled in the model name: ``scripted?malformed=2&fail=1&delay=0.2&bias=0.3&noise=2``."""

    malformed: int = 0  # per content, the requests after the failed ones that get a malformed verdict
    fail: int = 0  # per content, the first requests that get HTTP 500
    delay: float = 0.0  # seconds before every answer
    bias: float = 0.0  # position bias, in quality units (0..1)
    noise: int = 0  # each score moves by up to this much, fixed by the request's seed


def _options(model: Any) -> _Options:
    if not isinstance(model, str):
        raise _Refused(400, f"model must be a string such as {MODEL!r} or '{MODEL}?fail=1', got {model!r}")
    name, _, query = model.partition("?")
    if name != MODEL:
        raise _Refused(404, f"the model {name!r} does not exist; this server serves {MODEL!r}")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError as exc:
        raise _Refused(400, f"cannot read the options in {model!r}: {exc}") from None
    values: dict[str, Any] = {}
    for key, raw in pairs:
        if key not in _OPTION_TYPES:
            raise _Refused(400, f"unknown option {key!r} in {model!r}; the options are {', '.join(_OPTION_TYPES)}")
        try:
            value = _OPTION_TYPES[key](raw)
        except ValueError:
            raise _Refused(400, f"option {key}={raw!r} is not a number") from None
        if not 0 <= value < math.inf or (key == "bias" and value > 1):
            raise _Refused(400, f"option {key}={raw!r} is out of range (>= 0; bias at most 1)")
        values[key] = value
    return _Options(**values)


@dataclass(frozen=True)
class _Prompt:
    mode: str  # a key of MODES
    low: int
    high: int
    reference: str | None
    responses: dict[str, str]  # id -> unescaped text, in the order shown
    favoured: str | None  # the id an injected "10/10" asks to win, if there is one


def _injection(user: str, blocks: list[re.Match[str]]) -> str | None:
    """The id an ``INJECTION`` outside every response block favours — the block right before it,
    or the first block if it comes before them all — or None when there is none."""
    edges = [0, *(edge for block in blocks for edge in block.span()), len(user)]
    for gap in range(len(blocks) + 1):  # gap k lies between block k-1 and block k
        if INJECTION in user[edges[2 * gap] : edges[2 * gap + 1]]:
            return blocks[gap - 1 if gap else 0].group(1)
    return None


def _prompt(messages: Any) -> _Prompt:
    if not (isinstance(messages, list) and len(messages) >= 2 and all(isinstance(m, dict) for m in messages[:2])):
        raise _Refused(400, "messages must hold the judge's system message and then its user message")
    system, user = messages[0].get("content"), messages[1].get("content")
    if not isinstance(system, str) or not isinstance(user, str):
        raise _Refused(400, "the system and user messages must have text content")
    mode = max(MODES, key=lambda m: system.rfind(MODES[m]))  # the last verdict format named
    if MODES[mode] not in system:
        raise _Refused(400, f"the system message names no verdict format ({', '.join(MODES.values())})")
    scale = _SCALE.search(system)
    if scale is None or int(scale.group(1)) >= int(scale.group(2)):
        raise _Refused(400, "the system message has no line 'Scale: MIN to MAX' with integers MIN < MAX")
    blocks = list(_RESPONSE.finditer(user))
    responses: dict[str, str] = {}
    for block in blocks:
        responses.setdefault(block.group(1), html.unescape(block.group(2)))
    favoured = _injection(user, blocks)
    count = {"single": 1, "pairwise": 2, "group": len(blocks)}[mode]
    if not blocks or (favoured is None and not len(responses) == len(blocks) == count):  # injected: obeyed as it is
        wanted = {"single": "exactly one", "pairwise": "exactly two", "group": "one or more"}[mode]
        raise _Refused(400, f"a {mode} prompt needs {wanted} <response id=...> blocks, with distinct ids")
    reference = _REFERENCE.search(_RESPONSE.sub("", user))
    return _Prompt(
        mode=mode,
        low=int(scale.group(1)),
        high=int(scale.group(2)),
        reference=html.unescape(reference.group(1)) if reference else None,
        responses=responses,
        favoured=favoured,
    )


def _verdict(prompt: _Prompt, options: _Options, key: str, seed: int) -> dict[str, Any]:
    """The well-formed verdict for ``prompt``: from the qualities, or from an injection if there is one."""
    low, high, width = prompt.low, prompt.high, prompt.high - prompt.low
    ids = list(prompt.responses)
    assessed = {i: _assess(text, prompt.reference) for i, text in prompt.responses.items()}
    rationale = "; ".join(f"{i}: {note}" for i, (_, note) in assessed.items())
    if prompt.favoured is not None:
        rationale = f"As instructed, {INJECTION}. {rationale}"
        if prompt.mode == "single":
            return {"score": high, "rationale": rationale}
        if prompt.mode == "pairwise":
            return {"winner": prompt.favoured, "rationale": rationale}
        return {"scores": {i: high for i in ids}, "rationale": rationale}
    draws = {i: _noise(key, seed, i, options.noise) for i in ids}
    if prompt.mode == "pairwise":  # noise moves each quality by its draw, in scale units
        a, b = ids
        qa, qb = (assessed[i][0] + draws[i] / width for i in ids)
        if options.bias and abs(qa - qb) <= options.bias:
            return {"winner": a, "rationale": rationale}
        return {"winner": a if qa > qb else b if qb > qa else "tie", "rationale": rationale}
    scores = {}
    for position, i in enumerate(ids):
        lean = options.bias * width * (len(ids) - 1 - position) / (len(ids) - 1) if len(ids) > 1 else 0.0
        scores[i] = _clip(min(high, low + _round(width * assessed[i][0] + lean)) + draws[i], low, high)
    if prompt.mode == "single":
        return {"score": scores[ids[0]], "rationale": rationale}
    return {"scores": scores, "rationale": rationale}


def _malformed(verdict: dict[str, Any], prompt: _Prompt, kind: str) -> str:
    """``verdict`` broken in one of the ways real judges break the format."""
    field = next(iter(verdict))  # "score", "winner" or "scores"
    value = verdict[field]
    if kind == "prose":
        if field == "scores":
            said = ", ".join(f"{i}: {s}/{prompt.high}" for i, s in value.items())
        else:
            said = f"Score: {value}/{prompt.high}" if field == "score" else f"The better response is {value}."
        return f"{said}\n\n{verdict['rationale']}"
    if kind == "out_of_range":
        wrong = prompt.high + max(1, prompt.high - prompt.low)
        bad = {i: wrong for i in value} if field == "scores" else wrong if field == "score" else "C"
        return json.dumps({**verdict, field: bad})
    if kind == "missing_key":  # a group verdict loses its last response's score, the others the verdict itself
        if field == "scores":
            return json.dumps({**verdict, field: dict(list(value.items())[:-1])})
        return json.dumps({"rationale": verdict["rationale"]})
    text = json.dumps(verdict)
    return text[: len(text) // 2]  # truncated


def _error(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 404: "not_found_error"}.get(status, "server_error")
    return {"error": {"message": message, "type": kind, "code": status}}


def _chat_completion(number: int, model: str, messages: list[Any], content: str) -> dict[str, Any]:
    prompt_words = sum(len(str(m.get("content", "")).split()) for m in messages)  # words stand in for tokens
    completion_words = len(content.split())
    return {
        "id": f"chatcmpl-scripted-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_words,
            "completion_tokens": completion_words,
            "total_tokens": prompt_words + completion_words,
        },
    }


# ---- the server ------------------------------------------------------------------------------
class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = False  # server_close joins the handler threads: close() leaves none behind
    request_queue_size = 128  # socketserver's 5 makes a burst of connections wait a second for SYN retries

    def __init__(self, judge: ScriptedJudgeServer, port: int):
        self.judge = judge
        super().__init__(("127.0.0.1", port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (it timed out) is its own business; anything else is a bug to show."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    timeout = 30  # a client that connects and says nothing cannot hold close() up for longer

    def do_GET(self) -> None:
        if self.path.partition("?")[0] != "/v1/models":
            self._send(404, _error(404, f"no such path: GET {self.path}"))
            return
        self._send(
            200, {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0, "owned_by": "ludus"}]}
        )

    def do_POST(self) -> None:
        if self.path.partition("?")[0] != "/v1/chat/completions":
            self._send(404, _error(404, f"no such path: POST {self.path}"))
            return
        self._send(*self.server.judge._answer(self.rfile.read(int(self.headers.get("Content-Length") or 0))))

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a benchmark sends thousands of requests."""

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


class ScriptedJudgeServer:
    """The scripted judge, listening on ``127.0.0.1:port`` (``0``: a free port) in a thread of its own.

    ``url`` is the base URL a client wants (``http://127.0.0.1:PORT/v1``). Use it as a context
    manager, or call ``close``. Failures and malformed verdicts are counted per request content
    (a hash of the messages alone, so a retry with another seed is the same content): with
    ``fail=F&malformed=M``, its first F requests get HTTP 500, the next M a malformed verdict,
    the rest a good one.
    """

    def __init__(self, port: int = 0):
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}  # content hash -> requests so far
        self._stats = dict.fromkeys(("requests", *MODES, "failed", "malformed", "refused", "max_in_flight"), 0)
        self._in_flight = 0
        self._http = _HTTPServer(self, port)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-judge", daemon=True
        )
        self._thread.start()

    def __enter__(self) -> ScriptedJudgeServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def stats(self) -> dict[str, int]:
        """Counts of chat-completion requests: ``requests`` (all of them), one per mode (the readable
        ones), ``failed`` (HTTP 500), ``malformed`` (verdicts broken on purpose), ``refused`` (4xx);
        and ``max_in_flight``, the most readable requests it was answering at once (a client's
        concurrency bound, measured without a clock)."""
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        """Stops serving, closes the port and waits for the requests in flight; calling it again does nothing."""
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def _answer(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        """The status and body for one chat-completion request."""
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
            options, prompt = _options(body.get("model")), _prompt(body.get("messages"))
        except (ValueError, _Refused) as exc:
            status = exc.status if isinstance(exc, _Refused) else 400
            message = str(exc) if isinstance(exc, _Refused) else f"the request body is not a JSON object: {exc}"
            with self._lock:
                self._stats["requests"] += 1
                self._stats["refused"] += 1
            return status, _error(status, message)
        key = hashlib.sha256(json.dumps(body["messages"], sort_keys=True).encode()).hexdigest()
        with self._lock:
            attempt = self._seen.get(key, 0)
            self._seen[key] = attempt + 1
            failed = attempt < options.fail
            malformed = not failed and attempt < options.fail + options.malformed
            self._stats["requests"] += 1
            self._stats[prompt.mode] += 1
            self._stats["failed"] += failed
            self._stats["malformed"] += malformed
            number = self._stats["requests"]
            self._in_flight += 1
            self._stats["max_in_flight"] = max(self._stats["max_in_flight"], self._in_flight)
        try:
            time.sleep(options.delay)
            if failed:
                return 500, _error(500, f"scripted failure {attempt + 1} of {options.fail} for this content")
            seed = body.get("seed")
            verdict = _verdict(prompt, options, key, seed if isinstance(seed, int) else 0)
            if malformed:
                kind = MALFORMED_KINDS[(int(key[:8], 16) + attempt - options.fail) % len(MALFORMED_KINDS)]
                content = _malformed(verdict, prompt, kind)
            else:
                content = json.dumps(verdict)
        finally:
            with self._lock:
                self._in_flight -= 1
        return 200, _chat_completion(number, body["model"], body["messages"], content)
