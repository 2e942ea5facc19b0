"""The log importer (train/logs.py) under attack: logs written by a model, by users or by a broken
logger. Every bad line is skipped under its reason with its line number, nothing crashes or hangs,
nothing unusable reaches training (NaN rewards, log-probs that are no numbers, text no UTF-8 file
can hold), and a good line is never refused."""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from pathlib import Path

import pytest
import torch

from ludus.cli import main
from ludus.core.types import Message, Score, Task, Trajectory, Turn, chained_turns
from ludus.policies.tiny import TinyConfig, TinyPolicy
from ludus.rollout import records
from ludus.rollout.records import DEEPEST, read_lines
from ludus.train.logs import SHOWN_ERRORS, parse_line, read_logs, recompute_logprobs, tokenise

ASK = [{"role": "user", "content": "1+1"}]
GOOD = {"messages": [*ASK, {"role": "assistant", "content": "2"}], "reward": 1}


def policy() -> TinyPolicy:
    return TinyPolicy(TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=256))


def recorded(**changes) -> dict:
    """A Ludus trajectory line (recorded tokens and log-probs) with ``changes`` to its fields;
    ``turn`` changes its one turn."""
    trajectory = Trajectory(
        Task("t", "1+1", answer=2),
        [Message("user", "1+1"), Message("assistant", "2")],
        turns=[Turn([1, 2, 3], [4, 5], [-0.5, -0.5], reward=1.0)],
        score=Score(1.0),
        env="arithmetic",
    ).to_dict()
    trajectory["turns"][0].update(changes.pop("turn", {}))
    return trajectory | changes


def reply_calling(name: str, arguments) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"messages": [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]}], "reward": 1}


def write(path: Path, rows: list, end: str = "\n") -> Path:
    path.write_bytes(
        "".join((r if isinstance(r, str) else json.dumps(r)) + end for r in rows).encode("utf-8", "surrogatepass")
    )
    return path


# each hostile line, the reason it is skipped under, and a word its error must hold
HOSTILE = [
    ("[" * 100_000 + "]" * 100_000, "not JSON", f"nested deeper than {DEEPEST} levels"),  # RecursionError
    (reply_calling("f", "[" * 5_000 + "]" * 5_000), "malformed tool call", "nested deeper"),
    (json.dumps(GOOD).replace('"2"', '"\\ud800"'), "not JSON", "surrogate"),  # no UTF-8 file can hold it
    ({**GOOD, "task": {"id": ["a"], "prompt": "1+1"}}, "malformed episode", "task.id"),  # unhashable group key
    ({**GOOD, "task": {"id": "a", "prompt": "1+1", "info": [1]}}, "malformed episode", "task.info"),
    ({**GOOD, "tools": [{"name": 5, "description": None}]}, "malformed episode", "tools"),
    ({**GOOD, "reward": 10**400}, "bad reward", "finite"),  # OverflowError
    (json.dumps(GOOD).replace('"reward": 1', '"reward": 1e309'), "bad reward", "inf"),
    ({**GOOD, "reward": "1"}, "bad reward", "finite"),
    ({**GOOD, "reward": 1, "status": "infra_error"}, "infra_error", "not graded"),
    ({"messages": [*ASK, {"role": "аssistant", "content": "2"}], "reward": 1}, "malformed message", "role"),
    ({"messages": [*ASK, {"role": "assistant\u200b", "content": "2"}], "reward": 1}, "malformed message", "\\u200b"),
    ({"messages": [*ASK, {"role": "assistant", "content": {"text": "2"}}], "reward": 1}, "malformed message", "dict"),
    (reply_calling("f", "[1, 2]"), "malformed tool call", "not an object"),
    (reply_calling("f", "7"), "malformed tool call", "not an object"),
    (recorded(env=["x"]), "malformed trajectory", "env"),  # unhashable group key
    (recorded(info="x"), "malformed trajectory", "info"),  # info["logged"] = ... on a string
    (recorded(turn={"reward": "1"}), "malformed trajectory", "reward"),
    (json.dumps(recorded(turn={"reward": 0.25})).replace("0.25", "NaN"), "malformed trajectory", "reward"),
    (recorded(turn={"reward": None}), "malformed trajectory", "reward"),
    (json.dumps(recorded()).replace("-0.5, -0.5", "NaN, -0.5"), "malformed trajectory", "logprobs"),
    (recorded(turn={"logprobs": ["a", "b"]}), "malformed trajectory", "logprobs"),
    (recorded(turn={"prompt_ids": ["a"]}), "malformed trajectory", "prompt_ids"),
    (recorded(turn={"prompt_ids": [1.5]}), "malformed trajectory", "prompt_ids"),
    (recorded(turn={"completion_ids": 5}), "malformed trajectory", "completion_ids"),
    (recorded(seed="abc"), "malformed trajectory", "seed"),
    (recorded(score={"value": 10**400}), "malformed trajectory", "OverflowError"),
    (
        recorded(messages=[{"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": [1]}]}]),
        "malformed trajectory",
        "tool call",
    ),
]


