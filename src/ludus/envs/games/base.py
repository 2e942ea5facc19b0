"""What every game shares: the pure :class:`Game` state machine, the scripted players, the task
source and :class:`GameEnv`, the environment in which the policy plays one seat against a
scripted player.

A :class:`Game` knows nothing of policies or messages: a start from a random generator, whose
turn it is, the legal moves, applying one, the end and each seat's result, and each seat's view
as text. A later multi-seat episode can drive the same object with two policies.

The scripted opponent is deterministic given the task: its random choices at a state come from a
generator seeded with the task's game seed, its kind and the state itself, so the same task
always meets the same opponent, whatever was played before and whatever the episode seed. That is
what lets :meth:`GameEnv.reference_actions` find a line of moves that wins, and the task source
keep (by default) only starts from which such a line exists.
"""

from __future__ import annotations

import hashlib
import random
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ludus.core.env import Env, JsonTypes, Split
from ludus.core.types import ACTOR_NAME, Message, Observation, Score, Status, StepResult, Task, ToolCall, ToolSpec
from ludus.tasks.procedural import check_split, in_eval_bucket

State = Any  # a game's own immutable, hashable state
Player = Callable[[State, random.Random], str]  # a scripted player: the state (its turn) -> a legal move

MAX_REPLY_CHARS = 20_000  # a longer reply is refused unread
MOVE_TAG = re.compile(r"<move>(.*?)</move>", re.S)
OPEN_TAG = re.compile(r"<\s*/?\s*move\b", re.I)  # every spelling of a move tag, counted to refuse several
WIN, DRAW, LOSS = 1.0, 0.5, 0.0
ACTOR = "actor:"  # an opponent "actor:NAME" is played by the engine's policy NAME (RolloutEngine actors)
VIEWS = ("conversation", "state")
MOVES = ("text", "tool")


class Game(ABC):
    """A two-player game with seats 0 and 1 as a pure state machine (states are immutable)."""

    name: ClassVar[str]
    rules: ClassVar[str]  # the rules as the policy reads them
    move_help: ClassVar[str]  # the move format, e.g. "<move>5</move> (a free square 1-9)"
    seat_names: ClassVar[tuple[str, str]] = ("first player", "second player")

    @abstractmethod
    def initial(self, rng: random.Random) -> State:
        """The start (deals, secrets, heaps) drawn from ``rng``."""

    @abstractmethod
    def to_move(self, state: State) -> int:
        """The seat whose turn it is (meaningless at a terminal state)."""

    @abstractmethod
    def legal(self, state: State) -> list[str]:
        """The legal moves, canonical text, in a fixed order."""

    @abstractmethod
    def apply(self, state: State, move: str) -> State:
        """The state after the player to move plays ``move`` (one of :meth:`legal`)."""

    @abstractmethod
    def returns(self, state: State) -> tuple[float, float] | None:
        """Each seat's result (1 win, 0.5 draw, 0 loss) at a terminal state, else ``None``."""

    @abstractmethod
    def render(self, state: State, seat: int) -> str:
        """The state as ``seat`` sees it: hidden information stays hidden."""

    @abstractmethod
    def parse(self, text: str) -> str | None:
        """The canonical move written as ``text`` (the inside of the move tag, ASCII, stripped),
        or ``None`` when it is no move at all. Legality is checked separately."""

    def describe(self, state: State, move: str) -> str:
        """What playing ``move`` at ``state`` means, for the other seat to read."""
        return move

    def outcome_note(self, before: State, move: str, after: State, seat: int) -> str:
        """What ``seat`` learns when ``move`` takes ``before`` to ``after`` (a showdown, feedback)."""
        return ""

    def terminal(self, state: State) -> bool:
        return self.returns(state) is not None

    def opening_moves(self, state: State) -> list[str]:
        """The moves random opening plies may choose from (default: every legal move)."""
        return self.legal(state)

    def oracle_order(self, state: State, seat: int) -> list[str]:
        """The order in which the oracle's search tries the moves of ``seat`` (best guesses first)."""
        return self.legal(state)

    # ---- the scripted players -------------------------------------------------------------
    def players(self) -> Mapping[str, Player]:
        return {"random": self.random_player, "greedy": self.greedy_player, "perfect": self.perfect_player}

    def random_player(self, state: State, rng: random.Random) -> str:
        """A uniformly random legal move."""
        return rng.choice(self.legal(state))

    def greedy_player(self, state: State, rng: random.Random) -> str:
        """One ply: a move that wins at once; else one after which the opponent cannot win at once
        (blocking); else any, at random."""
        me = self.to_move(state)
        moves = self.legal(state)
        safe = []
        for move in moves:
            after = self.apply(state, move)
            result = self.returns(after)
            if result is not None and result[me] == WIN:
                return move
            if not self._wins_at_once(after):
                safe.append(move)
        return rng.choice(safe or moves)

    def _wins_at_once(self, state: State) -> bool:
        if self.terminal(state):
            return False
        mover = self.to_move(state)
        for move in self.legal(state):
            result = self.returns(self.apply(state, move))
            if result is not None and result[mover] == WIN:
                return True
        return False

    @abstractmethod
    def perfect_player(self, state: State, rng: random.Random) -> str:
        """The strongest scripted player of this game (each game documents what it is)."""


