"""The shop's data: a SQLite template database made from a data seed, and episode copies of it.

A data seed fixes everything in the template (products, customers, addresses, past orders,
settings and the store's "today"), so a task names its seed and its answer follows from it.
The template is built once per seed and kept as bytes (``Connection.serialize``); an episode
gets its own in-memory copy by ``deserialize``, so a reset costs about a millisecond and an
episode can never write into another one's data.
"""

from __future__ import annotations

import datetime
import functools
import random
import sqlite3

DATA_VERSION = "shop-data-v1"  # bump when generated content changes

SCHEMA = """
CREATE TABLE products (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, category TEXT NOT NULL, colour TEXT NOT NULL,
    price_cents INTEGER NOT NULL, stock INTEGER NOT NULL, rating REAL NOT NULL
);
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, email TEXT NOT NULL UNIQUE);
CREATE TABLE addresses (
    id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), label TEXT NOT NULL,
    street TEXT NOT NULL, city TEXT NOT NULL, postcode TEXT NOT NULL, country TEXT NOT NULL
);
CREATE TABLE orders (
    id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id), placed_on TEXT NOT NULL,
    status TEXT NOT NULL, total_cents INTEGER NOT NULL, ship_name TEXT NOT NULL, ship_street TEXT NOT NULL,
    ship_city TEXT NOT NULL, ship_postcode TEXT NOT NULL, ship_country TEXT NOT NULL
);
CREATE TABLE order_items (
    id INTEGER PRIMARY KEY, order_id INTEGER NOT NULL REFERENCES orders(id),
    product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT NULL, unit_price_cents INTEGER NOT NULL
);
CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
TABLES = ("products", "customers", "addresses", "orders", "order_items", "settings", "meta")
KEYS = {"settings": "key", "meta": "key"}  # primary keys other than ``id``

ADJECTIVES = (
    "Amber Arctic Brisk Cedar Classic Cosy Crisp Dapper Dusk Echo Fern Frost Glide Harbor Indigo Juniper Lumen "
    "Maple Meadow Nimbus Nova Oak Orbit Pebble Pine Quartz Raven Ridge Sable Solar Summit Tidal Urban Velvet Willow"
).split()
NOUNS = {
    "Kitchen": "Kettle Teapot Skillet Colander Grater Mug Ladle Whisk Toaster Cutting-Board".split(),
    "Outdoor": "Tent Lantern Hammock Backpack Canteen Compass Tarp Stool Firestarter Cooler".split(),
    "Office": "Stapler Notebook Desk-Lamp Organizer Binder Planner Pen-Set Monitor-Stand Whiteboard Folder".split(),
    "Apparel": "Scarf Beanie Jacket Hoodie Gloves Raincoat Sweater Vest Cap Poncho".split(),
    "Home": "Cushion Throw Vase Candle Rug Mirror Clock Basket Planter Curtain".split(),
    "Fitness": "Yoga-Mat Kettlebell Jump-Rope Dumbbell Foam-Roller Water-Bottle Band Gym-Bag Bench Towel".split(),
    "Toys": "Kite Puzzle Robot Yo-yo Spinning-Top Block-Set Marble-Run Plush-Bear Train-Set Drum".split(),
    "Audio": "Headphones Speaker Earbuds Radio Turntable Soundbar Microphone Amplifier Cable Dock".split(),
}
COLOURS = "Red Blue Green Black White Grey Yellow Orange Purple Teal".split()
FIRST = (
    "Ada Alan Grace Linus Edsger Barbara Donald Frances Ken Margaret John Radia Tim Hedy Claude Niklaus "
    "Sofia Mateo Amara Kenji Priya Lars Ines Tomas Nadia Omar Yara Felix Leila Hugo"
).split()
LAST = (
    "Lovelace Turing Hopper Torvalds Dijkstra Liskov Knuth Allen Thompson Hamilton Backus Perlman Lamarr "
    "Shannon Wirth Okafor Nakamura Haddad Lindqvist Moreau Castillo Novak Petrov Mensah Rossi Jansen"
).split()
STREETS = "Maple Oak Harbour Station Mill Church Park Bridge Market Elm Cedar Orchard Victoria King Queen".split()
STREET_KINDS = ("Street", "Road", "Avenue", "Lane", "Way")
PLACES = {
    "Portugal": ["Lisbon", "Porto", "Braga"],
    "Norway": ["Oslo", "Bergen", "Tromso"],
    "Canada": ["Toronto", "Halifax", "Calgary"],
    "Japan": ["Osaka", "Sapporo", "Kyoto"],
    "Ghana": ["Accra", "Kumasi", "Tamale"],
    "Chile": ["Santiago", "Valparaiso", "Arica"],
}
LABELS = ("Home", "Work", "Studio", "Cottage", "Parents")
STATUSES = ("delivered", "shipped", "processing", "cancelled")
CURRENCIES = {"USD": ("$", "US dollar"), "EUR": ("€", "Euro"), "GBP": ("£", "Pound sterling")}
STORE_NAMES = ("Northwind Goods", "Corner Market", "Blue Door Shop", "Harbour Supply", "Maple & Co.", "The Depot")


def street(rng: random.Random) -> str:
    return f"{rng.randint(1, 240)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}"


def postcode(rng: random.Random) -> str:
    district = f"{rng.choice('ABCDEFGHJKLMNPRSTW')}{rng.randint(10, 99)}"
    return f"{district} {rng.randint(1, 9)}{rng.choice('ABDEFGHJ')}{rng.choice('LNPQRSTUWXYZ')}"


def money(cents: int, currency: str = "USD") -> str:
    """``$12.50``: how the shop shows an amount in the currency it is set to display."""
    return f"{CURRENCIES.get(currency, ('$', ''))[0]}{cents // 100}.{cents % 100:02d}"


def _build(seed: int) -> sqlite3.Connection:
    rng = random.Random(f"{DATA_VERSION}:{seed}")
    conn = sqlite3.connect(":memory:")
    conn.executescript(SCHEMA)
    categories = rng.sample(sorted(NOUNS), rng.randint(5, 7))
    pairs = [(a, n, c) for c in categories for n in NOUNS[c] for a in ADJECTIVES]
    picked = rng.sample(pairs, rng.randint(45, 80))
    for i, (adjective, noun, category) in enumerate(picked, 1):
        conn.execute(
            "INSERT INTO products VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                i,
                f"{adjective} {noun.replace('-', ' ')}",
                category,
                rng.choice(COLOURS),
                rng.randint(3, 300) * 100 + rng.choice([0, 0, 49, 50, 95, 99]),
                rng.randint(0, 250),
                rng.randint(10, 50) / 10,
            ),
        )
    people = rng.sample([(f, last) for f in FIRST for last in LAST], rng.randint(24, 40))
    address_id = 0
    addresses: dict[int, list[tuple]] = {}
    for i, (first, last) in enumerate(people, 1):
        conn.execute(
            "INSERT INTO customers VALUES (?, ?, ?)", (i, f"{first} {last}", f"{first}.{last}@example.com".lower())
        )
        for label in rng.sample(LABELS, rng.randint(1, 3)):
            country = rng.choice(sorted(PLACES))
            address_id += 1
            row = (address_id, i, label, street(rng), rng.choice(PLACES[country]), postcode(rng), country)
            conn.execute("INSERT INTO addresses VALUES (?, ?, ?, ?, ?, ?, ?)", row)
            addresses.setdefault(i, []).append(row)
    today = datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(0, 365))
    prices = dict(conn.execute("SELECT id, price_cents FROM products"))
    n_orders, item_id = rng.randint(140, 260), 0
    dates = sorted(today - datetime.timedelta(days=rng.randint(1, 700)) for _ in range(n_orders))
    for order_id, day in enumerate(dates, 1):
        customer = rng.randint(1, len(people))
        address = rng.choice(addresses[customer])
        total = 0
        for product in rng.sample(sorted(prices), rng.randint(1, 3)):
            item_id += 1
            quantity = rng.choice([1, 1, 1, 2, 2, 3, 4])
            total += quantity * prices[product]
            conn.execute(
                "INSERT INTO order_items VALUES (?, ?, ?, ?, ?)",
                (item_id, order_id, product, quantity, prices[product]),
            )
        recent = (today - day).days < 20
        status = rng.choice(["processing", "shipped"]) if recent else rng.choice(["delivered"] * 8 + ["cancelled"])
        name = people[customer - 1][0] + " " + people[customer - 1][1]
        conn.execute(
            "INSERT INTO orders VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (order_id, customer, day.isoformat(), status, total, name, *address[3:]),
        )
    settings = {
        "store_name": rng.choice(STORE_NAMES),
        "currency": rng.choice(sorted(CURRENCIES)),
        "page_size": "10",  # each episode sets its own (ShopApp), before its baseline is taken
        "support_email": f"help@{rng.choice(['shop', 'store', 'goods'])}.example.com",
    }
    conn.executemany("INSERT INTO settings VALUES (?, ?)", sorted(settings.items()))
    conn.execute("INSERT INTO meta VALUES ('today', ?)", (today.isoformat(),))
    conn.commit()
    return conn


@functools.lru_cache(maxsize=64)
def template(seed: int) -> bytes:
    """The template database of data seed ``seed``, serialised (built once per process and seed)."""
    conn = _build(seed)
    try:
        return conn.serialize()
    finally:
        conn.close()


def open_copy(data: bytes) -> sqlite3.Connection:
    """A private in-memory database holding ``data`` (a serialised database)."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.deserialize(data)
    return conn


