"""``ludus view`` (issue 33) on real run folders: a ``ludus eval`` of 10,000 trajectories, a few-step
``ludus train``, a run graded again by ``ludus rescore``, a web run with screenshots and a repo run
with a diff. The API is checked against the files themselves (paging, sorting, filtering, a file
that grows or is rewritten), clients that name paths or come from other sites are refused, and the
page itself is driven in a real headless Chromium, hostile model text included."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from ludus.cli import main
from ludus.rollout.records import read_lines
from ludus.serve.view import MAX_PAGE_ROWS, open_runs, view_app
from support import REPO, script_module, serving

pytestmark = pytest.mark.usefixtures("module_cache")

TRAJECTORIES = "trajectories.jsonl"
BENCHMARK = REPO / "benchmarks" / "view_first_page.py"  # where `ludus view` is started as a user starts it
TOKEN = secrets.token_urlsafe(32)
AUTHORIZED = {"Authorization": f"Bearer {TOKEN}"}
get = functools.partial(httpx.get, headers=AUTHORIZED)  # the API, as the token's holder
HOSTILE = '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>'


@dataclass(frozen=True)
class Runs:
    big: Path  # ludus eval, the embedded model: 10,000 trajectories
    oracle: Path  # the first 20 tasks of the same split, answered right
    hostile: Path  # replies holding markup, graded again by ludus rescore
    web: Path  # the shop, with screenshots saved outside the run folder
    repo: Path  # a repository fixed: a diff
    train: Path  # a few steps of ludus train: metrics.jsonl and samples.jsonl
    shots: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    root = tmp_path_factory.mktemp("runs")
    # the evaluation syncs each trajectory to disk as it ends: on tmpfs that costs nothing, which
    # turns the 10,000-trajectory run from half a minute into seconds
    shm = Path("/dev/shm")
    fast = Path(tempfile.mkdtemp(prefix="ludus-view-", dir=shm)) if os.access(shm, os.W_OK) else root
    try:
        shots = root / "shots"
        evaluations = [
            ["arithmetic", "--tasks", "10000", "--max-tokens", "3", "--batch", "1000", "--runs", str(fast), "--name", "big"],
            ["arithmetic", "--model", "oracle", "--tasks", "20", "--name", "oracle"],
            ["math", "--model", "oracle", "--env-args", json.dumps({"path": str(hostile_tasks(root))}), "--name", "hostile"],
            ["web", "--model", "oracle", "--tasks", "1", "--env-args", json.dumps({"screenshots": str(shots)}), "--name", "web"],
            ["repo", "--model", "oracle", "--tasks", "1", "--name", "repo"],
        ]  # fmt: skip
        for flags in evaluations:
            assert main(["eval", *flags, *([] if "--runs" in flags else ["--runs", str(root)])]) == 0
        assert main(["rescore", str(root / "hostile"), "--env", "arithmetic"]) == 0
        train = [
            "--env", "arithmetic", "--tiny", "{d_model: 32, n_layers: 1, n_heads: 2}", "--warmstart-steps", "2",
            "--warmstart-batch", "4", "--steps", "3", "--prompts-per-step", "2", "--group-size", "2",
            "--eval-size", "4", "--time-limit-min", "0", "--threads", "1",
        ]  # fmt: skip
        assert main(["train", *train, "--runs-dir", str(root), "--name", "train"]) == 0
        yield Runs(fast / "big", root / "oracle", root / "hostile", root / "web", root / "repo", root / "train", shots)
    finally:
        if fast != root:
            shutil.rmtree(fast, ignore_errors=True)


def hostile_tasks(folder: Path) -> Path:
    """Tasks whose gold answer is markup: the oracle replies with it, as a model could."""
    rows = [{"prompt": f"Reply with the tag {i}", "answer": HOSTILE.replace("=1", f"={i}")} for i in range(20)]
    path = folder / "hostile.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def lines_of(path: Path) -> list[tuple[int, int, dict[str, Any]]]:
    """(byte offset, line number, record) of every line of a JSONL file."""
    return [(line.offset, line.number, json.loads(line.raw)) for line in read_lines(path)]


@contextlib.contextmanager
def viewing(*folders: Path) -> Iterator[str]:
    with serving(view_app(open_runs(folders), TOKEN), path="") as url:
        yield url


def rows(url: str, run: int = 0, name: str = TRAJECTORIES, **params: Any) -> dict[str, Any]:
    reply = get(f"{url}/api/runs/{run}/files/{name}/rows", params=params)
    assert reply.status_code == 200, reply.text
    return reply.json()


def indexed(url: str, run: int = 0, name: str = TRAJECTORIES) -> int:
    """The file's line count, once the server has read all of it (it reads in the background)."""
    while True:
        page = rows(url, run, name, limit=1, descending="true")  # a query that does not wait for the index
        if page["complete"]:
            return page["total"]
        time.sleep(0.02)


