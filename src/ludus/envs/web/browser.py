"""Real Chromium for web environments: a pool of warm browser processes, one fresh context per episode.

Playwright's async API belongs to one event loop, and environments are called from many
threads (the rollout engine's hosts, ``ludus check``). So one :class:`BrowserService` per
process owns a thread with its own event loop, Playwright and the Chromium processes; an
environment hands it coroutines (:meth:`BrowserService.run`) and blocks on the result, from
any thread. Browsers start once and stay warm; each episode gets a new browser context (no
shared cookies, storage or cache) that is closed with the episode.

Network: a context reaches only its own episode's app on 127.0.0.1 — every other request
(another port, another host, a service worker) is aborted by a route the browser applies
before the request leaves — and the browsers themselves send anything not on loopback to a
dead proxy, so a request the route misses still goes nowhere.

Failures of the browser (a crashed tab, a dead Chromium, no answer in time) raise
:class:`~ludus.core.types.InfraError`; mistakes of the model (an element that is not there,
an option that does not exist, a URL of another site) raise :class:`ActionError`, which the
environment shows to the model as the tool's error.

An action that runs out of time is the model's error only when the page refused it, not when
a busy machine starved the browser: the page refuses when the element is hidden or disabled,
or the option missing, right after (a check that does not depend on the load), or when the
browser's processes spent less than half of the action's time waiting for a CPU (the
kernel's scheduler statistics: :mod:`ludus.sandbox.load`). Otherwise the action is
``InfraError``: retried, then masked, never a refusal the model learns from. A page of the
episode's own app that is loading (after ``goto``, ``back`` or an action that navigates) is
waited for up to the wall-clock backstop (:func:`~ludus.sandbox.load.backstop_s`) instead, and
so is the page view: such pages load at once unless the machine is busy.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import re
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

from ludus.core.env import require
from ludus.core.types import InfraError
from ludus.envs.web.server import App, LoopbackServer
from ludus.sandbox.load import TreeClock, backstop_s, children

T = TypeVar("T")

PAGE_VIEW_JS = (Path(__file__).parent / "page_view.js").read_text()
DEFAULT_VIEWPORT = (1280, 720)  # Playwright's, for a new context
# links and forms that would open a new window open in the episode's one tab instead
SAME_TAB_JS = """
document.addEventListener("click", (event) => {
  const target = event.target instanceof Element && event.target.closest("a[target], area[target]");
  if (target) target.removeAttribute("target");
}, true);
document.addEventListener("submit", (event) => event.target.removeAttribute("target"), true);
window.open = (url) => { if (url) window.location.href = url; return null; };
"""
STARVED_SHARE = 0.5  # an action past its limit that waited this share of it for a CPU was starved
MAX_TEXT = 2_000  # characters one `type` action may enter: a flood is the model's error, not the page's problem
KEYS = re.compile(
    r"^((Control|Shift|Alt|Meta)\+)*([A-Za-z0-9]|F[1-9]|F1[0-2]|[-=\[\];',./`\\ ]|"
    r"Enter|Tab|Escape|Backspace|Delete|Space|Home|End|PageUp|PageDown|Insert|"
    r"Arrow(Up|Down|Left|Right))$"
)


class ActionError(Exception):
    """The model asked for something the page cannot do; the message tells it what to do instead."""


def find_chromium() -> str:
    """The Chromium to drive: ``$LUDUS_CHROMIUM``, else one on ``PATH`` (``scripts/system-deps``
    installs Debian's), else Playwright's own download when there is one."""
    explicit = os.environ.get("LUDUS_CHROMIUM")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise RuntimeError(f"LUDUS_CHROMIUM={explicit!r} is not an executable file")
        return explicit
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH", Path.home() / ".cache" / "ms-playwright"))
    for candidate in sorted(cache.glob("chromium-*/chrome-linux*/chrome"), reverse=True):
        return str(candidate)
    raise RuntimeError(
        "no Chromium found: run ./scripts/system-deps (installs the chromium package), "
        "or set LUDUS_CHROMIUM to a Chromium or Chrome executable"
    )


def _drivers() -> list[int]:
    """This process's children running Playwright's driver (the Node.js it ships, or the one
    ``PLAYWRIGHT_NODEJS_PATH`` names, as Playwright itself chooses)."""
    import playwright

    node = os.environ.get("PLAYWRIGHT_NODEJS_PATH") or str(Path(playwright.__file__).parent / "driver" / "node")
    node = os.path.realpath(node)
    found = []
    for pid in children(os.getpid()):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/exe") == node:
                found.append(pid)
    return found


def launch_args() -> list[str]:
    args = [
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--mute-audio",
        # anything not on loopback goes to a port where nothing listens (loopback bypasses
        # a proxy by default in Chromium)
        "--proxy-server=http://127.0.0.1:9",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--no-sandbox")  # Chromium refuses to start as root with its own sandbox on
    return args


@dataclass
class _Browser:
    handle: Any  # playwright Browser
    live: int = 0  # open contexts
    dead: bool = False


@dataclass
class PageView:
    """What the model sees of the page: its path, its title and its lines of text."""

    path: str
    title: str
    text: str


@dataclass(eq=False)  # compared by identity: the service keeps a set of open tabs
class Tab:
    """One episode's browser context and page, and the app server it may talk to."""

    service: BrowserService
    server: LoopbackServer
    browser: _Browser
    context: Any
    page: Any
    tag_text: bool
    crashed: bool = False
    notes: list[str] = field(default_factory=list)  # things the page did on its own (a dialog, a blocked popup)
    blocked: list[str] = field(default_factory=list)  # requests the network filter aborted
    pending: list[asyncio.Future[Any]] = field(default_factory=list)  # popups and dialogs being closed
    closed: bool = False

    @property
    def origin(self) -> str:
        return self.server.origin

    def path(self) -> str:
        """The page's URL without the origin (the port differs between episodes)."""
        url = self.page.url
        if url.startswith(self.origin):
            return url[len(self.origin) :] or "/"
        return url

    async def goto(self, url: str, timeout_s: float) -> None:
        """Open ``url`` — a path of this app or its full URL; nothing else."""
        target = urljoin(self.origin + "/", url.strip())
        parts = urlsplit(target)
        if parts.scheme != "http" or parts.netloc != urlsplit(self.origin).netloc:
            raise ActionError(f"goto only opens pages of this site: give a path like /orders, not {url[:100]!r}")
        await self._timed(lambda ms: self.page.goto(target, wait_until="load", timeout=ms), timeout_s, navigation=True)

    async def evaluate(self, script: str, arg: Any = None) -> Any:
        """Run ``script`` in the page: for the environment only (the model has no such action)."""
        return await self._guard(self.page.evaluate(script, arg))

    async def act(self, name: str, args: dict[str, Any], timeout_s: float) -> str:
        """Perform one of the model's actions; returns what it did, in words."""
        page = self.page
        before = self.path()
        if name in ("click", "type", "select"):
            element = args["element"]
            locator = page.locator(f'[data-ludus-id="{int(element)}"]')
            if await self._guard(locator.count()) == 0:
                raise ActionError(f"there is no element [{element}] on this page; use an id from the latest page view")
            locator = locator.first
            if name == "click":
                await self._timed(
                    lambda ms: locator.click(timeout=ms),
                    timeout_s,
                    f"[{element}] could not be clicked",
                    lambda: _unready(locator),
                )
                effect = f"clicked [{element}]"
            elif name == "type":
                text = args["text"]
                if len(text) > MAX_TEXT:
                    raise ActionError(f"text is {len(text)} characters long; at most {MAX_TEXT} may be typed at once")
                await self._timed(
                    lambda ms: locator.fill(text, timeout=ms),
                    timeout_s,
                    f"[{element}] does not accept text",
                    lambda: _unready(locator, editable=True),
                )
                effect = f"typed {len(text)} characters into [{element}]"
                if args.get("submit"):
                    await self._timed(lambda ms: locator.press("Enter", timeout=ms), timeout_s)
                    effect += " and pressed Enter"
            else:
                option = args["option"]
                try:
                    await self._timed(
                        lambda ms: locator.select_option(label=option, timeout=ms),
                        timeout_s,
                        refused=lambda: _lacks_option(locator, "label", option),
                    )
                except ActionError:
                    await self._timed(
                        lambda ms: locator.select_option(value=option, timeout=ms),
                        timeout_s,
                        f"[{element}] is not a list with the option {option!r}",
                        lambda: _lacks_option(locator, "value", option),
                    )
                effect = f"selected {option!r} in [{element}]"
        elif name == "press":
            key = args["key"]
            if not KEYS.match(key):
                raise ActionError(f"unknown key {key[:40]!r}: use names like Enter, Tab, Escape, ArrowDown, Control+a")
            await self._guard(page.keyboard.press(key))
            effect = f"pressed {key}"
        elif name == "scroll":
            sign = -1 if args["direction"] == "up" else 1
            await self._guard(page.evaluate("(dy) => window.scrollBy(0, dy)", sign * 0.8 * self._viewport_height()))
            effect = f"scrolled {args['direction']}"
        elif name == "goto":
            await self.goto(args["url"], timeout_s)
            effect = f"opened {self.path()}"
        elif name == "back":
            if (
                await self._timed(lambda ms: page.go_back(wait_until="load", timeout=ms), timeout_s, navigation=True)
                is None
            ):
                raise ActionError("there is no previous page to go back to")
            effect = "went back"
        else:
            raise ValueError(f"unknown browser action {name!r}")
        await self.settle(timeout_s)
        after = self.path()
        if after != before and name not in ("goto", "back"):
            effect += f"; the page is now {after}"
        return effect

    async def settle(self, timeout_s: float) -> None:
        """Wait until a navigation the last action started has loaded, and the windows and
        dialogs it opened are closed. A page that keeps loading is shown as it is."""
        await asyncio.sleep(0.01)
        with contextlib.suppress(ActionError):
            await self._timed(lambda ms: self.page.wait_for_load_state("load", timeout=ms), timeout_s, navigation=True)
        pending, self.pending = self.pending, []
        if pending:
            await asyncio.wait(pending, timeout=timeout_s)
        self._check()

    async def view(self, max_chars: int, timeout_s: float) -> PageView:
        """The page as text, from the first line at the top of the viewport, cut at ``max_chars``."""
        for attempt in range(3):
            try:
                script = self.page.evaluate(PAGE_VIEW_JS, {"tagText": self.tag_text})
                data = await asyncio.wait_for(script, backstop_s(timeout_s))  # reading the page is never a verdict
                break
            except Exception as exc:  # a navigation replaced the document under us: wait for it, look again
                self._check()
                if attempt == 2 or "context was destroyed" not in str(exc) and "navigat" not in str(exc):
                    raise InfraError(f"the page could not be read: {str(exc)[:300]}") from None
                with contextlib.suppress(Exception):
                    await self.page.wait_for_load_state("load", timeout=timeout_s * 1000)
        top = data["scrollY"]
        lines = data["lines"]
        above = sum(1 for _, y, _ in lines if y < top - 5)
        shown, used = [], 0
        for depth, y, text in lines:
            if y < top - 5:
                continue
            line = "  " * min(depth, 8) + text
            if used + len(line) + 1 > max_chars:
                break
            shown.append(line)
            used += len(line) + 1
        below = len(lines) - above - len(shown)
        body = "\n".join(shown) if shown else "(nothing on this part of the page)"
        if above:
            body = f"({above} lines above: scroll up to see them)\n" + body
        if below:
            body += f"\n({below} more lines below: scroll down to see them)"
        return PageView(self.path(), data["title"], body)

    async def screenshot(self, path: str) -> None:
        await self._guard(self.page.screenshot(path=path))

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.browser.live -= 1
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.context.close(), 10)
        await self.server.close()

    def _viewport_height(self) -> int:
        size = self.page.viewport_size
        return size["height"] if size else 720

    def _check(self) -> None:
        if self.crashed or self.browser.dead or self.page.is_closed():
            raise InfraError("the browser tab crashed or was closed")

    async def _guard(self, awaitable: Coroutine[Any, Any, T] | Any, refusal: str | None = None) -> T:
        """Await a Playwright call: the page's refusal (a bad element) is the model's
        ``ActionError``; a dead tab or browser is ``InfraError``."""
        from playwright.async_api import Error as PlaywrightError

        try:
            return await awaitable
        except PlaywrightError as exc:
            raise self._failure(exc, refusal) from None

    async def _timed(
        self,
        call: Callable[[float], Awaitable[T]],
        timeout_s: float,
        refusal: str | None = None,
        refused: Callable[[], Awaitable[bool]] | None = None,
        *,
        navigation: bool = False,
    ) -> T:
        """``call(timeout in ms)``, a Playwright call with a time limit, judged when it runs out
        (see the module docstring): the page's refusal when ``refused()`` says the page refuses
        the action right now, or when the browser was not starved; else ``InfraError``. The call
        is not tried again: an action may have happened before its time ran out (a click that
        started a navigation). A ``navigation`` (a page of the episode's own app loading) is
        given the wall-clock backstop rather than ``timeout_s``."""
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        clock, started = self.service.clock(), time.monotonic()
        try:
            return await call((backstop_s(timeout_s) if navigation else timeout_s) * 1000)
        except PlaywrightTimeout as exc:
            if refused is not None and await self._guard(refused()):
                raise self._failure(exc, refusal) from None
            now = time.monotonic()
            wall, times = now - started, clock.sample(now)
            if times.waited_s >= STARVED_SHARE * wall:
                raise InfraError(f"the browser was starved of CPU: {times.describe(wall)}") from None
            raise self._failure(exc, refusal) from None
        except PlaywrightError as exc:
            raise self._failure(exc, refusal) from None

    def _failure(self, exc: Exception, refusal: str | None) -> Exception:
        """What a Playwright error means: a dead tab or browser is ``InfraError``, anything else
        the page's refusal (``ActionError``)."""
        self._check()
        message = str(exc).split("\n")[0]
        if "Target" in message and "closed" in message or "crash" in message.lower():
            return InfraError(f"the browser failed: {message[:300]}")
        return ActionError(refusal or message[:300])


