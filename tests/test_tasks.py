"""Procedural task families: determinism, split hygiene, difficulty, and correct reference answers."""

from __future__ import annotations

import re

import pytest

from ludus.envs.procedural.countdown import score_countdown
from ludus.tasks import FAMILIES, Arithmetic, Countdown, LinearEquation, ProceduralTasks, Sorting

FAMILY_CLASSES = [Arithmetic, Countdown, Sorting, LinearEquation]


def prompts(family, seed: int = 0, split: str = "train", n: int = 50) -> list[str]:
    source = ProceduralTasks(family, seed=seed, split=split)
    return [source.get(i).prompt for i in range(n)]


def test_families_registry_names_every_family() -> None:
    assert FAMILIES == {
        "arithmetic": Arithmetic,
        "countdown": Countdown,
        "sorting": Sorting,
        "linear-equation": LinearEquation,
    }


@pytest.mark.parametrize("cls", FAMILY_CLASSES)
def test_same_seed_and_index_give_the_same_task(cls) -> None:
    a = ProceduralTasks(cls.at_level(3), seed=7)
    b = ProceduralTasks(cls.at_level(3), seed=7)
    for i in (0, 1, 17, 999):
        assert a.get(i) == b.get(i)


@pytest.mark.parametrize("cls", FAMILY_CLASSES)
def test_different_seeds_give_different_tasks(cls) -> None:
    assert prompts(cls.at_level(3), seed=1) != prompts(cls.at_level(3), seed=2)


@pytest.mark.parametrize("cls", FAMILY_CLASSES)
def test_train_and_eval_splits_are_disjoint(cls) -> None:
    family = cls.at_level(1)  # the smallest problem space is where overlap would show
    train = set(prompts(family, split="train", n=300))
    held_out = set(prompts(family, split="eval", n=300))
    assert len(held_out) > 10
    assert not train & held_out


def test_countdown_difficulty_sets_how_many_numbers() -> None:
    for level, count in ((1, 3), (3, 4), (5, 5), (6, 6)):
        task = ProceduralTasks(Countdown.at_level(level)).get(0)
        assert len(task.info["numbers"]) == count
        assert task.prompt.startswith("Use " + " ".join(map(str, task.info["numbers"])) + " to make ")


def test_sorting_difficulty_sets_list_length_and_range() -> None:
    easy, hard = Sorting.at_level(1), Sorting.at_level(6)
    for family in (easy, hard):
        for i in range(30):
            values = [int(v) for v in ProceduralTasks(family).get(i).prompt.split(":")[1].split()]
            assert len(values) == family.length
            assert all(family.low <= v <= family.high for v in values)
    assert hard.length > easy.length and hard.high > easy.high


def test_linear_difficulty_puts_x_on_both_sides() -> None:
    assert all(p.count("x") == 2 for p in prompts(LinearEquation.at_level(1)))  # "3x+5=20, x=?"
    assert all(p.count("x") == 3 for p in prompts(LinearEquation.at_level(4)))


@pytest.mark.parametrize("level", range(1, 7))
def test_countdown_reference_solution_verifies(level: int) -> None:
    source = ProceduralTasks(Countdown.at_level(level), seed=level)
    for i in range(100):
        task = source.get(i)
        target = task.info["target"]
        assert target > 0 and target not in task.info["numbers"]
        score = score_countdown(task.answer, task.info["numbers"], target)
        assert (score.value, score.status) == (1.0, "correct"), (task, score)


def _side_value(side: str, x: int) -> int:
    """Evaluate ``3x-5`` / ``-x+2`` / ``7`` at ``x``, independently of the generator's formatter."""
    total = 0
    for sign, digits, var in re.findall(r"([+-]?)(\d*)(x?)", side):
        if not digits and not var:
            continue
        magnitude = int(digits) if digits else 1
        total += (-1 if sign == "-" else 1) * magnitude * (x if var else 1)
    return total


@pytest.mark.parametrize("level", range(1, 7))
def test_linear_answer_solves_the_equation(level: int) -> None:
    source = ProceduralTasks(LinearEquation.at_level(level), seed=level)
    for i in range(100):
        task = source.get(i)
        equation, question = task.prompt.split(", ")
        assert question == "x=?"
        assert not re.search(r"\+-|--|\+\+|\b1x|\b0x|[+-]0\b", equation), equation
        left, right = equation.split("=")
        assert isinstance(task.answer, int)
        assert _side_value(left, task.answer) == _side_value(right, task.answer), task.prompt
        # the solution is unique: the equation is not an identity
        assert _side_value(left, task.answer + 1) != _side_value(right, task.answer + 1)


def test_linear_easiest_level_has_no_negatives() -> None:
    for i in range(100):
        task = ProceduralTasks(LinearEquation.at_level(1)).get(i)
        assert "-" not in task.prompt and task.answer >= 0


EXPECTED = {
    "sort asc": sorted,
    "sort desc": lambda xs: sorted(xs, reverse=True),
    "reverse": lambda xs: list(reversed(xs)),
    "remove duplicates, keep order": lambda xs: [v for i, v in enumerate(xs) if v not in xs[:i]],
}


@pytest.mark.parametrize("level", range(1, 7))
def test_sorting_answer_matches_python(level: int) -> None:
    source = ProceduralTasks(Sorting.at_level(level), seed=level)
    seen_ops = set()
    for i in range(100):
        task = source.get(i)
        op, _, shown = task.prompt.partition(": ")
        values = [int(v) for v in shown.split()]
        assert task.answer == EXPECTED[op](values)
        if op == "remove duplicates, keep order":
            assert len(task.answer) < len(values)  # there is always something to remove
        seen_ops.add(op)
    assert len(seen_ops) == len(Sorting.at_level(level).ops)


def test_sorting_accepts_comma_separated_ops() -> None:
    assert Sorting(ops="asc, reverse").ops == ("asc", "reverse")


def test_countdown_reference_uses_only_the_chosen_operators() -> None:
    for i in range(50):
        task = ProceduralTasks(Countdown(count=4, max_number=20, ops="+-")).get(i)
        assert not set(task.answer) & set("*/")


@pytest.mark.parametrize(
    ("make", "param"),
    [
        (lambda: Countdown(count=2), "count"),
        (lambda: Countdown(count=7), "count"),
        (lambda: Countdown(max_number=1), "max_number"),
        (lambda: Countdown(ops="+^"), "ops"),
        (lambda: Countdown(max_target=5), "max_target"),
        (lambda: Sorting(length=1), "length"),
        (lambda: Sorting(low=5, high=5), "low"),
        (lambda: Sorting(ops=("asc", "shuffle")), "ops"),
        (lambda: Sorting(ops=()), "ops"),
        (lambda: LinearEquation(max_coef=0), "max_coef"),
        (lambda: LinearEquation(max_coef=1, both_sides=True, negatives=False), "max_coef"),
        (lambda: LinearEquation(max_x=0), "max_x"),
        (lambda: LinearEquation(max_const=-1), "max_const"),
    ],
)
def test_invalid_params_raise_value_error_naming_the_param(make, param: str) -> None:
    with pytest.raises(ValueError, match=param):
        make()


@pytest.mark.parametrize("cls", FAMILY_CLASSES)
@pytest.mark.parametrize("level", [0, 7])
def test_unknown_difficulty_is_rejected(cls, level: int) -> None:
    with pytest.raises(ValueError, match="difficulty"):
        cls.at_level(level)