class Solver:
    """Exact negamax with a memo, for games small enough to solve (tic-tac-toe, nim): the value of
    a state for the seat to move, 1 win, 0.5 draw, 0 loss."""

    def __init__(self, game: Game):
        self.game = game
        self.memo: dict[Hashable, float] = {}

    def value(self, state: State) -> float:
        found = self.memo.get(state)
        if found is not None:
            return found
        result = self.game.returns(state)
        if result is not None:
            # the seat "to move" at a terminal state is read as the one who would move next
            value = result[self.game.to_move(state)]
        else:
            me = self.game.to_move(state)
            value = max(self._child(state, move, me) for move in self.game.legal(state))
        self.memo[state] = value
        return value

    def _child(self, state: State, move: str, me: int) -> float:
        after = self.game.apply(state, move)
        result = self.game.returns(after)
        if result is not None:
            return result[me]
        if self.game.to_move(after) == me:
            return self.value(after)
        return 1.0 - self.value(after)

    def best_moves(self, state: State) -> list[str]:
        me = self.game.to_move(state)
        scored = [(self._child(state, move, me), move) for move in self.game.legal(state)]
        top = max(v for v, _ in scored)
        return [m for v, m in scored if v == top]


# ---- reading a reply ------------------------------------------------------------------------------


def read_move(game: Game, reply: str) -> tuple[str | None, str]:
    """``(the canonical move, "")`` or ``(None, why it cannot be read)``. Deny by default: exactly
    one ``<move>…</move>`` tag, and inside it nothing but the game's own ASCII move syntax."""
    if len(reply) > MAX_REPLY_CHARS:
        return None, f"the reply is {len(reply):,} characters long; the limit is {MAX_REPLY_CHARS:,}"
    tags = len(OPEN_TAG.findall(reply))  # opening and closing tags, every spelling
    if tags > 2:  # refused before the lazy MOVE_TAG search, which is quadratic in a reply of many tags
        return None, f"write exactly one move tag, {game.move_help}; this reply has {tags} opening or closing tags"
    found = MOVE_TAG.findall(reply)
    if not found:
        return None, f"no move found: write exactly one {game.move_help}"
    if len(found) > 1 or tags != 2:
        return None, f"write exactly one move tag, {game.move_help}"
    return _read_body(game, found[0], f"write {game.move_help}")


def _read_body(game: Game, raw: str, how: str) -> tuple[str | None, str]:
    """The canonical move written as ``raw`` (a tag's inside, a tool's argument): nothing but the
    game's own ASCII move syntax, spaces around it allowed."""
    body = raw.strip(" \t\r\n")
    if not body or len(body) > 100 or not body.isascii() or not body.isprintable():
        return None, f"the move {raw[:40]!r} is unreadable: {how}"
    move = game.parse(body)
    if move is None:
        return None, f"{body[:40]!r} is not a move: {how}"
    return move, ""


def move_tool(game: Game) -> ToolSpec:
    """``moves="tool"``: the one tool, ``move``, whose one argument is the move as text."""
    what = game.move_help.replace("<move>", "").replace("</move>", "")
    return ToolSpec(
        "move",
        f"Play your move in {game.name}.",
        {
            "type": "object",
            "properties": {"move": {"type": "string", "description": f"the move: {what}"}},
            "required": ["move"],
            "additionalProperties": False,
        },
    )