def every_row(url: str, run: int = 0, name: str = TRAJECTORIES, **params: Any) -> list[dict[str, Any]]:
    """Every row the query selects, page by page, once the whole file is indexed."""
    indexed(url, run, name)
    out: list[dict[str, Any]] = []
    while True:
        page = rows(url, run, name, start=len(out), limit=MAX_PAGE_ROWS, **params)
        assert page["complete"]
        out += page["rows"]
        if len(out) >= page["total"]:
            return out


def reply_of(record: dict[str, Any]) -> str:
    return [m["content"] for m in record["messages"] if m["role"] == "assistant"][-1]


# ---- the API -------------------------------------------------------------------------------------
def test_the_table_pages_sorts_and_filters_as_the_file_says(runs):
    lines = lines_of(runs.big / TRAJECTORIES)
    statuses = Counter(record["score"]["status"] for _, _, record in lines)
    assert len(lines) == 10_000 and len(statuses) > 1
    with viewing(runs.big) as url:
        first = rows(url)  # served from the first lines read: the rest of the file is still being read
        assert [r["offset"] for r in first["rows"]] == [o for o, _, _ in lines[:50]]
        assert indexed(url) == 10_000
        first, second = rows(url), rows(url, start=50)
        assert first["total"] == 10_000 and first["statuses"] == sorted(statuses)
        assert [(r["offset"], r["line"]) for r in first["rows"] + second["rows"]] == [(o, n) for o, n, _ in lines[:100]]
        assert [r["task_id"] for r in first["rows"]] == [record["task"]["id"] for _, _, record in lines[:50]]
        for status, count in statuses.items():
            filtered = every_row(url, status=status)
            assert len(filtered) == count and {r["status"] for r in filtered} == {status}
        by_status = sorted(lines, key=lambda entry: entry[2]["score"]["status"], reverse=True)  # stable, as the view
        page = rows(url, sort="status", descending="true", start=4990, limit=20)
        assert [r["offset"] for r in page["rows"]] == [o for o, _, _ in by_status[4990:5010]]
        wanted = [(o, r) for o, _, r in lines if "/77" in r["task"]["id"] and r["score"]["status"] == "no_answer"]
        found = every_row(url, text="/77", status="no_answer", sort="task_id")
        assert [r["offset"] for r in found] == [o for o, _ in sorted(wanted, key=lambda e: e[1]["task"]["id"])]
        assert get(f"{url}/api/runs/0/files/{TRAJECTORIES}/rows", params={"sort": "messages"}).status_code == 400
        too_many = get(f"{url}/api/runs/0/files/{TRAJECTORIES}/rows", params={"limit": MAX_PAGE_ROWS + 1})
        assert too_many.status_code == 422


def test_a_training_run_shows_its_curves_and_its_samples_by_step(runs):
    metrics = [json.loads(line) for line in (runs.train / "metrics.jsonl").read_text().splitlines()]
    samples = lines_of(runs.train / "samples.jsonl")
    with viewing(runs.train, runs.oracle) as url:
        described = get(f"{url}/api/runs").json()
        assert described[0]["settings"]["config.yaml"]["steps"] == 3 and described[0]["metrics"]
        assert described[1]["settings"]["summary.json"]["accuracy"] == 1.0 and not described[1]["metrics"]
        curves = get(f"{url}/api/metrics", params={"keys": "reward/mean,eval/accuracy"}).json()
        assert {"reward/mean", "eval/accuracy", "loss", "lr"} <= set(curves["keys"])
        [train] = curves["runs"]  # the evaluation has no metrics.jsonl
        for key in ("reward/mean", "eval/accuracy"):
            assert train["series"][key] == [[m["step"], m[key]] for m in metrics if key in m]
        shown = every_row(url, name="samples.jsonl", sort="step", descending="true")
        assert len(shown) == len(samples)
        expected = sorted(samples, key=lambda entry: entry[2]["step"], reverse=True)
        assert [(r["offset"], r["step"]) for r in shown] == [(o, record["step"]) for o, _, record in expected]
        assert [r["tokens"] for r in shown] == [sum(len(t["completion_ids"]) for t in e[2]["turns"]) for e in expected]


