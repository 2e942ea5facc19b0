"""PostgreSQL as the SQL environment's second engine (``ludus[postgres]``, psycopg 3).

Tasks keep their databases as SQLite files; :class:`PostgresEngine` loads each file once into
a schema of a database it owns (``ludus_sql``; hidden variant databases into ``ludus_sql_hidden``,
which the model's connection cannot reach) and answers queries through
:class:`PostgresDatabase`, the same :class:`~ludus.envs.sql.verifier.Database` interface as SQLite.

Safety is enforced by the server, deny by default, not by reading the SQL:

* model and gold queries run as ``ludus_sql_reader``, a login role with no privileges of its own,
  in ``READ ONLY`` transactions that are always rolled back, through a server-side cursor
  (``DECLARE … CURSOR FOR``: exactly one query, no data-modifying ``WITH``);
* in the two databases Ludus owns, ``EXECUTE`` on every built-in function is revoked from
  ``PUBLIC`` and granted back only for operators, casts and :data:`ALLOWED_FUNCTIONS`; reading
  the system catalogs and ``information_schema`` is revoked too. So ``pg_sleep``,
  ``set_config``, ``query_to_xml``, ``pg_read_file``, ``current_schema``, ``random`` and
  ``pg_stat_activity`` (other sessions' queries) are all ``permission denied``;
* the reader has ``SELECT`` on every loaded table except honeypots, so reading ``secrets`` is
  a ``permission denied`` error that names the table: :class:`HoneypotRead`;
* a query may use ``timeout_s`` of its server process's CPU time, read from /proc when the
  server runs on this machine (a thread cancels it there; parallel workers are off, so the
  process does all of the work), and a busy machine that holds it back until the wall-clock
  backstop makes it :class:`QueryStarved` (``infra_error``). On a server elsewhere, whose load
  is not this machine's, ``timeout_s`` is wall-clock time. ``statement_timeout`` is set for
  every statement from that one deadline; PostgreSQL has no deterministic step budget, so
  ``max_steps`` does not apply. Rows come in batches up to ``max_rows``; ``temp_file_limit``
  caps spills to disk.

This needs a superuser connection (``dsn``) to a server Ludus may create two databases and one
role in. Without one, :func:`shared_server` starts a private server on 127.0.0.1 from the
installed PostgreSQL binaries (:class:`TemporaryServer`), stopped when the process ends.
"""

from __future__ import annotations

import atexit
import ctypes
import fcntl
import glob
import hashlib
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ludus.envs.sql.verifier import (
    DatabaseUnavailable,
    HoneypotRead,
    QueryError,
    QueryLimits,
    QueryRefused,
    QueryTimeout,
    Result,
    check_select,
    content_hash,
    fetch_capped,
    starved,
)
from ludus.sandbox.load import TreeClock, backstop_s

if TYPE_CHECKING:
    import psycopg

HARDENING_VERSION = "1"  # bump when the hardening statements change: prepared databases redo them
LOAD_VERSION = "1"  # bump when loading changes: it is part of every schema's name

# Functions a query may call, by name (every overload): deterministic and bounded, as for
# SQLite. Not allowed, among others: random, now (results would differ run to run), repeat,
# lpad, rpad, generate_series (large allocations), set_config, current_setting, pg_*.
ALLOWED_FUNCTIONS = tuple(
    """abs avg count max min sum round trunc length char_length character_length octet_length
    lower upper initcap substr substring left right btrim ltrim rtrim replace strpos position
    concat concat_ws string_agg split_part starts_with reverse sqrt cbrt power pow floor ceil
    ceiling ln log log10 exp mod div sign pi degrees radians width_bucket stddev stddev_pop
    stddev_samp variance var_pop var_samp bool_and bool_or every percentile_cont
    percentile_disc mode row_number rank dense_rank ntile lag lead first_value last_value
    nth_value percent_rank cume_dist date_part extract date_trunc to_char to_date to_number
    make_date""".split()
)


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise ImportError("the PostgreSQL engine needs psycopg: pip install 'ludus[postgres]'") from None
    return psycopg