def read_tool_move(game: Game, action: Message) -> tuple[str | None, str]:
    """``read_move`` for ``moves="tool"``: exactly one call of the tool ``move`` with exactly the
    argument ``move``, a string read like a tag's inside; the reply's text is not read."""
    how = "call the tool move exactly once, with the one argument move"
    calls = action.tool_calls
    if len(calls) != 1 or calls[0].name != "move":
        return None, f"{how} (this reply made {len(calls)} tool call(s))"
    arguments = calls[0].arguments
    if not isinstance(arguments, dict) or set(arguments) != {"move"} or not isinstance(arguments["move"], str):
        return None, f"{how}, a string"
    return _read_body(game, arguments["move"], how)


# ---- tasks --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """Everything an episode needs besides the game: its start and its opponent."""

    game_seed: str
    seat: int
    opponent: str
    opening: tuple[str, ...]


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class GameTasks:
    """An endless, seeded task source of one :class:`GameEnv`: task ``i`` draws a game seed, the
    policy's seat and random opening plies from ``Random(f"{game}:{params}:{seed}:{split}:{i}")``.
    Train and eval are disjoint by content (a hash of the start and the seat puts a task in one
    split); with ``winnable`` only starts the oracle can win are kept."""

    size: int | None = None
    MAX_TRIES = 2_000

    def __init__(self, env: GameEnv, seed: int, split: Split, eval_fraction: float):
        check_split(split, eval_fraction)
        self.env, self.seed, self.split, self.eval_fraction = env, seed, split, eval_fraction

    def get(self, index: int) -> Task:
        env = self.env
        rng = random.Random(f"{env.name}:{env.params()}:{self.seed}:{self.split}:{index}")
        for _ in range(self.MAX_TRIES):
            setup = env.draw_setup(rng)
            content = f"{env.name}:{env.params()}:{setup}"
            if in_eval_bucket(content, self.eval_fraction) != (self.split == "eval"):
                continue
            if env.scripted and env.game.terminal(env.advance(setup, env.start_state(setup))[0]):
                continue  # the opponent ended the game before the policy's first move (winnable=False)
            if env.winnable and env.oracle_line(setup) is None:
                continue
            task = Task(
                id=f"{env.name}/{self.split}/{digest(f'{self.seed}')[:12]}/{index}",
                prompt="",
                info={
                    "game_seed": setup.game_seed,
                    "seat": setup.seat,
                    "opponent": setup.opponent,
                    "opening": list(setup.opening),
                },
                source=env.name,
            )
            task.prompt = env.opening_text(setup)
            return task
        raise RuntimeError(f"{env.name} ({env.params()}) found no {self.split} task in {self.MAX_TRIES} tries")


# ---- the environment ----------------------------------------------------------------------------


