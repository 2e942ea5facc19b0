"""``Env.client_task``: a whole task from a client reaches an environment only through the fields
the environment declares safe (issue 28: a client's ``info.db`` opened server files)."""

from __future__ import annotations

from typing import ClassVar

import pytest

from ludus.core import Score, SingleTurnEnv, Task


class Echo(SingleTurnEnv):
    name = "echo"
    client_task_info: ClassVar[dict[str, type | tuple[type, ...]]] = {"numbers": list, "level": int, "weight": float}
    client_task_answer: ClassVar[type | tuple[type, ...]] = (list, str)

    def score(self, task: Task, completion: str) -> Score:
        return Score(1.0)


def test_a_declared_task_is_accepted_whole():
    task = Echo().client_task({"id": "t", "prompt": "p", "answer": [1, 2], "info": {"numbers": [3], "level": 2}})
    assert task == Task(id="t", prompt="p", answer=[1, 2], info={"numbers": [3], "level": 2})


@pytest.mark.parametrize(
    ("data", "refusal"),
    [
        ({"id": "t", "prompt": "p", "info": {"db": "/etc/shadow"}}, "does not accept task.info['db']"),
        ({"id": "t", "prompt": "p", "info": {"level": "2"}}, "wrong type: str"),
        ({"id": "t", "prompt": "p", "info": {"level": True}}, "wrong type: bool"),
        ({"id": "t", "prompt": "p", "info": ["db"]}, "must be a JSON object"),
        ({"id": "t", "prompt": "p", "info": []}, "must be a JSON object"),  # empty is no excuse
        ({"id": "t", "prompt": "p", "answer": {"repo_path": "/home"}}, "task.answer of type dict"),
        ({"id": "t", "prompt": "p", "answer": 3}, "task.answer of type int"),
        ({"id": "t", "prompt": "p", "path": "x"}, "no field 'path'"),
        ({"id": 3, "prompt": "p"}, "task.id must be a string"),
        ({"prompt": "p"}, "needs a string 'id'"),
        ("task", "must be a JSON object"),
        ({"id": "t", "prompt": "p", "answer": {"path": "/etc"}}, "task.answer of type dict"),
    ],
)
def test_anything_undeclared_is_refused_by_name(data, refusal):
    with pytest.raises(ValueError, match=refusal.replace("[", r"\[").replace("]", r"\]")):
        Echo().client_task(data)


def test_an_environment_that_never_considered_client_tasks_takes_none():
    class Silent(Echo):
        client_task_info = None

    with pytest.raises(ValueError, match="takes no tasks from clients"):
        Silent().client_task({"id": "t", "prompt": "p"})


def test_an_environment_that_declares_nothing_takes_no_info():
    class Plain(Echo):
        client_task_info: ClassVar[dict[str, type | tuple[type, ...]]] = {}

    assert Plain().client_task({"id": "t", "prompt": "p", "answer": "a"}).answer == "a"
    with pytest.raises(ValueError, match="accepts: none"):
        Plain().client_task({"id": "t", "prompt": "p", "info": {"numbers": [1]}})


def test_a_number_is_a_float_to_json_and_a_bool_is_no_number():
    assert Echo().client_task({"id": "t", "prompt": "p", "info": {"weight": 2}}).info == {"weight": 2}
    with pytest.raises(ValueError, match="wrong type: bool"):
        Echo().client_task({"id": "t", "prompt": "p", "info": {"weight": True}})
