"""Browser environments: the model acts on a real Chromium page through tools and is graded from state.

:class:`BrowserEnv` is what every web environment shares: a fresh browser context per episode
on the episode's own app (:mod:`ludus.envs.web.browser`), the page shown as text with an id on
everything the model can act on, and the actions as tools — ``click``, ``type``, ``select``,
``press``, ``scroll``, ``goto`` (this site only), ``back``, and ``answer``/``finish``, which end
the episode. A reply without a tool call is taken as the answer. An action the page cannot
perform is the tool's error, shown to the model; a browser that fails is ``infra_error``.

Subclasses say which app an episode runs (:meth:`BrowserEnv.app_for`), how it starts
(:meth:`BrowserEnv.prepare`), when it is over on its own (:meth:`BrowserEnv.finished`) and how
the end is graded (:meth:`BrowserEnv.final_score`):

* :class:`ShopEnv` (``web``): the built-in shop (:mod:`ludus.envs.web.shop`), its tasks graded
  from the episode's database.
* :class:`~ludus.envs.web.miniwob.MiniWoBEnv` (``miniwob``): MiniWoB++'s tasks, graded by
  each task's own scorer.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Literal

from ludus.core.env import Split, TaskSource, ToolEnv
from ludus.core.tools import ToolError, tool
from ludus.core.types import InfraError, Message, Observation, Score, StepResult, Task
from ludus.envs.web.browser import ActionError, BrowserService, Tab
from ludus.envs.web.server import App
from ludus.sandbox.load import backstop_s


class BrowserEnv(ToolEnv):
    """A web task in a real browser (see the module docstring). Not registered itself."""

    system_prompt = (
        "You operate a web browser to complete a task. Each page is shown as text: one line per "
        "element, and [N] before an element is its id — pass N to click, type and select. "
        "Call one tool at a time and read the page it shows before the next. "
        "When the task asks for information, end with answer(text); when it asks you to change "
        "something, end with finish() once it is done."
    )
    redteam_kinds: ClassVar[set[str]] = {"tools", "answer"}
    requires: ClassVar[Mapping[str, str]] = {"playwright": "pip install 'ludus[web]'"}
    tag_text: ClassVar[bool] = False  # ids on plain text too (MiniWoB clicks on words)
    unmetered_tools = frozenset({"answer", "finish"})  # the action budget never stops the model from ending

    def __init__(
        self,
        tasks: TaskSource | None = None,
        *,
        max_turns: int = 20,
        max_actions: int = 40,
        action_timeout_s: float = 5.0,
        max_chars: int = 6_000,
        viewport: tuple[int, int] = (1280, 720),
        screenshots: str | None = None,
    ):
        """``max_turns``: replies per episode; ``max_actions``: tool calls per episode;
        ``action_timeout_s``: how long one action may take; ``max_chars``: the page view's
        length; ``screenshots``: a folder to save a PNG of the page after every step into
        (its path goes in the step's ``info``, for multimodal models)."""
        super().__init__(tasks)
        if max_turns < 1 or max_actions < 1:
            raise ValueError("max_turns and max_actions must be at least 1")
        self.max_turns, self.max_tool_calls = max_turns, max_actions
        self.action_timeout_s, self.max_chars, self.viewport = action_timeout_s, max_chars, tuple(viewport)
        self.screenshots = screenshots
        self.tab: Tab | None = None
        self.app: App | None = None
        self._service: BrowserService | None = None
        self._ended: tuple[str, str | None] | None = None  # ("answer", text) or ("finish", None)
        self._shots = 0

    # ---- what subclasses provide -----------------------------------------------------------
    def app_for(self, task: Task) -> tuple[App, str]:
        """The episode's app and the path the browser opens first (quick: no I/O)."""
        raise NotImplementedError

    async def prepare(self, tab: Tab, task: Task) -> str:
        """Run on the browser's loop once the first page has loaded; returns the goal text the
        model is given."""
        return task.prompt

    async def finished(self, tab: Tab) -> Score | None:
        """After each action: the final score when the page ended the episode on its own."""
        return None

    def final_score(self, answer: str | None) -> Score:
        """Grade the episode when the model ends it: ``answer`` is its text, ``None`` after ``finish()``."""
        raise NotImplementedError

    def score(self, task: Task, completion: str) -> Score:
        return self.final_score(completion)

    def honeypot_touched(self) -> str | None:
        """What bait the model took in the app, if any (the episode then ends as ``honeypot``)."""
        return None

    # ---- the episode ----------------------------------------------------------------------
    @property
    def service(self) -> BrowserService:
        if self._service is None:
            self._service = BrowserService.shared()
        return self._service

    def _call(self, coro: Any) -> Any:
        try:
            service = self.service
        except BaseException:
            coro.close()  # never scheduled (no browser could start): closed, not left un-awaited
            raise
        # a bound on the browser's answer, past the start page's wait (the longest inside): every
        # action has its own time limit inside
        return service.run(coro, backstop_s(2 * self.action_timeout_s) + 30)

    def begin(self, task: Task) -> Observation:
        self.close()
        self._ended, self._shots = None, 0
        self.app, start = self.app_for(task)
        goal, view = self._call(self._open(task, start))
        first = Message("user", f"{goal}\n\n{view}")
        messages = [Message("system", self.system_prompt), first]
        return Observation(messages, self.tools())

    async def _open(self, task: Task, start: str) -> tuple[str, str]:
        assert self.app is not None
        self.tab = await self.service.open_tab(self.app, viewport=self.viewport, tag_text=self.tag_text)
        try:
            await self.tab.goto(start, self.action_timeout_s * 2)
        except ActionError as exc:
            raise InfraError(f"the app's start page {start!r} did not open: {exc}") from None
        goal = await self.prepare(self.tab, task)
        return goal, await self._render(self.tab)

    async def _render(self, tab: Tab) -> str:
        view = await tab.view(self.max_chars, self.action_timeout_s)
        head = f"URL: {view.path}\nTitle: {view.title}"
        if self.screenshots:
            os.makedirs(self.screenshots, exist_ok=True)
            task = re.sub(r"[^A-Za-z0-9._-]+", "_", self.task.id if self.task else "task")
            path = os.path.join(self.screenshots, f"{self.name}-{task}-{self._shots}.png")
            self._shots += 1
            await tab.screenshot(path)
            head += f"\nScreenshot: {path}"
        return f"{head}\n\n{view.text}"

    def close(self) -> None:
        tab, self.tab = self.tab, None
        if tab is not None:
            try:
                self._call(tab.service.close_tab(tab))
            except InfraError:
                pass  # the browser is gone: nothing left to close
        app, self.app = self.app, None
        if app is not None and hasattr(app, "close"):
            app.close()

    def tool_functions(self) -> Sequence[Callable[..., Any]]:
        return [
            self.click,
            self.type,
            self.select,
            self.press,
            self.scroll,
            self.goto,
            self.back,
            self.answer,
            self.finish,
        ]

    def transition(self, action: Message) -> StepResult:
        assert self.task is not None
        if not action.tool_calls:  # a reply in words is the answer
            score = self.final_score(action.content)
            return self._unless_bait(StepResult(Observation([]), score.value, terminated=True, score=score))
        result = self._call_tools(action)
        tab = self.tab
        if tab is None:
            raise InfraError("the episode's browser tab is gone")
        score, page = (None, "") if self._ended is not None else self._call(self._look(tab))
        notes, tab.notes[:] = list(tab.notes), []
        replies = result.observation.messages
        if replies and (page or notes):
            last = replies[-1]
            text = "\n".join([last.content, *notes]) + (f"\n\n{page}" if page else "")
            replies[-1] = Message(last.role, text, tool_call_id=last.tool_call_id, name=last.name)
        if self._ended is not None:
            kind, text = self._ended
            score = self.final_score(text if kind == "answer" else None)
        if score is not None:
            info = {**result.info, "blocked_requests": len(tab.blocked)}
            result = StepResult(result.observation, score.value, terminated=True, score=score, info=info)
        return self._unless_bait(result)

    async def _look(self, tab: Tab) -> tuple[Score | None, str]:
        """After the actions, in one trip to the browser: the page's own verdict, else its view."""
        score = await self.finished(tab)
        return score, "" if score is not None else await self._render(tab)

    def _unless_bait(self, result: StepResult) -> StepResult:
        bait = self.honeypot_touched()
        if bait:
            self.trip_honeypot(bait)
        return self._unless_honeypot(result)

    def _act(self, name: str, **args: Any) -> str:
        if self._ended is not None:
            raise ToolError("the episode has ended; no more actions")
        if self.tab is None:
            raise InfraError("no browser tab: call reset() first")
        try:
            return self._call(self.tab.act(name, args, self.action_timeout_s))
        except ActionError as exc:
            raise ToolError(str(exc)) from None

    # ---- the tools (their docstrings are what the model reads) ------------------------------
    @tool
    def click(self, element: int) -> str:
        """Click an element (a link, a button, a checkbox...).

        Args:
            element: the element's id, the N in [N] on the page.
        """
        return self._act("click", element=element)

    @tool
    def type(self, element: int, text: str, submit: bool = False) -> str:
        """Replace the text of an input field with new text.

        Args:
            element: the field's id, the N in [N] on the page.
            text: what to type.
            submit: press Enter afterwards (submits a search box or a one-field form).
        """
        return self._act("type", element=element, text=text, submit=submit)

    @tool
    def select(self, element: int, option: str) -> str:
        """Choose an option of a drop-down list.

        Args:
            element: the list's id, the N in [N] on the page.
            option: the option's text, as the page shows it.
        """
        return self._act("select", element=element, option=option)

    @tool
    def press(self, key: str) -> str:
        """Press a key on the focused element.

        Args:
            key: a key name such as Enter, Tab, Escape, ArrowDown or Control+a.
        """
        return self._act("press", key=key)

    @tool
    def scroll(self, direction: Literal["up", "down"]) -> str:
        """Scroll the page to see more of it.

        Args:
            direction: up or down.
        """
        return self._act("scroll", direction=direction)

    @tool
    def goto(self, url: str) -> str:
        """Open a page of this site by its address.

        Args:
            url: a path on this site, such as /orders?page=2.
        """
        return self._act("goto", url=url)

    @tool
    def back(self) -> str:
        """Go back to the previous page."""
        return self._act("back")

    @tool
    def answer(self, text: str) -> str:
        """Give the final answer to the task; this ends the episode.

        Args:
            text: the answer, as short as possible (a number, a name).
        """
        self._ended = ("answer", text)
        return "answer recorded; the episode is over"

    @tool
    def finish(self) -> str:
        """Say the task is done (for tasks that change something); this ends the episode."""
        self._ended = ("finish", None)
        return "the episode is over"


class ShopEnv(BrowserEnv):
    """The ``web`` environment: tasks on the built-in shop, graded from its database."""

    name = "web"
    description = "act in a real browser on a built-in shop with an admin side; graded from the app's state"

    def __init__(
        self,
        tasks: TaskSource | None = None,
        *,
        difficulty: int | None = None,
        seed: int = 0,
        eval_fraction: float = 0.1,
        **browser: Any,
    ):
        """``difficulty`` 1 (one-page look-ups), 2 (flows with login and pagination), 3 (edits
        that must persist), ``None`` for a mix; ``browser``: :class:`BrowserEnv`'s limits."""
        super().__init__(tasks, **browser)
        self.difficulty, self.seed, self.eval_fraction = difficulty, seed, eval_fraction

    def default_tasks(self, split: Split = "train") -> TaskSource:
        from ludus.envs.web.shop import ShopTasks

        return ShopTasks(self.difficulty, seed=self.seed, split=split, eval_fraction=self.eval_fraction)

    def app_for(self, task: Task) -> tuple[App, str]:
        app = self._app(task)
        return app, app.start_path

    def _app(self, task: Task) -> Any:
        """The task's app. Its layout, labels and ids are drawn from the task alone, so the
        samples of a group see the same page, and the oracle and the cheats need no browser."""
        from ludus.envs.web.shop import ShopApp

        return ShopApp(task, random.Random(f"{self.name}:{task.id}"))

    async def prepare(self, tab: Tab, task: Task) -> str:
        intro = getattr(self.app, "intro", "")
        return f"Task: {task.prompt}\n{intro}".strip()

    def final_score(self, answer: str | None) -> Score:
        from ludus.envs.web.shop import grade

        assert self.task is not None and self.app is not None
        return grade(self.task, self.app, answer)  # its own failures are infra_error already

    def honeypot_touched(self) -> str | None:
        return getattr(self.app, "honeypot", None)

    def reference_actions(self, task: Task) -> list[Message] | None:
        from ludus.envs.web.shop import reference_actions

        app = self._app(task)
        try:
            return reference_actions(task, app)
        finally:
            app.close()

    def cheats(self, task: Task) -> Mapping[str, list[Message]]:
        from ludus.envs.web.shop import cheats

        app = self._app(task)
        try:
            return cheats(task, app)
        finally:
            app.close()