def test_a_record_is_read_only_from_a_line_start_of_the_index(runs):
    lines = lines_of(runs.oracle / TRAJECTORIES)
    with viewing(runs.oracle) as url:
        base = f"{url}/api/runs/0/files/{TRAJECTORIES}/records"
        for offset, number, record in lines[:3]:
            got = get(f"{base}/{offset}").json()
            assert got["row"]["line"] == number and got["trajectory"]["messages"] == record["messages"]
            assert got["turns"] == [
                {
                    "prompt_tokens": 0,
                    "completion_tokens": 0,
                    "mean_logprob": None,
                    "reward": 1.0,
                    "finish_reason": "stop",
                }
            ]
        for offset in (1, lines[1][0] - 1, lines[-1][0] + 1, 10**12, -1):
            refused = get(f"{base}/{offset}")
            assert refused.status_code == 404 and "starts at byte" in refused.json()["detail"]


def test_clients_name_runs_files_and_screenshots_by_number_never_by_path(runs, tmp_path):
    with viewing(runs.web) as url:
        for path in (
            f"/api/runs/1/files/{TRAJECTORIES}/rows",
            f"/api/runs/-1/files/{TRAJECTORIES}/rows",
            "/api/runs/0/files/eval.json/rows",
            "/api/runs/0/files/samples.jsonl/rows",  # a trajectory file's name, but not in this run
            "/api/runs/0/files/..%2Feval.json/rows",
            "/api/runs/0/files/%2E%2E%2F%2E%2E%2Fetc%2Fpasswd/records/0",
            "/api/runs/0/files/../../etc/passwd/rows",
            f"/api/runs/0/files/{TRAJECTORIES}/records/0/screenshots/99",
        ):
            assert get(url + path).status_code == 404, path
        record = get(f"{url}/api/runs/0/files/{TRAJECTORIES}/records/0").json()
        saved = sorted(runs.shots.iterdir())
        assert len(record["screenshots"]) == len(saved) > 1  # the recorded folder, outside the run folder
        assert all(shot["served"] for shot in record["screenshots"])
        for number, shot in enumerate(record["screenshots"]):
            image = get(f"{url}/api/runs/0/files/{TRAJECTORIES}/records/0/screenshots/{number}")
            assert image.headers["content-type"] == "image/png" and image.content == Path(shot["path"]).read_bytes()

    # the same run, its page views rewritten to name files outside both folders (as a tool's output can)
    outside = tmp_path / "elsewhere.png"
    shutil.copy(saved[0], outside)
    copy = tmp_path / "copy"
    shutil.copytree(runs.web, copy)
    (copy / "link.png").symlink_to(outside)
    names = iter([str(outside), str(copy / "link.png"), f"{copy}/../elsewhere.png"])
    [record] = [json.loads(line) for line in (copy / TRAJECTORIES).read_text().splitlines()]
    for message in record["messages"]:
        message["content"] = re.sub(
            r"(?m)^Screenshot: .*$", lambda m: f"Screenshot: {next(names, m[0][12:])}", message["content"]
        )
    (copy / TRAJECTORIES).write_text(json.dumps(record) + "\n")
    with viewing(copy) as url:
        record = get(f"{url}/api/runs/0/files/{TRAJECTORIES}/records/0").json()
        assert [shot["served"] for shot in record["screenshots"]][:3] == [False, False, False]
        for number in range(3):
            refused = get(f"{url}/api/runs/0/files/{TRAJECTORIES}/records/0/screenshots/{number}")
            assert refused.status_code == 404 and "inside the run folder" in refused.json()["detail"]

    # a record that names a folder of everything as its screenshot folder shows only what a web
    # environment would have written there: ENV-TASK-N.png, right inside it, and a PNG
    (tmp_path / "sub").mkdir()
    real, fake = saved[0].read_bytes(), b"not an image"
    planted = {"web-t-1.png": real, "holiday.png": real, "sub/web-t-2.png": real, "web-t-3.png": fake}
    for name, data in planted.items():
        (tmp_path / name).write_bytes(data)
    names = iter(str(tmp_path / name) for name in planted)
    [record] = [json.loads(line) for line in (runs.web / TRAJECTORIES).read_text().splitlines()]
    for message in record["messages"]:
        message["content"] = re.sub(
            r"(?m)^Screenshot: .*$", lambda m: f"Screenshot: {next(names, m[0][12:])}", message["content"]
        )
    (copy / TRAJECTORIES).write_text(json.dumps(record) + "\n")
    recorded = json.loads((copy / "eval.json").read_text())
    (copy / "eval.json").write_text(json.dumps({**recorded, "env_args": {"screenshots": str(tmp_path)}}))
    with viewing(copy) as url:
        record = get(f"{url}/api/runs/0/files/{TRAJECTORIES}/records/0").json()
        assert [shot["served"] for shot in record["screenshots"]][:4] == [True, False, False, False]


