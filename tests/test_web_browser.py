"""The browser layer every web environment shares, on a real Chromium: the page as text, the
actions, the network fence around each episode, isolation between episodes, and what happens
when the model floods, storms or the tab dies."""

import threading
import time

import psutil
import pytest

from load_support import a_cpu, crowded, pinned_children
from ludus.core.types import InfraError, Message, Score, Status, Task, ToolCall
from ludus.envs.web.browser import ActionError, BrowserService
from ludus.envs.web.env import BrowserEnv
from ludus.envs.web.server import Response
from support import act

HOME = """<html><head><title>Home</title></head><body>
<h1>Hello</h1>
<a href="/next" data-ludus-id="77">Next page</a>
<form action="/search"><label for="q">Search</label><input id="q" name="q"><button>Go</button></form>
<label for="pw">Password</label><input id="pw" type="password" value="hunter2">
<select aria-label="Colour"><option>Red</option><option>Blue</option></select>
<label><input type="checkbox" name="gift"> Gift wrap</label>
<button onclick="alert('hi')">Alert me</button>
<a href="/next" target="_blank">New window</a>
<a href="/set">Set a cookie</a>
<div style="display:none"><a href="/secret">Hidden link</a></div>
{extra}
<div style="height:3000px"></div><p id="bottom">The end of the page</p>
</body></html>"""


class App:
    """A toy app that records what reached it."""

    def __init__(self, extra: str = ""):
        self.extra, self.paths, self.cookies = extra, [], []

    def handle(self, request):
        self.paths.append(request.path)
        self.cookies.append(dict(request.cookies))
        if request.path == "/":
            return Response(HOME.replace("{extra}", self.extra))
        if request.path == "/search":
            return Response(f"<title>Results</title><p>You searched {request.arg('q')}</p>")
        if request.path == "/set":
            return Response("<title>Set</title><p>cookie set</p>", cookies={"who": "me"})
        return Response('<title>Next</title><p>second page</p><a href="/">Home</a>')


class ToyEnv(BrowserEnv):
    name = "toy-web"

    def __init__(self, extra: str = "", **kwargs):
        super().__init__(**kwargs)
        self.extra = extra

    def app_for(self, task):
        return App(self.extra), "/"

    def final_score(self, answer):
        if answer == "ok":
            return Score(1.0)
        return Score.zero(Status.WRONG, f"expected ok, got {answer!r}")


TASK = Task(id="toy", prompt="Do the toy task.", answer="ok")


def page_of(result) -> str:
    return result.observation.messages[-1].content


@pytest.fixture(scope="module")
def env():
    env = ToyEnv()
    yield env
    env.close()


def test_the_page_as_text(env):
    obs = env.reset(TASK, 0)
    text = obs.messages[-1].content
    assert text.startswith("Do the toy task.\n\nURL: /\nTitle: Home")
    assert 'heading "Hello"' in text
    assert '[77] link "Next page"' in text  # the app's own id is kept
    assert 'textbox "Search" value=""' in text
    assert 'textbox "Password" value="•••••••"' in text and "hunter2" not in text
    assert 'combobox "Colour" value="Red" options: "Red" | "Blue"' in text
    assert 'checkbox "Gift wrap" unchecked' in text
    assert "Hidden link" not in text  # invisible elements are not shown
    assert text.count('"Search"') == 1  # a label is its control's name, not a line of its own
    assert [t.name for t in obs.tools] == [
        "click", "type", "select", "press", "scroll", "goto", "back", "answer", "finish"
    ]  # fmt: skip
    assert env.reset(TASK, 0).messages == obs.messages  # the same task and seed, the same view


def test_a_long_page_is_cut_and_scrolled():
    env = ToyEnv(max_chars=250)
    try:
        text = env.reset(TASK, 0).messages[-1].content
        assert "The end of the page" not in text and "more lines below: scroll down" in text
        for _ in range(8):
            text = page_of(act(env, "scroll", direction="down"))
        assert "The end of the page" in text and "lines above: scroll up" in text
        assert "lines above" not in page_of(act(env, "goto", url="/"))
    finally:
        env.close()


def element(text: str, label: str) -> int:
    line = next(line for line in text.splitlines() if label in line)
    return int(line.strip().split("]")[0].lstrip("["))


