"""Training configuration: defaults, a YAML file, then ``--key value`` flags, validated field by field.

Every error names the field (and the file it came from) and says what is allowed, e.g.
``config field 'lr' (from my.yaml) must be a number, got 'fast'``.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml

from ludus.core.types import ACTOR_NAME

# the GRPO variants (train/grpo.py explains each); defined here so that reading a config imports no torch
Scale = Literal["group", "batch", "none"]
LossAgg = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
TurnCredit = Literal["episode", "reward_to_go"]
ImportanceRatio = Literal["token", "sequence"]
ImportanceMode = Literal["truncate", "mask"]
OfflineObjective = Literal["reward_weighted", "importance_weighted", "filtered_bc"]
POOL_PREFIX = "pool-"  # self-play's pool members are the actors pool-STEP (train/selfplay.py)


@dataclass(frozen=True)
class LossConfig:
    """What one GRPO step reads (train/grpo.py: rewards, advantages, samples, the loss and the
    update), so the loss depends on these alone and not on the whole run. Made by
    :meth:`TrainConfig.loss`; each field means what the ``TrainConfig`` field of its name does."""

    # rewards and advantages
    scale_rewards: Scale
    turn_credit: TurnCredit
    max_tokens: int
    overlong_buffer: int
    overlong_penalty: float
    overlong_filter: bool
    # the loss
    eps_low: float
    eps_high: float
    beta: float
    entropy_coef: float
    loss_agg: LossAgg
    importance_ratio: ImportanceRatio
    importance_cap: float
    importance_mode: ImportanceMode
    # the update
    ppo_epochs: int
    minibatches: int
    max_grad_norm: float
    temperature: float
    max_staleness: int
    rollout_server: bool  # the samples come from an inference server, not from the learner here
    rollout_correction: bool
    rollout_logprob_tolerance: float
    replay_ratio: float  # logged groups in the batch: stale samples of an unknown policy


class ConfigError(ValueError):
    """A configuration value is missing, unknown or of the wrong type; the message names the field."""


@dataclass
class TrainConfig:
    """Everything ``ludus train`` needs. The defaults are the tuned recipe for the embedded model
    (see docs/recipe.md); every field can be set in YAML or as a flag."""

    # run
    name: str = ""  # run folder is <runs_dir>/<name>; empty: <env>-<date>-<time>
    runs_dir: str = "runs"
    seed: int = 0
    threads: int = 0  # torch CPU threads; 0 = $OMP_NUM_THREADS if set, else all cores
    # environment and tasks
    env: str = "arithmetic"
    env_args: dict[str, Any] = field(default_factory=lambda: {"digits": 2, "ops": "+", "digit_credit": 0.5})
    # several environments in one run (docs/curriculum.md): a list of {name, args, weight, label}; each group is
    # drawn from one of them by weight, with metrics and held-out evaluation per environment. Empty: env alone
    envs: list[dict[str, Any]] = field(default_factory=list)
    # adaptive curriculum over each environment's difficulty levels (train/curriculum.py): groups come from a
    # current level, promoted when its recent success rate reaches the band's top, demoted at its bottom; a share
    # `curriculum_review` of groups reviews the levels below. Levels: the environment's own (empty) or these,
    # easiest first; the run starts at the first
    curriculum: bool = False
    curriculum_levels: list[int] = field(default_factory=list)
    curriculum_band: list[float] = field(default_factory=lambda: [0.0, 0.6])
    curriculum_window: int = 32  # groups per level a promotion or demotion reads
    curriculum_review: float = 0.2
    # re-ask, for this fraction of groups, a task whose last group had reward variance (at most 3 times)
    revisit: float = 0.0
    # DAPO dynamic sampling (Yu et al., 2025): a step trains only on groups whose rewards differ, sampling more
    # groups until it has prompts_per_step of them or has sampled dynamic_sampling_rounds times as many
    dynamic_sampling: bool = False
    dynamic_sampling_rounds: int = 3
    env_threads: int = 32  # environment calls at once (slow ones: sandboxes, servers); quick procedural ones need none
    # where the environments run: threads here (default); env servers started with `ludus serve-env ENV`
    # (comma-separated URLs, sessions spread over them; a token comes from $LUDUS_ENV_TOKEN, never from a
    # config file); or Ray actors (ray: true; ray_address joins a cluster: auto, HOST:PORT, ray://HOST:10001)
    env_server: str = ""
    ray: bool = False
    ray_address: str = ""
    ray_actors: int = 2
    # model: "tiny" (the embedded model, warm-started into a cached base), a folder saved by ludus (tiny or
    # transformers, e.g. a run's final/ or checkpoints/step_NNNNNN/) or "hf:PATH" (a local transformers
    # checkpoint; see docs/models.md).
    # The RL defaults below are tuned for tiny: a pretrained model wants a far smaller lr (around 1e-6).
    model: str = "tiny"
    # options for loading a transformers model (model: hf:PATH or a saved transformers folder), e.g.
    # {device: cuda, dtype: bfloat16, tool_format: hermes}; default CPU float32 (bfloat16 halves memory
    # but trains less exactly); tool_format: how the model writes tool calls (hermes, mistral, llama3_json)
    model_args: dict[str, Any] = field(default_factory=dict)
    # tiny and warmstart_* apply to model: tiny only
    tiny: dict[str, Any] = field(default_factory=dict)  # TinyConfig overrides: d_model, n_layers, n_heads, max_len
    warmstart_steps: int = 180  # supervised steps that make the cached base model; 0 = start from random weights
    warmstart_batch: int = 64
    warmstart_lr: float = 2e-3
    # RL
    steps: int = 10_000  # a cap; with the default time limit, the 10 minutes end the run first
    time_limit_min: float = 10.0  # stop RL after this many minutes (0 = no limit)
    prompts_per_step: int = 32
    group_size: int = 8
    max_tokens: int = 6
    temperature: float = 0.7
    top_p: float = 1.0
    lr: float = 6e-4
    lr_schedule: Literal["constant", "cosine", "linear", "wsd"] = "wsd"
    lr_decay_frac: float = 0.5  # wsd: hold the lr, then decay it linearly to 0 over this last fraction of the run
    warmup_steps: int = 0
    weight_decay: float = 0.0
    ppo_epochs: int = 2
    minibatches: int = 1
    eps_low: float = 0.2
    eps_high: float = 0.28
    beta: float = 0.0
    entropy_coef: float = 0.05  # exploration bonus: loss -= entropy_coef * token entropy
    scale_rewards: Scale = "group"
    # multi-turn credit: "episode" trains every turn with its episode's advantage; "reward_to_go"
    # trains turn k with the return from turn k on (intermediate rewards; train/grpo.py)
    turn_credit: TurnCredit = "episode"
    loss_agg: LossAgg = "token-mean"
    # GSPO (Zheng et al., 2025): "sequence" takes one importance ratio per reply, the geometric mean of its
    # tokens' ratios, and clips it; it needs loss_agg seq-mean-token-mean and a clip range near 3e-4/4e-4
    importance_ratio: ImportanceRatio = "token"
    # DAPO (Yu et al., 2025): overlong_filter leaves replies cut off at max_tokens out of the loss; a soft
    # overlong punishment (overlong_buffer > 0) lowers a reply's reward linearly from 0 to -overlong_penalty
    # over its last overlong_buffer tokens before max_tokens
    overlong_filter: bool = False
    overlong_buffer: int = 0
    overlong_penalty: float = 1.0
    max_grad_norm: float = 1.0
    # asynchronous training: 0 = lockstep (sample, then learn; reproducible). k >= 1: a sampler thread
    # samples ahead with a copy of the weights, samples are at most k updates old, and the loss
    # reweights them by min(π_proximal / π_behaviour, importance_cap) (docs/rollout.md)
    max_staleness: int = 0
    importance_cap: float = 2.0
    # a token whose importance weight is past importance_cap: "truncate" weighs it by the cap (truncated IS),
    # "mask" leaves it out of the loss (masked IS); with importance_ratio sequence, per reply
    importance_mode: ImportanceMode = "truncate"
    # generation on an inference server (docs/integrations.md): the /v1 URL of an OpenAI-compatible server -
    # vLLM started with VLLM_SERVER_DEV_MODE=1 and --logprobs-mode processed_logprobs, or `ludus serve-model
    # --weight-updates` - that samples for the model learning here (an hf: model), token ids in and out; the
    # weights are pushed to it after every update. Empty: generate in this process
    rollout_server: str = ""
    rollout_weights_dir: str = ""  # where pushed weights go for the server to read; empty: <run>/rollout-weights
    # the server's log-probs of the tokens it samples must match the learner's within this, mean |Δ log-prob|
    # per token: at the start on probe replies (greedy and sampled), then on every step's tokens, before the
    # update (a step past it stops the run). A float32 server is ~1e-7 off, a bfloat16 one 1e-3-1e-2 (set
    # ~0.02 for one), one reporting log-probs before temperature 0.05-0.3 (refused at the start whatever
    # this says); 0: no check (docs/integrations.md)
    rollout_logprob_tolerance: float = 1e-3
    # the loss corrects what mismatch is left (truncated importance sampling, as TRL's and verl's vLLM
    # corrections): the ratio is taken against the learner's own log-probs and each token weighted by
    # min(π_learner / π_server, importance_cap), by importance_mode. false: the ratio against the server's
    rollout_correction: bool = True
    # rewards relative to the group (train/ranking.py, docs/rewards.md): an LLM judge scores each group's replies
    # together, e.g. {model: http://127.0.0.1:8000/v1, criteria: "...", rounds: 2}; the judge's score becomes the
    # reward and the environment's own is logged as reward/env. Empty: the environment's reward
    group_judge: dict[str, Any] = field(default_factory=dict)
    # learning from logs (train/offline.py, docs/offline.md): logged, rewarded episodes - JSONL files of
    # Ludus trajectories (an eval run's trajectories.jsonl, proxy episodes) or OpenAI-format conversations
    # with a reward, or run folders. offline: train only on them, prompts_per_step logged groups (attempts at
    # one task) per step, by offline_objective; no sampling. replay: online RL, and replay_ratio of each
    # step's groups come from these logs (groups whose rewards differ), corrected as stale samples
    offline: list[str] = field(default_factory=list)
    offline_objective: OfflineObjective = "reward_weighted"
    offline_beta: float = 0.1  # reward_weighted/importance_weighted: weight exp((reward - group mean) / beta)
    offline_weight_cap: float = 5.0  # an episode's weight (normalised to mean 1 over the log) is at most this
    offline_min_reward: float = 1.0  # filtered_bc: the episodes trained on have at least this reward
    replay: list[str] = field(default_factory=list)
    replay_ratio: float = 0.0  # the share of a step's groups taken from the replay logs, in [0, 1)
    # replay only in the run's first replay_steps steps (0: in every step): a weak logger's partial-credit answers
    # help a weak policy early and hold a strong one back late
    replay_steps: int = 0
    # a log's line without a reward is graded on the environment's own task of its id, or on its own task when the
    # environment takes that task from any client; true: on its own task always (logs you made: a forged task can
    # name any file on this machine)
    trust_logged_tasks: bool = False
    # self-play on a two-player game (train/selfplay.py, docs/games.md): each group's opponent is the learner
    # itself (self_play_latest of the groups; both seats trained) or a pool member: the learner's weights
    # saved every pool_every steps, the newest pool_size kept, drawn by recency or by rating (those most
    # likely to beat the learner most often). Elo ratings of the learner, the pool and the scripted players
    # are logged; held-out evaluation plays each scripted player
    self_play: bool = False
    pool_every: int = 10
    pool_size: int = 5
    pool_sampling: Literal["recency", "rating"] = "recency"
    self_play_latest: float = 0.5
    # scripted players of the game kept in the pool for the whole run, a league (e.g. [random]): drawn with
    # the checkpoints, never evicted, their ratings fixed; opponents that neither collapse nor drift with the learner
    pool_scripted: list[str] = field(default_factory=list)
    # other policies by name, each a model spec as for `model` (a saved folder, hf:PATH, an http(s)://.../v1
    # OpenAI-compatible server): a game's seat plays one with env_args opponent: "actor:NAME" (docs/games.md)
    actors: dict[str, str] = field(default_factory=dict)
    # evaluation and logging
    eval_every: int = 25
    eval_size: int = 200
    checkpoint_every: int = 25
    keep_checkpoints: int = 2
    # whole trajectories kept per step in samples.jsonl (for `ludus view`, `ludus rescore`, replay); -1: every one
    samples_per_step: int = 4

    def validate(self) -> None:
        positive = [
            "prompts_per_step",
            "group_size",
            "max_tokens",
            "eval_size",
            "ppo_epochs",
            "minibatches",
            "keep_checkpoints",
            "warmstart_batch",
            "env_threads",
            "ray_actors",
            "curriculum_window",
            "dynamic_sampling_rounds",
        ]
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"config field {name!r} must be at least 1, got {getattr(self, name)}")
        for name in [
            "steps",
            "warmstart_steps",
            "warmup_steps",
            "eval_every",
            "checkpoint_every",
            "threads",
            "beta",
            "entropy_coef",
            "weight_decay",
            "time_limit_min",
            "temperature",
            "max_staleness",
            "overlong_buffer",
            "overlong_penalty",
        ]:
            if getattr(self, name) < 0:
                raise ConfigError(f"config field {name!r} must be >= 0, got {getattr(self, name)}")
        for name in ["lr", "warmstart_lr", "max_grad_norm"]:
            if not getattr(self, name) > 0:
                raise ConfigError(f"config field {name!r} must be > 0, got {getattr(self, name)}")
        if self.samples_per_step < -1:
            raise ConfigError(
                f"config field 'samples_per_step' must be >= 0, or -1 for every one; got {self.samples_per_step}"
            )
        if not self.importance_cap >= 1:
            raise ConfigError(f"config field 'importance_cap' must be >= 1, got {self.importance_cap}")
        if not 0 < self.lr_decay_frac <= 1:
            raise ConfigError(f"config field 'lr_decay_frac' must be in (0, 1], got {self.lr_decay_frac}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"config field 'top_p' must be in (0, 1], got {self.top_p}")
        if not (0 <= self.eps_low < 1 and self.eps_high >= 0):
            raise ConfigError(
                f"config fields 'eps_low'/'eps_high' must satisfy 0 <= eps_low < 1, eps_high >= 0; got {self.eps_low}, {self.eps_high}"
            )
        if self.overlong_buffer > self.max_tokens:
            raise ConfigError(
                f"config field 'overlong_buffer' ({self.overlong_buffer}) must be at most max_tokens ({self.max_tokens})"
            )
        if self.importance_ratio == "sequence":
            if self.loss_agg != "seq-mean-token-mean":
                raise ConfigError(
                    "config field 'importance_ratio' sequence (GSPO) averages the loss per reply: set loss_agg: "
                    f"seq-mean-token-mean (got {self.loss_agg!r})"
                )
            if self.eps_high > 0.01 or self.eps_low > 0.01:
                raise ConfigError(
                    "config field 'importance_ratio' sequence (GSPO) clips a per-reply ratio that stays near 1: "
                    "use a clip range like the paper's, eps_low: 0.0003, eps_high: 0.0004 "
                    f"(got {self.eps_low}, {self.eps_high})"
                )
        if self.group_size < 2:
            raise ConfigError(
                f"config field 'group_size' must be at least 2 (GRPO compares samples within a group), got {self.group_size}"
            )
        if self.temperature == 0:
            raise ConfigError(
                "config field 'temperature' must be > 0 for RL sampling (greedy decoding gives identical group samples)"
            )
        for name, hint in typing.get_type_hints(TrainConfig).items():  # set directly, not through _coerce
            if get_origin(hint) is Literal and getattr(self, name) not in get_args(hint):
                raise ConfigError(f"config field {name!r} must be one of {', '.join(map(repr, get_args(hint)))}")
        if self.env_server and self.ray:
            raise ConfigError("config fields 'env_server' and 'ray' both say where environments run: keep one")
        if self.ray_address and not self.ray:
            raise ConfigError("config field 'ray_address' joins a Ray cluster for the environments: set ray: true too")
        for url in self.env_servers:
            if not url.startswith(("http://", "https://")):
                raise ConfigError(f"config field 'env_server' holds addresses like http://HOST:PORT, got {url!r}")
        self._validate_self_play()
        self._validate_model()
        self._validate_rollout_server()
        self._validate_tasks()
        self._validate_logs()

    def _validate_self_play(self) -> None:
        """Self-play's settings, and what it cannot be combined with (the game itself is checked
        when the run makes it)."""
        if self.pool_every < 1 or self.pool_size < 1:
            raise ConfigError(
                f"config fields 'pool_every' and 'pool_size' must be at least 1, got {self.pool_every} and {self.pool_size}"
            )
        if not 0 <= self.self_play_latest <= 1:
            raise ConfigError(f"config field 'self_play_latest' must be in [0, 1], got {self.self_play_latest}")
        if not isinstance(self.pool_scripted, list) or not all(isinstance(p, str) for p in self.pool_scripted):
            raise ConfigError(f"config field 'pool_scripted' lists scripted players' names, got {self.pool_scripted!r}")
        for name, spec in self.actors.items():
            if not isinstance(name, str) or not ACTOR_NAME.fullmatch(name) or name.startswith(POOL_PREFIX):
                raise ConfigError(
                    f"config field 'actors': {name!r} is not an actor's name (letters, digits, '_', '.', '-'; up to "
                    f"64; not starting with {POOL_PREFIX!r}, self-play's pool)"
                )
            if not isinstance(spec, str) or not spec or spec in ("tiny", "oracle", "nothing"):
                raise ConfigError(
                    f"config field 'actors': {name} must name a model: a saved folder, hf:PATH or an http(s)://.../v1 "
                    f"server; got {spec!r}"
                )
        if not self.self_play:
            if self.pool_scripted:
                raise ConfigError("config field 'pool_scripted' is a self-play pool's: set self_play: true, or drop it")
            return
        clashes = {
            "envs": self.envs,
            "curriculum": self.curriculum,
            "max_staleness": self.max_staleness,
            "offline": self.offline,
            "replay": self.replay,
            "group_judge": self.group_judge,
            "env_server": self.env_server,  # its tasks stay on the server: self-play sets each game's opponent on the task
        }
        given = [name for name, value in clashes.items() if value]
        if given:
            raise ConfigError(
                f"config field 'self_play' trains one game in lockstep against a pool it changes between steps: "
                f"drop {', '.join(given)}"
            )

    def _validate_logs(self) -> None:
        """Offline training and replay: what they read, and what they cannot be combined with."""
        if self.offline and self.replay:
            raise ConfigError(
                "config fields 'offline' and 'replay' both read logs: offline trains on logs alone, replay mixes "
                "them into online RL; keep one"
            )
        if not 0 <= self.replay_ratio < 1:
            raise ConfigError(f"config field 'replay_ratio' must be in [0, 1), got {self.replay_ratio}")
        if bool(self.replay) != (self.replay_ratio > 0):
            raise ConfigError(
                "config fields 'replay' (the logs) and 'replay_ratio' (their share of each step's groups, > 0) "
                "go together: set both or neither"
            )
        if self.replay_steps < 0 or (self.replay_steps and not self.replay):
            raise ConfigError(
                f"config field 'replay_steps' (replay in the first so many steps; 0: every step) must be >= 0 and "
                f"needs 'replay', got {self.replay_steps}"
            )
        if self.offline_beta <= 0 or self.offline_weight_cap < 1:
            raise ConfigError(
                f"config fields 'offline_beta' must be > 0 and 'offline_weight_cap' >= 1, got {self.offline_beta} "
                f"and {self.offline_weight_cap}"
            )
        if self.offline:
            sampling = {
                "rollout_server": self.rollout_server,
                "max_staleness": self.max_staleness,
                "dynamic_sampling": self.dynamic_sampling,
                "group_judge": self.group_judge,
                "curriculum": self.curriculum,
                "revisit": self.revisit,
                "beta": self.beta,
            }
            given = [name for name, value in sampling.items() if value]
            if given:
                raise ConfigError(
                    f"config field 'offline' trains on logs without sampling or a reference model: drop {', '.join(given)}"
                )

    def _validate_tasks(self) -> None:
        """The mixture's entries and the curriculum's settings (the environments themselves are
        checked when the run makes them)."""
        default = TrainConfig()
        if self.envs and (self.env, self.env_args) != (default.env, default.env_args):
            raise ConfigError("config fields 'env'/'env_args' and 'envs' both name the run's environments: keep one")
        labels: list[str] = []
        for i, entry in enumerate(self.envs):
            where = f"config field 'envs' entry {i}"
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ConfigError(f"{where} must be a mapping with a name, e.g. {{name: countdown, weight: 2}}")
            unknown = set(entry) - {"name", "args", "weight", "label"}
            if unknown:
                raise ConfigError(f"{where} has unknown keys {sorted(unknown)}; it takes name, args, weight, label")
            if not isinstance(entry.get("args", {}), dict):
                raise ConfigError(f"{where}: args must be a mapping of the environment's constructor arguments")
            weight = entry.get("weight", 1.0)
            if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0:
                raise ConfigError(f"{where}: weight must be a number > 0, got {weight!r}")
            labels.append(str(entry.get("label", entry["name"])))
        if len(set(labels)) < len(labels):
            raise ConfigError(
                f"config field 'envs' names an environment twice ({labels}); give the entries distinct labels"
            )
        if self.envs and (self.env_servers or self.ray):
            raise ConfigError("config field 'envs' (a mixture) runs environments in threads here; drop env_server/ray")
        low_high = self.curriculum_band
        if len(low_high) != 2 or not 0 <= low_high[0] < low_high[1] <= 1:
            raise ConfigError(
                f"config field 'curriculum_band' must be [low, high] with 0 <= low < high <= 1, got {low_high}"
            )
        if not 0 <= self.curriculum_review < 1:
            raise ConfigError(f"config field 'curriculum_review' must be in [0, 1), got {self.curriculum_review}")
        if not 0 <= self.revisit < 1:
            raise ConfigError(f"config field 'revisit' must be in [0, 1), got {self.revisit}")
        if self.curriculum and self.env_servers:
            raise ConfigError(
                "config field 'curriculum' makes the environment at each difficulty level here; an env server "
                "serves one fixed set of env_args: drop env_server or the curriculum"
            )
        if self.curriculum_levels and not self.curriculum:
            raise ConfigError("config field 'curriculum_levels' applies with curriculum: true")

    def env_entries(self) -> list[dict[str, Any]]:
        """The run's environments as ``{name, args, weight, label}``: ``envs``, or ``env`` alone."""
        entries = self.envs or [{"name": self.env, "args": self.env_args}]
        return [
            {
                "name": e["name"],
                "args": dict(e.get("args", {})),
                "weight": float(e.get("weight", 1.0)),
                "label": str(e.get("label", e["name"])),
            }
            for e in entries
        ]

    @property
    def env_servers(self) -> list[str]:
        return [u.strip() for u in self.env_server.split(",") if u.strip()]

    def _validate_rollout_server(self) -> None:
        """Generation on a server needs a transformers model here and a server URL that can take its weights."""
        if not self.rollout_logprob_tolerance >= 0:
            raise ConfigError(
                f"config field 'rollout_logprob_tolerance' must be >= 0, got {self.rollout_logprob_tolerance}"
            )
        if not self.rollout_server:
            return
        url = self.rollout_server.rstrip("/")
        if not url.startswith(("http://", "https://")) or not url.endswith("/v1"):
            raise ConfigError(
                f"config field 'rollout_server' must be the /v1 URL of an OpenAI-compatible server, e.g. "
                f"http://127.0.0.1:8000/v1; got {self.rollout_server!r}"
            )
        from ludus.policies import saved_kind  # noqa: PLC0415 - reading a config's fields (train --help) needs no policies

        try:  # model is tiny, hf:PATH or a folder with a config.json (_validate_model)
            tiny = self.model == "tiny" or (not self.model.startswith("hf:") and saved_kind(self.model) == "tiny")
        except (OSError, ValueError) as exc:
            raise ConfigError(f"config field 'model' ({self.model!r}): {exc}") from None
        if tiny:
            raise ConfigError(
                "config field 'rollout_server' needs a transformers model that the server loads too (model: "
                f"hf:PATH); model is {self.model!r}, the embedded tiny model, which generates in this process only"
            )
        if self.top_p != 1:
            raise ConfigError(
                "config field 'top_p' must be 1 with 'rollout_server': the server reports log-probs renormalised "
                f"over the top-p nucleus, the learner scores the whole distribution; got top_p {self.top_p}"
            )

    def _validate_model(self) -> None:
        """Catch a model that cannot be trained before a run folder is made for it."""
        unknown = set(self.model_args) - {"device", "dtype", "tool_format"}
        if unknown:
            raise ConfigError(
                f"config field 'model_args' takes device, dtype and tool_format only, got {sorted(unknown)}"
            )
        if self.model == "tiny":
            if self.model_args:
                raise ConfigError("config field 'model_args' applies to transformers models; for tiny use 'tiny'")
            return
        if self.model.startswith(("http://", "https://")):
            raise ConfigError(
                f"config field 'model' is {self.model!r}, a model server, whose weights cannot be trained from "
                "here; use a local model: hf:PATH (a transformers checkpoint folder) or a folder saved by ludus"
            )
        folder = Path(self.model.removeprefix("hf:"))
        if not (folder / "config.json").is_file():
            raise ConfigError(
                f"config field 'model' must be 'tiny', a folder saved by ludus (a run's final/ or "
                f"checkpoints/step_NNNNNN/) or hf:PATH (a local transformers checkpoint); {str(folder)!r} is not "
                "such a folder (no config.json there)"
            )

    def loss(self) -> LossConfig:
        """The fields one GRPO step reads (train/grpo.py)."""
        same = {f.name: getattr(self, f.name) for f in dataclasses.fields(LossConfig) if f.name != "rollout_server"}
        return LossConfig(**same, rollout_server=bool(self.rollout_server))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(TrainConfig)}


