"""Self-play on a two-player game (docs/games.md): the learner plays itself and a pool of its past
checkpoints, and everyone gets a rating.

    each group ─▶ its opponent: the learner itself (both seats trained), or a pool member
               ─▶ G matches from one start; the engine batches every seat the learner plays
               ─▶ :func:`seat_groups`: one GRPO group per task and learner seat
    every ``pool_every`` steps ─▶ the learner's weights saved into the pool (``pool_size`` kept)
    ratings: the scripted players calibrated once by games among themselves; the learner measured
    at every evaluation against them; each pool member rated by its games against the learner

Advantages per seat are what SPIRAL calls a role-conditioned baseline: a group holds G matches
from the same start, and each seat's rewards (zero-sum: a win for one is a loss for the other) are
centred on that seat's own mean, so the first player's advantage is not mistaken for skill.

Ratings are on the Elo scale, anchored by players that do not change. When a run starts, the
game's scripted players play each other (:func:`calibrate`) and get fixed ratings, ``random`` at
1000. At every evaluation the learner's rating is its performance against them: the rating at
which its expected score against their ratings equals the score it made on the held-out games
(:func:`performance`, with one virtual draw against each as a prior, so that losing every game
is a low rating, not minus infinity). It is a measurement of the weights of that step, not a sum
of past updates, so it falls only when the learner plays worse. A pool member joins with the
learner's rating of that moment and moves by Elo (``K = 32``) with its games against the learner,
game by game in a fixed order; those games do not move the learner's rating.
"""

from __future__ import annotations

import dataclasses
import math
import random
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ludus import policies
from ludus.core.types import Score, Status, Task, Trajectory
from ludus.policies.base import Policy, TrainablePolicy
from ludus.train.config import POOL_PREFIX

LEARNER = "learner"
ANCHOR, ANCHOR_RATING = "random", 1000.0
ELO_K = 32.0


def seat_groups(group: list[Trajectory]) -> list[list[Trajectory]]:
    """A group of G matches as the groups GRPO learns from: one per seat the learner played, each
    trajectory cut to that seat's turns, its return that seat's result (zero-sum: the other seat's
    complement) and its score that seat's. Trajectories without a match record (an infrastructure
    failure, a run out of turns) keep their own score in every seat."""
    for t in group:
        _check_match(t)
    seats = sorted({s for t in group for s in _match(t).get("seats", [])})
    if not seats:
        return [group]
    out = []
    for seat in seats:
        cut = []
        for t in group:
            match = _match(t)
            if not match:
                cut.append(dataclasses.replace(t, info={**t.info, "seat": seat}))
                continue
            reward = float(match["rewards"][seat])
            turns = [dataclasses.replace(turn, reward=0.0) for turn, s in zip(t.turns, match["seats"], strict=True) if s == seat]  # fmt: skip
            if turns:  # a game pays at its end: the seat's return is its result, on its last turn
                turns[-1].reward = reward
            score = Score(reward, Status(match["statuses"][seat]), str(match["reasons"][seat]))
            cut.append(dataclasses.replace(t, turns=turns, score=score, info={**t.info, "seat": seat}))
        out.append(cut)
    return out


def _check_match(trajectory: Trajectory) -> None:
    """A match record, if there is one, is what GameEnv writes, else a ValueError naming the
    episode: a seat of 0 or 1 per turn, two results in [0, 1], two statuses (deny by default: a
    custom game's bad record must stop the run, never be trained on)."""
    match = _match(trajectory)
    if not match:
        return
    seats, rewards, statuses = match.get("seats"), match.get("rewards"), match.get("statuses")
    ok = (
        isinstance(seats, list)
        and len(seats) == len(trajectory.turns)
        and all(s in (0, 1) and not isinstance(s, bool) for s in seats)
        and isinstance(rewards, list)
        and len(rewards) == 2
        and all(isinstance(r, int | float) and not isinstance(r, bool) and 0.0 <= r <= 1.0 for r in rewards)
        and isinstance(statuses, list)
        and len(statuses) == 2
        and all(s in set(Status) for s in statuses)
        and isinstance(match.get("reasons"), list)
        and len(match["reasons"]) == 2
    )
    if not ok:
        key = trajectory.info.get("key", trajectory.task.id if trajectory.task else "?")
        raise ValueError(
            f"episode {key}: its info['match'] is not a game's record (a seat 0 or 1 per turn of the policy, two "
            f"rewards in [0, 1], two statuses, two reasons): {str(match)[:300]}"
        )