@pytest.mark.parametrize("hostile", [HOSTILE[:SHOWN_ERRORS], HOSTILE[SHOWN_ERRORS:]], ids=["first", "rest"])
def test_every_hostile_line_is_skipped_by_reason_with_its_line_number_and_nothing_crashes(tmp_path, hostile):
    rows = [GOOD, *(row for row, _, _ in hostile), GOOD]
    path = write(tmp_path / "log.jsonl", rows)
    kept, report = read_logs([path], policy())
    assert report.lines == len(rows) and report.kept == len(kept) == 2  # nothing dropped silently
    assert report.skipped == Counter(reason for _, reason, _ in hostile)
    for number, (error, (_, reason, word)) in enumerate(zip(report.errors, hostile, strict=True), start=2):
        assert error.startswith(f"{path}:{number}: {reason}") and word in error, error
    # what is kept can be written back as the run folder's logged.jsonl is: strict JSON, UTF-8
    text = "".join(json.dumps(t.to_dict(), ensure_ascii=False, allow_nan=False) + "\n" for t in kept)
    text.encode("utf-8")


def test_good_lines_that_look_hostile_are_kept(tmp_path):
    nested = {"a": [[[[{"b": [[[1]]]}]]]]}  # a few levels, as a tool's arguments may have
    rows = [
        {**GOOD, "messages": [*ASK, {"role": "assistant", "content": "2 \ud83d\ude00"}]},  # a pair: one character
        {**GOOD, "messages": [*ASK, {"role": "assistant", "content": "the escape \\ud800 as text"}]},
        reply_calling("lookup", json.dumps(nested)),
        {**GOOD, "reward": 0, "status": "correct"},  # the logger's own status; the reward is what trains
        {**GOOD, "messages": [*ASK, {"role": "assistant", "content": "[/] [link=x]2[/link] \x1b[31m"}]},
        recorded(turn={"logprobs": [0.0, -1e-9]}),
    ]
    path = write(tmp_path / "log.jsonl", rows, end="\r\n")  # written on Windows, byte-order mark and all
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    kept, report = read_logs([path], policy())
    assert report.kept == len(rows) and not report.skipped, report.errors
    assert kept[0].messages[-1].content == "2 😀" and kept[1].messages[-1].content == "the escape \\ud800 as text"
    assert kept[2].messages[-1].tool_calls[0].arguments == nested
    assert [t.reward for t in kept[3:5]] == [0.0, 1.0]


def test_an_error_shows_what_the_log_says_as_text_not_as_terminal_codes(tmp_path):
    rows = [
        reply_calling("\x1b]8;;http://evil\x1b\\[red]f\u202e", "{oops"),
        {**GOOD, "status": "infra_error", "reason": "\x1b[2J\rall good\u200b"},
    ]
    _, report = read_logs([write(tmp_path / "log.jsonl", rows)], policy())
    for error in report.errors:
        assert not any(c in error for c in "\x1b\r\u202e\u200b"), error
    assert "\\x1b]8;;http://evil" in report.errors[0] and "\\u202e" in report.errors[0]
    assert report.errors[1].endswith("(\\x1b[2J\\rall good\\u200b)")


