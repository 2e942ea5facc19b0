"""Grading a shop episode, deny by default.

Look-ups: the answer must be exactly the value (numbers compared as decimals, so ``$12.50`` is
``12.5``, and a currency named must be the store's; names compared without regard to case or
spacing) and the shop's data must be as the episode found it. Edits: the episode's database is diffed against its baseline (the
template plus the episode's own page size); the intended change must be there and nothing
else, or the reason says what differs. A failure of the grader itself is ``infra_error``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

from ludus.core.types import Score, Status, Task
from ludus.envs.web.shop.app import ShopApp
from ludus.envs.web.shop.data import CURRENCIES, diff, open_copy, rows
from ludus.envs.web.shop.tasks import EDITS, LOOKUPS, lookup_gold

# one number, maybe with a currency sign or code and thousands separators: "$1,107.97", "12.5 EUR"
_NUMBER = re.compile(
    r"^(?:[$€£]|USD|EUR|GBP)?\s*(\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)\s*(?:USD|EUR|GBP)?$", re.IGNORECASE
)


def _plain(text: str) -> str:
    """An answer without surrounding quotes, one final full stop (a sentence's, after a number too: ``79.5.``,
    inside the quotes or after them: ``"79.5."``, ``"79.5".``) and extra spaces; a second full stop stays, so
    ``79.5..``, ``"79.5.".``, ``79.5.3`` and ``79.5.0`` are not numbers."""
    text = " ".join(text.split())
    stop = text.endswith(".")
    text = text.removesuffix(".").rstrip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
        if not stop:
            text = text.removesuffix(".").rstrip()
    return text


def _same(a: object, b: object) -> bool:
    return " ".join(str(a).split()).casefold() == " ".join(str(b).split()).casefold()


def grade(task: Task, app: ShopApp, answer: str | None) -> Score:
    """The episode's score (see the module docstring); ``answer`` is ``None`` after ``finish()``."""
    kind = task.info.get("kind")
    try:
        baseline = open_copy(app.baseline)
        try:
            changes = diff(baseline, app.db)
            if kind in LOOKUPS:
                gold = lookup_gold(kind, task.info["parameters"], baseline)
                if gold != str(task.answer):
                    return Score.zero(
                        Status.GOLD_ERROR,
                        f"the task's answer {task.answer!r} disagrees with its database ({gold!r}): "
                        "it was made by another version of the shop; regenerate it",
                    )
                (currency,) = baseline.execute("SELECT value FROM settings WHERE key = 'currency'").fetchone()
                return _lookup(task, LOOKUPS[kind], answer, changes, currency)
            if kind in EDITS:
                return _edit(task, baseline, app, changes)
        finally:
            baseline.close()
    except Exception as exc:  # noqa: BLE001 - the grader's own failure says nothing about the model
        return Score.zero(Status.INFRA_ERROR, f"the shop grader failed: {type(exc).__name__}: {exc}")
    return Score.zero(Status.INFRA_ERROR, f"unknown task kind {kind!r}")


def describe(changes: dict[str, dict[str, list]]) -> str:
    """The changes in a few words: ``orders: 1 added; products #4 stock 10->8``."""
    parts = []
    for table, change in changes.items():
        if change["added"]:
            parts.append(f"{table}: {len(change['added'])} row(s) added")
        if change["removed"]:
            parts.append(f"{table}: {len(change['removed'])} row(s) removed")
        for key, columns in change["changed"][:5]:
            what = ", ".join(f"{c} {old!r}->{new!r}" for c, (old, new) in columns.items())
            parts.append(f"{table} {key}: {what}")
    return "; ".join(parts) or "nothing changed"


def _named_currencies(text: str) -> set[str]:
    """The currencies an answer names, by sign or by code."""
    return {code for code, (sign, _) in CURRENCIES.items() if sign in text or code.casefold() in text.casefold()}


def _lookup(task: Task, compare: str, answer: str | None, changes: dict[str, Any], currency: str) -> Score:
    if answer is None or not answer.strip():
        return Score.zero(Status.NO_ANSWER, "the task asks for an answer; none was given")
    if changes:
        return Score.zero(
            Status.WRONG, f"the task only asks a question, but the shop's data changed: {describe(changes)}"
        )
    text = _plain(answer)
    if compare == "name":
        if _same(text, task.answer):
            return Score(1.0, Status.CORRECT, f"answered {task.answer!r}", extracted=text)
        return Score.zero(Status.WRONG, f"expected {task.answer!r}, got {text[:80]!r}", extracted=text[:200])
    match = _NUMBER.match(text)
    if match is None or (compare == "number" and not re.fullmatch(r"\d+(?:\.\d+)?", text)):
        return Score.zero(Status.FORMAT_ERROR, f"expected a single number, got {text[:80]!r}", extracted=text[:200])
    named = _named_currencies(text)
    if named - {currency}:
        return Score.zero(
            Status.WRONG,
            f"the store shows amounts in {currency}; the answer says {', '.join(sorted(named))}",
            extracted=text[:200],
        )
    try:
        given = Decimal(match.group(1).replace(",", ""))
    except InvalidOperation:
        return Score.zero(Status.FORMAT_ERROR, f"{text[:80]!r} is not a number", extracted=text[:200])
    if given == Decimal(task.answer):
        return Score(1.0, Status.CORRECT, f"answered {task.answer}", extracted=match.group(1))
    return Score.zero(Status.WRONG, f"expected {task.answer}, got {match.group(1)}", extracted=match.group(1))