def _match(trajectory: Trajectory) -> dict[str, Any]:
    env = trajectory.info.get("env")
    match = env.get("match") if isinstance(env, dict) else None
    return match if isinstance(match, dict) else {}


def learner_result(trajectory: Trajectory) -> float | None:
    """The learner's result in a match against another player (1 win, 0.5 draw, 0 loss), from its
    seat's status; ``None`` when the match measured nothing (an infrastructure failure)."""
    score = trajectory.score
    if score is None or score.is_infra_error:
        return None
    return {Status.CORRECT: 1.0, Status.PARTIAL: 0.5}.get(score.status, 0.0)


def expected_score(rating: float, other: float) -> float:
    """The score a player of ``rating`` is expected to make against one of ``other`` (Elo's logistic)."""
    return 1.0 / (1.0 + 10 ** ((other - rating) / 400.0))


def performance(results: Iterable[tuple[float, float]], prior: int = 1) -> float:
    """The maximum-likelihood Elo rating of a player who made these ``(opponent's rating, score)``
    results: the rating at which the expected scores add up to the scores made. ``prior`` virtual
    draws against each distinct opponent keep it finite when every game was won or lost."""
    games = list(results)
    games += [(rating, 0.5) for rating in {r for r, _ in games} for _ in range(prior)]
    if not games:
        return ANCHOR_RATING
    made = sum(score for _, score in games)
    lo, hi = -5000.0, 7000.0
    for _ in range(80):  # bisection: the expected total rises with the rating
        mid = (lo + hi) / 2
        if sum(expected_score(mid, r) for r, _ in games) < made:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def calibrate(env: Any, games: int = 40, seed: int = 0) -> dict[str, float]:
    """Ratings of a game's scripted players from games among themselves: every pair ``games``
    times, seats alternating, from starts the environment draws as it draws its tasks (its
    ``draw_setup``, ``start_state``), moves from generators seeded by the game and the state;
    fitted jointly (each player's :func:`performance` against the others, repeated until it
    settles), ``random`` fixed at 1000."""
    game, players = env.game, env.game.players()
    names = sorted(players)
    results: list[tuple[str, str, float]] = []
    rng = random.Random(f"calibrate:{env.name}:{seed}")
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for k in range(games):
                setup = env.draw_setup(rng)
                seats = (a, b) if k % 2 == 0 else (b, a)
                state = env.start_state(setup)
                while not game.terminal(state):
                    mover = seats[game.to_move(state)]
                    state = game.apply(state, players[mover](state, random.Random(f"{seed}:{k}:{mover}:{state!r}")))
                result = game.returns(state)[seats.index(a)]  # type: ignore[index]
                results.append((a, b, result))
    ratings = {name: ANCHOR_RATING for name in names}
    for _ in range(50):
        for name in names:
            if name == ANCHOR:
                continue
            mine = [(ratings[b], s) for a, b, s in results if a == name]
            mine += [(ratings[a], 1.0 - s) for a, b, s in results if b == name]
            ratings[name] = performance(mine)
    return {name: round(value, 1) for name, value in ratings.items()}


class Elo:
    """Elo ratings of named players; ``fixed`` players keep theirs (the anchors)."""

    def __init__(self, ratings: Mapping[str, float] | None = None, fixed: Iterable[str] = (ANCHOR,)):
        self.ratings: dict[str, float] = dict(ratings or {})
        self.fixed = set(fixed)
        self.games: dict[str, int] = {}

    def rating(self, player: str) -> float:
        return self.ratings.setdefault(player, ANCHOR_RATING)

    def expected(self, a: str, b: str) -> float:
        """The score ``a`` is expected to make against ``b``."""
        return expected_score(self.rating(a), self.rating(b))

    def update(self, results: Iterable[tuple[str, str, float]]) -> None:
        """``(a, b, a's score)`` results, one game at a time."""
        for a, b, score in results:
            change = ELO_K * (score - self.expected(a, b))
            for player, sign in ((a, 1.0), (b, -1.0)):
                self.games[player] = self.games.get(player, 0) + 1
                if player not in self.fixed:
                    self.ratings[player] = self.rating(player) + sign * change

    def metrics(self) -> dict[str, float]:
        return {f"rating/{player}": round(value, 1) for player, value in sorted(self.ratings.items())}


