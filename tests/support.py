"""Shared by several test modules: a tiny transformers checkpoint built on the spot, a task a
tiny model learns from the reward (``digit-map``) and its supervised warm start, a real HTTP
server for an ASGI app on 127.0.0.1, a web page of another origin for a real browser to open,
vLLM's server in its own virtual environment, and a check that a scorer never runs code smuggled
into a reply."""

import contextlib
import http.server
import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import torch
import uvicorn

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing here may reach the Hub

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from ludus.core import Score, SingleTurnEnv, Status, Task  # noqa: E402

CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
CORPUS = [
    "What is 12 + 30? The answer is 42.",
    "Reply with the final answer only. 6+3=9",
    CALL,
    "The quick brown fox jumps over the lazy dog.",
]
# Renders tools (their JSON) and assistant tool calls (as <tool_call> blocks), like real templates.
TEMPLATE = (
    "{{ bos_token }}"
    "{% if tools %}<|tools|>{% for t in tools %}{{ t.function | tojson }}{% endfor %}{{ '\\n' }}{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}"
    "<tool_call>{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}</tool_call>"
    "{% endfor %}"
    "{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
# Knows neither tools nor tool calls, like many base models' templates.
BARE_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{% if m.role == 'assistant' %}{{ eos_token }}{% endif %}{{ '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_hf_checkpoint(folder: Path, context: int = 256, head_dim: int = 8, texts: Sequence[str] = ()) -> Path:
    """A randomly initialised 2-layer Llama and a byte-level BPE tokenizer with a chat template
    that renders tools and tool calls, saved to ``folder``: a real transformers checkpoint
    made without any download. Four heads of ``head_dim`` (vLLM's CPU attention needs 32 or more).
    ``texts``: more for the tokenizer to learn from (up to 1,024 tokens), so that prompts made of
    such text (tool schemas) take a few hundred positions rather than one per character."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        [*CORPUS, *texts],
        trainers.BpeTrainer(
            vocab_size=1024 if texts else 320,
            special_tokens=["<pad>", "<s>", "</s>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    tokenizer.chat_template = TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=4 * head_dim,
        intermediate_size=8 * head_dim,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=context,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# ---- a task a tiny model learns from the reward ---------------------------------------------------
class DigitTasks:
    """Prompts "a?" whose answer is the digit (3a mod 10): ten facts, only learnable from the reward."""

    size = None

    def __init__(self, split: str):
        self.split = split

    def get(self, index: int) -> Task:
        a = random.Random(f"{self.split}:{index}").randint(0, 9)
        return Task(id=f"{self.split}/{index}", prompt=f"{a}?", answer=str(3 * a % 10))


class DigitMapEnv(SingleTurnEnv):
    name = "digit-map"
    description = "reward 1 when the reply is the digit 3a mod 10"
    system_prompt = None
    quick = True

    def default_tasks(self, split="train"):
        return DigitTasks(split)

    def score(self, task: Task, completion: str) -> Score:
        if completion.strip() == task.answer:
            return Score(1.0, Status.CORRECT, "right digit")
        return Score.zero(Status.WRONG, f"expected {task.answer}")


def warm_start_digits(base: Path, out: Path, steps: int = 45) -> Path:
    """``base`` after a short supervised warm start on gold digits (16 prompts a step, AdamW 1e-3,
    one thread), saved to ``out``: the tiny Llama then writes a digit and stops, and samples the
    right one about a third of the time at temperature 1."""
    from ludus.policies.hf import HFPolicy

    torch.manual_seed(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy = HFPolicy.load(base)
        env, source = DigitMapEnv(), DigitTasks("train")
        optimizer = torch.optim.AdamW(policy.module.parameters(), lr=1e-3)
        eos = policy.tokenizer.eos_token_id
        for step in range(steps):
            tasks = [source.get(1000 + step * 16 + i) for i in range(16)]
            prompts = [policy.encode_prompt(env.reset(t, seed=0).messages) for t in tasks]
            targets = [policy.tokenizer.encode(t.answer, add_special_tokens=False) + [eos] for t in tasks]
            logp, _ = policy.token_logprobs(prompts, targets)
            optimizer.zero_grad()
            (-logp.mean()).backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    policy.save(out)
    return out


@contextlib.contextmanager
def script_module(path: Path, name: str) -> Iterator[Any]:
    """The script at ``path`` (a benchmark) imported as module ``name``, which is in
    ``sys.modules`` while in use: dataclasses look their module up."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(name, None)


@contextlib.contextmanager
def serving(app: Any, path: str = "/v1", send_buffer: int | None = None, **options: Any) -> Iterator[str]:
    """Serve the ASGI ``app`` on a free port of 127.0.0.1 in a background thread; yields its URL
    plus ``path``. ``send_buffer`` sets the kernel's send buffer of each connection (a small one
    makes the server wait for a client that stops reading); ``options`` go to ``uvicorn.Config``."""
    sock = socket.socket()
    if send_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, send_buffer)  # accepted connections inherit it
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1, **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(2000):  # a bound on a broken start-up, not a speed check
            if server.started or not thread.is_alive():
                break
            time.sleep(0.005)
        assert server.started, "the test server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{path}"
    finally:
        server.should_exit = True
        thread.join()
        sock.close()


@contextlib.contextmanager
def page_of_another_origin(html: str) -> Iterator[str]:
    """``html`` served at ``http://localhost:PORT/``, an origin other than any ``127.0.0.1:PORT``
    server's; yields that origin."""

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.end_headers()
            self.wfile.write(html.encode())

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://localhost:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def results_in_chromium(pages: list[tuple[str, str | None]], extra_args: tuple[str, ...] = ()) -> list[Any]:
    """Open each ``(url, script)`` in a real Chromium (the one the web environment drives): with
    no script, wait for the page's own to set ``window.done`` and return its ``window.results``;
    else return what ``script`` (a JavaScript function, run in the page) returns. Only loopback
    is reachable (the web environment's launch arguments)."""
    from playwright.sync_api import sync_playwright

    from ludus.envs.web.browser import find_chromium, launch_args

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=find_chromium(), args=[*launch_args(), *extra_args])
        try:
            results = []
            for url, script in pages:
                tab = browser.new_page()
                tab.goto(url)
                if script is None:
                    tab.wait_for_function("window.done === true", timeout=60_000)
                    script = "() => window.results"
                results.append(tab.evaluate(script))
            return results
        finally:
            browser.close()


# ---- vLLM, in its own virtual environment -------------------------------------------------------
REPO = Path(__file__).resolve().parent.parent


def vllm_python() -> str:
    """The python of vLLM's virtual environment, built by ``scripts/vllm-venv`` the first time
    (a few minutes; later calls return at once)."""
    done = subprocess.run([str(REPO / "scripts" / "vllm-venv")], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"scripts/vllm-venv failed ({done.returncode}):\n{done.stderr[-4000:]}")
    return done.stdout.strip().splitlines()[-1]


class VLLMServer:
    """vLLM's OpenAI-compatible server for the checkpoint ``model``, on a free port of 127.0.0.1,
    with the weight endpoints (``VLLM_SERVER_DEV_MODE``) and log-probs of the temperature-scaled
    distribution. Its caches, temporary files and log stay in ``folder``; it runs in a process
    group of its own, so :meth:`kill` takes its engine and worker processes with it."""

    def __init__(self, python: str, model: Path, folder: Path, name: str = "tiny"):
        self.python, self.model, self.folder, self.name = python, model, folder, name
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def log(self) -> Path:
        return self.folder / "vllm.log"

    def start(self, timeout_s: float = 600) -> "VLLMServer":
        for sub in ("tmp", "cache"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        env = {
            **{name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"},  # vLLM binds its own
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": "1",
            "TMPDIR": str(self.folder / "tmp"),
            "VLLM_CACHE_ROOT": str(self.folder / "cache"),
            "TORCHINDUCTOR_CACHE_DIR": str(self.folder / "cache" / "inductor"),
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        command = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model), "--served-model-name", self.name,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--enforce-eager", "--dtype", "float32", "--max-model-len", "256",
            "--logprobs-mode", "processed_logprobs", "--seed", "0",
        ]  # fmt: skip
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.folder, start_new_session=True
            )
        deadline = time.monotonic() + timeout_s  # a bound on a broken start-up, not a speed check
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()  # its engine processes may outlive it
                raise RuntimeError(f"vLLM exited with {self.proc.returncode} while starting:\n{self.tail()}")
            if self._healthy():
                return self
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"vLLM did not answer /health within {timeout_s} s:\n{self.tail()}")

    def _healthy(self) -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self._healthy()

    def ensure(self) -> "VLLMServer":
        """This server, started again if it died (the fault test kills it)."""
        if not self.alive():
            self.stop()
            self.start()
        return self

    def kill(self) -> None:
        """SIGKILL to the server and its engine processes at once: a crash, not a shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(ProcessLookupError):  # engine processes a dead server left behind
            os.killpg(self.proc.pid, signal.SIGKILL)

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


# ---- tool environments, one action at a time ----------------------------------------------------
def act(env: Any, name: str, **args: Any) -> Any:
    """``env.step`` with one call of the tool ``name``."""
    from ludus.core.types import Message, ToolCall

    return env.step(Message("assistant", "", tool_calls=[ToolCall(name, args, id="c0")]))


def play_reference(env: Any, task: Task, seed: int = 0) -> Any:
    """Reset on ``task`` and play its ``reference_actions`` until the episode ends; the last step."""
    env.reset(task, seed)
    result = None
    for action in env.reference_actions(task):
        result = env.step(action)
        if result.done:
            break
    return result


def package_without_dependencies(requirement: str, module: str) -> Path:
    """The folder holding ``module`` from ``requirement`` installed alone (``pip --no-deps``) into
    Ludus's cache, for packages whose declared dependencies clash with ours or are far too heavy
    for what a test reads of them; the folder is added to ``sys.path``."""
    import shutil
    import sys

    from ludus.core.cache import cache_dir

    target = cache_dir("test-packages", requirement.replace("==", "-"))
    if not (target / module).exists():
        partial = target.with_name(target.name + f".partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(partial), requirement],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"could not install {requirement}: {done.stderr[-2000:]}"
        try:
            partial.rename(target)
        except OSError:  # another process got there first
            shutil.rmtree(partial, ignore_errors=True)
    if str(target) not in sys.path:
        sys.path.append(str(target))
    return target


SMUGGLED_MARK = "LUDUS_SMUGGLED_CODE_RAN"
SMUGGLED_CODE = f"__import__('os').environ.__setitem__('{SMUGGLED_MARK}', '1')"  # a reply that is also Python


def assert_only_theirs_runs_the_reply(theirs: Any, ours: Any) -> None:
    """``theirs(reply)`` (a scorer of another project) runs Python smuggled into a reply; ``ours(reply)``
    grades the same reply 0 without running it."""
    os.environ.pop(SMUGGLED_MARK, None)
    try:
        theirs(SMUGGLED_CODE)
        assert os.environ.pop(SMUGGLED_MARK, None) == "1", "their scorer did not run the reply"
        assert ours(SMUGGLED_CODE) == 0.0
        assert SMUGGLED_MARK not in os.environ, "our scorer ran the reply"
    finally:
        os.environ.pop(SMUGGLED_MARK, None)


def start_env_server(
    *extra: str, env: str = "arithmetic", env_args: dict | None = None
) -> tuple[subprocess.Popen, str]:
    """``ludus serve-env`` in its own process on a free port; returns it and its address."""
    cmd = [sys.executable, "-m", "ludus.cli", "serve-env", env, "--port", "0", *extra]
    if env_args is not None:
        cmd += ["--env-args", json.dumps(env_args)]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "300"})
    line = proc.stderr.readline()  # "serving ENV at URL (...)", printed once the socket listens
    if " at http" not in line:
        proc.kill()
        raise AssertionError(f"serve-env did not start: {line}{proc.stderr.read()}")
    return proc, line.split(" at ", 1)[1].split()[0]