def test_actions_change_the_page(env):
    text = env.reset(TASK, 0).messages[-1].content
    searched = act(env, "type", element=element(text, 'textbox "Search"'), text="blue mugs", submit=True)
    assert "the page is now /search?q=blue+mugs" in page_of(searched)
    assert 'text "You searched blue mugs"' in page_of(searched)
    assert "URL: /\n" in page_of(act(env, "back"))
    chosen = page_of(act(env, "select", element=element(text, "combobox"), option="Blue"))
    assert 'value="Blue"' in chosen
    assert 'checkbox "Gift wrap" checked' in page_of(act(env, "click", element=element(text, "checkbox")))
    assert "URL: /next" in page_of(act(env, "goto", url="/next"))
    finished = act(env, "answer", text="ok")
    assert finished.done and finished.score.status == "correct" and finished.reward == 1.0


def test_mistakes_are_tool_errors_the_model_can_read(env):
    text = env.reset(TASK, 0).messages[-1].content
    cases = [
        (("click", {"element": 999}), "there is no element [999]"),
        (("type", {"element": element(text, "link"), "text": "x"}), "does not accept text"),
        (
            ("select", {"element": element(text, "combobox"), "option": "Green"}),
            "is not a list with the option 'Green'",
        ),
        (("press", {"key": "Launch the missiles"}), "unknown key"),
        (("type", {"element": element(text, "Search"), "text": "a" * 100_000}), "at most 2000"),
        (("click", {"element": "seven"}), "Error"),
    ]
    for (name, args), message in cases:
        result = act(env, name, **args)
        assert not result.done
        assert message in page_of(result), (name, page_of(result)[:300])
        assert result.info["tool_errors"] == 1
    assert "went back" not in page_of(act(env, "back"))  # nothing to go back to: an error, not a crash


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "javascript:document.title='pwned'",
        "data:text/html,<h1>fake</h1>",
        "chrome://version",
        "about:blank",
        "http://example.com/",
        "//example.com/x",
        "http://127.0.0.1:9/",
        "https://127.0.0.1/",
    ],
)
def test_goto_opens_only_this_site(env, url):
    env.reset(TASK, 0)
    result = act(env, "goto", url=url)
    assert "goto only opens pages of this site" in page_of(result)
    assert "URL: /\n" in page_of(result)


def test_the_page_reaches_nothing_but_its_own_app():
    """A page that tries to load from the internet and from another episode's app on this machine:
    every such request is stopped in the browser; the other episode's app never sees one."""
    victim = ToyEnv()
    victim.reset(TASK, 0)
    other = victim.tab.origin
    attacker = ToyEnv(
        extra=f"""<img src="http://example.com/pixel.png"><img src="{other}/stolen-by-img">
        <script>fetch("{other}/stolen-by-fetch").catch(() => null);
        fetch("http://8.8.8.8/").catch(() => null);</script>
        <iframe src="{other}/stolen-by-frame"></iframe>"""
    )
    try:
        attacker.reset(TASK, 0)
        act(attacker, "scroll", direction="down")  # give the page's requests time to be made
        blocked = attacker.tab.blocked
        assert any("example.com" in url for url in blocked)
        assert any("stolen-by-img" in url for url in blocked)
        assert any("stolen-by-fetch" in url for url in blocked)
        assert not any("stolen" in path for path in victim.app.paths)
    finally:
        attacker.close()
        victim.close()


def test_episodes_share_no_cookies():
    first, second = ToyEnv(), ToyEnv()
    try:
        first.reset(TASK, 0)
        text = act(first, "goto", url="/set")
        assert "cookie set" in page_of(text)
        act(first, "goto", url="/next")
        assert first.app.cookies[-1] == {"who": "me"}
        second.reset(TASK, 0)
        act(second, "goto", url="/next")
        assert all(not cookies for cookies in second.app.cookies)
        first.reset(TASK, 1)  # a new episode of the same environment starts clean too
        act(first, "goto", url="/next")
        assert first.app.cookies[-1] == {}
    finally:
        first.close()
        second.close()


def test_dialogs_and_popups_do_not_hang_the_episode(env):
    text = env.reset(TASK, 0).messages[-1].content
    alerted = page_of(act(env, "click", element=element(text, "Alert me")))
    assert "the page showed a alert dialog: 'hi' (dismissed)" in alerted
    popped = act(env, "click", element=element(text, "New window"))
    assert "URL: /next" in page_of(popped)  # a link to a new window opens in the episode's one tab
    assert len(env.tab.context.pages) == 1


