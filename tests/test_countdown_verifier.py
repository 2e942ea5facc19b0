"""The countdown verifier: exact, deny-by-default, and never raising on model text."""

from __future__ import annotations

import pytest

from ludus.envs.procedural.countdown import (
    MAX_DEPTH,
    ExpressionError,
    expression_value,
    parse_expression,
    score_countdown,
)

NUMBERS = [3, 7, 25, 50]
TARGET = 75


def score(text: str, numbers: list[int] = NUMBERS, target: int = TARGET):
    return score_countdown(text, numbers, target)


@pytest.mark.parametrize(
    "reply",
    [
        "50+25",
        "25*3",
        "(50-25)*3",
        "<answer>50 + 25</answer>",
        "I think \\boxed{25\\times 3}",
        "Answer: 3 × 25",
        "50+25 = 75",
        "  (50 + 25)  ",
    ],
)
def test_correct_expressions_score_one(reply: str) -> None:
    s = score(reply)
    assert (s.value, s.status) == (1.0, "correct"), s.reason


def test_exact_fractions_not_floats() -> None:
    # with floats (0.1 + 0.2) * 10 is 3.0000000000000004; fractions land exactly on 3
    s = score_countdown("(1/10+2/10)*10", [1, 2, 10, 10, 10], 3)
    assert (s.value, s.status) == (1.0, "correct"), s.reason


def test_wrong_value() -> None:
    s = score("50+25+3")
    assert (s.value, s.status) == (0.0, "wrong")
    assert "78" in s.reason


def test_claimed_result_must_be_the_target() -> None:
    s = score("50+3 = 75")
    assert (s.value, s.status) == (0.0, "wrong")
    s = score("50+25 = 74")
    assert (s.value, s.status) == (0.0, "wrong")
    assert "74" in s.reason
    s = score("50+25 = seventy-five")
    assert (s.value, s.status) == (0.0, "format_error")


def test_chain_of_equalities_is_a_format_error() -> None:
    s = score("50+25 = 75 = 75")
    assert (s.value, s.status) == (0.0, "format_error")


def test_reusing_a_number() -> None:
    s = score("25+25+25")
    assert (s.value, s.status) == (0.0, "wrong")
    assert "25" in s.reason and "3 times" in s.reason


def test_duplicates_in_the_given_numbers_may_each_be_used_once() -> None:
    assert score_countdown("5*5+2", [2, 5, 5], 27).value == 1.0
    assert score_countdown("5*5*5+2", [2, 5, 5], 127).status == "wrong"


def test_foreign_number() -> None:
    s = score("75")
    assert (s.value, s.status) == (0.0, "wrong")
    assert "not one of the numbers" in s.reason
    s = score("50+25*1")
    assert (s.value, s.status) == (0.0, "wrong")


def test_division_by_zero_is_wrong_not_an_exception() -> None:
    s = score("50/(7-7)", [7, 7, 50], 75)
    assert (s.value, s.status) == (0.0, "wrong")
    assert "zero" in s.reason


@pytest.mark.parametrize(
    "reply",
    [
        "__import__('os').system('rm -rf /')",
        "50+25; import os",
        "exec('75')",
        "50**2",
        "50 25",
        "3(25)",
        "-3+50+25",
        "50+",
        "(50+25",
        "50+25)",
        "2.5*30",
        "\x00\x01",
    ],
)
def test_hostile_or_malformed_input_is_a_format_error(reply: str) -> None:
    s = score(reply)
    assert (s.value, s.status) == (0.0, "format_error")
    assert s.reason.startswith("not a valid expression: ")


@pytest.mark.parametrize("reply", ["", "  ", "<answer> </answer>"])
def test_empty_reply_is_no_answer(reply: str) -> None:
    s = score(reply)
    assert (s.value, s.status) == (0.0, "no_answer")


def test_very_long_input_is_refused() -> None:
    s = score("+".join(["3"] * 500))
    assert (s.value, s.status) == (0.0, "format_error")
    s = score("1" * 100_000)
    assert (s.value, s.status) == (0.0, "format_error")


def test_deeply_nested_parentheses_are_refused() -> None:
    s = score("(" * 60 + "50" + ")" * 60 + "+25")
    assert (s.value, s.status) == (0.0, "format_error")
    with pytest.raises(ExpressionError, match="nested"):
        parse_expression("(" * (MAX_DEPTH + 1) + "1" + ")" * (MAX_DEPTH + 1))
    assert expression_value(parse_expression("(" * MAX_DEPTH + "1" + ")" * MAX_DEPTH)) == 1


def test_hedged_answers_are_ambiguous() -> None:
    s = score("\\boxed{50+25} or maybe \\boxed{25*3}")
    assert (s.value, s.status) == (0.0, "ambiguous")


def test_precedence_and_associativity() -> None:
    assert expression_value(parse_expression("2+3*4")) == 14
    assert expression_value(parse_expression("20-5-3")) == 12
    assert expression_value(parse_expression("64/4/2")) == 8
    assert expression_value(parse_expression("(2+3)*4")) == 20
