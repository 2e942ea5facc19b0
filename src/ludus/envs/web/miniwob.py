"""MiniWoB++ on a real browser: small web tasks ("click the OK button", "log in as ...") graded by
each task's own JavaScript scorer.

The pages come from the ``miniwob`` package (``pip install 'ludus[web]'``), served read-only on
the episode's loopback port. An episode loads ``/miniwob/<task>.html``, seeds the page's random
generator with the task's seed (``Math.seedrandom``), turns off the task's 10-second clock (a
language model is slower than that), starts the episode and hides the page's reward and timer
display, so a task and seed always give the same page. The goal is the task's utterance. The
episode ends when the task's scorer does (``core.endEpisode``, usually on a Submit or on the
clicked target): full reward when it gives its full raw reward, else 0. Ending the episode any
other way (``answer``, ``finish``, a reply in words, leaving the task's page) scores 0.

A positive raw reward below the full one (click-checkboxes gives the fraction of boxes right)
is wrong: the task is done or not.

Supported tasks (``SUPPORTED``) are those a scripted oracle (:meth:`MiniWoBEnv.reference_actions`)
solves on every seed from the utterance and the page. Unsupported, among others: tasks that need
the pointer (drag-*, draw-*, hover-shape, chase-circle, use-slider, use-colorwheel: there is no
drag, hover or coordinate action); tasks drawn in SVG or canvas, which the text view does not
show (identify-shape, count-shape, grid-coordinate, click-pie); tasks graded on wall-clock time
(button-delay, simon-says, moving-items); click-scroll-list (it may want two options of a
multi-select, and ``select`` picks one); social-media (icon-only buttons with no text to show);
and longer flows not scripted yet (email-inbox, book-flight, search-engine, ...).

The oracle reads its targets' ids from the page the policy sees first. Where a target shows only
after an action (a link in a closed tab or section, a file in a folder), the oracle plays the
episode on its own page to learn the id and then starts the same episode again: a task and seed
always give the same page, so the ids it learns are the ones the policy will see. Where MiniWoB
places one button over another, the oracle reaches the covered one with Tab and Enter.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ludus.core.env import JsonTypes, Split, TaskSource
from ludus.core.types import InfraError, Message, Score, Status, Task, ToolCall
from ludus.envs.web.browser import Tab
from ludus.envs.web.env import BrowserEnv
from ludus.envs.web.server import App, StaticFiles

# setTimeout treats a delay above 2^31-1 ms as 0, which would end every episode at once
NO_CLOCK_MS = 2**31 - 1
EVAL_SEED_OFFSET = 1_000_000  # eval seeds start here; train seeds stay below it

# Runs in the page once it has loaded: start the episode as MiniWoB's own driver does, without its clock.
_START_JS = """
async ({ seed, clock }) => {
  for (let i = 0; i < 500 && !(window.core && core.cover_div && typeof genProblem === "function"); i++) {
    await new Promise((r) => setTimeout(r, 10));
  }
  if (!(window.core && core.cover_div)) return "the task page did not load its MiniWoB core";
  core.EPISODE_MAX_TIME = clock;
  Math.seedrandom(seed);
  core.startEpisodeReal();
  for (let i = 0; i < 500 && !WOB_TASK_READY; i++) await new Promise((r) => setTimeout(r, 10));
  if (!WOB_TASK_READY) return "the task did not become ready";
  core.clearTimer();
  for (const id of ["reward-display", "click-canvas", "sync-task-cover"]) {
    const el = document.getElementById(id);
    if (el) el.style.display = "none";
  }
  window.__ludusEpisode = seed;
  return null;
}
"""

_STATE_JS = """
() => ({
  ours: window.__ludusEpisode !== undefined,
  done: typeof WOB_DONE_GLOBAL !== "undefined" && WOB_DONE_GLOBAL === true,
  raw: typeof WOB_RAW_REWARD_GLOBAL === "number" ? WOB_RAW_REWARD_GLOBAL : 0,
  reason: typeof WOB_REWARD_REASON === "undefined" || WOB_REWARD_REASON === null ? null : String(WOB_REWARD_REASON),
})
"""

# data-ludus-id of the elements matching a selector, with their trimmed text
_FIND_JS = """
(selector) => Array.from(document.querySelectorAll(selector)).map((el) => [
  el.getAttribute("data-ludus-id"), (el.textContent || "").replace(/\\s+/g, " ").trim(),
])
"""


def html_root() -> Path:
    """The ``html`` folder of the installed ``miniwob`` package (found without importing it:
    its ``__init__`` registers gymnasium environments)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("MiniWoB++ tasks need the miniwob package: pip install 'ludus[web]'")
    root = Path(list(spec.submodule_search_locations)[0]) / "html"
    if not (root / "core" / "core.js").is_file():
        raise RuntimeError(f"the miniwob package at {root.parent} has no html/core/core.js; reinstall it")
    return root