def rows(conn: sqlite3.Connection, table: str) -> dict[object, dict[str, object]]:
    """Every row of ``table`` as a dict, by primary key."""
    if table not in TABLES:
        raise ValueError(f"unknown table {table!r}")
    cursor = conn.execute(f"SELECT * FROM {table}")  # noqa: S608 - table is one of TABLES
    names = [d[0] for d in cursor.description]
    key = KEYS.get(table, "id")
    return {row[names.index(key)]: dict(zip(names, row, strict=True)) for row in cursor}


def diff(before: sqlite3.Connection, after: sqlite3.Connection) -> dict[str, dict[str, list]]:
    """What changed between two databases of the shop's schema, per table: rows ``added``,
    ``removed`` and ``changed`` (``(key, {column: (old, new)})``); tables without changes left out."""
    out: dict[str, dict[str, list]] = {}
    for table in TABLES:
        old, new = rows(before, table), rows(after, table)
        added = [new[k] for k in new if k not in old]
        removed = [old[k] for k in old if k not in new]
        changed = []
        for k in old.keys() & new.keys():
            columns = {c: (old[k][c], new[k][c]) for c in old[k] if old[k][c] != new[k][c]}
            if columns:
                changed.append((k, columns))
        if added or removed or changed:
            out[table] = {"added": added, "removed": removed, "changed": sorted(changed, key=lambda x: str(x[0]))}
    return out
