"""SQL answers graded by execution: run the model's query and the gold query, compare results.

Two parts, kept apart so a second engine only adds a :class:`Database`
(:mod:`ludus.envs.sql.postgres` is the PostgreSQL one):

* the engine side — :class:`Database` (``tables()``, ``describe(name)``, ``query(sql, limits)``)
  and :class:`SQLiteDatabase`, a connection that can only read: the file is opened
  ``mode=ro&immutable=1`` with ``query_only``, and an authorizer allows what a SELECT needs
  and nothing else (no ATTACH, PRAGMA, writes, DDL, transactions, non-allow-listed functions).
  A progress handler aborts a query past its step budget or its CPU time, rows are fetched in
  batches up to a cap, strings are capped in length;
* the grading side — :func:`compare_results` and :class:`SQLVerifier`, engine-independent.

The reward rule (docs/sql.md):

* results are compared as **multisets of rows**; row order matters only when the gold query
  has an ``ORDER BY`` at its top level (not inside a subquery or a window);
* **column order matters** and column names do not (questions name the columns in order);
  the column counts must agree;
* numbers agree when they are equal after rounding both to 9 significant digits (so
  ``AVG(x)`` and ``SUM(x) * 1.0 / COUNT(x)`` agree, and an integral float equals the integer);
  strings and blobs must be identical; ``NULL`` equals only ``NULL``;
* the answer must match on **every** database given (the episode's and a hidden variant with
  other rows), so a constant that happens to equal the gold on one database earns nothing;
* a gold query that fails or returns no rows is a defective task: status ``gold_error``,
  value 0, never a reward.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol

from ludus.core.types import InfraError, Score, Status
from ludus.sandbox.load import backstop_s

SIGNIFICANT_DIGITS = 9
"""Numbers are compared after rounding to this many significant digits."""

MAX_ANSWER_CHARS = 20_000
"""A longer final answer is not read (status ``format_error``)."""


@dataclass(frozen=True)
class QueryLimits:
    """What one query may use. ``timeout_s`` is the query's CPU time, whatever the machine's
    load (a query the machine starves until the wall-clock backstop, ``backstop_s(timeout_s)``,
    is :class:`QueryStarved`); ``max_steps`` counts engine instructions (deterministic, unlike
    time); ``max_rows`` rows are fetched at most;
    ``max_value_chars`` caps any one string or blob the engine builds, ``max_result_chars``
    the text and blobs of a whole result (the memory a query can make Python hold)."""

    timeout_s: float = 5.0
    max_steps: int = 50_000_000
    max_rows: int = 10_000
    max_value_chars: int = 100_000
    max_result_chars: int = 5_000_000


@dataclass(frozen=True)
class Result:
    """A query's columns and rows; ``complete`` is False when more rows existed than fetched."""

    columns: tuple[str, ...]
    rows: tuple[tuple[Any, ...], ...]
    complete: bool = True


class QueryError(Exception):
    """The query could not run to its end; the message is for the model."""


class QueryRefused(QueryError):
    """Not one read-only statement: a write, ATTACH, PRAGMA, several statements, bad syntax."""


class QueryTimeout(QueryError):
    """Stopped by the step limit (``deterministic``: so is every run of the same query), by the
    CPU time limit, or, with ``wall=True``, by the wall clock of a server whose CPU time Ludus
    cannot read (a remote PostgreSQL)."""

    def __init__(self, message: str, *, deterministic: bool = False, wall: bool = False):
        self.deterministic, self.wall = deterministic, wall
        super().__init__(message)


class HoneypotRead(QueryError):
    """The query reads a table no legitimate solution needs (see ``honeypot_tables``)."""

    def __init__(self, table: str):
        self.table = table
        super().__init__(f"the table {table!r} may not be read")


class DatabaseUnavailable(InfraError):
    """The engine itself failed (a server down, a connection lost): nobody's answer was judged."""