class Oracle:
    """Writes the reference episode's tool calls, one per message. A live oracle also plays each
    call on the environment's page, for tasks whose targets get their ids only once they show."""

    def __init__(self, env: MiniWoBEnv, live: bool):
        self.env, self.live = env, live
        self.messages: list[Message] = []

    @property
    def goal(self) -> str:
        return self.env.goal

    def match(self, pattern: str) -> re.Match[str]:
        found = re.search(pattern, self.goal)
        if found is None:
            raise RuntimeError(f"the oracle cannot read the goal {self.goal!r} (expected /{pattern}/)")
        return found

    def js(self, script: str, arg: Any = None) -> Any:
        assert self.env.tab is not None
        return self.env._call(self.env.tab.evaluate(script, arg))

    def id(self, selector: str, text: str | None = None, nth: int | None = None) -> int:
        """The page-view id of the first shown element matching ``selector`` (and whose text is
        ``text``), or of the ``nth`` one."""
        found = [ident for ident, content in self.js(_FIND_JS, selector) if text is None or content == text]
        if nth is not None:
            found = found[nth : nth + 1]
        shown = [ident for ident in found if ident is not None]
        if not shown:
            what = f"{selector}{' with text ' + repr(text) if text is not None else ''}"
            raise RuntimeError(
                f"no element {what}" if not found else f"{what} has no id: the page view did not show it"
            )
        return int(shown[0])

    def call(self, name: str, **args: Any) -> None:
        message = Message("assistant", "", tool_calls=[ToolCall(name, args, id=f"c{len(self.messages) + 1}")])
        self.messages.append(message)
        if self.live:
            self.env.step(message)

    def click(self, selector: str, text: str | None = None, nth: int | None = None) -> None:
        self.call("click", element=self.id(selector, text, nth))

    def type(self, selector: str, text: str) -> None:
        self.call("type", element=self.id(selector), text=text)

    def select(self, selector: str, option: str) -> None:
        self.call("select", element=self.id(selector), option=option)


# ---- the solvers: one per supported task ------------------------------------------------------
def _click_button(o: Oracle) -> None:
    o.click("#area button", o.match(r'Click on the "(.*)" button\.').group(1))


_COVERED_JS = """
(selector) => {
  const el = document.querySelector(selector);
  const box = el.getBoundingClientRect();
  const top = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
  return !(top && el.contains(top));
}
"""

# how many Tab presses (negative: Shift+Tab) move the focus from where it is to the element
_TABS_JS = """
(selector) => {
  const all = Array.from(document.querySelectorAll("button, input, select, textarea, a[href]"))
    .filter((e) => !e.disabled && e.checkVisibility());
  return all.indexOf(document.querySelector(selector)) - all.indexOf(document.activeElement);
}
"""


def _press_or_click(o: Oracle, selector: str) -> None:
    """Click the element, or, when another covers its centre (MiniWoB places some buttons at random
    and they can overlap), move the focus to it with Tab and press Enter, as a keyboard user would."""
    if not o.js(_COVERED_JS, selector):
        o.click(selector)
        return
    tabs = o.js(_TABS_JS, selector)
    for _ in range(abs(tabs)):
        o.call("press", key="Tab" if tabs > 0 else "Shift+Tab")
    o.call("press", key="Enter")


def _click_button_sequence(o: Oracle) -> None:
    _press_or_click(o, "#subbtn")
    _press_or_click(o, "#subbtn2")