# ---- a private server ----


def server_binaries() -> Path:
    """The folder holding ``initdb`` and ``postgres``: on PATH, from ``pg_config``, or in
    Debian's / Red Hat's versioned folders (newest first)."""
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).parent
    if shutil.which("pg_config"):
        bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True).stdout.strip()
        if bindir and (Path(bindir) / "initdb").exists():
            return Path(bindir)
    candidates = glob.glob("/usr/lib/postgresql/*/bin/initdb") + glob.glob("/usr/pgsql-*/bin/initdb")
    if candidates:
        return Path(max(candidates, key=lambda p: int(re.findall(r"\d+", p)[0]))).parent
    raise FileNotFoundError(
        "PostgreSQL's server programs (initdb, postgres) were not found: install the `postgresql` "
        "package (./scripts/system-deps does) or give the SQL environment a server's dsn"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the server's process, after the switch of user: stop (fast shutdown) when the thread
    that started it ends, so a killed Ludus process leaves no server behind."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


def remove_stale_servers(max_age_s: float = 3600) -> None:
    """Delete the folders of temporary servers whose owner is gone: a killed Ludus process
    stops its server (see ``_die_with_parent``) but cannot delete the folder. An owner holds a
    lock on ``owner.lock`` for its lifetime; the kernel releases it when the process dies."""
    for folder in Path(tempfile.gettempdir()).glob("ludus-pg-*"):
        try:
            with open(folder / "owner.lock", "rb") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except FileNotFoundError:  # an owner between mkdtemp and its lock, or a very old folder
            try:
                if time.time() - folder.stat().st_mtime < max_age_s:
                    continue
            except OSError:
                continue
        except OSError:  # locked: its owner lives
            continue
        shutil.rmtree(folder, ignore_errors=True)


class TemporaryServer:
    """A throwaway PostgreSQL server on 127.0.0.1 with a random port and password, in a
    temporary folder that :meth:`stop` deletes. Run as root, the server runs as the
    ``postgres`` user (PostgreSQL refuses root). Tuned for speed, not durability (no fsync)."""

    def __init__(self) -> None:
        self.bin = server_binaries()
        remove_stale_servers()
        self.root = Path(tempfile.mkdtemp(prefix="ludus-pg-"))
        self._owner = open(self.root / "owner.lock", "wb")  # noqa: SIM115 - held for the server's lifetime
        fcntl.flock(self._owner, fcntl.LOCK_EX)
        self.password = secrets.token_hex(16)
        self.user = "ludus_admin"
        self.port = 0
        self._as: dict[str, Any] = {}
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root needs a `postgres` user to run the server as") from None
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = {"user": owner.pw_uid, "group": owner.pw_gid, "extra_groups": []}
        self._process: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()
        self._started = threading.Event()
        self._error: BaseException | None = None
        try:
            self._initdb()
            # the thread that starts the server must outlive it (see _die_with_parent)
            self._thread = threading.Thread(target=self._run, name="ludus-postgres", daemon=True)
            self._thread.start()
            self._started.wait()
            if self._error is not None:
                raise self._error
        except BaseException:
            self.stop()
            raise
        atexit.register(self.stop)

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} password={self.password} dbname=postgres"

    def _initdb(self) -> None:
        pwfile = self.root / "pw"
        pwfile.write_text(self.password)
        if self._as:
            os.chown(pwfile, self._as["user"], self._as["group"])
        command = [str(self.bin / "initdb"), "-D", str(self.root / "data"), "-U", self.user, "-A", "scram-sha-256"]
        command += [f"--pwfile={pwfile}", "-E", "UTF8", "--no-locale", "--no-sync"]
        done = subprocess.run(command, capture_output=True, text=True, **self._as)
        pwfile.unlink()
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.strip()[-2000:]}")

    def _run(self) -> None:
        try:
            for _ in range(5):  # another program may take the free port first
                self.port = _free_port()
                if self._start():
                    break
            else:
                raise RuntimeError(f"PostgreSQL did not start; its log: {self._log()[-2000:]}")
        except BaseException as exc:
            self._error = exc
            self._started.set()
            return
        self._started.set()
        self._stopped.wait()
        process = self._process
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)  # fast shutdown: ends sessions, exits cleanly
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def _start(self) -> bool:
        options = [
            "-c", "listen_addresses=127.0.0.1", "-p", str(self.port), "-k", str(self.root),
            "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
            "-c", "max_connections=300", "-c", "shared_buffers=64MB",
            # shared memory segments as files in the data folder, not /dev/shm: deleted with it
            "-c", "dynamic_shared_memory_type=mmap",
        ]  # fmt: skip
        log = open(self.root / "log", "ab")  # noqa: SIM115 - the server writes it for its lifetime
        self._process = subprocess.Popen(
            [str(self.bin / "postgres"), "-D", str(self.root / "data"), *options],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent, **self._as,
        )  # fmt: skip
        log.close()
        psycopg = _psycopg()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                return False
            try:
                psycopg.connect(self.dsn, connect_timeout=5).close()
                return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        self._process.kill()
        self._process.wait()
        return False

    def _log(self) -> str:
        path = self.root / "log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        """Stop the server and delete its folder; safe to call twice."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()  # it shuts the server down (see _run)
        shutil.rmtree(self.root, ignore_errors=True)
        self._owner.close()

    def __enter__(self) -> TemporaryServer:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


