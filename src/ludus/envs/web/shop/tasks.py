"""The shop's procedural tasks: look-ups and edits, at three levels, over databases made from data seeds.

1. one-page look-ups: a product's price, stock, rating or colour;
2. flows with login, filters and pagination: a customer's number of orders (admin), the
   cheapest product of a colour in a category, the best-rated product of a category, an
   order's total (admin, the order list is paged);
3. edits that must persist: a customer's address (admin), an order shipped to a saved
   address (customer), a store setting (admin), cancelling an order (admin).

Task ``i`` is drawn from ``random.Random(f"{version}:{seed}:{split}:{i}")``: first a data seed,
then the kind and its parameters from that seed's template database. Train and eval are
disjoint by database: a data seed belongs to the eval split when its hash falls in the eval
bucket, so no eval shop is ever seen in training. A question is kept only when its answer is
unique (no tie for the cheapest or best-rated product).
"""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from ludus.core.env import Split
from ludus.core.types import Task
from ludus.envs.web.shop.data import CURRENCIES, PLACES, STORE_NAMES, open_copy, postcode, street, template
from ludus.tasks.procedural import MAX_TRIES, check_split, in_eval_bucket, seed_tag

GENERATOR_VERSION = "web-shop-v1"  # bump when generated tasks change
LEVELS = (1, 2, 3)
LOOKUPS = {  # kind -> how its answer is compared
    "product_price": "money",
    "product_stock": "number",
    "product_rating": "number",
    "product_colour": "name",
    "customer_order_count": "number",
    "cheapest_filtered": "name",
    "best_rated": "name",
    "order_total": "money",
}
EDITS = ("edit_address", "place_order", "change_setting", "cancel_order")
PAGE_SIZES = ("15", "20", "25", "30")  # page-size targets: never one an episode starts with (5-9)

Made = tuple[str, Any, dict[str, Any]] | None  # (prompt, answer, parameters), or None: draw again


def cents_text(cents: int) -> str:
    return str(Decimal(cents) / 100)


def _product(conn: sqlite3.Connection, rng: random.Random) -> tuple:
    rows = conn.execute("SELECT id, name, price_cents, stock, rating, colour FROM products ORDER BY id").fetchall()
    return rng.choice(rows)


def product_price(conn: sqlite3.Connection, rng: random.Random) -> Made:
    pid, name, cents, *_ = _product(conn, rng)
    return (
        f'What is the price of the "{name}" in the shop? Answer with the number only.',
        cents_text(cents),
        {"product_id": pid},
    )


def product_stock(conn: sqlite3.Connection, rng: random.Random) -> Made:
    pid, name, _, stock, *_ = _product(conn, rng)
    return f'How many units of the "{name}" are in stock? Answer with the number only.', str(stock), {"product_id": pid}


def product_rating(conn: sqlite3.Connection, rng: random.Random) -> Made:
    pid, name, _, _, rating, _ = _product(conn, rng)
    prompt = f'What is the customer rating (out of 5) of the "{name}"? Answer with the number only.'
    return prompt, f"{rating:.1f}", {"product_id": pid}


def product_colour(conn: sqlite3.Connection, rng: random.Random) -> Made:
    pid, name, *_, colour = _product(conn, rng)
    return f'What colour is the "{name}"? Answer with the colour only.', colour, {"product_id": pid}


def customer_order_count(conn: sqlite3.Connection, rng: random.Random) -> Made:
    rows = conn.execute(
        "SELECT c.id, c.name, COUNT(o.id) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "GROUP BY c.id ORDER BY c.id"
    ).fetchall()
    cid, name, count = rng.choice(rows)
    prompt = (
        f"Using the store's admin pages, find out how many orders the customer {name} has placed "
        "(counting orders of every status). Answer with the number only."
    )
    return prompt, str(count), {"customer_id": cid}


def cheapest_filtered(conn: sqlite3.Connection, rng: random.Random) -> Made:
    groups = conn.execute(
        "SELECT category, colour FROM products GROUP BY category, colour HAVING COUNT(*) >= 2 ORDER BY category, colour"
    ).fetchall()
    if not groups:
        return None
    category, colour = rng.choice(groups)
    rows = conn.execute(
        "SELECT id, name, price_cents FROM products WHERE category = ? AND colour = ? ORDER BY price_cents, id",
        (category, colour),
    ).fetchall()
    if rows[0][2] == rows[1][2]:
        return None
    prompt = (
        f"What is the name of the cheapest {colour.lower()} product in the {category} category? "
        "Answer with its name only."
    )
    return prompt, rows[0][1], {"product_id": rows[0][0], "category": category, "colour": colour}