def test_a_huge_line_is_not_loaded_whole_and_the_next_line_keeps_its_number_and_offset(tmp_path, monkeypatch):
    monkeypatch.setattr(records, "LONGEST_LINE", 1000)
    huge = {**GOOD, "messages": [*ASK, {"role": "assistant", "content": "x" * 5000}]}
    path = write(tmp_path / "log.jsonl", [huge, GOOD])
    kept, report = read_logs([path], policy())
    assert report.kept == 1 and report.skipped == {"too long": 1}
    assert report.errors == [f"{path}:1: too long: the line is over 1,000 bytes"]
    assert kept[0].info["logged"]["line"] == 2
    cut, whole = read_lines(path, longest=1000)
    assert cut.cut and len(cut.raw) == 1000 and not whole.cut
    assert path.read_bytes()[whole.offset :].rstrip(b"\n") == whole.raw  # the offset past the cut line is exact


def test_a_log_that_is_a_pipe_or_cannot_be_read_is_an_error_not_a_hang_or_a_crash(tmp_path):
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="is not a file"):
        read_logs([fifo], policy())
    with pytest.raises(ValueError, match="/proc/self/mem cannot be read: Input/output error"):
        read_logs(["/proc/self/mem"], policy())  # a regular file whose first byte is an I/O error


def test_a_pipe_put_where_a_file_was_checked_is_refused_once_open_and_never_waited_on(tmp_path):
    """The check before opening can be raced (a FIFO swapped in after it): the file is opened without
    waiting and checked again once open. A thread, so that a regression fails instead of hanging."""
    fifo = tmp_path / "trajectories.jsonl"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:
        for reader in (read_lines, records.untrusted_lines):
            try:
                list(reader(fifo))
            except (OSError, ValueError) as exc:
                outcome.append(exc)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(60)
    if thread.is_alive():  # waiting for a writer that never comes
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO waited for a writer")
    assert [type(e) for e in outcome] == [OSError, ValueError]
    assert all("not a regular file" in str(e) for e in outcome)


class CountingTiny(TinyPolicy):
    """The tiny policy, counting the token positions its log-prob passes run over."""

    positions = 0

    def token_logprobs(self, prompt_ids, completion_ids, temperature=1.0):
        self.positions += sum(len(p) + len(c) for p, c in zip(prompt_ids, completion_ids, strict=True))
        return super().token_logprobs(prompt_ids, completion_ids, temperature)


def test_a_conversation_of_many_turns_is_scored_in_one_pass_with_the_log_probs_of_each_turn():
    messages = [{"role": "system", "content": "s"}, *ASK]
    for k in range(120):
        messages += [{"role": "assistant", "content": str(k)}, {"role": "user", "content": "more"}]
    messages.append({"role": "assistant", "content": "end"})
    counting = CountingTiny(TinyConfig(d_model=32, n_layers=1, n_heads=2, max_len=2048))
    trajectory = parse_line(json.dumps({"messages": messages, "reward": 1}).encode())
    tokenise(trajectory, counting)
    trajectory.info["logged"] = {}
    assert len(chained_turns(trajectory.turns)) == 1 and len(trajectory.turns) == 121
    assert recompute_logprobs([trajectory], counting, temperature=0.7) == 1
    last = trajectory.turns[-1]
    assert counting.positions == len(last.prompt_ids) + len(last.completion_ids)  # one pass, not 121
    with torch.no_grad():  # each turn's log-probs as if it were scored alone
        for turn in trajectory.turns[::20]:
            alone, _ = counting.token_logprobs([turn.prompt_ids], [turn.completion_ids], 0.7)
            assert turn.logprobs == pytest.approx(alone[0].tolist(), abs=1e-5)


def test_markup_in_a_logged_tool_name_does_not_crash_offline_training(tmp_path, monkeypatch):
    monkeypatch.setenv("LUDUS_CACHE", str(tmp_path / "cache"))
    rows = [reply_calling("[/]", "{oops"), GOOD, {**GOOD, "messages": [*ASK, {"role": "assistant", "content": "3"}]}]
    log = write(tmp_path / "log.jsonl", rows)
    tiny = ["--tiny", "{d_model: 32, n_layers: 1, n_heads: 2}", "--warmstart-steps", "0", "--threads", "1"]
    run = ["--steps", "1", "--prompts-per-step", "1", "--eval-size", "2", "--runs-dir", str(tmp_path / "runs")]
    assert main(["train", "--offline", str(log), *tiny, *run]) == 0