_shared: TemporaryServer | None = None
_shared_lock = threading.Lock()


def shared_server() -> TemporaryServer:
    """This process's private server, started on first use."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared._stopped.is_set():
            _shared = TemporaryServer()
        return _shared


# ---- loading SQLite files ----


_C_COLLATION = ' COLLATE "C"'


@dataclass(frozen=True)
class _Column:
    source: str  # the name in the SQLite file
    name: str  # the name in PostgreSQL
    type: str
    references: str | None


@dataclass(frozen=True)
class _Table:
    source: str  # the name in the SQLite file
    name: str  # the name in PostgreSQL
    columns: tuple[_Column, ...]
    primary_key: tuple[str, ...]
    rows: int

    def describe(self) -> str:
        lines = [
            f"  {c.name} {c.type.removesuffix(_C_COLLATION)}" + (f" REFERENCES {c.references}" if c.references else "")
            for c in self.columns
        ]
        if self.primary_key:
            lines.append(f"  PRIMARY KEY ({', '.join(self.primary_key)})")
        return f"CREATE TABLE {self.name} (\n" + ",\n".join(lines) + "\n)"


def _pg_type(stored: set[str], declared: str) -> str:
    """A column's PostgreSQL type from the kinds of value SQLite holds in it (its declared
    type only when it holds none): SQLite lets any column hold anything."""
    stored = stored - {"null"}
    if not stored:
        d = declared.upper()
        stored = {"integer"} if "INT" in d else {"real"} if any(k in d for k in ("REAL", "FLOA", "DOUB")) else set()
        stored = stored or ({"blob"} if "BLOB" in d else {"text"})
    if stored == {"integer"}:
        return "bigint"
    if stored <= {"integer", "real"}:
        return "double precision"
    if stored == {"blob"}:
        return "bytea"
    return "text" + _C_COLLATION  # SQLite compares text bytewise: so does the C collation


def _lowered(names: list[str]) -> dict[str, str]:
    """PostgreSQL folds unquoted names to lower case while SQLite ignores case, so names are
    loaded in lower case (``SELECT … FROM Singer`` then works on both), unless two collide."""
    lower = [n.lower() for n in names]
    mapping = dict(zip(names, lower if len(set(lower)) == len(lower) else names, strict=True))
    for name in mapping.values():
        if len(name.encode()) > 63:
            raise ValueError(f"the name {name!r} is longer than PostgreSQL's 63 bytes")
    return mapping


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _is_key(conn: sqlite3.Connection, table: str, columns: list[str], rows: int) -> bool:
    """Whether ``columns`` hold a valid PostgreSQL primary key: SQLite lets a declared key
    (other than an INTEGER one) hold NULLs, and loaded datasets do."""
    if not columns:
        return False
    cols = ", ".join(map(_quote, columns))
    nulls = " OR ".join(f"{_quote(c)} IS NULL" for c in columns)
    (distinct,) = conn.execute(f"SELECT count(*) FROM (SELECT DISTINCT {cols} FROM {_quote(table)})").fetchone()
    (with_null,) = conn.execute(f"SELECT count(*) FROM {_quote(table)} WHERE {nulls}").fetchone()
    return distinct == rows and with_null == 0


def read_layout(conn: sqlite3.Connection) -> list[_Table]:
    """The tables of a SQLite database as they are loaded into PostgreSQL."""
    sources = [
        r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")
    ]
    table_names = _lowered(sorted(sources))
    tables = []
    for source in sorted(sources):
        info = conn.execute(f"PRAGMA table_info({_quote(source)})").fetchall()  # cid, name, type, notnull, default, pk
        column_names = _lowered([c[1] for c in info])
        links = {}
        for fk in conn.execute(f"PRAGMA foreign_key_list({_quote(source)})").fetchall():  # id, seq, table, from, to, …
            parent = table_names.get(fk[2], fk[2])
            target = fk[4] if parent == fk[2] or fk[4] is None else fk[4].lower()
            links[fk[3]] = f"{parent}({target})" if target else parent
        columns = []
        for c in info:
            kinds = {r[0] for r in conn.execute(f"SELECT DISTINCT typeof({_quote(c[1])}) FROM {_quote(source)}")}
            columns.append(_Column(c[1], column_names[c[1]], _pg_type(kinds, c[2] or ""), links.get(c[1])))
        key_sources = [c[1] for c in sorted((c for c in info if c[5]), key=lambda c: c[5])]
        (rows,) = conn.execute(f"SELECT count(*) FROM {_quote(source)}").fetchone()
        key = tuple(column_names[k] for k in key_sources) if _is_key(conn, source, key_sources, rows) else ()
        tables.append(_Table(source, table_names[source], tuple(columns), key, rows))
    return tables


# ---- the engine ----


def _message(exc: Exception) -> str:
    """The server's one-line message, without psycopg's context (our DECLARE around the query)."""
    primary = getattr(getattr(exc, "diag", None), "message_primary", None)
    lines = str(exc).strip().splitlines()
    return primary or (lines[0] if lines else type(exc).__name__)


class PostgresEngine:
    """One PostgreSQL server as seen by Ludus: the databases it prepared, the schemas it
    loaded and a pool of reader connections. Use :meth:`get`, which shares one engine per
    server in a process."""

    _engines: dict[tuple[str, str], PostgresEngine] = {}
    _engines_lock = threading.Lock()

    @classmethod
    def get(cls, dsn: str | None = None, database: str = "ludus_sql") -> PostgresEngine:
        """The engine for ``dsn`` (else ``$LUDUS_POSTGRES_DSN``, else :func:`shared_server`)."""
        dsn = dsn or os.environ.get("LUDUS_POSTGRES_DSN") or shared_server().dsn
        with cls._engines_lock:
            engine = cls._engines.get((dsn, database))
            if engine is None:
                engine = cls._engines[(dsn, database)] = cls(dsn, database)
            return engine

    def __init__(self, dsn: str, database: str = "ludus_sql"):
        if not re.fullmatch(r"[a-z_][a-z0-9_]{0,50}", database):
            raise ValueError(f"database must be a lower-case PostgreSQL name, got {database!r}")
        self.psycopg = _psycopg()
        self.dsn, self.database, self.hidden_database = dsn, database, f"{database}_hidden"
        self.reader = f"{database}_reader"  # the role of every query; one per main database
        self._lock = threading.Lock()  # the admin connections, loading, preparing
        self._admin: dict[str, psycopg.Connection] = {}
        self._prepared: set[str] = set()
        self._layouts: dict[tuple[str, str], list[_Table]] = {}
        self._password: str | None = None
        self._idle: dict[str, list[psycopg.Connection]] = {}
        self._idle_lock = threading.Lock()

    # -- administration (superuser) --

    def _connect(self, dbname: str | None, **extra: Any) -> psycopg.Connection:
        """A connection to ``dbname`` (``None``: the dsn's own database)."""
        if dbname is not None:
            extra["dbname"] = dbname
        try:
            return self.psycopg.connect(
                self.psycopg.conninfo.make_conninfo(self.dsn, **extra),
                autocommit=True, connect_timeout=10, application_name="ludus",
            )  # fmt: skip
        except self.psycopg.OperationalError as exc:
            raise DatabaseUnavailable(f"cannot connect to PostgreSQL: {_message(exc)}") from None

    def _admin_conn(self, dbname: str | None) -> psycopg.Connection:
        conn = self._admin.get(dbname or "")
        if conn is None or conn.closed or conn.broken:
            conn = self._admin[dbname or ""] = self._connect(dbname)
        return conn

    def _prepare(self, dbname: str) -> None:
        """Create and harden ``dbname`` and the reader role, once per server (concurrent
        processes wait for each other on an advisory lock)."""
        if dbname in self._prepared:
            return
        sql = self.psycopg.sql
        if dbname == self.hidden_database:
            self._prepare(self.database)  # the reader role and its password live there
        root = self._admin_conn(None)
        (superuser,) = root.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
        if not superuser:
            raise PermissionError(
                "the PostgreSQL engine needs a superuser dsn: it creates the databases "
                f"{self.database}/{self.hidden_database} and the role {self.reader}, and revokes functions there"
            )
        if not root.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,)).fetchone():
            try:
                root.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))
            except (self.psycopg.errors.DuplicateDatabase, self.psycopg.errors.UniqueViolation):
                pass  # another process made it first
        conn = self._admin_conn(dbname)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('ludus-prepare'))")
            conn.execute("CREATE SCHEMA IF NOT EXISTS ludus_meta")
            conn.execute("REVOKE ALL ON SCHEMA ludus_meta FROM PUBLIC")
            conn.execute("CREATE TABLE IF NOT EXISTS ludus_meta.state (key text PRIMARY KEY, value text NOT NULL)")
            state = dict(conn.execute("SELECT key, value FROM ludus_meta.state").fetchall())
            if dbname == self.database:
                self._password = state.get("reader_password") or self._make_reader(conn)
            if state.get("hardened") != HARDENING_VERSION:
                self._harden(conn, dbname)
                conn.execute(
                    "INSERT INTO ludus_meta.state VALUES ('hardened', %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    (HARDENING_VERSION,),
                )
        self._check_hardening(dbname)
        self._prepared.add(dbname)  # only once checked: a failed check is raised again on the next use

    def _make_reader(self, conn: psycopg.Connection) -> str:
        sql = self.psycopg.sql
        password = secrets.token_hex(24)
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (self.reader,)).fetchone()
        verb = "ALTER" if exists else "CREATE"
        conn.execute(
            sql.SQL(
                verb
                + " ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS PASSWORD {}"
            ).format(sql.Identifier(self.reader), sql.Literal(password))
        )
        for setting, value in (
            ("default_transaction_read_only", "on"),
            ("statement_timeout", "60s"),  # a backstop: each query sets its own
            ("idle_in_transaction_session_timeout", "60s"),
            ("temp_file_limit", "256MB"),
            ("lc_messages", "C"),  # the honeypot check reads "permission denied for table …"
        ):
            conn.execute(
                sql.SQL("ALTER ROLE {} SET {} = {}").format(
                    sql.Identifier(self.reader), sql.Identifier(setting), sql.Literal(value)
                )
            )
        conn.execute(
            "INSERT INTO ludus_meta.state VALUES ('reader_password', %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (password,),
        )
        return password

    def _harden(self, conn: psycopg.Connection, dbname: str) -> None:
        sql = self.psycopg.sql
        db, reader = sql.Identifier(dbname), sql.Identifier(self.reader)
        for statement in (
            sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(db),
            sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(db, reader),
            sql.SQL("REVOKE ALL ON SCHEMA public FROM PUBLIC"),
            sql.SQL("REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pg_catalog, information_schema FROM PUBLIC"),
            sql.SQL("REVOKE SELECT ON ALL TABLES IN SCHEMA pg_catalog, information_schema FROM PUBLIC"),
            sql.SQL("REVOKE USAGE ON SCHEMA information_schema FROM PUBLIC"),
        ):
            conn.execute(statement)
        granted = conn.execute(
            """SELECT DISTINCT f::regprocedure::text FROM (
                 SELECT oprcode AS f FROM pg_operator WHERE oprcode <> 0
                 UNION SELECT castfunc FROM pg_cast WHERE castfunc <> 0
                 UNION SELECT oid FROM pg_proc WHERE pronamespace = 'pg_catalog'::regnamespace AND proname = ANY(%s)
               ) AS fs""",
            (list(ALLOWED_FUNCTIONS),),
        ).fetchall()
        conn.execute("GRANT EXECUTE ON FUNCTION " + ", ".join(r[0] for r in granted) + " TO PUBLIC")

    def _check_hardening(self, dbname: str) -> None:
        """Deny by default, verified: the reader must not be able to sleep or read catalogs."""
        conn = self._reader_conn(dbname)
        try:
            for probe in ("SELECT pg_sleep(0)", "SELECT count(*) FROM pg_stat_activity"):
                try:
                    with conn.transaction(force_rollback=True):
                        conn.execute(probe)
                except self.psycopg.errors.InsufficientPrivilege:
                    continue
                raise RuntimeError(f"{dbname} is not hardened: the reader could run {probe!r}")
        finally:
            conn.close()

    def load(self, path: str | Path, honeypot_tables: Sequence[str] = (), hidden: bool = False) -> tuple[str, str]:
        """``(database, schema)`` holding the SQLite file at ``path``, loaded on first use.
        Concurrent loads of one file (threads or processes) make one schema."""
        dbname = self.hidden_database if hidden else self.database
        honeypots = sorted({t.lower() for t in honeypot_tables})
        digest = hashlib.sha256(f"{LOAD_VERSION}|{content_hash(path)}|{','.join(honeypots)}".encode()).hexdigest()
        schema = f"db_{digest[:24]}"
        with self._lock:
            if (dbname, schema) in self._layouts:
                return dbname, schema
            self._prepare(dbname)
            source = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro&immutable=1", uri=True)
            try:
                layout = read_layout(source)
                conn = self._admin_conn(dbname)
                with conn.transaction():
                    conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (schema,))
                    if not conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone():
                        self._copy(conn, source, schema, layout, honeypots)
            except sqlite3.Error as exc:
                raise ValueError(f"cannot read the SQLite database {path}: {exc}") from None
            except self.psycopg.DataError as exc:
                raise ValueError(f"cannot load {path} into PostgreSQL: {_message(exc)}") from None
            except self.psycopg.OperationalError as exc:
                raise DatabaseUnavailable(f"PostgreSQL failed while loading {path}: {_message(exc)}") from None
            finally:
                source.close()
            self._layouts[(dbname, schema)] = layout
        return dbname, schema

    def _copy(
        self,
        conn: psycopg.Connection,
        source: sqlite3.Connection,
        schema: str,
        layout: list[_Table],
        honeypots: list[str],
    ) -> None:
        sql = self.psycopg.sql
        s, reader = sql.Identifier(schema), sql.Identifier(self.reader)
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(s))
        for table in layout:
            t = sql.Identifier(schema, table.name)
            columns = sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.type)) for c in table.columns
            )
            conn.execute(sql.SQL("CREATE TABLE {} ({})").format(t, columns))
            # a text column may hold numbers in SQLite: SQLite's own CAST writes them as it would
            picks = ", ".join(
                f"CAST({_quote(c.source)} AS TEXT)" if c.type.startswith("text") else _quote(c.source)
                for c in table.columns
            )
            rows = source.execute(f"SELECT {picks} FROM {_quote(table.source)}")
            with conn.cursor().copy(sql.SQL("COPY {} FROM STDIN").format(t)) as copy:
                for row in rows:
                    copy.write_row(row)
            if table.primary_key:
                keys = sql.SQL(", ").join(map(sql.Identifier, table.primary_key))
                conn.execute(sql.SQL("ALTER TABLE {} ADD PRIMARY KEY ({})").format(t, keys))
        conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(s, reader))
        conn.execute(sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(s, reader))
        for table in layout:
            if table.name.lower() in honeypots:
                conn.execute(sql.SQL("REVOKE SELECT ON {} FROM {}").format(sql.Identifier(schema, table.name), reader))

    # -- reading (the reader role) --

    def _reader_conn(self, dbname: str) -> psycopg.Connection:
        with self._idle_lock:
            idle = self._idle.setdefault(dbname, [])
            while idle:
                conn = idle.pop()
                if not conn.closed and not conn.broken:
                    return conn
        conn = self._connect(dbname, user=self.reader, password=self._password)
        conn.read_only = True
        return conn

    def release(self, dbname: str, conn: psycopg.Connection) -> None:
        """Give a reader connection back to the pool (closed when it is not clean)."""
        pq = self.psycopg.pq
        if conn.closed or conn.broken or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            conn.close()
            return
        with self._idle_lock:
            idle = self._idle.setdefault(dbname, [])
            if len(idle) < 64:
                idle.append(conn)
                return
        conn.close()

    def open(self, path: str | Path, honeypot_tables: Sequence[str] = (), hidden: bool = False) -> PostgresDatabase:
        """A read-only view of the SQLite database at ``path``, loaded into this server.
        ``hidden``: a database the model must never reach (a variant for grading)."""
        dbname, schema = self.load(path, honeypot_tables, hidden)
        return PostgresDatabase(self, dbname, schema, self._layouts[(dbname, schema)], honeypot_tables)

    def close(self) -> None:
        """Close every connection (the engine reconnects if used again)."""
        with self._idle_lock:
            for conns in self._idle.values():
                for conn in conns:
                    conn.close()
            self._idle.clear()
        with self._lock:
            for conn in self._admin.values():
                conn.close()
            self._admin.clear()


