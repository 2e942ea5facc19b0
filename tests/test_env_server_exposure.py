"""What a client can make an env server do or reveal (issue 28, section 1), on real servers on
127.0.0.1 and real SQLite files: whole tasks from clients (off unless the server allows them, and
then only the fields an environment declares safe), the sql family's bounded database cache,
seeds and secrets kept out of ``/info``, and refused requests that leave nothing behind."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import httpx
import pytest
from websockets.asyncio.client import connect

from ludus.cli import build_parser
from ludus.core.registry import env_class, make
from ludus.core.types import Task
from ludus.envs import ArithmeticEnv
from ludus.envs.sql import tasks as sql_tasks
from ludus.rollout.remote import REDACTED, RemoteEnv, RemoteEnvError
from ludus.serve import env_server
from ludus.serve.env_server import EnvServer, ServerLimits
from ludus.train.config import ConfigError, TrainConfig
from ludus.train.trainer import make_env_factory
from support import serving

ALLOW = ServerLimits(allow_client_tasks=True, show_reasons=True)


# ---- whole tasks from clients -----------------------------------------------------------------------
def test_a_whole_task_is_refused_unless_the_server_allows_client_tasks():
    app = EnvServer(lambda: make("arithmetic"))
    task = {"id": "mine", "prompt": "2+2=", "answer": 4}
    with serving(app, path="") as url:
        refused = httpx.post(f"{url}/reset", json={"session_id": "s", "task": task})
        assert refused.status_code == 403 and refused.json()["error"]["type"] == "client_tasks_off"
        assert "--allow-client-tasks" in refused.json()["error"]["message"] and not app.sessions
        with pytest.raises(RemoteEnvError, match="--allow-client-tasks") as caught:
            RemoteEnv(url).reset(Task("mine", "2+2=", answer=4))  # what a Python client sees
        assert caught.value.kind == "client_tasks_off"
    with serving(EnvServer(lambda: make("arithmetic"), limits=ALLOW), path="") as url:
        env = RemoteEnv(url)
        env.reset(Task("mine", "2+2=", answer=4))
        assert env.step("4").score.status == "correct"
        smuggled = httpx.post(f"{url}/reset", json={"task": {**task, "info": {"db": "/etc/shadow"}}})
        assert smuggled.status_code == 400 and "task.info['db']" in smuggled.json()["error"]["message"]


def test_serve_env_flags_reach_the_server(monkeypatch):
    served: list[ServerLimits] = []
    monkeypatch.setattr(env_server, "serve", lambda factory, **kw: served.append(kw["limits"]))
    for flags, allowed, shown in (
        ([], False, False),
        (["--hide-reasons"], False, False),  # the old flag, now the default
        (["--allow-client-tasks", "--show-reasons"], True, True),
    ):
        args = build_parser().parse_args(["serve-env", "arithmetic", *flags])
        assert args.run(args) == 0
        assert (served[-1].allow_client_tasks, served[-1].show_reasons) == (allowed, shown)
    args = build_parser().parse_args(["serve-env", "arithmetic", "--hide-reasons", "--show-reasons"])
    with pytest.raises(ValueError, match="contradict"):
        args.run(args)
    flags = ["--allow-host", "envs.internal", "--allow-origin", "https://app.example", "--ws-idle-timeout", "5"]
    args = build_parser().parse_args(["serve-env", "arithmetic", *flags])
    assert args.run(args) == 0
    assert (served[-1].allow_hosts, served[-1].allow_origins) == (("envs.internal",), ("https://app.example",))
    assert served[-1].ws_idle_timeout_s == 5
    args = build_parser().parse_args(["serve-env", "arithmetic", "--allow-origin", "http://LOCALHOST:8000"])
    with pytest.raises(ValueError, match="write 'http://localhost:8000'"):
        args.run(args)


def test_sql_takes_no_task_from_a_client_and_writes_nothing(tmp_path, monkeypatch):
    """The attack of issue 28: ``info.db`` named a private SQLite file, the hidden variant of an eval
    task, /etc/shadow or a missing file (told apart); ``info.recipe`` wrote databases per request."""
    monkeypatch.setenv("LUDUS_CACHE", str(tmp_path / "cache"))
    private = tmp_path / "private.sqlite"
    with sqlite3.connect(private) as conn:
        conn.execute("CREATE TABLE salaries (name TEXT, amount INT)")
    recipe = sql_tasks.SQLTasks(1, root=tmp_path / "elsewhere").get(0)
    app = EnvServer(lambda: make("sql", difficulty=1), limits=ALLOW)
    with serving(app, path="") as url:
        replies = []
        for info in (
            {"db": str(private), "variant_dbs": [], "honeypot_tables": []},
            {"db": "/etc/shadow"},
            {"db": str(tmp_path / "missing.sqlite")},
            {"recipe": recipe.info["recipe"], "difficulty": 1},
        ):
            task = {"id": "x", "prompt": "How many rows?", "answer": "SELECT count(*) FROM salaries", "info": info}
            reply = httpx.post(f"{url}/reset", json={"session_id": "spy", "task": task})
            replies.append((reply.status_code, reply.json()))
    assert all(status == 400 for status, _ in replies)
    assert len({json.dumps(body) for _, body in replies}) == 1  # nothing to tell the files apart by
    assert "sql takes no tasks from clients" in replies[0][1]["error"]["message"]
    assert not app.sessions and not (tmp_path / "cache").exists()


def test_every_family_takes_its_own_tasks_and_nothing_that_reaches_the_disk():
    for name in ("arithmetic", "sorting", "countdown", "linear-equation", "math", "instruct"):
        env = make(name)
        own = env.task_source("train").get(0)
        assert env.client_task(own.to_dict()) == own, name  # a client may send what the family makes
        env.close()
    instruct = make("instruct")
    own = instruct.task_source("train").get(0).to_dict()
    many = {**own["answer"], "constraints": own["answer"]["constraints"] * 9}
    with pytest.raises(ValueError, match="1 to 8 constraints"):  # checked on the event loop: kept small
        instruct.client_task({**own, "answer": many})
    with pytest.raises(ValueError, match="'kind' is one of"):
        instruct.client_task({**own, "answer": {**own["answer"], "constraints": [{"kind": "regex"}]}})
    # a word count sets how long a reply may be: 10**9 words let megabyte replies stall the event loop
    for bad, refusal in [(10**9, "from 0 to 5000"), ("9" * 9, "whole number"), (True, "whole number")]:
        words = {"kind": "length_words", "relation": "at least", "num_words": bad}
        with pytest.raises(ValueError, match=refusal):
            instruct.client_task({**own, "answer": {**own["answer"], "constraints": [words]}})
    with pytest.raises(ValueError, match="cannot be checked: KeyError"):  # no relation: the checker cannot read it
        instruct.client_task({**own, "answer": {**own["answer"], "constraints": [{"kind": "length_words"}]}})
    # their tasks name files, or carry the grader's own code, or cost the server without bound
    for name in ("sql", "web", "code", "code-tools", "repo", "bfcl", "bfcl-multi-turn"):
        declining = object.__new__(env_class(name))  # what it declares, without its data or browser
        with pytest.raises(ValueError, match="takes no tasks from clients"):
            declining.client_task({"id": "t", "prompt": "p"})
    with pytest.raises(ValueError, match="needs task.info 'miniwob'"):  # a task's name and seed, nothing else
        object.__new__(env_class("miniwob")).client_task({"id": "t", "prompt": "p"})


# ---- the sql family's database cache ---------------------------------------------------------------------
def cache_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.sqlite"))


def test_enumerating_sql_tasks_keeps_the_cache_bounded_and_live_episodes_intact(tmp_path, monkeypatch):
    monkeypatch.setenv("LUDUS_CACHE", str(tmp_path))
    monkeypatch.setattr(sql_tasks, "CACHE_BYTES", 300_000)  # about six tasks' databases
    gold = make("sql", difficulty=1, seed=4).task_source("train").get(0)
    app = EnvServer(lambda: make("sql", difficulty=1, seed=4), limits=ServerLimits(show_reasons=True))
    with serving(app, path="") as url:
        env = RemoteEnv(url)
        env.reset(env.task_source("train").get(0))  # the episode's database is open from here
        biggest = 0
        for index in range(1, 31):  # a client walking GET /tasks/train/N
            assert httpx.get(f"{url}/tasks/train/{index}").status_code == 200
            biggest = max([biggest, *(p.stat().st_size for p in (tmp_path / "sql").glob("*.sqlite"))])
            assert cache_bytes(tmp_path / "sql") <= 300_000 * 17 // 16 + 2 * biggest
        assert not Path(gold.info["db"]).exists()  # trimmed while the episode ran
        score = env.step(f"```sql\n{gold.answer}\n```").score
    assert score.status == "correct", score.reason  # on its open database and the variant made again


def test_a_recipe_that_gives_another_question_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("LUDUS_CACHE", str(tmp_path / "cache"))
    made = sql_tasks.SQLTasks(2, root=tmp_path / "a").get(0)
    forged = Task(made.id, made.prompt, "SELECT 1", {**made.info, "db": str(tmp_path / "b" / "x.sqlite")})
    with pytest.raises(ValueError, match="another question"):
        sql_tasks.local_databases(forged)
    assert not list(sql_tasks.cache_dir("sql").glob(f"{Path(made.info['db']).stem}*"))


# ---- what /info and scores reveal ---------------------------------------------------------------------
SECRET_ARGS = {
    "digits": 2,
    "seed": 7,
    "postgres_dsn": "host=db user=ludus password=hunter2",
    "judge": {"url": "https://user:pw@judge.example/v1", "api_key": "sk-123", "model": "m"},
    "mirrors": ["https://tok3n@mirror.example/data", "https://public.example/data"],
}


def test_info_shows_env_args_without_seeds_or_secrets():
    app = EnvServer(lambda: make("arithmetic", digits=2, seed=7), env_args=SECRET_ARGS)
    with serving(app, path="") as url:
        shown = httpx.get(f"{url}/info").json()["env_args"]
    assert shown == {
        "digits": 2,
        "seed": REDACTED,
        "postgres_dsn": REDACTED,
        "judge": {"url": REDACTED, "api_key": REDACTED, "model": "m"},
        "mirrors": [REDACTED, "https://public.example/data"],
    }
    for secret in ("hunter2", "pw@", "sk-123", "tok3n"):
        assert secret not in json.dumps(shown)


# each value carries a marker that must not reach /info: secrets under their usual names, tokens under
# neutral ones, and what makes a seed
SPELLINGS = {
    "headers": {"Authorization": "Bearer m0001"},
    "auth": "alice:m0002",
    "pwd": "m0003",
    "cookie": "sid=m0004",
    "db": "mysql://db.example/app?pwd=m0005",
    "openai": "sk-proj-m0006",
    "hf": "hf_m0007abcdefghijklmnop",
    "bucket": "https://b.example/o?X-Amz-Signature=m0008",
    "webhook": "https://hooks.slack.com/services/T00/B00/m0009",
    "random_state": "m0010",
    "rng": "m0011",
    "salt": "m0012",
    "note": "aws AKIAM0013ABCDEFGHIJK here",
    "blob": "m0014Zq8pL2vX9rT4wY7uK1sN6b",  # 24+ characters of a random token
    "github": "ghp_m0015",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.m0016",
}


def test_info_hides_secrets_under_other_names_and_tokens_under_neutral_keys():
    app = EnvServer(lambda: make("arithmetic"), env_args={**SPELLINGS, "digits": 2, "path": "/data/tasks.jsonl"})
    with serving(app, path="") as url:
        shown = httpx.get(f"{url}/info").json()["env_args"]
    hidden = {**dict.fromkeys(SPELLINGS, REDACTED), "headers": {"Authorization": REDACTED}}
    assert shown == {**hidden, "digits": 2, "path": "/data/tasks.jsonl"}
    assert "m00" not in json.dumps(shown).lower()


def test_train_checks_a_server_whose_seed_is_hidden_by_the_keys_it_can_see():
    args = {"digits": 2, "ops": "+", "seed": 7}
    app = EnvServer(lambda: make("arithmetic", **args), env_args=args)
    with serving(app, path="") as url:
        factory, first = make_env_factory(TrainConfig(env="arithmetic", env_args=args, env_server=url))
        first.close()
        remote = factory()
        assert remote.name == "arithmetic"
        remote.close()
        for other in ({"digits": 3, "ops": "+", "seed": 7}, {"digits": 2, "ops": "+"}):
            with pytest.raises(ConfigError, match="--env-args"):
                make_env_factory(TrainConfig(env="arithmetic", env_args=other, env_server=url))


# ---- refused requests leave nothing behind ---------------------------------------------------------------
class BrokenRows:
    """A task source whose row 5 cannot be read."""

    size = 10

    def get(self, index: int) -> Task:
        if index == 5:
            raise ValueError("row 5 is corrupt")
        return Task(f"row/{index}", f"{index}+1=", answer=index + 1)


class Rows(ArithmeticEnv):
    quick = False  # tasks load on the environment's thread, after the session is built

    def default_tasks(self, split="train"):
        return BrokenRows()


def test_a_refused_reset_builds_no_session_and_keeps_an_existing_one():
    app = EnvServer(Rows, limits=ALLOW)
    refused = [
        {"task": {"id": "t", "prompt": "p", "info": {"db": "/etc/passwd"}}},
        {"task": ["not", "a", "task"]},
        {"split": "test", "index": 0},
        {"index": "abc"},
        {"index": 99},
        {"seed": "one"},
        {"index": 5},  # the source fails while loading, on the environment's thread
    ]
    with serving(app, path="") as url:
        for n, body in enumerate(refused):
            reply = httpx.post(f"{url}/reset", json={"session_id": f"new{n}", **body})
            assert reply.status_code in (400, 404, 500) and "error" in reply.json(), body
        assert not app.sessions
        assert httpx.post(f"{url}/reset", json={"session_id": "kept", "index": 1}).status_code == 200
        assert httpx.post(f"{url}/reset", json={"session_id": "kept", "index": 5}).status_code == 500
        assert list(app.sessions) == ["kept"]


class Unlisted(ArithmeticEnv):
    """Its train split is empty (task 0 divides by zero, as an empty BFCL split did) and its eval
    split cannot be made at all."""

    def default_tasks(self, split="train"):
        if split == "eval":
            raise RuntimeError("no eval file")
        return EmptyRows()


class EmptyRows:
    size = 0

    def get(self, index: int) -> Task:
        return [][index % 0]


def test_a_split_that_fails_to_describe_itself_is_left_out_with_a_warning():
    warnings: list[str] = []
    limits = env_server.fit_to_descriptors(Unlisted, ServerLimits(), warnings.append)  # probes each split
    app = EnvServer(Unlisted, limits=limits, on_warning=warnings.append)
    assert warnings == [
        "the train split has no tasks: every request for one is refused (404 unknown_task)",
        "the eval split is left out: its task source failed (RuntimeError: no eval file)",
    ]
    with serving(app, path="") as url:
        assert httpx.get(f"{url}/info").json()["splits"] == {"train": 0}
        for path, kind in (("/tasks/train/0", "unknown_task"), ("/tasks/eval/0", "unknown_split")):
            assert httpx.get(url + path).json()["error"]["type"] == kind


def test_close_and_step_need_a_session_id_that_is_text():
    app = EnvServer(lambda: make("arithmetic"))
    with serving(app, path="") as url:
        assert httpx.post(f"{url}/reset", json={"session_id": "None"}).status_code == 200
        for op, body in (("close", {}), ("close", {"session_id": None}), ("close", {"session_id": 7}), ("step", {})):
            reply = httpx.post(f"{url}/{op}", json=body)
            assert reply.status_code == 400 and reply.json()["error"]["type"] == "bad_request", (op, body)
        assert list(app.sessions) == ["None"]  # "close {}" named no session; it closed none


def test_task_indices_that_are_no_integers_are_clean_refusals():
    app = EnvServer(lambda: make("arithmetic"))
    with serving(app, path="") as url:
        for index in ("abc", "9" * 5000, "²", "-1", str(2**63), "1.5"):
            reply = httpx.get(f"{url}/tasks/train/{index}")
            assert reply.status_code == 400 and reply.json()["error"]["type"] == "bad_request", index
            assert len(reply.text) < 300  # the index is quoted cut short
        for index in ("abc", 2**63, -1, 1.5, True):
            for op in ("task", "reset"):
                reply = httpx.post(f"{url}/{op}", json={"split": "train", "index": index})
                assert reply.status_code == 400 and reply.json()["error"]["type"] == "bad_request", (op, index)
        assert httpx.get(f"{url}/tasks/train/{2**63 - 1}").status_code == 200
        split = httpx.get(f"{url}/tasks/{'x' * 5000}/1")
        assert split.status_code == 404 and len(split.text) < 300

        async def over_websocket():
            async with connect(url.replace("http", "ws") + "/ws") as ws:
                await ws.send(json.dumps({"id": 1, "op": "task", "split": "train", "index": "9" * 5000}))
                return json.loads(await ws.recv())

        reply = asyncio.run(over_websocket())
        assert reply["ok"] is False and reply["status"] == 400
        assert not app.sessions


# ---- the seed in public task ids ---------------------------------------------------------------------
SECRET_SEED = 81730355216  # docs/serving.md's example of a secret seed


@pytest.mark.parametrize("name", ["arithmetic", "countdown", "sorting", "linear-equation", "instruct", "math"])
def test_public_task_ids_do_not_carry_the_secret_seed(name):
    """A red team read the seed back from ids like ``arithmetic/train/81730355216/0``, rebuilt the
    environment locally and answered every task. Ids name the seed by a digest only."""
    app = EnvServer(lambda: make(name, seed=SECRET_SEED), env_args={"seed": SECRET_SEED})
    with serving(app, path="") as url, httpx.Client(timeout=60) as client:
        assert client.get(f"{url}/info").json()["env_args"] == {"seed": REDACTED}
        looked_up = client.get(f"{url}/tasks/train/0").json()["task"]
        reset = client.post(f"{url}/reset", json={"session_id": "probe", "index": 0}).json()
        public_text = json.dumps([looked_up, reset["task"], client.get(f"{url}/info").json()])
    assert str(SECRET_SEED) not in public_text
    local = make(name, seed=SECRET_SEED)
    assert local.task_source("train").get(0).id == looked_up["id"]  # a trainer with the seed still matches ids
    assert make(name, seed=SECRET_SEED + 1).task_source("train").get(0).id != looked_up["id"]