async def _unready(locator: Any, editable: bool = False) -> bool:
    """Whether the element is hidden, disabled (or, with ``editable``, read-only) right now: the
    page refusing an action, whatever the machine's load."""
    if not await locator.is_visible():
        return True
    return not await (locator.is_editable() if editable else locator.is_enabled())


async def _lacks_option(locator: Any, key: str, option: str) -> bool:
    """Whether the list has no option whose ``label`` (or ``value``) is ``option``, right now."""
    script = "(el, [key, option]) => !Array.from(el.options || []).some((o) => o[key] === option)"
    return bool(await locator.evaluate(script, [key, option]))


class BrowserService:
    """The process's browsers, on a thread of their own (see the module docstring)."""

    _shared: BrowserService | None = None
    _shared_lock = threading.Lock()

    def __init__(self, contexts_per_browser: int = 8, warm_pages: int = 2):
        """``contexts_per_browser``: episodes per Chromium process before another starts;
        ``warm_pages``: fresh contexts kept ready, so a reset does not wait for one."""
        self.contexts_per_browser, self.warm_pages = contexts_per_browser, warm_pages
        require({"playwright": "pip install 'ludus[web]'"}, "web environments")  # here, not deep in a thread
        self.executable = find_chromium()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="ludus-browser")
        self._thread.start()
        self._browsers: list[_Browser] = []
        self._playwright: Any = None
        self._launching: asyncio.Lock | None = None
        self._tabs: set[Tab] = set()
        self._warm: list[tuple[_Browser, Any, Any]] = []
        self._filling: asyncio.Future[None] | None = None
        self._drivers: list[int] = []  # Playwright's driver processes: Chromium runs below them
        self._closed = False

    @classmethod
    def shared(cls) -> BrowserService:
        """The one service of this process, started on first use and stopped at exit."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared._closed:
                cls._shared = cls()
                atexit.register(cls._shared.shutdown)
            return cls._shared

    # ---- calling in from other threads ----------------------------------------------------
    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """Run ``coro`` on the service's loop and wait for it. A call that overruns ``timeout_s``
        is cancelled and raises ``InfraError``: the browser, not the model, failed to answer."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("BrowserService.run was called from its own thread; await the coroutine instead")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise InfraError(f"the browser did not answer within {timeout_s:g} s") from None

    # ---- on the service's loop ------------------------------------------------------------
    async def open_tab(self, app: App, *, viewport: tuple[int, int], tag_text: bool) -> Tab:
        """A new context and page in a warm browser, allowed to reach ``app`` (now served on a
        fresh loopback port) and nothing else."""
        server = await LoopbackServer(app).start()
        try:
            browser, context, page = await self._take_page()
            if tuple(viewport) != DEFAULT_VIEWPORT:
                await page.set_viewport_size({"width": viewport[0], "height": viewport[1]})
        except Exception as exc:
            await server.close()
            raise InfraError(f"could not open a browser context: {str(exc)[:300]}") from None
        tab = Tab(self, server, browser, context, page, tag_text)
        elsewhere = re.compile("^(?!" + re.escape(server.origin) + "/)")  # matched in the browser

        async def refuse(route: Any) -> None:
            tab.blocked.append(route.request.url[:200])
            await route.abort("blockedbyclient")

        def on_dialog(dialog: Any) -> None:
            tab.notes.append(f"the page showed a {dialog.type} dialog: {dialog.message[:200]!r} (dismissed)")
            tab.pending.append(asyncio.ensure_future(dialog.dismiss()))

        def on_popup(popup: Any) -> None:  # one that got past SAME_TAB_JS
            if popup is not tab.page:
                tab.notes.append("the page tried to open a new window (blocked)")
                tab.pending.append(asyncio.ensure_future(popup.close()))

        def on_crash(_: Any) -> None:
            tab.crashed = True

        await context.route(elsewhere, refuse)
        page.on("dialog", on_dialog)
        page.on("crash", on_crash)
        context.on("page", on_popup)
        self._tabs.add(tab)
        return tab

    async def _new_page(self) -> tuple[_Browser, Any, Any]:
        browser = await self._pick_browser()
        browser.live += 1
        try:
            context = await browser.handle.new_context(
                service_workers="block",
                accept_downloads=False,
                locale="en-US",  # pages that render dates and times read the same on every machine
                timezone_id="UTC",
            )
            await context.add_init_script(SAME_TAB_JS)
            return browser, context, await context.new_page()
        except Exception:
            browser.live -= 1
            raise

    async def _take_page(self) -> tuple[_Browser, Any, Any]:
        """A fresh context and page: one made ahead of time when there is one (a context and a
        page cost most of a reset), and another is then made in the background."""
        while self._warm:
            browser, context, page = self._warm.pop()
            if not browser.dead and not page.is_closed():
                break
            browser.live -= 1
        else:
            browser, context, page = await self._new_page()
        if self.warm_pages and (self._filling is None or self._filling.done()):
            self._filling = asyncio.ensure_future(self._fill())
        return browser, context, page

    async def _fill(self) -> None:
        with contextlib.suppress(Exception):  # a failure here shows at the next reset, made on demand
            while len(self._warm) < self.warm_pages and not self._closed:
                self._warm.append(await self._new_page())

    async def close_tab(self, tab: Tab) -> None:
        self._tabs.discard(tab)
        await tab.close()

    async def _pick_browser(self) -> _Browser:
        self._browsers = [b for b in self._browsers if not b.dead]
        for browser in sorted(self._browsers, key=lambda b: b.live):
            if browser.live < self.contexts_per_browser:
                return browser
        if self._launching is None:
            self._launching = asyncio.Lock()
        async with self._launching:  # one launch at a time; the others then find room in it
            for browser in self._browsers:
                if not browser.dead and browser.live < self.contexts_per_browser:
                    return browser
            if self._playwright is None:
                from playwright.async_api import async_playwright

                self._playwright = await async_playwright().start()
                self._drivers = _drivers()
            handle = await self._playwright.chromium.launch(
                executable_path=self.executable, args=launch_args(), headless=True, timeout=60_000
            )
            browser = _Browser(handle)

            def on_disconnect(_: Any) -> None:
                browser.dead = True

            handle.on("disconnected", on_disconnect)
            self._browsers.append(browser)
            return browser

    def clock(self) -> TreeClock:
        """The CPU time and CPU wait of the browsers (and the Playwright driver over them) from now;
        the waits of all their threads added up, as an action passes from one to the next. Where
        they cannot be found, no wait is ever read and time limits are wall-clock ones."""
        return TreeClock(self._drivers, summed=True)

    def stats(self) -> dict[str, int]:
        """Browser processes and open episodes: what a leak check counts."""
        return {"browsers": sum(not b.dead for b in self._browsers), "tabs": len(self._tabs)}

    def shutdown(self) -> None:
        """Close every context and browser and stop the thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True

        async def stop() -> None:
            for tab in list(self._tabs):
                await tab.close()
            for _, context, _ in self._warm:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(context.close(), 10)
            for browser in self._browsers:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(browser.handle.close(), 10)
            if self._playwright is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._playwright.stop(), 10)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