CPU_SAMPLE_S = 0.05  # how often a running query's CPU time is read
_DENIED_TABLE = re.compile(r'permission denied for (?:table|relation) "?([^"\s]+)"?')
_REFUSED = {"42601", "0A000", "25006", "42P10"}  # syntax, not supported, read-only, bad cursor
_INFRA_CLASSES = ("08", "57P", "58", "XX", "53100", "53300")  # connection, shutdown, system, disk, too many connections


def _local_backend(conn: psycopg.Connection) -> int | None:
    """The process id of ``conn``'s server process when it runs on this machine (its title
    names this connection's own address and port), else None."""
    pid = conn.info.backend_pid
    try:
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            address = sock.getsockname()
        title = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(address, tuple):  # a Unix socket: the server may run in another PID namespace
        return None
    return pid if f" {address[0]}({address[1]}) ".encode() in title else None


class _CpuLimit:
    """Cancels the statement running on ``conn`` once its server process (``pid``) has used
    ``limit_s`` of CPU time, from a thread of its own (the query blocks the caller's)."""

    def __init__(self, conn: psycopg.Connection, pid: int | None, limit_s: float):
        self.exceeded: QueryTimeout | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if pid is not None:
            clock = TreeClock([pid])
            self._thread = threading.Thread(target=self._watch, args=(conn, clock, limit_s), daemon=True)

    def _watch(self, conn: psycopg.Connection, clock: TreeClock, limit_s: float) -> None:
        while not self._stop.wait(CPU_SAMPLE_S):
            if clock.sample().cpu_s >= limit_s:
                self.exceeded = QueryTimeout(f"query timed out after {limit_s:g} s of CPU time")
                conn.cancel_safe()
                return

    def __enter__(self) -> _CpuLimit:
        if self._thread is not None:
            self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