def _edit(task: Task, baseline: Any, app: ShopApp, changes: dict[str, dict[str, list]]) -> Score:
    if not changes:
        return Score.zero(Status.WRONG, "nothing in the shop was changed")
    p = task.info["parameters"]
    kind = task.info["kind"]
    if kind == "edit_address":
        problem = _one_change(changes, "addresses", p["address_id"], {f: p[f] for f in ("street", "city", "postcode")})
    elif kind == "change_setting":
        problem = _one_change(changes, "settings", p["key"], {"value": p["value"]})
    elif kind == "cancel_order":
        problem = _one_change(changes, "orders", p["order_id"], {"status": "cancelled"})
    else:
        problem = _placed(p, baseline, app, changes)
    if problem:
        return Score.zero(Status.WRONG, f"{problem} (changes: {describe(changes)[:400]})")
    return Score(1.0, Status.CORRECT, f"the intended change is there and nothing else: {describe(changes)[:300]}")


def _one_change(changes: dict[str, dict[str, list]], table: str, key: object, want: dict[str, object]) -> str | None:
    """Why ``changes`` is not exactly row ``key`` of ``table`` set to ``want``, or None when it is."""
    others = sorted(t for t in changes if t != table)
    if others:
        return f"other tables changed too: {', '.join(others)}"
    change = changes.get(table)
    if change is None:
        return f"{table} did not change"
    if change["added"] or change["removed"]:
        return f"rows were added to or removed from {table}"
    by_key = dict(change["changed"])
    if set(by_key) != {key}:
        wrong = sorted(str(k) for k in by_key if k != key)
        return f"the wrong {table} row(s) changed: {', '.join(wrong)}" if wrong else f"{table} {key} did not change"
    columns = by_key[key]
    extra = sorted(set(columns) - set(want))
    if extra:
        return f"{table} {key}: {', '.join(extra)} changed too"
    for column, value in want.items():
        if column not in columns:
            return f"{table} {key}: {column} was not changed (it should be {value!r})"
        if not _same(columns[column][1], value):
            return f"{table} {key}: {column} should be {value!r}, is {columns[column][1]!r}"
    return None


def _placed(p: dict[str, Any], baseline: Any, app: ShopApp, changes: dict[str, dict[str, list]]) -> str | None:
    """Why ``changes`` is not exactly the order of ``p`` (its row, its item, the stock taken), or None."""
    if set(changes) != {"orders", "order_items", "products"}:
        return f"expected changes to orders, order_items and products, got {', '.join(sorted(changes))}"
    orders, items = changes["orders"], changes["order_items"]
    if len(orders["added"]) != 1 or orders["removed"] or orders["changed"]:
        return f"expected exactly one new order, got {len(orders['added'])} (and other order changes)"
    if len(items["added"]) != 1 or items["removed"] or items["changed"]:
        return f"expected the new order to hold one product line, got {len(items['added'])}"
    order, item = orders["added"][0], items["added"][0]
    product = rows(baseline, "products")[p["product_id"]]
    address = rows(baseline, "addresses")[p["address_id"]]
    want_order = {
        "customer_id": p["customer_id"],
        "status": "processing",
        "placed_on": app.today,
        "total_cents": p["quantity"] * product["price_cents"],
        **{f"ship_{f}": address[f] for f in ("street", "city", "postcode", "country")},
    }
    for column, value in want_order.items():
        if not _same(order[column], value):
            return f"the new order's {column} is {order[column]!r}, expected {value!r}"
    want_item = {"order_id": order["id"], "product_id": p["product_id"], "quantity": p["quantity"]}
    for column, value in want_item.items():
        if item[column] != value:
            return f"the new order line's {column} is {item[column]!r}, expected {value!r}"
    stock = dict(changes["products"]["changed"])
    if changes["products"]["added"] or changes["products"]["removed"] or set(stock) != {p["product_id"]}:
        return "products other than the ordered one changed"
    if stock[p["product_id"]] != {"stock": (product["stock"], product["stock"] - p["quantity"])}:
        return f"the ordered product changed unexpectedly: {stock[p['product_id']]}"
    return None