def best_rated(conn: sqlite3.Connection, rng: random.Random) -> Made:
    categories = [r[0] for r in conn.execute("SELECT DISTINCT category FROM products ORDER BY category")]
    category = rng.choice(categories)
    rows = conn.execute(
        "SELECT id, name, rating FROM products WHERE category = ? ORDER BY rating DESC, id", (category,)
    ).fetchall()
    if len(rows) < 2 or rows[0][2] == rows[1][2]:
        return None
    prompt = f"Which product in the {category} category has the highest customer rating? Answer with its name only."
    return prompt, rows[0][1], {"product_id": rows[0][0], "category": category}


def order_total(conn: sqlite3.Connection, rng: random.Random) -> Made:
    oid, total = rng.choice(conn.execute("SELECT id, total_cents FROM orders ORDER BY id").fetchall())
    prompt = f"Using the store's admin pages, find the total amount of order #{oid}. Answer with the number only."
    return prompt, cents_text(total), {"order_id": oid}


def edit_address(conn: sqlite3.Connection, rng: random.Random) -> Made:
    aid, cid, label, old_street, old_city, old_postcode, country, name = rng.choice(
        conn.execute(
            "SELECT a.id, a.customer_id, a.label, a.street, a.city, a.postcode, a.country, c.name "
            "FROM addresses a JOIN customers c ON c.id = a.customer_id ORDER BY a.id"
        ).fetchall()
    )
    new = {"street": street(rng), "city": rng.choice(PLACES[country]), "postcode": postcode(rng)}
    if new["street"] == old_street or new["city"] == old_city or new["postcode"] == old_postcode:
        return None
    prompt = (
        f"In the store's admin pages, change the {label} address of the customer {name} to street "
        f'"{new["street"]}", city "{new["city"]}", postcode "{new["postcode"]}" (keep its label and country). '
        "Call finish() when it is saved."
    )
    return prompt, None, {"customer_id": cid, "address_id": aid, **new}


def place_order(conn: sqlite3.Connection, rng: random.Random) -> Made:
    aid, cid, label = rng.choice(conn.execute("SELECT id, customer_id, label FROM addresses ORDER BY id").fetchall())
    pid, name, _, stock, *_ = _product(conn, rng)
    if stock < 5:
        return None
    quantity = rng.randint(2, 4)
    prompt = (
        f'Sign in with your customer account and order {quantity} units of the "{name}", shipped to your saved '
        f"{label} address. Call finish() when the order is placed."
    )
    return prompt, None, {"customer_id": cid, "address_id": aid, "product_id": pid, "quantity": quantity}


def change_setting(conn: sqlite3.Connection, rng: random.Random) -> Made:
    current = dict(conn.execute("SELECT key, value FROM settings"))
    key = rng.choice(["store_name", "currency", "page_size", "support_email"])
    if key == "store_name":
        value = rng.choice([s for s in STORE_NAMES if s != current[key]]) + rng.choice(["", " Outlet", " Online"])
        what = f'change the store name to "{value}"'
    elif key == "currency":
        value = rng.choice([c for c in sorted(CURRENCIES) if c != current[key]])
        what = f"make the store display prices in {CURRENCIES[value][1]} ({value})"
    elif key == "page_size":
        value = rng.choice(PAGE_SIZES)
        what = f"set the number of products shown per page to {value}"
    else:
        value = (
            f"{rng.choice(['support', 'care', 'hello', 'orders'])}@{rng.choice(['mail', 'desk', 'team'])}.example.com"
        )
        what = f"change the support email address to {value}"
    if value == current[key]:
        return None
    prompt = (
        f"In the store's admin settings, {what}. Leave the other settings as they are. Call finish() when it is saved."
    )
    return prompt, None, {"key": key, "value": value}


def cancel_order(conn: sqlite3.Connection, rng: random.Random) -> Made:
    rows = conn.execute("SELECT id FROM orders WHERE status = 'processing' ORDER BY id").fetchall()
    if not rows:
        return None
    oid = rng.choice(rows)[0]
    prompt = (
        f"In the store's admin pages, cancel order #{oid} (set its status to cancelled) and change nothing else. "
        "Call finish() when it is saved."
    )
    return prompt, None, {"order_id": oid}