class QueryStarved(DatabaseUnavailable):
    """A query still running at the wall-clock backstop short of its CPU time: a busy machine
    held it back, which says nothing about the query."""


def starved(limits: QueryLimits, wall_s: float) -> QueryStarved:
    """What a query held back past the wall-clock backstop raises (on either engine)."""
    return QueryStarved(
        f"the machine was too busy: the query was still running after {wall_s:.0f} s of wall-clock time, "
        f"short of its {limits.timeout_s:g} s of CPU time"
    )


class Database(Protocol):
    """What the environment and the verifier need from an engine."""

    def tables(self) -> list[str]: ...

    def describe(self, name: str) -> str: ...

    def query(self, sql: str, limits: QueryLimits) -> Result: ...

    def close(self) -> None: ...


# The functions a SELECT may call: deterministic, bounded ones. Not allowed: random/randomblob
# (results would differ run to run), zeroblob/printf/format (large allocations), load_extension,
# sqlite_* introspection, and anything else unknown.
ALLOWED_FUNCTIONS = frozenset(
    """abs avg count max min sum total round length lower upper substr substring trim ltrim rtrim
    replace coalesce ifnull nullif iif instr typeof group_concat string_agg like glob char unicode
    sign hex quote octet_length concat concat_ws date time datetime julianday strftime unixepoch cast likely unlikely likelihood
    sqrt pow power floor ceil ceiling log log10 log2 ln exp mod pi
    row_number rank dense_rank ntile lag lead first_value last_value nth_value percent_rank
    cume_dist""".split()
)

_FIRST_WORDS = ("select", "with", "values")
_SYNTAX = ("syntax error", "incomplete input", "unrecognized token")


def _strip_leading_comments(sql: str) -> str:
    text = sql.lstrip()
    while text.startswith(("--", "/*")):
        end = text.find("\n") if text.startswith("--") else text.find("*/")
        text = "" if end < 0 else text[end + (1 if text.startswith("--") else 2) :].lstrip()
    return text


def check_select(sql: str) -> None:
    """Refuse, before any engine sees it, text that is not a query: a NUL character, or a
    first word other than SELECT, WITH or VALUES. Each engine still enforces read-only itself."""
    if "\x00" in sql:
        raise QueryRefused("the query contains a NUL character")
    if not _strip_leading_comments(sql).lower().startswith(_FIRST_WORDS):
        raise QueryRefused("only a single SELECT statement (or WITH ... SELECT) is allowed")


def _value_size(value: Any) -> int:
    """Roughly how much memory a fetched value holds, for the ``max_result_chars`` cap."""
    if isinstance(value, (str, bytes, memoryview)):
        return len(value)
    if isinstance(value, (list, tuple, dict)):
        return len(repr(value))
    return 8


def fetch_capped(
    cursor: Any, limits: QueryLimits, batch_size: int, before_fetch: Callable[[], None] | None = None
) -> tuple[list[tuple[Any, ...]], bool]:
    """``(rows, complete)`` from a DB-API cursor: at most ``max_rows`` rows, fetched in batches
    so that a huge result is never held whole; raises :class:`QueryError` past
    ``max_result_chars``. ``before_fetch`` runs before every batch but the first."""
    rows: list[tuple[Any, ...]] = []
    size = 0
    while len(rows) < limits.max_rows:
        if rows and before_fetch is not None:
            before_fetch()
        batch = cursor.fetchmany(min(batch_size, limits.max_rows - len(rows)))
        if not batch:
            break
        rows.extend(batch)
        size += sum(_value_size(v) for row in batch for v in row)
        if size > limits.max_result_chars:
            raise QueryError(
                f"the result is larger than {limits.max_result_chars:,} characters; select fewer rows or columns"
            )
    return rows, len(rows) < limits.max_rows or cursor.fetchone() is None


_hashes: dict[tuple[str, int, int], str] = {}
_hashes_lock = threading.Lock()