def test_a_file_that_grows_is_read_on_and_one_rewritten_is_read_again(runs, tmp_path):
    lines = (runs.oracle / TRAJECTORIES).read_bytes().splitlines(keepends=True)
    run = tmp_path / "growing"
    run.mkdir()
    path = run / TRAJECTORIES
    path.write_bytes(b"".join(lines[:5]) + lines[5][:40])  # a writer half way through line 6
    with viewing(run) as url:
        assert [r["line"] for r in every_row(url)] == [1, 2, 3, 4, 5]
        with path.open("ab") as f:  # the rest of line 6, a blank line, a broken one, six more
            f.write(lines[5][40:] + b"\n" + b"{not json\n" + b"".join(lines[6:12]))
        shown = every_row(url)
        assert [(r["offset"], r["line"]) for r in shown] == [(line.offset, line.number) for line in read_lines(path)]
        assert [r["line"] for r in shown[4:8]] == [5, 6, 8, 9] and len(shown) == 13
        broken = shown[6]
        assert broken["status"] == "unreadable" and broken["problem"].startswith("not JSON")
        opened = get(f"{url}/api/runs/0/files/{TRAJECTORIES}/records/{broken['offset']}")
        assert opened.status_code == 422 and "line 8 is not JSON" in opened.json()["detail"]
        path.write_bytes(b"".join(lines[12:15]))  # rewritten shorter, as a resumed training does
        shown = every_row(url)
        assert [r["task_id"] for r in shown] == [json.loads(line)["task"]["id"] for line in lines[12:15]]
        assert [r["line"] for r in shown] == [1, 2, 3]


def test_a_rescored_run_shows_the_old_and_the_new_verdict(runs):
    verdicts = {v["offset"]: v for v in map(json.loads, (runs.hostile / "rescore.jsonl").read_text().splitlines())}
    summary = json.loads((runs.hostile / "rescore.json").read_text())
    assert summary["changed"] > 0
    with viewing(runs.hostile) as url:
        shown = every_row(url)
        assert shown and all(r["offset"] in verdicts for r in shown)
        for row in shown:
            verdict = verdicts[row["offset"]]
            assert (row["rescore"]["old_status"], row["rescore"]["new_status"]) == (
                verdict["old"]["status"],
                verdict["new"]["status"],
            )
        assert len(every_row(url, changed="true")) == summary["changed"]
        offset = shown[0]["offset"]
        record = get(f"{url}/api/runs/0/files/{TRAJECTORIES}/records/{offset}").json()
        assert (
            record["rescore"]["old"] == verdicts[offset]["old"] and record["rescore"]["new"] == verdicts[offset]["new"]
        )


def test_pages_of_other_sites_are_refused_and_the_page_runs_only_its_own_script(runs):
    with viewing(runs.oracle) as url:
        for headers in (
            {"origin": "http://localhost:9999"},
            {"origin": "null"},
            {"host": "attacker.example:8300"},  # DNS rebinding
            {"sec-fetch-site": "cross-site"},  # an <img> or <script> of another site's page
        ):
            for path in ("/", "/api/runs", f"/api/runs/0/files/{TRAJECTORIES}/records/0"):
                refused = httpx.get(url + path, headers={**headers, **AUTHORIZED})
                assert refused.status_code == 403 and refused.json()["error"]["type"].startswith("forbidden"), path
        page = httpx.get(url + "/", headers={"sec-fetch-site": "none"})  # the page's files hold no data: public
        policy = page.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy and "unsafe" not in policy
        assert page.headers["x-content-type-options"] == "nosniff"
        assert re.findall(r"<script[^>]*>", page.text) == ['<script src="/view.js" defer>']
        assert get(url + "/api/runs").headers["x-content-type-options"] == "nosniff"
        assert httpx.post(url + "/api/runs", headers=AUTHORIZED).status_code == 405