def whole(name: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int in ``lo..hi``, else a ValueError naming ``name``: env args may come from
    JSON, where 2.5, "6" and true would otherwise pass a range check and fail (or hang) later."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"{name} must be a whole number from {lo} to {hi}, got {value!r}")
    return value


def parse_illegal(policy: str) -> int:
    """The number of bad replies forgiven in an episode: ``"lose"`` -> 0, ``"retry:N"`` -> N."""
    if not isinstance(policy, str):
        raise ValueError(f"illegal must be 'lose' or 'retry:N' (N a whole number), got {policy!r}")
    if policy == "lose":
        return 0
    m = re.fullmatch(r"retry:([0-9]{1,3})", policy)
    if not m:
        raise ValueError(f"illegal must be 'lose' or 'retry:N' (N a whole number), got {policy!r}")
    return int(m.group(1))


def check_opponent(opponent: Any, game: Game) -> str:
    """``opponent`` if it names a scripted player, ``"self"`` or ``"actor:NAME"``, else a ValueError."""
    if isinstance(opponent, str) and (
        opponent in game.players()
        or opponent == "self"
        or (opponent.startswith(ACTOR) and ACTOR_NAME.fullmatch(opponent[len(ACTOR) :]))
    ):
        return opponent
    scripted = ", ".join(game.players())
    raise ValueError(f"opponent must be a scripted player ({scripted}), 'self' or 'actor:NAME', got {opponent!r}")


class GameEnv(Env):
    """The policy plays one seat of a :class:`Game`; a scripted player plays the other.

    Env args: ``opponent`` (``random``, ``greedy``, ``perfect``), ``illegal`` (``"lose"``, or
    ``"retry:N"``: N bad replies forgiven per episode, each answered with the reason; the next
    one loses), ``seat`` (``0``, ``1`` or ``None`` for either, drawn per task), ``opening`` (at
    most this many random plies before the policy's first turn), ``winnable`` (keep only starts
    the oracle wins against this opponent: what gives every task a reachable reward of 1; by
    default on, except in a game of hidden information, where the oracle sees the hidden cards: kept
    deals would favour the policy, and a passive policy would win most of them), ``draw_reward``,
    ``seed``, ``eval_fraction``.
    """

    quick = True
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    client_task_info: ClassVar[Mapping[str, JsonTypes] | None] = None  # tasks hold the hidden deal
    redteam_kinds: ClassVar[frozenset[str]] = frozenset({"answer"})
    default_opponent: ClassVar[str] = "greedy"
    default_opening: ClassVar[int] = 0
    oracle_budget: ClassVar[int] = 200_000  # states the oracle's search may visit
    hidden_information: ClassVar[bool] = False  # the opponent holds what the policy cannot see (a card)

    def __init__(
        self,
        tasks: Any = None,
        *,
        game: Game,
        opponent: str | None = None,
        illegal: str = "lose",
        view: str = "conversation",
        moves: str = "text",
        seat: int | None = None,
        opening: int | None = None,
        winnable: bool | None = None,
        draw_reward: float = 0.5,
        seed: int = 0,
        eval_fraction: float = 0.1,
    ):
        super().__init__(tasks)
        self.game = game
        self.opponent = check_opponent(self.default_opponent if opponent is None else opponent, game)
        self.scripted = self.opponent in game.players()
        if view not in VIEWS:
            raise ValueError(f"view must be one of {', '.join(VIEWS)}, got {view!r}")
        self.view = view
        if moves not in MOVES:
            raise ValueError(f"moves must be one of {', '.join(MOVES)}, got {moves!r}")
        self.moves = moves
        self.illegal = illegal
        self.retries = parse_illegal(illegal)
        if seat is not None and (isinstance(seat, bool) or seat not in (0, 1)):
            raise ValueError(f"seat must be 0, 1 or None (either), got {seat!r}")
        self.seat = None if seat is None else int(seat)
        self.opening = self.default_opening if opening is None else whole("opening", opening, 0, 1_000)
        if isinstance(draw_reward, bool) or not isinstance(draw_reward, (int, float)) or not 0.0 <= draw_reward < 1.0:
            raise ValueError(f"draw_reward must be in [0, 1): a draw may not pay as much as a win; got {draw_reward!r}")
        winnable = self.scripted and not self.hidden_information if winnable is None else winnable
        if not isinstance(winnable, bool):
            raise ValueError(f"winnable must be true or false, got {winnable!r}")
        if winnable and not self.scripted:
            raise ValueError(f"winnable needs a scripted opponent to search against, not {self.opponent!r}")
        if isinstance(eval_fraction, bool) or not isinstance(eval_fraction, (int, float)) or not 0 < eval_fraction < 1:
            raise ValueError(f"eval_fraction must be strictly between 0 and 1, got {eval_fraction!r}")
        self.winnable, self.draw_reward = winnable, float(draw_reward)
        self.seed, self.eval_fraction = seed, eval_fraction
        self.max_turns = 2 * (self.max_policy_moves() + self.retries)  # both seats' moves, when both are asked
        self._oracle_cache: dict[Setup, tuple[str, ...] | None] = {}
        self.state: State = None
        self.setup: Setup | None = None
        self.left = 0  # bad replies still forgiven in this episode

    # ---- what subclasses say ----------------------------------------------------------------
    def max_policy_moves(self) -> int:
        """The most moves the policy can make in one game (bounds ``max_turns``)."""
        raise NotImplementedError

    def params(self) -> str:
        """What changes the tasks, for their seeds."""
        return f"opponent={self.opponent},seat={self.seat},opening={self.opening},winnable={self.winnable}"

    # ---- tasks ----------------------------------------------------------------------------------
    def default_tasks(self, split: Split = "train") -> GameTasks:
        return GameTasks(self, self.seed, split, self.eval_fraction)

    def draw_setup(self, rng: random.Random) -> Setup:
        game_seed = f"{rng.getrandbits(64):016x}"
        seat = rng.randrange(2) if self.seat is None else self.seat
        state = self.game.initial(random.Random(game_seed))
        plies: list[str] = []
        for _ in range(rng.randint(0, self.opening)):
            moves = [m for m in self.game.opening_moves(state) if not self.game.terminal(self.game.apply(state, m))]
            if not moves:
                break
            move = rng.choice(moves)
            plies.append(move)
            state = self.game.apply(state, move)
        return Setup(game_seed, seat, self.opponent, tuple(plies))

    def setup_of(self, task: Task) -> Setup:
        info = task.info
        return Setup(str(info["game_seed"]), int(info["seat"]), str(info["opponent"]), tuple(info["opening"]))

    def start_state(self, setup: Setup) -> State:
        state = self.game.initial(random.Random(setup.game_seed))
        for move in setup.opening:
            if move not in self.game.legal(state):
                raise ValueError(f"the task's opening move {move!r} is illegal")
            state = self.game.apply(state, move)
        return state

    # ---- the scripted opponent --------------------------------------------------------------------
    def opponent_move(self, setup: Setup, state: State) -> str:
        rng = random.Random(f"{self.game.name}:{setup.game_seed}:{setup.opponent}:{state!r}")
        move = self.game.players()[setup.opponent](state, rng)
        assert move in self.game.legal(state), f"the {setup.opponent} player chose an illegal move {move!r}"
        return move

    def advance(self, setup: Setup, state: State) -> tuple[State, list[str]]:
        """Let the opponent move until it is the policy's turn or the game ends; the notes for the policy."""
        notes = []
        while not self.game.terminal(state) and self.game.to_move(state) != setup.seat:
            move = self.opponent_move(setup, state)
            after = self.game.apply(state, move)
            notes.append(f"The opponent plays {self.game.describe(state, move)}.")
            note = self.game.outcome_note(state, move, after, setup.seat)
            if note:
                notes.append(note)
            state = after
        return state, notes

    # ---- the oracle ----------------------------------------------------------------------------
    def oracle_line(self, setup: Setup) -> tuple[str, ...] | None:
        """A line of the policy's moves that wins against this task's (deterministic, scripted)
        opponent, or ``None`` when the search finds none."""
        if setup not in self._oracle_cache:
            self._oracle_cache[setup] = self.find_win(setup)
            if len(self._oracle_cache) > 4096:
                self._oracle_cache.pop(next(iter(self._oracle_cache)))
        return self._oracle_cache[setup]

    def find_win(self, setup: Setup) -> tuple[str, ...] | None:
        """Depth-first search over the policy's moves, the opponent's replies played out, with a
        memo of lost states and a budget of visited states."""
        start, _ = self.advance(setup, self.start_state(setup))
        failed: set[Hashable] = set()
        budget = [self.oracle_budget]

        def search(state: State) -> list[str] | None:
            result = self.game.returns(state)
            if result is not None:
                return [] if result[setup.seat] == WIN else None
            if state in failed or budget[0] <= 0:
                return None
            budget[0] -= 1
            for move in self.game.oracle_order(state, setup.seat):
                after, _ = self.advance(setup, self.game.apply(state, move))
                rest = search(after)
                if rest is not None:
                    return [move, *rest]
            failed.add(state)
            return None

        line = search(start)
        return None if line is None else tuple(line)

    def reference_actions(self, task: Task) -> list[Message] | None:
        """The oracle's winning line against a scripted opponent (``None`` against any other: its
        replies cannot be searched)."""
        setup = self.setup_of(task)
        line = self.oracle_line(setup) if setup.opponent in self.game.players() else None
        return None if line is None else [self.move_message(move, i) for i, move in enumerate(line)]

    def reference_example(self, task: Task, seed: int) -> tuple[list[Message], str] | None:
        """One of the policy's turns from anywhere in a game, with the perfect player's move as the
        reply: a model warm-started on opening positions alone plays illegal moves once the game
        has moved on (a nim heap emptied). The game is played from the task's start, each move the
        greedy player's or, half the time, a random legal one, so the turns are those a learning
        policy reaches, not only a strong line's (and a game costs one perfect move, the label's);
        scripted opponents move as the task says."""
        if self.moves == "tool":
            return None  # a tool call is no text reply: warm start with moves="text"
        rng = random.Random(f"{self.game.name}:{task.id}:{seed}:warm start")
        obs = self.reset(task, seed)
        conversation, turns, n = list(obs.messages), None, 0
        while True:
            state, mine = self.state, obs.actor == ""
            if mine:  # reservoir sampling: each of the policy's turns equally likely
                n += 1
                if rng.randrange(n) == 0:
                    turns = (conversation, state)
            move = (self.game.greedy_player if rng.random() < 0.5 else self.game.random_player)(state, rng)
            action = self.move_message(move)
            result = self.step(action)
            if result.done:
                break
            obs = result.observation
            conversation = list(obs.messages) if result.history_rewritten else [*conversation, action, *obs.messages]
        if turns is None:  # the game ended before the policy's first turn
            return None
        conversation, state = turns
        return conversation, self.move_message(self.game.perfect_player(state, rng)).content

    def move_message(self, move: str, i: int = 0) -> Message:
        """The assistant message that plays ``move``: the tag, or a call of the tool ``move``."""
        if self.moves == "tool":
            return Message("assistant", "", [ToolCall("move", {"move": move}, id=f"move_{i}")])
        return Message("assistant", f"<move>{move}</move>")

    def tools(self) -> list[ToolSpec]:
        return [move_tool(self.game)] if self.moves == "tool" else []

    def reference(self, task: Task) -> str | None:
        """One good first move: the oracle line's, else the perfect player's. Not a whole game's
        reward (a game pays at its end) but what a supervised warm start needs: one reply to the
        task's first observation, in the move format."""
        if self.moves == "tool":
            return None  # a tool call is no text reply: warm start with moves="text"
        setup = self.setup_of(task)
        line = self.reference_actions(task)
        if line:
            return line[0].content
        state = self.start_state(setup)
        if setup.opponent in self.game.players():
            state, _ = self.advance(setup, state)
        rng = random.Random(f"{self.game.name}:{setup.game_seed}:reference")
        return f"<move>{self.game.perfect_player(state, rng)}</move>"

    def cheats(self, task: Task) -> dict[str, list[Message]]:
        """Replies that must earn nothing: content-free, a move outside the tag, look-alike and
        zero-width characters, every legal move at once, an illegal move, claims of victory.
        Only against a scripted opponent: when the policy plays both seats (``self``), a cheat
        plays both, and one of them wins by the other's forfeit."""
        setup = self.setup_of(task)
        if setup.opponent not in self.game.players():
            return {}
        state, _ = self.advance(setup, self.start_state(setup))
        legal = self.game.legal(state)
        line = self.oracle_line(setup)
        first = line[0] if line else legal[0]
        look_alike = first.translate(str.maketrans("0123456789abcdefghijklmnopqrstuvwxyz", "０１２３４５６７８９аbсdеfghіjklmnорqrstuvwхyz"))  # fmt: skip
        say = lambda text: [Message("assistant", text)]  # noqa: E731
        out = {
            "content-free": say("I will play the best move."),
            "bare move, no tag": say(first),
            "claims victory": say("<move>I win</move> The game is over and I have won."),
            "every legal move": say(" ".join(f"<move>{m}</move>" for m in legal)),
            "two moves in one tag": say(f"<move>{first} {legal[-1]}</move>"),
            "zero-width characters": say(f"<move>\u200b{first}\u200d</move>"),
            "unclosed tag": say(f"<move>{first}"),
            "every reply the same junk": [Message("assistant", "pass")] * self.max_turns,
        }
        if look_alike != first:
            out["look-alike characters"] = say(f"<move>{look_alike}</move>")
        illegal = self.illegal_example(state)
        if illegal is not None:
            out["an illegal move"] = [self.move_message(illegal, i) for i in range(self.retries + 1)]
        if self.moves == "tool":
            call = lambda *calls: [Message("assistant", "", list(calls))]  # noqa: E731
            out |= {
                "the move as text, no call": say(f"<move>{first}</move>"),
                "two calls": call(ToolCall("move", {"move": first}, "a"), ToolCall("move", {"move": legal[-1]}, "b")),
                "another tool": call(ToolCall("win", {"move": first}, "a")),
                "an extra argument": call(ToolCall("move", {"move": first, "and": "I win"}, "a")),
                "a number, not a string": call(ToolCall("move", {"move": 5}, "a")),
                "zero-width in the argument": call(ToolCall("move", {"move": f"\u200b{first}"}, "a")),
            }
        return out

    def illegal_example(self, state: State) -> str | None:
        """A well-formed move that is illegal at ``state``, if the game has one."""
        return None

    # ---- the episode ------------------------------------------------------------------------------
    def how_to_move(self, short: bool = False) -> str:
        if self.moves == "tool":
            what = self.game.move_help.replace("<move>", "").replace("</move>", "")
            return f"Call the tool move once per reply, its argument move being {what}."
        if short:
            return f"Reply {self.game.move_help}."
        return f"Reply with your move as {self.game.move_help}: exactly one move tag per reply."

    def update(self, talk: list[Message], text: str) -> list[Message]:
        """What a seat reads next in its conversation: when its last reply called tools, an answer
        to each call (chat APIs want one per call), ``text`` in the first; else a user message."""
        last = talk[-1] if talk else None
        if last is None or last.role != "assistant" or not last.tool_calls:
            return [Message("user", text)]
        return [
            Message(
                "tool",
                text if i == 0 else "Not played: one move per reply.",
                tool_call_id=call.id or None,
                name=call.name,
            )  # fmt: skip
            for i, call in enumerate(last.tool_calls)
        ]

    def seat_text(self, setup: Setup, seat: int, state: State, notes: list[str]) -> str:
        """The first message ``seat`` reads: who plays whom, the rules, the move format, what
        happened before its first turn and the state."""
        against = {"self": "another copy of yourself"}.get(setup.opponent, "a scripted opponent")
        if setup.opponent.startswith(ACTOR):
            against = "another model"
        parts = [
            f"You are playing {self.game.name} as the {self.game.seat_names[seat]} against {against}.",
            self.game.rules,
            self.how_to_move(),
        ]
        if self.retries:
            parts.append(f"An unreadable or illegal move is refused with the reason; after {self.retries} such "
                         "replies in a game the next one loses.")  # fmt: skip
        else:
            parts.append("An unreadable or illegal move loses the game.")
        if setup.opening:
            parts.append(f"The game starts after {len(setup.opening)} opening move(s): {', '.join(setup.opening)}.")
        return "\n\n".join([*parts, *notes, self.game.render(state, seat)])

    def state_text(self, seat: int, state: State, notes: list[str]) -> str:
        """``view="state"``: the whole prompt of a turn, short — the game, the seat, the move
        format, what happened since this seat's last turn and the state; no rules, no history."""
        head = f"{self.game.name}, {self.game.seat_names[seat]}. {self.how_to_move(short=True)}"
        return "\n".join([head, *notes, self.game.render(state, seat)])

    def opening_text(self, setup: Setup) -> str:
        """A task's ``prompt``: its seat's first view (after a scripted opponent's first moves)."""
        state, notes = self.start_state(setup), []
        if setup.opponent in self.game.players():
            state, notes = self.advance(setup, state)
        if self.view == "state":
            return self.state_text(setup.seat, state, notes)
        return self.seat_text(setup, setup.seat, state, notes)

    def begin(self, task: Task) -> Observation:
        setup = self.setup = self.setup_of(task)
        check_opponent(setup.opponent, self.game)
        if setup.opponent in self.game.players():
            self.state, notes = self.advance(setup, self.start_state(setup))
            self.actors: tuple[str | None, ...] = tuple("" if s == setup.seat else None for s in (0, 1))
        else:
            self.state, notes = self.start_state(setup), []
            other = "" if setup.opponent == "self" else setup.opponent[len(ACTOR) :]
            self.actors = tuple("" if s == setup.seat else other for s in (0, 1))
        self.left = [self.retries, self.retries]
        self.talk: list[list[Message]] = [[], []]
        self.notes: list[list[str]] = [[], []]
        self.notes[setup.seat] = notes
        self.seats: list[int] = []  # the seat of each of the learner's turns
        self.shown: tuple[int, int] | None = None  # the seat and length of the conversation last handed out
        return self._ask(self.game.to_move(self.state))[0]

    def _ask(self, seat: int) -> tuple[Observation, bool]:
        """Seat ``seat``'s turn: its conversation brought up to date (:meth:`_hand_out`)."""
        notes, self.notes[seat] = self.notes[seat], []
        talk = self.talk[seat]
        if self.view == "state":
            talk[:] = [Message("user", self.state_text(seat, self.state, notes))]
        elif not talk:
            assert self.setup is not None
            talk.append(Message("user", self.seat_text(self.setup, seat, self.state, notes)))
        else:
            talk += self.update(talk, "\n".join([*notes, "", self.game.render(self.state, seat)]).strip())
        return self._hand_out(seat)

    def _hand_out(self, seat: int) -> tuple[Observation, bool]:
        """``seat``'s conversation for whoever plays it, and whether it is handed out whole
        (``history_rewritten``): only the new messages when the same conversation was handed out
        last (the engine has appended the reply since), else all of it."""
        talk, shown = self.talk[seat], self.shown
        self.shown = (seat, len(talk))
        actor = self.actors[seat]
        assert actor is not None, "a scripted seat is never asked"
        if shown is not None and shown[0] == seat and self.view == "conversation":
            return Observation(talk[shown[1] + 1 :], self.tools(), actor), False  # +1: the reply the engine added
        return Observation(list(talk), self.tools(), actor), True

    def transition(self, action: Message) -> StepResult:
        assert self.setup is not None
        game, seat = self.game, self.game.to_move(self.state)
        if self.actors[seat] == "":
            self.seats.append(seat)
        self.talk[seat].append(action)
        move, why = read_tool_move(game, action) if self.moves == "tool" else read_move(game, action.content)
        if move is not None and move not in game.legal(self.state):
            move, why = None, f"{move!r} is not a legal move here; legal: {', '.join(game.legal(self.state))}"
        if move is None:
            if self.left[seat] > 0:
                self.left[seat] -= 1
                self.notes[seat].append(f"Refused: {why}. ({self.left[seat]} more refusal(s) allowed.)")
                obs, rewritten = self._ask(seat)
                return StepResult(obs, info={"illegal": 1}, history_rewritten=rewritten)
            returns = (0.0, 1.0) if seat == 0 else (1.0, 0.0)
            return self._finish(returns, forfeit=seat, why=why)
        before, self.state = self.state, game.apply(self.state, move)
        for s in (0, 1):
            note = game.outcome_note(before, move, self.state, s)
            if s != seat:
                note = f"The opponent plays {game.describe(before, move)}.\n{note}".strip()
            if note:
                self.notes[s].append(note)
        if self.actors[1 - seat] is None and not game.terminal(self.state):  # a scripted opponent replies
            self.state, notes = self.advance(self.setup, self.state)
            self.notes[seat] += notes
        result = game.returns(self.state)
        if result is not None:
            return self._finish(result)
        obs, rewritten = self._ask(game.to_move(self.state))
        return StepResult(obs, history_rewritten=rewritten)

    def _finish(self, returns: tuple[float, float], forfeit: int | None = None, why: str = "") -> StepResult:
        """The end: each seat's reward and status, the task seat's as the episode's score, and
        every seat's in ``info["match"]`` (for self-play, which trains both seats)."""
        scores = [self._seat_score(returns[s], forfeit == s, forfeit is not None, why) for s in (0, 1)]
        seat = self.setup.seat  # type: ignore[union-attr]
        verdict = {WIN: "You win.", LOSS: "You lose."}.get(returns[seat], "The game is a draw.")
        if forfeit == seat:
            self.notes[seat].append(f"Refused: {why}. You lose.")
        elif forfeit is not None:
            self.notes[seat].append(
                "The opponent made an unreadable or illegal move. You win."
            )  # its text stays its own
        else:
            self.notes[seat] += ["", self.game.render(self.state, seat), "", f"Game over. {verdict}"]
        notes, self.notes[seat] = self.notes[seat], []
        self.talk[seat] += self.update(self.talk[seat], "\n".join(notes).strip())
        obs, rewritten = self._hand_out(seat)
        info = {"match": {"seats": list(self.seats), "rewards": [x.value for x in scores],
                          "statuses": [str(x.status) for x in scores], "reasons": [x.reason for x in scores]}}  # fmt: skip
        score = scores[seat]
        return StepResult(obs, score.value, True, score=score, info=info, history_rewritten=rewritten)

    def _seat_score(self, result: float, forfeited: bool, by_forfeit: bool, why: str) -> Score:
        if forfeited:
            return Score.zero(Status.FORMAT_ERROR, f"lost by an unreadable or illegal move: {why}")
        if by_forfeit:
            return Score(WIN, Status.CORRECT, "won: the opponent made an unreadable or illegal move")
        if result == WIN:
            return Score(WIN, Status.CORRECT, "won the game")
        if result == LOSS:
            return Score.zero(Status.WRONG, "lost the game")
        return Score(self.draw_reward, Status.PARTIAL, "a draw")
