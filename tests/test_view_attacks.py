"""``ludus view`` attacked (issue 33's red team): a run folder is model-written text and may be
copied from anyone, so every file of it is hostile — lines that broke the index thread or a
reply, strings of megabytes, metrics and verdicts that are no numbers, FIFOs and directories
where files were, YAML that expands without bound — other accounts of this machine, which reach
127.0.0.1 without the token, read nothing, and the page is driven in a real Chromium by pages of
other origins and by markup in every field a run holds."""

from __future__ import annotations

import contextlib
import copy
import functools
import http.server
import json
import os
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ludus.cli import main
from ludus.serve.view import MAX_CHOICES, MAX_FIELD_CHARS, open_runs, view_app
from support import page_of_another_origin, serving

pytestmark = [
    pytest.mark.usefixtures("module_cache"),
    # the index is read on a thread of its own: one that dies hides the rest of the file
    pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning"),
]

TRAJECTORIES = "trajectories.jsonl"
ROWS = f"/api/runs/0/files/{TRAJECTORIES}/rows"
RECORDS = f"/api/runs/0/files/{TRAJECTORIES}/records"
TOKEN = secrets.token_urlsafe(32)
get = functools.partial(httpx.get, headers={"Authorization": f"Bearer {TOKEN}"})  # the API, as the token's holder


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One line of a real ``ludus eval`` run, to be bent into hostile ones."""
    root = tmp_path_factory.mktemp("runs")
    assert main(["eval", "arithmetic", "--model", "oracle", "--tasks", "1", "--runs", str(root), "--name", "r"]) == 0
    return json.loads((root / "r" / TRAJECTORIES).read_text().splitlines()[0])


def run_folder(folder: Path, lines: list[str], files: dict[str, str] | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TRAJECTORIES).write_text("".join(line + "\n" for line in lines))
    for name, text in (files or {}).items():
        (folder / name).write_text(text)
    return folder


@contextlib.contextmanager
def viewing(*folders: Path) -> Iterator[str]:
    with serving(view_app(open_runs(folders), TOKEN), path="") as url:
        yield url


def strict_json(reply: httpx.Response) -> Any:
    """The reply's JSON as a browser's ``JSON.parse`` reads it: no NaN, no Infinity."""
    assert reply.status_code == 200, reply.text[:500]

    def refuse(name: str) -> None:
        raise AssertionError(f"the reply holds {name}, which JSON.parse refuses")

    return json.loads(reply.content, parse_constant=refuse)


def every_row(url: str) -> dict[str, Any]:
    """The first page once the whole file is indexed (the index is read in the background)."""
    while not (page := strict_json(get(url + ROWS, params={"limit": 500})))["complete"]:
        time.sleep(0.02)
    return page


def variant(record: dict[str, Any], task_id: str, change: Callable[[dict[str, Any]], None]) -> str:
    line = copy.deepcopy(record)
    line["task"]["id"] = task_id
    change(line)
    return json.dumps(line)


# ---- lines that broke the index, the table or a reply -----------------------------------------------
def test_hostile_lines_neither_stop_the_index_nor_break_the_table_or_a_record(record, tmp_path):
    megabytes = "x" * 10_000_000
    hostile = {
        "huge-integer-reward": lambda r: r["turns"][0].update(reward=10**400),  # float() of it overflows
        "huge-integer-score": lambda r: (r["turns"].clear(), r["score"].update(value=-(10**400))),
        "token-ids-a-number": lambda r: r["turns"][0].update(completion_ids=5, prompt_ids=7),
        "not-a-number-info": lambda r: r["info"].update(loss=float("nan"), best=float("inf")),
        "not-a-number-reward": lambda r: r["turns"][0].update(reward=float("nan")),
        "status-10MB": lambda r: r["score"].update(status=megabytes),
        "env-10MB": lambda r: r.update(env=megabytes),
        "100k-components": lambda r: r["score"].update(components={f"c{k}": 1.0 for k in range(100_000)}),
    }
    lines = [json.dumps(record)]
    lines += [variant(record, name, change) for name, change in hostile.items()]
    lines.append(variant(record, "task-id-10MB-" + megabytes, lambda r: None))
    lines.append(variant(record, "overflowing-float", lambda r: r["info"].update(big="BIG")).replace('"BIG"', "1e999"))
    nested = "[" * 100_000 + "]" * 100_000  # too deep for any JSON parser: the line is unreadable, not fatal
    lines.append(json.dumps(record).replace('"info": {', f'"info": {{"deep": {nested}, ', 1))
    lines.append(variant(record, "the-last-line", lambda r: None))
    with viewing(run_folder(tmp_path / "hostile", lines)) as url:
        page = every_row(url)
        rows = page["rows"]
        assert page["total"] == len(lines) and rows[-1]["task_id"] == "the-last-line"
        assert [row["task_id"] for row in rows[1 : 1 + len(hostile)]] == list(hostile)
        by_id = {row["task_id"]: row for row in rows}
        for name in ("huge-integer-reward", "not-a-number-reward"):  # the score's value, as for no reward
            assert by_id[name]["reward"] == record["score"]["value"]
        assert by_id["huge-integer-score"]["reward"] is None and by_id["token-ids-a-number"]["tokens"] == 0
        assert rows[-2]["status"] == "unreadable" and "deep" in rows[-2]["problem"]
        # a field of megabytes is cut in the index and in every reply: the index holds small summaries
        for row in rows:
            assert all(len(row[key]) <= MAX_FIELD_CHARS for key in ("task_id", "env", "status"))
        cut = next(row for row in rows if row["task_id"].startswith("task-id-10MB-"))
        assert cut["task_id"].startswith("task-id-10MB-xxx") and len(by_id["status-10MB"]["status"]) > 100
        assert len(by_id["100k-components"]["components"]) == MAX_CHOICES == len(page["components"])
        assert len(json.dumps(page)) < 2_000_000
        for row in rows[:-2] + rows[-1:]:  # every readable line opens, NaN and all
            opened = strict_json(get(f"{url}{RECORDS}/{row['offset']}"))
            assert opened["row"]["offset"] == row["offset"]
        opened = strict_json(get(f"{url}{RECORDS}/{by_id['token-ids-a-number']['offset']}"))
        assert opened["turns"][0]["completion_tokens"] == 0
        opened = strict_json(get(f"{url}{RECORDS}/{by_id['not-a-number-info']['offset']}"))
        assert opened["trajectory"]["info"]["loss"] is None
        opened = strict_json(get(f"{url}{RECORDS}/{by_id['overflowing-float']['offset']}"))
        assert opened["trajectory"]["info"]["big"] is None
        deep = get(f"{url}{RECORDS}/{rows[-2]['offset']}")
        assert deep.status_code == 422 and "deep" in deep.json()["detail"]
        # a sorted or filtered page over the cut fields answers too
        for sort in ("task_id", "status", "env", "reward", "tokens", "c:c7"):
            assert strict_json(get(url + ROWS, params={"sort": sort}))["total"] == len(lines)
        cut_status = by_id["status-10MB"]["status"]
        assert strict_json(get(url + ROWS, params={"status": cut_status}))["total"] == 1


def test_the_api_answers_only_the_token_holder_and_only_through_the_header(record, tmp_path):
    """Other accounts of this machine reach 127.0.0.1 too: without the token they read nothing, and
    a token in a URL (which ends up in logs and history) is not taken; the page's own files, which
    hold no data, stay public."""
    run = run_folder(tmp_path / "run", [json.dumps(record)])
    with viewing(run) as url:
        assert get(url + "/api/runs").status_code == 200
        assert httpx.get(url + "/api/runs", headers={"authorization": f"bearer {TOKEN}"}).status_code == 200
        wrong = [{}, {"Authorization": f"Bearer {secrets.token_urlsafe(32)}"}, {"Authorization": "Bearer"},
                 {"Authorization": TOKEN}, {"Authorization": f"Basic {TOKEN}"}, {"Authorization": f"Bearer {TOKEN}x"}]  # fmt: skip
        for path in ("/api/runs", ROWS, f"{RECORDS}/0", f"{RECORDS}/0/screenshots/0", "/api/metrics", "/api/compare",
                     "/api/no-such-route"):  # fmt: skip
            for headers in wrong:
                refused = httpx.get(url + path, headers=headers)
                assert refused.status_code == 401 and "Bearer TOKEN" in refused.json()["detail"], (path, headers)
            assert httpx.get(url + path, params={"token": TOKEN}).status_code == 401, path
        for path in ("/", "/view.js", "/view.css", "/health"):
            assert httpx.get(url + path).status_code == 200, path
    with pytest.raises(ValueError, match="16"):
        view_app(open_runs([run]), "guessable")


def test_many_distinct_statuses_and_envs_are_offered_as_a_bounded_choice(record, tmp_path):
    lines = [
        variant(record, f"t{k}", lambda r, k=k: (r.update(env=f"env-{k}"), r["score"].update(status=f"s-{k}")))
        for k in range(MAX_CHOICES + 50)
    ]
    with viewing(run_folder(tmp_path / "many", lines)) as url:
        page = every_row(url)
        assert page["total"] == len(lines)
        assert len(page["envs"]) == len(page["statuses"]) == MAX_CHOICES


def test_hostile_verdicts_and_metrics_are_skipped_and_the_rest_is_shown(record, tmp_path):
    verdict = {
        "file": TRAJECTORIES,
        "offset": 0,
        "line": 1,
        "env": "arithmetic",
        "task_id": record["task"]["id"],
        "old": record["score"],
        "new": {**record["score"], "status": "wrong", "value": 0.0},
        "old_reward": 1.0,
        "new_reward": 0.0,
        "diverged": None,
    }
    verdicts = [
        {**verdict, "offset": float("inf")},  # int() of it overflows
        {**verdict, "new": {**verdict["new"], "value": 10**400}},
        {**verdict, "old_reward": float("nan")},
        [verdict],
        verdict,  # the one good verdict, last
    ]
    keys = {f"k{k}": k for k in range(100_000)}
    metrics = [
        {"step": 1, "loss": 10**400, "reward/mean": 0.5},
        {"step": 2, "loss": float("nan"), "reward/mean": float("inf")},
        {"step": "3", "loss": "high", "reward/mean": 0.7},
        {"step": 4, "loss": 1e308, "reward/mean": True, **keys},
        [1, 2],
    ]
    folder = run_folder(
        tmp_path / "run",
        [json.dumps(record)],
        {
            "rescore.jsonl": "".join(json.dumps(v) + "\n" for v in verdicts),
            "metrics.jsonl": "".join(json.dumps(m) + "\n" for m in metrics),
        },
    )
    with viewing(folder) as url:
        [row] = every_row(url)["rows"]
        assert row["rescore"]["new_status"] == "wrong"
        opened = strict_json(get(f"{url}{RECORDS}/0"))
        assert opened["rescore"]["new"]["status"] == "wrong"
        curves = strict_json(get(url + "/api/metrics", params={"keys": "loss,reward/mean,k99999"}))
        [series] = [run["series"] for run in curves["runs"]]
        assert series == {"loss": [[4, 1e308]], "reward/mean": [[1, 0.5]], "k99999": [[4, 99999]]}
        assert len(curves["keys"]) == 100_002


# ---- files that are not files ------------------------------------------------------------------------
@contextlib.contextmanager
def fifo_watch(*fifos: Path) -> Iterator[list[str]]:
    """FIFOs at ``fifos`` and a thread that notices any being opened for reading (by opening it
    for writing, which succeeds only then, and closing it at once: the reader sees an empty file
    and goes on instead of waiting for good); yields the names of those opened."""
    for fifo in fifos:
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
    opened: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for fifo in fifos:
                try:
                    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
                except OSError:  # ENXIO: no reader; ENOENT: replaced meanwhile
                    continue
                opened.append(fifo.name)
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield opened
    finally:
        stop.set()
        watcher.join()


def test_fifos_and_folders_where_files_were_never_hang_or_break_the_server(record, tmp_path):
    folder = run_folder(tmp_path / "run", [json.dumps(record)] * 3, {"metrics.jsonl": '{"step": 1, "loss": 1}\n'})
    settings = [folder / name for name in ("config.yaml", "eval.json", "summary.json", "rescore.json")]
    with fifo_watch(*settings) as opened:
        runs = open_runs([folder])  # reads what the run recorded about itself
        with serving(view_app(runs, TOKEN), path="") as url:
            assert strict_json(get(url + "/api/runs"))[0]["settings"] == {}
            assert every_row(url)["total"] == 3
            path = folder / TRAJECTORIES
            path.unlink()
            path.mkdir()  # the trajectory file replaced by a folder while viewed
            assert every_row(url)["total"] == 0
            assert get(f"{url}{RECORDS}/0").status_code == 404
            path.rmdir()
            with fifo_watch(path, folder / "metrics.jsonl", folder / "rescore.jsonl") as also_opened:
                assert every_row(url)["total"] == 0
                assert get(f"{url}{RECORDS}/0").status_code == 404
                assert strict_json(get(url + "/api/metrics"))["runs"] == []
                assert strict_json(get(url + "/api/runs"))[0]["files"][0]["rows"] == 0
    assert opened == [] and also_opened == []


def test_recorded_settings_that_expand_without_bound_are_left_out(record, tmp_path):
    levels = "".join(f"l{k}: &l{k} [{', '.join([f'*l{k - 1}'] * 9)}]\n" for k in range(1, 10))
    bomb = "l0: &l0 [x, x, x, x, x, x, x, x, x]\n" + levels  # 9**10 strings once written out
    folder = run_folder(tmp_path / "bomb", [json.dumps(record)], {"config.yaml": bomb})
    with viewing(folder) as url:
        assert "config.yaml" not in strict_json(get(url + "/api/runs"))[0]["settings"]
    (folder / "config.yaml").write_text("me: &me [*me]\n")  # a list that holds itself
    (folder / "eval.json").write_text('{"env_args": {"x": NaN}, "samples": 1}')
    with viewing(folder) as url:
        settings = strict_json(get(url + "/api/runs"))[0]["settings"]
        assert "config.yaml" not in settings and settings["eval.json"] == {"env_args": {"x": None}, "samples": 1}
    (folder / "config.yaml").write_text("shared: &s {lr: 0.1}\nagain: *s\n")  # a small alias is fine
    with viewing(folder) as url:
        assert strict_json(get(url + "/api/runs"))[0]["settings"]["config.yaml"]["again"] == {"lr": 0.1}


# ---- a real Chromium: pages of other origins, and markup in every field -------------------------------
# run in a page of another origin (or a file, or a sandboxed frame): every way a page reaches a
# server on this machine, against the viewer by both its names; what each could read
ATTACK_PAGE = """<!doctype html><body><script>
const settle = (promise) => promise.then((value) => value, (error) => "error: " + error.name);
const load = (tag, url) => new Promise((resolve) => {
  const node = document.createElement(tag);
  node.onload = () => resolve("loaded");
  node.onerror = () => resolve("error");
  node.src = url;
  document.body.append(node);
});
const framed = (url) => new Promise((resolve) => {
  const frame = document.createElement("iframe");
  frame.onload = () => { try { resolve(frame.contentDocument.body.innerText); } catch (e) { resolve("error: " + e.name); } };
  frame.src = url;
  document.body.append(frame);
});
const sandboxed = (url) => new Promise((resolve) => {
  addEventListener("message", (event) => resolve(event.data), { once: true });
  const frame = document.createElement("iframe");
  frame.sandbox = "allow-scripts";  // its Origin is "null"
  frame.srcdoc = `<script>fetch(${JSON.stringify(url)}).then((r) => r.text()).then((t) => parent.postMessage(t, "*"),
    (e) => parent.postMessage("error: " + e.name, "*"))<\\/script>`;
  document.body.append(frame);
});
async function attack(viewer) {
  const runs = viewer + "/api/runs", record = viewer + "/api/runs/0/files/trajectories.jsonl/records/0";
  return {
    fetch: await settle(fetch(runs).then((r) => r.text())),
    credentials: await settle(fetch(record, { credentials: "include" }).then((r) => r.text())),
    noCors: await settle(fetch(record, { mode: "no-cors" }).then((r) => r.type)),
    img: await load("img", record + "/screenshots/0"),
    script: await load("script", runs),
    iframe: await framed(viewer + "/"),
    sandboxed: await sandboxed(runs),
  };
}
(async () => {
  const results = {};
  for (const viewer of new URLSearchParams(location.search).getAll("viewer")) results[viewer] = await attack(viewer);
  window.results = results;
  window.done = true;
})();
</script></body>"""


@contextlib.contextmanager
def listener() -> Iterator[tuple[int, list[str]]]:
    """A server on 127.0.0.1 that records every request (what an injected script would send)."""
    hits: list[str] = []

    class Record(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Record)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], hits
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def hostile_runs(root: Path, record: dict[str, Any], markup: str) -> tuple[Path, Path]:
    """Two runs of the same task whose every field a page shows holds ``markup``, in folders
    named with markup; the first also has a line whose fields are of no expected type."""
    line = copy.deepcopy(record)
    line["task"].update(id="invoice-\u202etxt.exe", answer=markup, source="javascript:window.pwned=7")
    line["env"] = markup
    line["score"].update(status=markup, reason=markup, extracted=markup, components={markup: 0.5})
    line["messages"] = [
        {"role": "user", "content": f"{markup}\nScreenshot: {markup}.png"},
        {
            "role": "assistant",
            "content": markup,
            "tool_calls": [{"id": markup, "name": markup, "arguments": {markup: markup}}],
        },
        {"role": "tool", "name": markup, "tool_call_id": markup, "content": markup},
        {"role": markup, "content": "the last message"},
    ]
    line["tools"] = [{"name": markup, "description": markup, "parameters": {}}]
    line["turns"][0]["finish_reason"] = markup
    line["info"] = {markup: markup, "env": {"diff": f"--- a/{markup}\n+++ b/x\n@@ -1 +1 @@\n-{markup}\n+{markup}\n"}}
    odd = copy.deepcopy(record)
    odd.update(messages=[None, 5, "text", {"role": "assistant", "content": "after the odd ones"}], tools=[None, 3])
    odd["messages"][3]["tool_calls"] = "not a list"
    odd["score"].update(value="high", components={"c": "x"})
    odd["turns"][0]["reward"] = "high"
    first = run_folder(root / "<img src=x onerror=window.pwned=8>", [json.dumps(line), json.dumps(odd)])
    second = run_folder(root / "<svg onload=window.pwned=9>", [json.dumps(line)])
    verdict = {
        "file": TRAJECTORIES, "offset": 0, "line": 1, "env": markup, "task_id": line["task"]["id"],
        "old": {**line["score"], "reason": markup}, "new": {**line["score"], "status": markup, "reason": markup},
        "old_reward": 1.0, "new_reward": 0.0, "diverged": markup,
    }  # fmt: skip
    (first / "rescore.jsonl").write_text(json.dumps(verdict) + "\n")
    (first / "metrics.jsonl").write_text(
        f"{json.dumps({'step': 1, markup: 0.5})}\n{json.dumps({'step': 2, markup: 1})}\n"
    )
    summary = {"tasks": markup, "mean_reward": "high", "statuses": {markup: 1}}
    (first / "summary.json").write_text(json.dumps(summary))
    return first, second


def recording(app: Any, seen: list[tuple[str, dict[str, str], int]]) -> Any:
    """``app`` noting in ``seen`` each HTTP request's path, headers and reply status."""

    async def noted(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await app(scope, receive, send)

        async def noting(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = {k.decode(): v.decode("latin-1") for k, v in scope["headers"]}
                seen.append((scope["path"], headers, message["status"]))
            await send(message)

        return await app(scope, receive, noting)

    return noted


# what the page must not hold once it has shown a run: anything markup would have made
INJECTED = (
    "iframe, object, embed, base, style, meta[http-equiv], link:not([href='/view.css']), img:not(.shot), "
    "a[href^=javascript], [onerror], [onload], [onclick], svg script, svg a"
)
VIOLATIONS = (
    "window.violations = []; addEventListener('securitypolicyviolation', (e) => violations.push(e.violatedDirective));"
)


def test_other_origins_read_nothing_and_markup_in_every_field_runs_nothing_in_chromium(record, tmp_path):
    from playwright.sync_api import sync_playwright

    from ludus.envs.web.browser import find_chromium, launch_args

    seen: list[tuple[str, dict[str, str], int]] = []
    with listener() as (port, hits):
        markup = (
            f"<img src=x onerror=\"window.pwned=1;fetch('http://127.0.0.1:{port}/img')\">"
            "<script>window.pwned=2</script><svg onload=window.pwned=3></svg></style>"
            '<a href="javascript:window.pwned=4">link</a><iframe srcdoc="<script>parent.pwned=5</script>"></iframe>'
            f"<style>body {{ background: url(http://127.0.0.1:{port}/css) }}</style>"
        )
        first, second = hostile_runs(tmp_path, record, markup)
        app = recording(view_app(open_runs([first, second]), TOKEN), seen)
        with serving(app, path="") as viewer, page_of_another_origin(ATTACK_PAGE) as other:
            viewer_port = viewer.rsplit(":", 1)[1]
            by_name = f"http://localhost:{viewer_port}"
            query = urllib.parse.urlencode({"viewer": [viewer, by_name]}, doseq=True)
            attack_file = tmp_path / "attack.html"
            attack_file.write_text(ATTACK_PAGE)
            attackers = [
                f"{other}/?{query}",  # localhost:OTHER: another site than 127.0.0.1
                f"{other.replace('localhost', '127.0.0.1')}/?{query}",  # 127.0.0.1:OTHER: the same site
                f"{attack_file.as_uri()}?{query}",  # a file: its Origin is "null"
            ]
            rebind = ["--host-resolver-rules=MAP rebind.test 127.0.0.1", "--proxy-bypass-list=rebind.test"]
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=find_chromium(), args=[*launch_args(), *rebind])
                try:
                    attacks = []
                    for url in attackers:
                        tab = browser.new_page()
                        tab.goto(url)
                        tab.wait_for_function("window.done === true")
                        attacks.append(tab.evaluate("window.results"))
                        tab.close()
                    tab = browser.new_page()
                    tab.goto(f"http://rebind.test:{viewer_port}/")  # DNS rebinding: the same origin, by a name
                    rebound = tab.evaluate("() => fetch('/api/runs').then((r) => r.status)")
                    tab.close()
                    seen_from_attackers = list(seen)
                    shown = views_of_hostile_runs(browser, viewer, markup)
                finally:
                    browser.close()
        assert hits == []  # nothing injected sent a request
    # the attackers: every request they made was refused, and none of them read a thing
    assert rebound == 403 and seen_from_attackers
    assert all(status == 403 for _, _, status in seen_from_attackers), [(p, s) for p, _, s in seen_from_attackers]
    assert len({path for path, _, _ in seen_from_attackers}) >= 4
    for results in attacks:
        assert set(results) == {viewer, by_name}
        for what in results.values():
            assert what["fetch"] == what["credentials"] == what["sandboxed"] == "error: TypeError", what
            assert what["img"] == what["script"] == "error" and "invoice" not in json.dumps(what)
    # the viewer's own page: every field shown as text, bidirectional controls as code points
    for route, (texts, injected, pwned, violations) in shown.items():
        assert injected == 0 and pwned is None and violations == [], route
        if route != "odd":
            assert (markup[:200] if route == "table" else markup) in texts, route  # the table's cells are cut
    assert "invoice-[U+202E]txt.exe" in shown["table"][0] and "after the odd ones" in shown["odd"][0]
    assert "not served" in shown["trajectory"][0]


def views_of_hostile_runs(browser: Any, viewer: str, markup: str) -> dict[str, tuple[str, int, Any, list[str]]]:
    """Each view of the page over :func:`hostile_runs`: its text, how many elements markup would
    have made, ``window.pwned`` and the Content-Security-Policy violations it caused."""
    page = browser.new_page()
    page.add_init_script(VIOLATIONS)
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    odd_offset = get(f"{viewer}{ROWS}").json()["rows"][1]["offset"]
    routes = {
        "table": ("#/table?run=0", "#rows tbody tr"),
        "trajectory": (f"#/trajectory?run=0&file={TRAJECTORIES}&offset=0", ".card.rescore"),
        "odd": (f"#/trajectory?run=0&file={TRAJECTORIES}&offset={odd_offset}", "pre:text('after the odd ones')"),
        "curves": (f"#/curves?keys={urllib.parse.quote(markup)}", ".chart svg polyline"),
        "compare": ("#/compare?a=0&b=1&task=t&ao=0&bo=0", "#side-b .message.assistant"),
    }
    page.goto(f"{viewer}/#token={TOKEN}")  # the address ludus view prints: the page keeps the token for the tab
    shown = {}
    for name, (route, ready) in routes.items():
        page.goto(f"{viewer}/{route}")
        page.wait_for_selector(ready)
        problems += page.locator(".error").all_inner_texts()  # a view that failed says so there
        shown[name] = (
            page.inner_text("body"),
            page.locator(INJECTED).count() + page.evaluate("document.scripts.length") - 1,
            page.evaluate("window.pwned"),
            page.evaluate("window.violations"),
        )
    page.close()
    assert not problems, problems
    return shown