@dataclasses.dataclass
class Member:
    name: str  # "pool-STEP"
    step: int
    folder: Path


class SelfPlay:
    """A run's opponents: the pool of past checkpoints (as the engine's ``actors``, a mapping it
    adds to and removes from), who each group plays, and the ratings.

    ``latest``: the share of groups in which the learner plays itself; the others play a pool
    member, drawn by ``sampling``: ``"recency"`` (the newest most often: weight = rank) or
    ``"rating"`` (the members most likely to beat the learner most often: weight = their Elo
    expected score against it, prioritized fictitious self-play). ``league``: scripted players that
    are members for the whole run (never evicted, ratings fixed by calibration; with recency each
    weighs as the oldest checkpoint): opponents that neither collapse nor drift with the learner."""

    def __init__(
        self,
        folder: Path,
        *,
        every: int,
        size: int,
        sampling: str,
        latest: float,
        seed: int,
        league: Iterable[str] = (),
        model_args: Mapping[str, Any] | None = None,
        actors: dict[str, Policy] | None = None,
    ):
        self.folder, self.every, self.size, self.sampling, self.latest = folder, every, size, sampling, latest
        self.league = list(league)
        self.seed = seed
        self.model_args = dict(model_args or {})
        self.members: list[Member] = []
        # the engine's actors (the run's own, from its config, too): one frozen policy per member
        self.actors: dict[str, Policy] = actors if actors is not None else {}
        self.evicted: list[Path] = []  # members' folders the last checkpoint may still name
        self.elo = Elo({LEARNER: ANCHOR_RATING})

    # ---- who plays each group --------------------------------------------------------------
    def opponent(self, group: int) -> str:
        """The opponent of group number ``group``: ``"self"``, ``"actor:pool-STEP"`` or a league
        player's name. Seeded by the
        run's seed and the group's number, so a resumed run draws the same."""
        rng = random.Random(f"selfplay:{self.seed}:{group}")
        if not (self.members or self.league) or rng.random() < self.latest:
            return "self"
        names = ["actor:" + m.name for m in self.members] + self.league
        if self.sampling == "recency":
            weights = [float(i + 1) for i in range(len(self.members))] + [1.0] * len(self.league)
        else:
            weights = [self.elo.expected(m.name, LEARNER) for m in self.members]
            weights += [self.elo.expected(player, LEARNER) for player in self.league]
        return rng.choices(names, weights)[0]

    def task(self, task: Task, group: int) -> Task:
        """``task`` with its opponent replaced by this group's."""
        return dataclasses.replace(task, info={**task.info, "opponent": self.opponent(group)})

    # ---- the pool ----------------------------------------------------------------------------
    def maybe_add(self, step: int, policy: TrainablePolicy) -> bool:
        """After step ``step``'s update: every ``every`` steps the learner joins the pool (saved
        under the run's ``pool/``), with its current rating; the oldest member beyond ``size`` leaves."""
        if step % self.every:
            return False
        folder = self.folder / f"step_{step:06d}"
        if folder.is_symlink() or folder.is_file():  # never write through a link, or over a stray file
            folder.unlink()
        policy.save(folder)
        self._load(Member(f"{POOL_PREFIX}{step}", step, folder))
        self.elo.ratings[self.members[-1].name] = self.elo.rating(LEARNER)
        return True

    def _load(self, member: Member) -> None:
        self.actors[member.name] = policies.load_policy(str(member.folder), **self.model_args)
        self.members.append(member)
        while len(self.members) > self.size:
            gone = self.members.pop(0)
            self.actors.pop(gone.name, None)
            self.elo.ratings.pop(gone.name, None)  # no more games: its rating would only lengthen every log line
            self.evicted.append(gone.folder)

    def checkpointed(self) -> None:
        """After a checkpoint: the members it no longer names are deleted (a run resumed from the
        checkpoint before it may still need them)."""
        for folder in self.evicted:
            shutil.rmtree(folder, ignore_errors=True)
        self.evicted = []

    # ---- ratings -------------------------------------------------------------------------------
    def calibrate(self, env: Any) -> None:
        """Fix the scripted players' ratings by games among themselves (:func:`calibrate`)."""
        scripted = calibrate(env)  # one seed for every run: the ratings are the game's, comparable across runs
        self.elo.ratings.update(scripted)
        self.elo.fixed = {*scripted, LEARNER}  # the learner moves only when it is measured

    def record_training(self, groups: Iterable[list[Trajectory]]) -> dict[str, float]:
        """Rate the pool members the learner met in these groups; the step's metrics."""
        results = []
        for group in groups:
            for t in group:
                opponent = str(t.task.info.get("opponent", ""))
                result = learner_result(t)
                if opponent.startswith("actor:" + POOL_PREFIX) and result is not None:
                    results.append((LEARNER, opponent.removeprefix("actor:"), result))
        self.elo.update(results)
        played = [r for _, _, r in results]
        out = {"selfplay/pool_size": len(self.members), "selfplay/pool_matches": len(played)}
        if played:
            out["selfplay/pool_win_rate"] = round(sum(played) / len(played), 4)
        return out | self.elo.metrics()

    def record_eval(self, games: Mapping[str, Iterable[Trajectory]]) -> None:
        """Measure the learner: its performance rating over an evaluation's held-out games against
        each scripted player (name -> its games), at their fixed ratings."""
        results = [
            (self.elo.rating(player), r) for player, played in games.items() for t in played
            if (r := learner_result(t)) is not None
        ]  # fmt: skip
        self.elo.ratings[LEARNER] = performance(results)

    # ---- checkpoints -------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "members": [[m.name, m.step, m.folder.name] for m in self.members],
            "ratings": dict(self.elo.ratings),
            "games": dict(self.elo.games),
        }

    def load_state_dict(self, state: Mapping[str, Any], step: int) -> list[str]:
        """The pool and ratings of a checkpoint at ``step``; members saved after it are deleted.
        Returns the members whose folders are gone (left out of the pool; their ratings stay)."""
        for member in self.members:
            self.actors.pop(member.name, None)
        self.members, self.evicted, missing = [], [], []
        for name, member_step, folder in state.get("members", []):
            step_of = int(member_step)
            if name != f"{POOL_PREFIX}{step_of}" or folder != f"step_{step_of:06d}":  # a checkpoint names no other file
                raise ValueError(f"a checkpoint's self-play pool names {name!r} in {folder!r}: not a pool member")
            member = Member(name, step_of, self.folder / folder)
            if (
                not member.folder.is_symlink() and (member.folder / "config.json").is_file()
            ):  # never load from elsewhere
                self._load(member)
            else:
                missing.append(member.name)
        kept = {m.folder.name for m in self.members}
        for stale in self.folder.glob("step_[0-9][0-9][0-9][0-9][0-9][0-9]") if self.folder.is_dir() else []:
            if stale.name not in kept and int(stale.name.removeprefix("step_")) > step:
                shutil.rmtree(stale, ignore_errors=True)
        fixed = self.elo.fixed
        self.elo = Elo(state.get("ratings", {LEARNER: ANCHOR_RATING}), fixed)
        self.elo.games = dict(state.get("games", {}))
        return missing


def win_rate(trajectories: list[Trajectory]) -> dict[str, float]:
    """Wins, draws and losses of the learner over games against one opponent (infra errors left out)."""
    results = [r for t in trajectories if (r := learner_result(t)) is not None]
    n = len(results) or 1
    return {
        "win_rate": round(sum(r == 1.0 for r in results) / n, 4),
        "draw_rate": round(sum(r == 0.5 for r in results) / n, 4),
        "loss_rate": round(sum(r == 0.0 for r in results) / n, 4),
        "games": float(len(results)),
        "score": round(sum(results) / n, 4) if results else math.nan,
    }