class PostgresDatabase:
    """One loaded database, queried as the reader role; see the module docstring."""

    def __init__(
        self, engine: PostgresEngine, dbname: str, schema: str, layout: list[_Table], honeypot_tables: Sequence[str]
    ):
        self.engine, self.dbname, self.schema = engine, dbname, schema
        self.honeypots = {t.lower() for t in honeypot_tables}
        self._tables = {t.name: t for t in layout}
        self._conn: psycopg.Connection | None = engine._reader_conn(dbname)
        self._backend = _local_backend(self._conn)  # its server process, when its CPU time can be read

    def tables(self) -> list[str]:
        return sorted(self._tables)

    def describe(self, name: str) -> str:
        """The table's columns as a ``CREATE TABLE`` statement and its row count (none for a honeypot)."""
        key = name.strip().strip('"').lower()
        table = self._tables.get(key) or {t.lower(): v for t, v in self._tables.items()}.get(key)
        if table is None:
            raise QueryError(f"no table named {name!r}; list_tables shows them")
        if table.name.lower() in self.honeypots:
            return table.describe()
        return f"{table.describe()}\n-- {table.rows} rows"

    def query(self, sql: str, limits: QueryLimits) -> Result:
        """Run one read-only statement within ``limits``; raises a :class:`QueryError` subclass,
        or :class:`DatabaseUnavailable` when the server fails."""
        check_select(sql)
        conn = self._conn
        if conn is None:
            raise RuntimeError("the database is closed")
        psycopg = self.engine.psycopg
        compose = psycopg.sql
        started = time.monotonic()
        deadline = started + (limits.timeout_s if self._backend is None else backstop_s(limits.timeout_s))

        def past_deadline() -> Exception:
            if self._backend is None:
                return QueryTimeout(f"query timed out after {limits.timeout_s:g} s", wall=True)
            return starved(limits, time.monotonic() - started)

        def time_left() -> int:
            left = deadline - time.monotonic()
            if left <= 0:
                raise past_deadline()
            return max(1, int(left * 1000))

        def renew_timeout() -> None:  # the timeout counts per statement: each fetch gets what is left
            conn.execute(compose.SQL("SET LOCAL statement_timeout = {}").format(compose.Literal(time_left())))

        with _CpuLimit(conn, self._backend, limits.timeout_s) as cpu:
            try:
                with conn.transaction(force_rollback=True):
                    conn.execute(
                        compose.SQL(
                            "SET LOCAL search_path TO {}; SET LOCAL statement_timeout = {}; "
                            "SET LOCAL max_parallel_workers_per_gather = 0"
                        ).format(compose.Identifier(self.schema), compose.Literal(time_left()))
                    )
                    with conn.cursor(name="ludus_query") as cursor:
                        cursor.execute(sql)
                        rows, complete = fetch_capped(cursor, limits, batch_size=1000, before_fetch=renew_timeout)
                        columns = tuple(d.name for d in cursor.description or ())
            except psycopg.Error as exc:
                if getattr(exc, "sqlstate", None) == "57014":  # cancelled: by the CPU limit, else the deadline
                    raise (cpu.exceeded or past_deadline()) from None
                raise self._explain(exc) from None
            except (ValueError, OverflowError) as exc:  # text psycopg cannot send
                raise QueryRefused(str(exc)) from None
        return Result(columns, tuple(rows), complete)

    def _explain(self, exc: Exception) -> Exception:
        state = getattr(exc, "sqlstate", None) or ""
        message = _message(exc)
        if state == "42501":
            denied = _DENIED_TABLE.search(message)
            if denied and denied.group(1).lower() in self.honeypots:
                return HoneypotRead(denied.group(1))
            return QueryRefused(f"not allowed: {message} (the database is read-only; use one SELECT)")
        if state in _REFUSED:
            return QueryRefused(message)
        if not state or state.startswith(_INFRA_CLASSES) or (self._conn is not None and self._conn.broken):
            return DatabaseUnavailable(f"PostgreSQL failed: {message}")
        return QueryError(message)

    def close(self) -> None:
        if self._conn is not None:
            self.engine.release(self.dbname, self._conn)
            self._conn = None