def content_hash(path: str | Path) -> str:
    """SHA-256 of a database file, memoised by path, size and modification time: what names
    a database's tool-cache scope and its loaded copy in another engine."""
    stat = Path(path).stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _hashes_lock:
        if key in _hashes:
            return _hashes[key]
    with open(path, "rb") as f:  # streamed: loaded databases can be gigabytes
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    with _hashes_lock:
        _hashes[key] = digest
        if len(_hashes) > 4096:  # a file made again (a trimmed cache) is a new key: keep the newest
            del _hashes[next(iter(_hashes))]
    return digest


class SQLiteDatabase:
    """A read-only view of one SQLite file. Opening never writes next to the file
    (``immutable=1``: no journal, no lock files), and nothing the model writes can change it.

    ``honeypot_tables`` are tables a query may not read; reading one raises
    :class:`HoneypotRead` (detected by the authorizer's read callback, not by text matching).
    """

    def __init__(self, path: str | Path, honeypot_tables: Sequence[str] = ()):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"database file not found: {self.path}")
        self.honeypots = {t.lower() for t in honeypot_tables}
        uri = self.path.resolve().as_uri() + "?mode=ro&immutable=1"
        self._conn = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA query_only = ON")
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
        self._denied: list[str] = []
        self._honeypot: str | None = None
        self._conn.set_authorizer(self._authorize)

    def _authorize(self, action: int, arg1: str | None, arg2: str | None, db: str | None, _: str | None) -> int:
        if action == sqlite3.SQLITE_SELECT or action == sqlite3.SQLITE_RECURSIVE:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_READ:
            if arg1 is not None and arg1.lower() in self.honeypots:  # also a CTE of that name: documented
                self._honeypot = self._honeypot or arg1
                return sqlite3.SQLITE_DENY
            # SQLite names no database for a table read without columns (count(*)) or a CTE
            if db in ("main", None):
                return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION and arg2 is not None and arg2.lower() in ALLOWED_FUNCTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            what = f"the function {arg2}"
        elif action == sqlite3.SQLITE_READ:
            what = f"reading {db}.{arg1}"
        else:
            what = _ACTION_NAMES.get(action)
        self._denied.append(what or f"action {action}")
        return sqlite3.SQLITE_DENY

    def tables(self) -> list[str]:
        rows = self._internal("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        return sorted(r[0] for r in rows)

    def describe(self, name: str) -> str:
        """The table's ``CREATE TABLE`` statement and its row count (none for a honeypot)."""
        match = {t.lower(): t for t in self.tables()}.get(name.strip().strip('"`[]').lower())
        if match is None:
            raise QueryError(f"no table named {name!r}; list_tables shows them")
        (ddl,) = self._internal("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (match,))[0]
        if match.lower() in self.honeypots:
            return ddl
        (count,) = self._internal(f'SELECT count(*) FROM "{match.replace(chr(34), chr(34) * 2)}"')[0]
        return f"{ddl}\n-- {count} rows"

    def _internal(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, params).fetchall()

    def query(self, sql: str, limits: QueryLimits) -> Result:
        """Run one read-only statement within ``limits``; raises a :class:`QueryError` subclass."""
        check_select(sql)
        self._denied.clear()
        self._honeypot = None
        self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limits.max_value_chars)
        # the engine runs in this thread: its CPU time is the query's
        cpu_limit, started = time.thread_time() + limits.timeout_s, time.monotonic()
        backstop = started + backstop_s(limits.timeout_s)
        steps_per_call = 1_000
        budget = [limits.max_steps // steps_per_call]
        stopped: list[QueryTimeout | QueryStarved] = []

        def progress() -> int:
            budget[0] -= 1
            if budget[0] < 0:
                message = f"query exceeded the limit of {limits.max_steps:,} engine steps"
                stopped.append(QueryTimeout(message, deterministic=True))
            elif time.thread_time() > cpu_limit:
                stopped.append(QueryTimeout(f"query timed out after {limits.timeout_s:g} s of CPU time"))
            elif time.monotonic() > backstop:
                stopped.append(starved(limits, time.monotonic() - started))
            return 1 if stopped else 0

        self._conn.set_progress_handler(progress, steps_per_call)
        try:
            cursor = self._conn.execute(sql)
            rows, complete = fetch_capped(cursor, limits, batch_size=100)
            columns = tuple(d[0] for d in cursor.description or ())
            cursor.close()
        except sqlite3.Error as exc:
            raise self._explain(exc, stopped) from None
        except (ValueError, OverflowError) as exc:  # e.g. a string Python cannot hand to SQLite
            raise QueryRefused(str(exc)) from None
        finally:
            self._conn.set_progress_handler(None, 0)
            self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 1_000_000_000)
        return Result(columns, tuple(rows), complete)

    def _explain(self, exc: sqlite3.Error, stopped: list[QueryTimeout | QueryStarved]) -> Exception:
        if self._honeypot is not None:
            return HoneypotRead(self._honeypot)
        if stopped:
            return stopped[0]
        if self._denied:
            return QueryRefused(f"not allowed: {self._denied[0]} (the database is read-only; use one SELECT)")
        message = str(exc)
        if isinstance(exc, sqlite3.ProgrammingError) or any(s in message for s in _SYNTAX):
            return QueryRefused(message)
        return QueryError(message)

    def close(self) -> None:
        self._conn.close()


_ACTION_NAMES = {
    getattr(sqlite3, name): name.removeprefix("SQLITE_").replace("_", " ").lower()
    for name in dir(sqlite3)
    if name.startswith("SQLITE_")
    and name.removeprefix("SQLITE_").split("_")[0]
    in ("ATTACH", "DETACH", "PRAGMA", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "TRANSACTION")
    or name in ("SQLITE_ANALYZE", "SQLITE_REINDEX", "SQLITE_SAVEPOINT", "SQLITE_COPY")
}


# ---- extracting and comparing ----

_SQL_BLOCK = re.compile(r"```(?:[ \t]*(?:sqlite|sql)\b)?[ \t]*\n?(.*?)```", re.S | re.I)


def extract_sql(completion: str) -> str | None:
    """The SQL of a reply: the last ```sql block if there is one, else the whole reply."""
    blocks = _SQL_BLOCK.findall(completion)
    text = blocks[-1] if blocks else completion
    text = text.strip()
    return text or None


_TOKENS = re.compile(
    r"""'(?:[^']|'')*'|"(?:[^"]|"")*"|`[^`]*`|\[[^\]]*\]|--[^\n]*|/\*.*?(?:\*/|$)|(\()|(\))|([A-Za-z_]\w*)""", re.S
)


def orders_rows(sql: str) -> bool:
    """Whether ``sql`` has an ``ORDER BY`` at its top level, which fixes its row order.
    Strings, quoted names and comments are skipped; an ``ORDER BY`` inside parentheses (a
    subquery, a window's ``OVER (...)``, a function call) does not count."""
    depth, previous = 0, ""
    for m in _TOKENS.finditer(sql):
        if m.group(1):
            depth += 1
        elif m.group(2):
            depth = max(0, depth - 1)
        elif m.group(3):
            word = m.group(3).lower()
            if depth == 0 and previous == "order" and word == "by":
                return True
            previous = word
    return False


def _normalise(value: Any) -> Any:
    """Integral numbers as exact ints; other floats rounded to ``SIGNIFICANT_DIGITS``. Engine
    types are brought to one form: PostgreSQL's ``numeric`` (``AVG``, ``SUM``) is a number like
    SQLite's, ``boolean`` its 0/1, and arrays and JSON become hashable values."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, Decimal):
        if not value.is_finite():
            return str(value)
        value = int(value) if value == value.to_integral_value() and abs(value) < 2**53 else float(value)
    if isinstance(value, (list, tuple)):
        return tuple(_normalise(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True, default=str)
    if isinstance(value, float) and math.isfinite(value):
        if not (value.is_integer() and abs(value) < 2**53):
            value = float(f"{value:.{SIGNIFICANT_DIGITS}g}")
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def _rows(result: Result) -> list[tuple[Any, ...]]:
    return [tuple(_normalise(v) for v in row) for row in result.rows]


def compare_results(gold: Result, got: Result, ordered: bool) -> str | None:
    """``None`` when ``got`` answers like ``gold`` under the rule of the module docstring,
    else a short sentence saying how they differ."""
    if len(got.columns) != len(gold.columns):
        return f"{len(got.columns)} columns, expected {len(gold.columns)}"
    if not got.complete:
        return f"more than {len(got.rows)} rows, expected {len(gold.rows)}"
    if len(got.rows) != len(gold.rows):
        return f"{len(got.rows)} rows, expected {len(gold.rows)}"
    want, have = _rows(gold), _rows(got)
    if ordered:
        if want == have:
            return None
        if Counter(want) == Counter(have):
            return "the right rows in the wrong order"
        return "different rows"
    return None if Counter(want) == Counter(have) else "different rows"


class SQLVerifier:
    """Grades a final SQL answer by execution on every database given (see the module docstring)."""

    def __init__(self, limits: QueryLimits | None = None):
        self.limits = limits or QueryLimits()

    def score(self, completion: str, gold_sql: str, databases: Sequence[Database]) -> Score:
        """Raises :class:`HoneypotRead` when the answer reads a honeypot table (the environment
        decides the penalty); every other outcome is a :class:`Score`."""
        if len(completion) > MAX_ANSWER_CHARS:
            return Score.zero(Status.FORMAT_ERROR, f"the answer is longer than {MAX_ANSWER_CHARS} characters")
        sql = extract_sql(completion)
        if sql is None:
            return Score.zero(Status.NO_ANSWER, "no SQL in the reply")
        if not databases:
            return Score.zero(Status.INFRA_ERROR, "no database to grade on")
        ordered = orders_rows(gold_sql)
        for i, db in enumerate(databases):
            where = "the episode's database" if i == 0 else f"hidden variant database {i}"
            try:
                gold = db.query(gold_sql, self.limits)
            except QueryTimeout as exc:  # a defective task (steps, CPU) or a remote server's wall clock
                status = Status.INFRA_ERROR if exc.wall else Status.GOLD_ERROR
                return Score.zero(status, f"the gold query was stopped on {where}: {exc}")
            except QueryError as exc:
                return Score.zero(Status.GOLD_ERROR, f"task defect: the gold query fails on {where}: {exc}")
            if not gold.rows:
                return Score.zero(Status.GOLD_ERROR, f"task defect: the gold query returns no rows on {where}")
            if not gold.complete:
                return Score.zero(Status.GOLD_ERROR, f"task defect: the gold result on {where} exceeds the row cap")
            try:
                got = db.query(sql, self.limits)
            except HoneypotRead:
                raise
            except QueryTimeout as exc:
                return Score.zero(Status.TIMEOUT, str(exc), extracted=sql)
            except QueryRefused as exc:
                return Score.zero(Status.FORMAT_ERROR, f"not one read-only SELECT statement: {exc}", extracted=sql)
            except QueryError as exc:
                return Score.zero(Status.WRONG, f"the query failed: {exc}", extracted=sql)
            problem = compare_results(gold, got, ordered)
            if problem:
                return Score.zero(Status.WRONG, f"on {where}: {problem}", extracted=sql)
        reason = "same result as the gold query" + (f" on all {len(databases)} databases" if len(databases) > 1 else "")
        return Score(1.0, Status.CORRECT, reason, extracted=sql)