def _click_link(o: Oracle) -> None:
    o.click("#area span.alink", o.match(r'Click on the link "(.*)"\.').group(1))


def _label_input(o: Oracle, kind: str, text: str) -> int:
    """The id of the checkbox or radio button whose label reads ``text``."""
    script = f"""(text) => {{
      const input = Array.from(document.querySelectorAll('#area label input[type="{kind}"]'))
        .find((i) => i.parentElement.textContent.trim() === text);
      return input ? input.getAttribute("data-ludus-id") : null;
    }}"""
    ident = o.js(script, text)
    if ident is None:
        raise RuntimeError(f"no {kind} labelled {text!r}")
    return int(ident)


def _click_checkboxes(o: Oracle) -> None:
    names = o.match(r"^Select (.*) and click Submit\.$").group(1)
    for name in [] if names == "nothing" else names.split(", "):
        o.call("click", element=_label_input(o, "checkbox", name))
    o.click("#subbtn")


def _click_option(o: Oracle) -> None:
    name = o.match(r"^Select (.*) and click Submit\.$").group(1)
    o.call("click", element=_label_input(o, "radio", name))
    o.click("#subbtn")


def _click_dialog(o: Oracle) -> None:
    o.click(".ui-dialog-titlebar button")


def _click_dialog_2(o: Oracle) -> None:
    label = o.match(r'labeled "(.*)"\.').group(1)
    if label == "x":
        o.click(".ui-dialog-titlebar button")
    else:
        o.click(".ui-dialog-buttonpane button", label)


def _click_tab(o: Oracle) -> None:
    tab = o.match(r"Click on Tab #(\d)\.").group(1)
    o.click(f'#area ul a[href="#tabs-{tab}"]')


def _click_test(o: Oracle) -> None:
    _press_or_click(o, "#subbtn")


def _click_widget(o: Oracle) -> None:
    kind = o.match(r'Click on a "(\w+)" widget\.').group(1)
    o.click(f'#area [data-type="{kind}"]')


def _choose_list(o: Oracle) -> None:
    o.select("#options", o.match(r"^Select (.*) from the list and click Submit\.$").group(1))
    o.click("#area button", "Submit")


def _enter_password(o: Oracle) -> None:
    password = o.match(r'password "(.*)" into both').group(1)
    o.type("#password", password)
    o.type("#verify", password)
    o.click("#subbtn")


def _enter_text(o: Oracle) -> None:
    o.type("#tt", o.match(r'^Enter "(.*)" into the text field').group(1))
    o.click("#subbtn")


def _enter_text_2(o: Oracle) -> None:
    found = o.match(r'^Type "(.*)" in all (upper|lower) case letters')
    o.type("#tt", found.group(1).upper() if found.group(2) == "upper" else found.group(1).lower())
    o.click("#subbtn")


def _focus_text(o: Oracle) -> None:
    o.click("#tt")


def _focus_text_2(o: Oracle) -> None:
    position = o.match(r"Focus into the (1st|2nd|3rd) input").group(1)
    o.click(f"#tt{position[0]}")


def _login_user(o: Oracle) -> None:
    found = o.match(r'username "(.*)" and the password "(.*)" into')
    o.type("#username", found.group(1))
    o.type("#password", found.group(2))
    o.click("#subbtn")


def _use_spinner(o: Oracle) -> None:
    o.type("#spinner", o.match(r"^Select (-?\d+) with the spinner").group(1))
    o.click("#subbtn")


def _click_checkboxes_soft(o: Oracle) -> None:
    groups = _synonyms()
    words = o.match(r"^Select words similar to (.*) and click Submit\.$").group(1).split(", ")
    labels = o.js("""() => Array.from(document.querySelectorAll('#area label input[type="checkbox"]'))
      .map((i) => [i.getAttribute("data-ludus-id"), i.parentElement.textContent.trim()])""")
    for word in words:
        ident = next(i for i, label in labels if any(word in g and label in g for g in groups))
        o.call("click", element=int(ident))
    o.click("#subbtn")