def test_an_action_storm_is_capped():
    env = ToyEnv(max_actions=5)
    try:
        env.reset(TASK, 0)
        calls = [ToolCall("scroll", {"direction": "down"}, id=f"c{i}") for i in range(40)]
        result = env.step(Message("assistant", "", tool_calls=calls))
        assert result.info["tool_calls"] == 40 and result.info["tool_errors"] == 35
        assert "limit of 5 tool calls is used up" in result.observation.messages[-1].content
        assert act(env, "answer", text="ok").score.status == "correct"  # the episode still ends properly
    finally:
        env.close()


def test_a_starved_browser_is_infra_error_and_a_refusal_stays_a_refusal():
    """The browser shares one CPU with 6 busy processes. A click it cannot finish in time is
    ``InfraError`` (retried, then masked), never "could not be clicked"; a disabled button and a
    missing option are refused as on an idle machine: the page refuses them, not the load."""
    env = ToyEnv(extra='<button disabled data-ludus-id="88">Locked</button>')
    cpu = a_cpu()

    def attempt(name: str, timeout_s: float, **args) -> object:
        try:
            return env.service.run(env.tab.act(name, args, timeout_s), 120)
        except (ActionError, InfraError) as exc:
            return exc

    try:
        text = env.reset(TASK, 0).messages[-1].content
        with pinned_children(cpu), crowded(cpu, busy=6):
            starved = attempt("click", 0.02, element=element(text, "checkbox"))
            locked = attempt("click", 1, element=88)
            missing = attempt("select", 1, element=element(text, "combobox"), option="Green")
        assert isinstance(starved, InfraError) and "starved of CPU" in str(starved), starved
        assert isinstance(locked, ActionError) and str(locked) == "[88] could not be clicked", locked
        assert isinstance(missing, ActionError) and "is not a list with the option 'Green'" in str(missing), missing
    finally:
        env.close()


def test_a_crashed_tab_is_infra_error_not_a_zero():
    env = ToyEnv()
    try:
        env.reset(TASK, 0)
        with pytest.raises(Exception):  # noqa: B017 - the crash itself aborts the navigation
            env.service.run(env.tab.page.goto("chrome://crash"), 30)
        result = act(env, "scroll", direction="down")
        assert result.done and result.score.status == "infra_error"
        assert env.reset(TASK, 0).messages  # the next episode gets a healthy tab
        assert act(env, "answer", text="ok").score.status == "correct"
    finally:
        env.close()


def test_the_wrong_answer_and_words_instead_of_a_tool(env):
    env.reset(TASK, 0)
    assert act(env, "answer", text="not ok").score.status == "wrong"
    env.reset(TASK, 0)
    assert env.step("ok").score.status == "correct"  # a reply without a tool call is the answer
    env.reset(TASK, 0)
    ended = act(env, "finish")
    assert ended.done and ended.score.status == "wrong"


def chromium_processes() -> int:
    count = 0
    for process in psutil.Process().children(recursive=True):
        try:
            count += "chrom" in process.name().lower()
        except psutil.NoSuchProcess:  # a renderer that exited while we counted
            pass
    return count


def test_episodes_leave_nothing_behind_across_threads():
    """Episodes from several threads at once, then closed: no context is left open and the
    Chromium process count is what the warm pool holds, not more."""
    service = BrowserService.shared()
    warm = ToyEnv()
    warm.reset(TASK, 0)
    warm.close()
    before, tabs = chromium_processes(), service.stats()["tabs"]
    errors = []

    def worker(n: int) -> None:
        env = ToyEnv()
        try:
            for seed in range(6):
                env.reset(TASK, seed)
                act(env, "click", element=77)
                if act(env, "answer", text="ok").score.status != "correct":
                    errors.append(n)
        finally:
            env.close()

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors
    assert service.stats()["tabs"] == tabs
    # Chromium ends a closed context's renderers asynchronously, later still on a busy
    # machine: wait for them to go (a leak never goes), then the count is the warm pool's.
    deadline = time.monotonic() + 60
    while chromium_processes() > before + 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert chromium_processes() <= before + 2


def test_screenshots_for_multimodal_models(tmp_path):
    env = ToyEnv(screenshots=str(tmp_path))
    try:
        text = env.reset(TASK, 0).messages[-1].content
        path = next(line.split(": ", 1)[1] for line in text.splitlines() if line.startswith("Screenshot: "))
        with open(path, "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    finally:
        env.close()