def test_ludus_view_says_what_is_wrong_with_a_folder(tmp_path, capsys):
    assert main(["view", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert "holds no trajectories" in capsys.readouterr().err
    (tmp_path / "token").write_text("\n")
    assert main(["view", str(tmp_path / "empty"), "--token-file", str(tmp_path / "token")]) == 2
    assert "is empty" in capsys.readouterr().err


# ---- the page in a real Chromium -------------------------------------------------------------------
def test_the_page_in_a_real_chromium(runs):
    from playwright.sync_api import sync_playwright

    from ludus.envs.web.browser import find_chromium, launch_args

    big = lines_of(runs.big / TRAJECTORIES)
    oracle = lines_of(runs.oracle / TRAJECTORIES)
    hostile = lines_of(runs.hostile / TRAJECTORIES)
    no_answers = sum(record["score"]["status"] == "no_answer" for _, _, record in big)
    with (
        script_module(BENCHMARK, "view_first_page_benchmark") as benchmark,
        benchmark.ludus_view(runs.big, runs.oracle, runs.hostile, runs.web, runs.repo) as (url, token, _),
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(executable_path=find_chromium(), args=launch_args())
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        problems: list[str] = []
        page.on("pageerror", lambda error: problems.append(str(error)))
        page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)

        def shown(selector: str) -> list[str]:
            return page.locator(selector).all_inner_texts()

        def range_says(text: str) -> None:
            # a locator, not wait_for_function: that one polls with eval, which the page's policy refuses
            page.locator("#range", has_text=text).wait_for()

        # the address ludus view printed: the page keeps the token for the tab and takes it out of the address bar
        page.goto(f"{url}/#token={token}")
        range_says("rows 1–50 of 10,000")
        assert page.url == f"{url}/"

        # the first page of 10,000, sorted, filtered, then one trajectory in full
        assert shown("#rows tbody td:nth-child(2)") == [record["task"]["id"] for _, _, record in big[:50]]
        page.click("th[data-sort=status]")
        page.wait_for_selector("th.sorted-asc[data-sort=status]")
        by_status = sorted(big, key=lambda entry: entry[2]["score"]["status"])
        assert shown("#rows tbody td:nth-child(2)") == [record["task"]["id"] for _, _, record in by_status[:50]]
        page.select_option("select[name=status]", "no_answer")
        range_says(f"of {no_answers:,}")
        assert set(shown("#rows tbody td:nth-child(5)")) == {"no_answer"}
        chosen = next(record for _, _, record in big[1000:] if record["score"]["status"] == "no_answer")
        page.fill("input[name=text]", "/" + chosen["task"]["id"].rpartition("/")[2])
        range_says("rows 1–1 of 1")
        page.click("#rows tbody tr")
        page.wait_for_selector(".message.assistant")
        assert shown(".message.assistant pre") == [reply_of(chosen)]
        assert chosen["task"]["prompt"] in shown(".message.user pre")[0]

        # model-written markup is text: it shows, and nothing of it runs
        page.goto(f"{url}/#/table?run=2")
        page.wait_for_selector("#rows tbody tr")
        rescored = shown("#rows tbody td.rescore")
        assert rescored[0].startswith("gold_error → format_error")  # ludus rescore's verdicts, old → new
        page.check("input[name=changed]")
        range_says(f"of {len(hostile)}")
        page.click("#rows tbody tr")
        page.wait_for_selector(".card.rescore")
        assert shown(".message.assistant pre") == [reply_of(hostile[0][2])] and HOSTILE[:20] in reply_of(hostile[0][2])
        assert "cannot be read" in page.inner_text(".card.rescore") and "not a single integer" in page.inner_text(
            ".card.rescore"
        )
        assert page.evaluate("window.pwned") is None
        assert page.evaluate("document.images.length") == 0 and page.evaluate("document.scripts.length") == 1

        # two runs side by side on the tasks both did
        page.goto(f"{url}/#/compare?a=0&b=1")
        page.wait_for_selector("#shared tbody tr")
        assert f"of {len(oracle)} both runs did" in page.inner_text(".pager")
        task = page.inner_text("#shared tbody tr td")
        page.click("#shared tbody tr")
        page.wait_for_selector("#side-b .message.assistant")
        [mine] = [record for _, _, record in big if record["task"]["id"] == task]
        [right] = [record for _, _, record in oracle if record["task"]["id"] == task]
        assert shown("#side-a .message.assistant pre") == [reply_of(mine)]
        assert shown("#side-b .message.assistant pre") == [str(right["task"]["answer"])] == [reply_of(right)]

        # the web environment's screenshots, the repository's diff
        page.goto(f"{url}/#/trajectory?run=3&file={TRAJECTORIES}&offset=0")
        page.wait_for_selector("img.shot")
        assert all(width > 0 for width in benchmark.images_drawn(page))  # fetched with the token: no token in a URL
        assert page.locator("img.shot").count() == len(list(runs.shots.iterdir()))
        page.goto(f"{url}/#/trajectory?run=4&file={TRAJECTORIES}&offset=0")
        page.wait_for_selector(".diff .add")
        diff = lines_of(runs.repo / TRAJECTORIES)[0][2]["info"]["env"]["diff"]
        added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
        assert shown(".card.change .diff .add") == added
        browser.close()
    assert not problems, problems
