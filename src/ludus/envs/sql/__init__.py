"""The ``sql`` family: answer a question about a database with one SELECT query, graded by
execution on read-only SQLite or PostgreSQL (docs/sql.md). Procedural databases
(:class:`SQLTasks`) or Spider/BIRD folders (:func:`load_sql_tasks`). The PostgreSQL engine
(:mod:`ludus.envs.sql.postgres`) needs the ``postgres`` extra and loads on first use."""

from ludus.envs.sql.env import SQLEnv
from ludus.envs.sql.tasks import SQLTasks, load_sql_tasks
from ludus.envs.sql.verifier import Database, QueryLimits, SQLiteDatabase, SQLVerifier

__all__ = ["Database", "QueryLimits", "SQLEnv", "SQLTasks", "SQLVerifier", "SQLiteDatabase", "load_sql_tasks"]