def _synonyms() -> list[list[str]]:
    """click-checkboxes-soft's groups of synonyms, read from the task's own page."""
    page = (html_root() / "miniwob" / "click-checkboxes-soft.html").read_text()
    table = page.split("var SYNONYMS = ", 1)[1].split("];", 1)[0] + "]"
    return [re.findall(r"'([^']*)'", row) for row in re.findall(r"\[([^\[\]]*)\]", table)]


def _click_collapsible(o: Oracle) -> None:
    o.click("#area h3")
    o.click("#subbtn")


_SECTION_JS = """
({ links, text }) => {
  const spans = Array.from(document.querySelectorAll(links)).filter((s) => s.textContent === text);
  const shown = spans.find((s) => s.getAttribute("data-ludus-id") !== null && s.checkVisibility());
  const span = shown || spans[0];
  if (!span) return null;
  return { shown: !!shown, panel: span.closest("div[id], .ui-accordion-content").id || null,
           index: Array.from(span.closest(".ui-accordion-content, div[id]").parentElement.children)
             .filter((c) => c.matches(".ui-accordion-content, div[id]")).indexOf(
               span.closest(".ui-accordion-content, div[id]")) };
}
"""


def _click_tab_2(o: Oracle) -> None:
    text = o.match(r'click on the link "(.*)"\.').group(1)
    where = o.js(_SECTION_JS, {"links": "#area span.alink", "text": text})
    if where is None:  # click-tab-2-medium empties its second tab: when that held the link, that tab is the answer
        o.click("#area li.ui-tab", nth=1)
        return
    if not where["shown"]:
        o.click(f'#area ul a[href="#{where["panel"]}"]')
    o.click("#area span.alink", text)


def _click_collapsible_2(o: Oracle) -> None:
    text = o.match(r'click on the link "(.*)"\.').group(1)
    where = o.js(_SECTION_JS, {"links": "#area span.alink", "text": text})
    if not where["shown"]:
        o.click("#area h3", nth=where["index"])
    o.click("#area span.alink", text)


_TREE_JS = """
(name) => {
  const spans = Array.from(document.querySelectorAll("#tree span")).filter((s) => s.textContent === name);
  const depth = (s) => { let d = 0; for (let e = s; e; e = e.parentElement) d += e.tagName === "UL"; return d; };
  spans.sort((a, b) => depth(a) - depth(b));
  const path = [];
  for (let li = spans[0].parentElement.parentElement.closest("li"); li; li = li.parentElement.closest("li")) {
    path.unshift(li.querySelector(":scope > span").textContent);
  }
  return path;
}
"""


def _navigate_tree(o: Oracle) -> None:
    name = o.match(r'named "(.*)"\.').group(1)
    for folder in o.js(_TREE_JS, name):
        o.click("#tree span.folder", folder)
    o.click("#tree span", name)


def _read_table(o: Oracle) -> None:
    key = o.match(r"^Enter the value of (.*) into the text field").group(1)
    rows = o.js(
        "() => Array.from(document.querySelectorAll('#tab tr')).map((r) => [r.cells[0].textContent, r.cells[1].textContent])"
    )
    o.type("#tt", next(value for k, value in rows if k == key))
    o.click("#subbtn")


def _find_word(o: Oracle) -> None:
    position = int(o.match(r"^Find the (\d+)(st|nd|rd|th) word").group(1))
    words = o.js("() => document.querySelector('#area p').textContent").split()
    o.type("#answer-input", re.sub(r"[^a-zA-Z]", "", words[position - 1]))
    o.click("#subbtn")


def _enter_date(o: Oracle) -> None:
    month, day, year = o.match(r"^Enter (\d\d)/(\d\d)/(\d{4}) as the date").groups()
    o.type("#tt", f"{year}-{month}-{day}")
    o.click("#subbtn")


def _enter_time(o: Oracle) -> None:
    hour, minute, half = o.match(r"^Enter (\d+):(\d\d)\s*([AP]M)? as the time").groups()
    hours = int(hour) % 12 + (12 if half == "PM" else 0) if half else int(hour)
    o.type("#tt", f"{hours:02d}:{minute}")
    o.click("#subbtn")


