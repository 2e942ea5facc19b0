"""Fixtures shared by the test modules."""

import os

import pytest

# Ray reads this once, when it is first imported — by whichever test module imports it first (verl
# imports ray): without it a local Ray instance started later listens beyond 127.0.0.1.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Two test workers share two cores, and the processes they start share them too: torch (in these
# processes, and `ludus train`'s `threads: 0`) takes one thread each, since threads that outnumber
# the free cores spin-wait and make every step several times slower.
os.environ.setdefault("OMP_NUM_THREADS", "1")

from ludus.train.config import TrainConfig, load_config

# A training run of seconds: a one-layer tiny model on 1-digit addition, on one thread.
SMALL_TRAINING = {
    "env_args": {"digits": 1, "ops": "+"},
    "tiny": {"d_model": 32, "n_layers": 1, "n_heads": 2, "max_len": 24},
    "warmstart_steps": 5,
    "prompts_per_step": 4,
    "group_size": 4,
    "max_tokens": 3,
    "eval_size": 16,
    "eval_every": 2,
    "checkpoint_every": 2,
    "time_limit_min": 0,
    "threads": 1,
}


@pytest.fixture(scope="session")
def small_training() -> dict:
    """:data:`SMALL_TRAINING`, for fixtures wider than a test's, which cannot use ``small_config``."""
    return dict(SMALL_TRAINING)


@pytest.fixture
def small_config(tmp_path, monkeypatch):
    """``small_config(**overrides)``: that configuration, writing its runs under ``tmp_path``
    and its base models to a cache of its own."""
    monkeypatch.setenv("LUDUS_CACHE", str(tmp_path / "cache"))

    def make(**overrides) -> TrainConfig:
        return load_config(overrides={**SMALL_TRAINING, "runs_dir": str(tmp_path / "runs"), **overrides})

    return make


@pytest.fixture(scope="session")
def postgres_dsn():
    """A private PostgreSQL server on 127.0.0.1 for the session (scripts/system-deps installs
    PostgreSQL), also named in ``$LUDUS_POSTGRES_DSN`` for the ``engine: postgres`` default."""
    from ludus.envs.sql.postgres import TemporaryServer

    with TemporaryServer() as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("LUDUS_POSTGRES_DSN", server.dsn)
        yield server.dsn


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory):
    """``$LUDUS_CACHE`` of the test module's own (generated databases): declare it with
    ``pytestmark = pytest.mark.usefixtures("module_cache")``."""
    with pytest.MonkeyPatch.context() as mp:
        root = tmp_path_factory.mktemp("ludus-cache")
        mp.setenv("LUDUS_CACHE", str(root))
        yield root


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """A tiny Llama checkpoint whose heads are 32 wide (vLLM's CPU attention needs that)."""
    from support import build_hf_checkpoint

    return build_hf_checkpoint(tmp_path_factory.mktemp("tiny-llama") / "model", head_dim=32)


@pytest.fixture(scope="session")
def vllm(tiny_llama, tmp_path_factory):
    """vLLM's OpenAI-compatible server (``support.VLLMServer``) for the whole session, serving
    ``tiny_llama``; ``scripts/vllm-venv`` builds its virtual environment the first time. Tests
    push their own weights to it; a test that kills it gets a new one from ``vllm.ensure()``."""
    from support import VLLMServer, vllm_python

    server = VLLMServer(vllm_python(), tiny_llama, tmp_path_factory.mktemp("vllm")).start()
    try:
        yield server
    finally:
        server.stop()