def _coerce(name: str, value: Any, where: str) -> Any:
    """Check ``value`` against the field's annotation; flags arrive as strings and are parsed as YAML."""
    hint = typing.get_type_hints(TrainConfig)[name]
    origin = get_origin(hint)

    def fail(want: str) -> ConfigError:
        return ConfigError(f"config field {name!r}{where} must be {want}, got {value!r}")

    if origin is Literal:
        if value not in get_args(hint):
            raise fail("one of " + ", ".join(map(repr, get_args(hint))))
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise fail("true or false")
        return value
    if hint in (int, float) and isinstance(value, str):  # YAML reads "1e-3" as a string
        try:
            value = hint(value)
        except ValueError:
            raise fail("an integer" if hint is int else "a number") from None
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("an integer")
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail("a number")
        return float(value)
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise fail("a string")
        return str(value)
    if origin is dict:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise fail("a mapping (key: value pairs)")
        return dict(value)
    if origin is list:
        if value is None:
            return []
        if get_args(hint)[0] is str and isinstance(value, str):  # `--offline logs.jsonl`: one path
            return [value]
        if not isinstance(value, list):
            raise fail("a list")
        item = get_args(hint)[0]
        if item is str:
            if not all(isinstance(x, str) for x in value):
                raise fail("a list of strings")
            return list(value)
        for x in value:
            ok = (
                isinstance(x, dict)
                if get_origin(item) is dict
                else isinstance(x, (int, float)) and not isinstance(x, bool)
            )
            if not ok or (item is int and not isinstance(x, int)):
                raise fail(f"a list of {'mappings' if get_origin(item) is dict else item.__name__ + 's'}")
        return [float(x) for x in value] if item is float else list(value)
    if origin in (types.UnionType, typing.Union):  # pragma: no cover - no such fields yet
        return value
    raise AssertionError(f"unhandled config type {hint} for {name}")  # pragma: no cover


def _apply(config: TrainConfig, values: dict[str, Any], where: str) -> None:
    for key, value in values.items():
        name = key.replace("-", "_")
        if name not in FIELDS:
            close = difflib.get_close_matches(name, list(FIELDS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown config field {key!r}{where}{hint}")
        setattr(config, name, _coerce(name, value, where))


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Defaults, then the YAML file at ``path``, then ``overrides`` (flag values, YAML-parsed strings)."""
    config = TrainConfig()
    given: set[str] = set()
    if path is not None:
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"config file {path} does not exist") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a mapping of field: value, got {type(data).__name__}")
        _apply(config, data, f" (from {path})")
        given |= set(data)
    if overrides:
        parsed = {k: yaml.safe_load(v) if isinstance(v, str) else v for k, v in overrides.items()}
        _apply(config, parsed, " (from the command line)")
        given |= set(parsed)
    if "env" in given and "env_args" not in given and config.env != TrainConfig.env:
        config.env_args = {}  # the default env_args belong to the default environment
    config.validate()
    return config