SOLVERS: dict[str, Callable[[Oracle], None]] = {
    "click-checkboxes-soft": _click_checkboxes_soft,
    "click-checkboxes-transfer": _click_checkboxes,
    "click-collapsible": _click_collapsible,
    "click-collapsible-nodelay": _click_collapsible,
    "click-collapsible-2": _click_collapsible_2,
    "click-collapsible-2-nodelay": _click_collapsible_2,
    "click-tab-2": _click_tab_2,
    "click-tab-2-easy": _click_tab_2,
    "click-tab-2-medium": _click_tab_2,
    "click-tab-2-hard": _click_tab_2,
    "navigate-tree": _navigate_tree,
    "read-table": _read_table,
    "find-word": _find_word,
    "enter-date": _enter_date,
    "enter-time": _enter_time,
    "choose-list": _choose_list,
    "click-button": _click_button,
    "click-button-sequence": _click_button_sequence,
    "click-checkboxes": _click_checkboxes,
    "click-dialog": _click_dialog,
    "click-dialog-2": _click_dialog_2,
    "click-link": _click_link,
    "click-option": _click_option,
    "click-tab": _click_tab,
    "click-test": _click_test,
    "click-test-2": _click_test,
    "click-widget": _click_widget,
    "enter-password": _enter_password,
    "enter-text": _enter_text,
    "enter-text-2": _enter_text_2,
    "enter-text-dynamic": _enter_text,
    "focus-text": _focus_text,
    "focus-text-2": _focus_text_2,
    "login-user": _login_user,
    "unicode-test": _click_button,
    "use-spinner": _use_spinner,
}
# tasks whose oracle must play as it goes: a later target gets its id only once it shows, or the
# second button's keyboard path starts where the first left the focus
LIVE = frozenset(
    {
        "click-button-sequence",
        "click-collapsible-2",
        "click-collapsible-2-nodelay",
        "click-tab-2",
        "click-tab-2-easy",
        "click-tab-2-medium",
        "click-tab-2-hard",
        "navigate-tree",
    }
)
SUPPORTED: tuple[str, ...] = tuple(sorted(SOLVERS))


@dataclass
class MiniWoBTasks:
    """An endless supply cycling through ``names``; round ``r`` of the cycle has seed ``r`` (train)
    or ``EVAL_SEED_OFFSET + r`` (eval)."""

    names: tuple[str, ...]
    split: Split = "train"
    size: int | None = None

    def get(self, index: int) -> Task:
        round_, which = divmod(int(index), len(self.names))
        offset = EVAL_SEED_OFFSET if self.split == "eval" else 0
        return MiniWoBEnv.task_for(self.names[which], offset + round_)


def _check_name(name: str) -> str:
    """``name`` if the oracle supports it; otherwise an error that says whether MiniWoB++ has it
    (looked up in a listing of its pages: a client's string never names a file to look at)."""
    if name not in SOLVERS:
        known = "a MiniWoB++ task ludus does not support yet" if name in _pages() else "not a MiniWoB++ task"
        raise ValueError(f"{name!r} is {known}; supported: {', '.join(SUPPORTED)}")
    return name


@functools.cache
def _pages() -> frozenset[str]:
    """The names of the task pages MiniWoB++ ships."""
    return frozenset(page.stem for page in (html_root() / "miniwob").glob("*.html"))


