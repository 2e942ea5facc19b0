"""Shared by the TRL and verl adapter tests: a small tool environment, a single-turn environment
whose grader fails on some tasks, the address of a port nothing listens on, and a quick
supervised warm-up of the tiny transformers checkpoint (tests/support.py) so that sampling from
it gives a mix of right and wrong answers."""

import socket
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import torch

from ludus.core.env import SingleTurnEnv, ToolEnv
from ludus.core.types import InfraError, Score, Status, Task

# A response parser for tests/support.py's chat template: TRL reads tool calls with it.
RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|assistant|>",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"</s>\s*", "content": "text"},
    },
}


class AddTasks:
    """Task i: what is (i + 1) + 2. Task 3's tool is down (its calls raise InfraError)."""

    size = 4

    def get(self, index: int) -> Task:
        if not 0 <= index < self.size:
            raise IndexError(index)
        a = index + 1
        return Task(f"add/{index}", f"{a}+2=?", answer=a + 2, info={"down": index == 3})


class AddEnv(ToolEnv):
    """Add with a tool, then reply with the sum alone. ``calls`` records every tool call made
    in this process (the env server of the remote test runs here too)."""

    name = "add-tool"
    description = "add two integers with a tool"
    system_prompt = "Use add."  # short prompts: the tiny test model reads every byte as a token
    max_turns = 4
    calls: ClassVar[list[tuple[str, int, int]]] = []

    def default_tasks(self, split: str = "train") -> AddTasks:
        return AddTasks()

    def tool_functions(self):
        return [self.add]

    def add(self, a: int, b: int) -> str:
        """Add.

        Args:
            a: x.
            b: y.
        """
        assert self.task is not None
        AddEnv.calls.append((self.task.id, a, b))
        if self.task.info.get("down"):
            raise InfraError("the adding machine is down")
        return str(a + b)

    def score(self, task: Task, completion: str) -> Score:
        text = completion.strip()
        if not text.lstrip("-").isdigit():
            return Score.zero(Status.FORMAT_ERROR, f"not an integer: {text[:40]!r}")
        if int(text) == task.answer:
            return Score(1.0, Status.CORRECT, "right sum")
        return Score.zero(Status.WRONG, f"expected {task.answer}, got {text}")

    def reference_actions(self, task: Task):
        return None


class FlakyTasks:
    size = 4

    def get(self, index: int) -> Task:
        return Task(f"flaky/{index}", f"What is {index} + 1?", answer=index + 1)


class FlakyGraderEnv(SingleTurnEnv):
    """Single-turn sums whose grader crashes on odd tasks: those samples are infra_error."""

    name = "flaky-grader"
    description = "sums; the grader fails on odd tasks"
    system_prompt = "Reply with the final answer only."

    def default_tasks(self, split: str = "train") -> FlakyTasks:
        return FlakyTasks()

    def score(self, task: Task, completion: str) -> Score:
        if int(task.id.rsplit("/", 1)[1]) % 2:
            raise ConnectionError("grading service unreachable")
        ok = completion.strip() == str(task.answer)
        return Score(1.0, Status.CORRECT, "right") if ok else Score.zero(Status.WRONG, "wrong")

    def reference(self, task: Task) -> str:
        return str(task.answer)


def closed_port_url() -> str:
    """``http://127.0.0.1:PORT`` where nothing listens: a port the system handed out, then closed.
    A connection there is refused at once, as to an env server that is down."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def teach(folder: Path, examples: Sequence[tuple[str | list[int], str]], steps: int = 80, lr: float = 1e-2) -> None:
    """Fine-tune the checkpoint in ``folder`` on (prefix, target) pairs — the prefix rendered as
    text or already token ids; the loss on the target tokens only — and save it back."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    batch = []
    for prefix, target in examples:
        p = prefix if isinstance(prefix, list) else tokenizer(prefix, add_special_tokens=False)["input_ids"]
        t = tokenizer(target, add_special_tokens=False)["input_ids"]
        batch.append((torch.tensor([p + t]), torch.tensor([[-100] * len(p) + t])))
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    model.train()
    for _ in range(steps):
        optimizer.zero_grad()
        loss = sum(model(input_ids=ids, labels=labels).loss for ids, labels in batch)
        loss.backward()
        optimizer.step()
    model.save_pretrained(folder)