KINDS: dict[int, tuple[Callable[[sqlite3.Connection, random.Random], Made], ...]] = {
    1: (product_price, product_stock, product_rating, product_colour),
    2: (customer_order_count, cheapest_filtered, best_rated, order_total),
    3: (edit_address, place_order, change_setting, cancel_order),
}


def lookup_gold(kind: str, p: dict[str, Any], conn: sqlite3.Connection) -> str:
    """The answer of look-up ``kind`` with parameters ``p``, read from ``conn`` (the grader's check
    that a task and its database still agree)."""

    def one(sql: str, *args: object) -> tuple:
        return conn.execute(sql, args).fetchone()

    if kind in ("product_price", "product_stock", "product_rating", "product_colour"):
        price, stock, rating, colour = one(
            "SELECT price_cents, stock, rating, colour FROM products WHERE id = ?", p["product_id"]
        )
        return {"product_price": cents_text(price), "product_stock": str(stock), "product_rating": f"{rating:.1f}"}.get(
            kind, colour
        )
    if kind == "customer_order_count":
        return str(one("SELECT COUNT(*) FROM orders WHERE customer_id = ?", p["customer_id"])[0])
    if kind == "cheapest_filtered":
        return one(
            "SELECT name FROM products WHERE category = ? AND colour = ? ORDER BY price_cents, id",
            p["category"],
            p["colour"],
        )[0]
    if kind == "best_rated":
        return one("SELECT name FROM products WHERE category = ? ORDER BY rating DESC, id", p["category"])[0]
    if kind == "order_total":
        return cents_text(one("SELECT total_cents FROM orders WHERE id = ?", p["order_id"])[0])
    raise ValueError(f"{kind!r} is not a look-up task kind")


def make_task(data_seed: int, level: int, kind: str | None, rng: random.Random, task_id: str) -> Task:
    """A task of ``level`` (of ``kind``, else a kind drawn from ``rng``) on data seed ``data_seed``."""
    makers = {m.__name__: m for m in KINDS[level]}
    conn = open_copy(template(data_seed))
    try:
        for _ in range(100):
            maker = makers[kind] if kind else rng.choice(KINDS[level])
            made = maker(conn, rng)
            if made is not None:
                prompt, answer, parameters = made
                info = {"kind": maker.__name__, "difficulty": level, "data_seed": data_seed, "parameters": parameters}
                return Task(id=task_id, prompt=prompt, answer=answer, info=info, source="web")
    finally:
        conn.close()
    raise RuntimeError(
        f"data seed {data_seed} yielded no level-{level} {kind or ''} task in 100 tries; report this bug"
    )


class ShopTasks:
    """An endless, deterministic task source on the shop: task ``i`` is the same on every machine.

    ``difficulty`` is a level 1-3, or ``None`` to draw each task's level; ``kind`` restricts
    the tasks to one kind (a name in :data:`KINDS`)."""

    size: int | None = None

    def __init__(
        self,
        difficulty: int | None = None,
        seed: int = 0,
        split: Split = "train",
        eval_fraction: float = 0.1,
        kind: str | None = None,
    ):
        check_split(split, eval_fraction)
        if difficulty is not None and difficulty not in LEVELS:
            raise ValueError(f"difficulty must be one of {LEVELS} or None (mixed), got {difficulty!r}")
        levels = [lv for lv in LEVELS if any(m.__name__ == kind for m in KINDS[lv])]
        if kind is not None and (not levels or difficulty not in (None, levels[0])):
            raise ValueError(f"kind {kind!r} is not a task kind of level {difficulty}")
        self.difficulty = levels[0] if kind else difficulty
        self.seed, self.split, self.eval_fraction, self.kind = seed, split, eval_fraction, kind

    def get(self, index: int) -> Task:
        rng = random.Random(f"{GENERATOR_VERSION}:{self.seed}:{self.split}:{index}")
        for _ in range(MAX_TRIES):
            data_seed = rng.getrandbits(32)
            if in_eval_bucket(f"{GENERATOR_VERSION}:data:{data_seed}", self.eval_fraction) == (self.split == "eval"):
                break
        level = self.difficulty or rng.choice(LEVELS)
        return make_task(data_seed, level, self.kind, rng, f"web-{level}/{self.split}/{seed_tag(self.seed)}/{index}")