class MiniWoBEnv(BrowserEnv):
    """The ``miniwob`` environment: MiniWoB++ tasks in a real browser (see the module docstring)."""

    name = "miniwob"
    description = "MiniWoB++ web tasks (click, type, select) in a real browser, graded by each task's own scorer"
    tag_text = True
    reward_range: ClassVar[tuple[float, float]] = (0.0, 1.0)
    honeypot_penalty = 0.0  # MiniWoB has no honeypots; the range must still hold the penalty
    client_task_info: ClassVar[Mapping[str, JsonTypes] | None] = {"miniwob": str, "seed": int}  # client_task
    requires: ClassVar[Mapping[str, str]] = {
        "playwright": "pip install 'ludus[web]'",
        "miniwob": "pip install 'ludus[web]'",
    }

    def __init__(self, tasks: TaskSource | None = None, *, names: Sequence[str] | None = None, **browser: Any):
        """``names``: the tasks to cycle through (default: every supported one); ``browser``:
        :class:`BrowserEnv`'s limits."""
        super().__init__(tasks, **browser)  # first: it says what to install when a package is missing
        self.root = html_root()
        chosen = tuple(names) if names is not None else SUPPORTED
        if not chosen:
            raise ValueError("names must list at least one MiniWoB++ task")
        self.names = tuple(_check_name(n) for n in chosen)
        self.goal = ""

    @classmethod
    def task_for(cls, name: str, seed: int = 0) -> Task:
        """The task ``name`` with the page generated from ``seed``."""
        _check_name(name)
        return Task(
            id=f"miniwob/{name}/{seed}",
            prompt=f"the MiniWoB++ task {name} (seed {seed})",
            info={"miniwob": name, "seed": int(seed)},
            source="miniwob",
        )

    def default_tasks(self, split: Split = "train") -> TaskSource:
        return MiniWoBTasks(self.names, split)

    def client_task(self, data: Any) -> Task:
        """A supported task's name and a page seed are all a client may choose: the task is
        :meth:`task_for`'s, its prompt a label (the page states the goal)."""
        task = super().client_task(data)
        if set(task.info) != {"miniwob", "seed"}:
            raise ValueError("a MiniWoB++ task needs task.info 'miniwob' (a task name) and 'seed' (an integer)")
        return self.task_for(task.info["miniwob"], task.info["seed"])

    def app_for(self, task: Task) -> tuple[App, str]:
        return StaticFiles(self.root), f"/miniwob/{_check_name(task.info['miniwob'])}.html"

    async def prepare(self, tab: Tab, task: Task) -> str:
        problem = await tab.evaluate(_START_JS, {"seed": str(task.info["seed"]), "clock": NO_CLOCK_MS})
        if problem:
            raise InfraError(f"MiniWoB++ task {task.info['miniwob']}: {problem}")
        utterance = await tab.evaluate("() => core.getUtterance()")
        self.goal = str(utterance)
        return f"Task: {self.goal}"

    async def finished(self, tab: Tab) -> Score | None:
        state = await tab.evaluate(_STATE_JS)
        if not state["ours"]:
            return Score.zero(Status.WRONG, "the task's page was left: the task can only be done on its own page")
        if not state["done"]:
            return None
        raw = float(state["raw"])
        if raw >= 1.0 - 1e-9:
            return Score(1.0, Status.CORRECT, "the task's scorer gave its full reward")
        reason = state["reason"] or f"the task's scorer gave reward {raw:g}"
        return Score.zero(Status.WRONG, reason)

    def final_score(self, answer: str | None) -> Score:
        if self.tab is not None:
            ended = self._call(self.finished(self.tab))
            if ended is not None:
                return ended
        return Score.zero(
            Status.WRONG,
            "the task's scorer had not ended the episode: MiniWoB++ tasks are done on the page "
            "(usually by clicking the target or Submit), not by answering",
        )

    def reference_actions(self, task: Task) -> list[Message] | None:
        solver = SOLVERS.get(task.info.get("miniwob", ""))
        if solver is None:
            return None
        seed = self.episode_seed
        if self.tab is None or self.task != task or self.turn:
            self.reset(task, seed)
        oracle = Oracle(self, live=task.info["miniwob"] in LIVE)
        solver(oracle)
        if oracle.live:
            self.reset(task, seed)  # the caller plays the actions on a fresh episode
        return oracle.messages

    def cheats(self, task: Task) -> Mapping[str, list[Message]]:
        def say(name: str, **args: Any) -> Message:
            return Message("assistant", "", tool_calls=[ToolCall(name, args, id="c1")])

        if self.tab is None or self.task != task or self.turn:
            self.reset(task, self.episode_seed)
        other = "click-test" if task.info["miniwob"] != "click-test" else "click-button"
        return {
            "answer with the goal": [say("answer", text=self.goal)],
            "finish at once": [say("finish")],
            "open another task": [say("goto", url=f"/miniwob/{other}.html")],
            "javascript url": [say("goto", url="javascript:WOB_DONE_GLOBAL=true;WOB_RAW_REWARD_GLOBAL=1")],
        }
