"""A complete Ludus environment in ~30 lines: write a random word backwards."""

import random

from ludus.core import Score, SingleTurnEnv, Status, Task


class ReverseTasks:
    """Task i is always the same word (seeded), so runs are reproducible."""

    size = None  # endless

    def __init__(self, split: str):
        self.split = split

    def get(self, index: int) -> Task:
        rng = random.Random(f"reverse:{self.split}:{index}")
        word = "".join(rng.choice("abcdefgh") for _ in range(rng.randint(3, 6)))
        return Task(id=f"reverse/{self.split}/{index}", prompt=f"reverse {word}:", answer=word[::-1])


class ReverseEnv(SingleTurnEnv):
    name = "reverse"
    description = "write a word backwards"

    def default_tasks(self, split="train"):
        return ReverseTasks(split)

    def reference(self, task):
        return task.answer  # lets `ludus check` confirm the best answer earns full reward

    def score(self, task: Task, completion: str) -> Score:
        answer = completion.strip()
        if not answer:
            return Score.zero(Status.NO_ANSWER, "empty reply")
        if answer == task.answer:
            return Score(1.0, Status.CORRECT, "reversed correctly")
        return Score.zero(Status.WRONG, f"expected {task.answer!r}, got {answer[:40]!r}")


if __name__ == "__main__":
    from ludus.certify import check_env, format_report

    print(format_report(check_env(ReverseEnv, name="reverse")))
    env = ReverseEnv()
    print(env.reset(seed=1).messages[-1].content, "->", env.step("nope").score)
