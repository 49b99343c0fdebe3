"""The dashboard: the data its page shows (read from run directories made by scripted runs), the launch form's
checks, and a real browser driving the page (headless Chromium) through launch, watch, diff and compare."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import qa_fixture
from dashboard_browser import CHROMIUM, TOKEN, _dashboard_cmd, _wait_http
from scripted_server import Policies, ScriptedServer

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.dashboard import views
from skillopt_ray.dashboard.launcher import Launcher, form_schema, overrides_from_form
from skillopt_ray.runs.rundir import RunDir  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def _cli(url: str, out: Path, data: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "skillopt_ray",
        "+experiment=searchqa",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={out}",
        f"env.data_dir={data}",
        "env.options.split_source=folders",
        "tracking=none",
        "debug.progress=off",
        *extra,
    ]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """Two finished SearchQA runs that differ in their learning rate, made by the CLI against the scripted server."""
    root = tmp_path_factory.mktemp("dash")
    answers = qa_fixture(root / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        for lr in (3, 5):
            done = _cli(srv.base_url, root / "out", root / "qa", f"optimizer.learning_rate={lr}")
            assert done.returncode == 0, done.stderr[-2000:]
    return root


def test_runs_table_reads_scores_costs_and_swept_values_from_the_run_directories(two_runs):
    out = two_runs / "out"
    paths = views.find_runs(out)
    assert len(paths) == 2
    rows = views.compare_rows(out, paths)
    for row, path in zip(rows, paths):
        summary = json.loads((path / "summary.json").read_text())
        ledger = json.loads((path / "ledger.json").read_text())["totals"]
        assert row["status"] == "finished" and row["experiment"] == "searchqa"
        assert row["best_selection"] == summary["selection"]["best"]
        assert (row["test_initial"], row["test_best"], row["test_final"]) == tuple(
            summary["test"][k]["hard"] for k in ("initial", "best", "final")
        )
        assert row["tokens"] == ledger["prompt_tokens"] + ledger["completion_tokens"] > 0
    # only the key that differs between the runs is shown as swept (the output folder and seed are not)
    swept = sorted(r["swept"]["optimizer.learning_rate"] for r in rows)
    assert swept == [3, 5] and all(list(r["swept"]) == ["optimizer.learning_rate"] for r in rows)


def _copy_run(src: Path, dst: Path, **config_changes) -> Path:
    """A copy of a finished run whose config.yaml has some top-level keys changed."""
    import yaml

    shutil.copytree(src, dst)
    cfg = yaml.safe_load((dst / "config.yaml").read_text())
    cfg.update(config_changes)
    (dst / "config.yaml").write_text(yaml.safe_dump(cfg))
    return dst


def test_swept_values_are_compared_within_a_benchmark_and_sweep_trials_are_marked(two_runs, tmp_path):
    a, b = views.find_runs(two_runs / "out")
    cfg = RunDir(a).read_config()
    other = _copy_run(a, tmp_path / "other", experiment="alfworld", env={**cfg["env"], "name": "alfworld"}, seed=9)
    tags = {**cfg["tracking"], "tags": {"sweep": "lr-sweep", "sweep.trial": "t00001"}}
    trial = _copy_run(b, tmp_path / "trial", tracking=tags)
    rows = views.compare_rows(tmp_path, [a, b, other, trial])
    # a and b are one group (they differ in the learning rate only); the other benchmark's run is alone, and so
    # is the sweep's trial: none of them lists the keys that differ only across groups
    assert [list(r["swept"]) for r in rows] == [["optimizer.learning_rate"], ["optimizer.learning_rate"], [], []]
    assert (rows[3]["sweep"], rows[3]["trial"]) == ("lr-sweep", "t00001") and rows[0]["sweep"] == ""
    # a key an older run's config lacks is not a swept value
    assert views.swept_keys([{"a": 1, "new": 2}, {"a": 1}, {"a": 3, "new": 2}]) == ["a"]


def test_a_stopped_run_is_not_shown_as_running_while_its_progress_record_is_fresh(two_runs, tmp_path):
    run = _copy_run(views.find_runs(two_runs / "out")[0], tmp_path / "run")
    (run / "summary.json").unlink()
    rd = RunDir(run)
    rd.write_progress({"phase": "train", "stage": "reflect", "written_at": time.time()})
    sessions = rd.read_sessions()
    sessions[-1]["status"] = "running"
    rd.write_sessions(sessions)
    assert views.status_of(rd) == "running"
    assert views.status_of(rd, stopped=True) == "stopped"  # the dashboard stopped it and its process ended
    sessions[-1]["status"] = "interrupted"  # the command ended (Ctrl-C) and said so
    rd.write_sessions(sessions)
    assert views.status_of(rd) == "stopped"


def test_a_step_diff_is_the_diff_without_its_markdown_fence(two_runs):
    path = views.find_runs(two_runs / "out")[0]
    raw = (path / "steps/e01_s001/diff.md").read_text()
    shown = views.step_diff(path, "e01_s001")
    assert raw.startswith("```") and not shown.startswith("```") and "```" not in shown.splitlines()[-1]
    assert shown.startswith("--- current") and "+- RULE-" in shown.replace("+ - ", "+- ")


def test_form_placeholders_are_the_chosen_presets_values():
    launcher = Launcher(REPO)
    tiny = launcher.schema({"experiment": "searchqa", "smoke": "tiny"})
    paper = launcher.schema({"experiment": "searchqa"})
    assert (tiny["epochs"]["placeholder"], tiny["batch_size"]["placeholder"]) == (2, 1)
    assert tiny["lr_schedule"]["placeholder"] == "constant" and tiny["min_learning_rate"]["placeholder"] == 2
    assert (paper["epochs"]["placeholder"], paper["lr_schedule"]["placeholder"]) == (4, "cosine")
    with pytest.raises(UsageError):
        launcher.schema({"experiment": "../llm/openai"})


def test_watch_data_is_what_the_run_recorded(two_runs):
    out = two_runs / "out"
    path = views.find_runs(out)[0]
    detail = views.run_detail(out, path)
    history = [json.loads(line) for line in (path / "history.jsonl").read_text().splitlines()]
    gate = json.loads((path / "steps/e01_s001/gate.json").read_text())
    first = detail["steps"][0]
    assert first["id"] == "e01_s001" and first["action"] == history[0]["action"] == gate["action"]
    assert first["reason"] == gate["reason"] and first["flipped"] == gate["flipped"] and first["has_diff"]
    assert [p["current"] for p in detail["curve"][1:]] == [h["current_score"] for h in history]
    assert detail["curve"][0]["current"] == json.loads((path / "state.json").read_text())["initial_score"]
    version, text = views.current_skill(RunDir(path))
    assert detail["skill"] == {"version": version, "text": text} and "RULE-" in text
    slow = json.loads((path / "epochs/e02/slow_result.json").read_text())
    e2 = [e for e in detail["epochs"] if e["epoch"] == 2][0]
    assert e2["slow_update"] == slow["slow_update_content"] and e2["slow_action"] == slow["action"]
    assert e2["meta_skill"] and detail["costs"]["totals"]["calls"] > 0
    assert "+- RULE-" in views.step_diff(path, "e01_s001").replace("+ - ", "+- ")
    with pytest.raises(ValueError):
        views.step_diff(path, "../../etc")
    # a run's final progress record says it is done, so a finished run is never shown as running
    assert json.loads((path / "progress.json").read_text())["phase"] == "done"


def test_skill_diff_of_two_runs(two_runs, tmp_path):
    a, b = views.find_runs(two_runs / "out")
    assert views.skill_diff(a, a) == ""
    other = tmp_path / "other"
    shutil.copytree(b, other)
    (other / "best_skill.md").write_text((b / "best_skill.md").read_text() + "- a rule only run b has\n")
    diff = views.skill_diff(a, other)
    assert "+- a rule only run b has" in diff


def test_form_overrides_only_the_filled_fields():
    schema = form_schema()
    assert "searchqa" in schema["experiment"]["choices"] and "embedded" in schema["llm"]["choices"]
    form = {
        "experiment": "searchqa",
        "llm": "",
        "learning_rate": "6",
        "slow_update": "false",
        "extra": "seed=3 env.limit_test=2",
    }
    assert overrides_from_form(form) == [
        "+experiment=searchqa",
        "optimizer.learning_rate=6",
        "optimizer.slow_update=false",
        "seed=3",
        "env.limit_test=2",
    ]


@pytest.mark.parametrize(
    "form, needle",
    [
        ({"experiment": "searchqa", "learning_rate": "0"}, "optimizer.learning_rate"),
        ({"experiment": "searchqa", "llm": "no-such-preset"}, "no-such-preset"),
        ({"experiment": "searchqa", "learning_rate": "four"}, "whole number"),
    ],
)
def test_bad_form_input_is_the_clis_one_line_error_and_starts_nothing(tmp_path, form, needle):
    launcher = Launcher(REPO)
    form = {**form, "extra": f"output_dir={tmp_path / 'out'}"}
    with pytest.raises(UsageError) as e:
        launcher.launch(form)
    assert needle in str(e.value) and "\n" not in str(e.value).strip()
    assert launcher.launches == {} and not (tmp_path / "out").exists()


def _opened_run_dir(launch, timeout: float = 180.0) -> Path:
    """The run directory the launched command says it opened (its 'run directory:' line)."""
    deadline = time.monotonic() + timeout
    while not any(line.startswith("run directory: ") for line in list(launch.log)):
        assert time.monotonic() < deadline and launch.process.poll() is None, "\n".join(launch.log)
        time.sleep(0.3)
    return Path(launch.run_dir)


# ---------------------------------------------------------------- the page in a real browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_the_page_launches_watches_diffs_and_compares_in_a_real_browser(two_runs, tmp_path, need_chromium):
    from playwright.sync_api import expect, sync_playwright

    out = tmp_path / "out"
    shutil.copytree(two_runs / "out", out)  # two finished runs to compare with the one launched from the page
    answers = qa_fixture(tmp_path / "qa")
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "OPENAI_API_KEY": "sk-secret-1"}
    with ScriptedServer(Policies(target="rule_gated", answers=answers), latency_s=2.5) as srv:
        server = subprocess.Popen(
            [*_dashboard_cmd(port, out), "--allow-path", str(tmp_path)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            _wait_http(f"http://127.0.0.1:{port}/api/runs", token=TOKEN)
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=CHROMIUM,
                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-sync"],
                )
                page = browser.new_page(viewport={"width": 1400, "height": 1500})
                page.goto(f"http://127.0.0.1:{port}/?token={TOKEN}")
                assert "token" not in page.url  # the tab's sessionStorage keeps it; the address bar and history do not
                page.click("#tab-launch")
                page.wait_for_selector("#launch-form select[name=experiment]")
                page.select_option("select[name=experiment]", "searchqa")
                page.select_option("select[name=llm]", "compatible")
                page.fill("input[name=base_url]", srv.base_url)
                page.select_option("select[name=smoke]", "tiny")
                # the empty fields show what +smoke=tiny makes of them, not the paper's values
                expect(page.locator("input[name=epochs]")).to_have_attribute(
                    "placeholder", "2", timeout=20_000
                )  # the schema composes the presets server-side: slow on a loaded machine
                expect(page.locator("input[name=batch_size]")).to_have_attribute("placeholder", "1")
                expect(page.locator("select[name=lr_schedule] option").first).to_have_text("(preset: constant)")
                page.fill("input[name=seed]", "7")
                page.fill(
                    "input[name=extra]",
                    f"env.data_dir={tmp_path / 'qa'} env.options.split_source=folders tracking=none output_dir={out}",
                )
                page.click("#check")
                expect(page.locator("#command")).to_contain_text("python -m skillopt_ray +experiment=searchqa")
                expect(page.locator("#keys")).to_contain_text("COMPATIBLE_API_KEY")  # which key goes where
                page.click("#launch")
                expect(page.locator("#launches tbody")).to_contain_text("running", timeout=20_000)
                page.screenshot(path=str(tmp_path / "launch.png"), full_page=True)

                page.click("#tab-watch")
                page.wait_for_function(
                    "() => [...document.querySelectorAll('#run-select option')].some(o => o.value.includes('seed7'))",
                    timeout=60_000,
                )
                run_id = page.eval_on_selector_all(
                    "#run-select option", "os => os.map(o => o.value).find(v => v.includes('seed7'))"
                )
                page.select_option("#run-select", run_id)
                # the stage strip moves and the first gate decision appears, all without reloading the page
                page.wait_for_selector(".stage.current", timeout=120_000)
                seen = {page.get_attribute(".stage.current", "data-stage")}
                deadline = time.monotonic() + 240
                decided = page.locator("#steps tbody tr[data-action^='accept'], #steps tbody tr[data-action^='reject']")
                while time.monotonic() < deadline and decided.count() == 0:
                    cur = page.query_selector(".stage.current")
                    if cur:
                        seen.add(cur.get_attribute("data-stage"))
                    page.wait_for_timeout(300)
                assert decided.count() >= 1, "no gate decision showed up"
                assert len(seen) >= 2, f"the stage strip did not move: {seen}"
                expect(decided.first).to_contain_text("accept")
                decided.first.click()
                expect(page.locator("#diff")).to_contain_text("RULE-")
                expect(page.locator("#run-status")).to_have_text("finished", timeout=240_000)
                page.screenshot(path=str(tmp_path / "watch.png"), full_page=True)
                assert "sk-secret-1" not in page.content()

                page.click("#tab-compare")
                page.wait_for_selector("#runs tbody input[type=checkbox]")
                boxes = page.locator("#runs tbody input[type=checkbox]")
                assert boxes.count() == 3
                boxes.nth(0).check()
                boxes.nth(2).check()
                page.click("#plot-curves")
                page.wait_for_selector("#compare-chart svg path")
                page.click("#diff-skills")
                expect(page.locator("#skill-diff")).to_contain_text(re.compile("no differences|@@"))
                expect(page.locator("#runs tbody")).to_contain_text("optimizer.learning_rate=3")
                page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)
                browser.close()
        finally:
            server.terminate()
            log, _ = server.communicate(timeout=30)
    assert "sk-secret-1" not in log
    assert (tmp_path / "watch.png").stat().st_size > 10_000 and (tmp_path / "compare.png").stat().st_size > 10_000


@pytest.mark.slow
def test_a_run_stopped_from_the_page_resumes_from_the_same_command(tmp_path):
    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers), latency_s=1.0) as srv:
        launcher = Launcher(REPO)
        form = {
            "experiment": "searchqa",
            "llm": "compatible",
            "base_url": srv.base_url,
            "smoke": "tiny",
            "extra": f"env.data_dir={tmp_path / 'qa'} env.options.split_source=folders tracking=none "
            f"output_dir={tmp_path / 'out'}",
        }
        first = launcher.launch(form)
        run_dir = _opened_run_dir(first)
        deadline = time.monotonic() + 120
        while not (run_dir / "steps").is_dir() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (run_dir / "steps").is_dir(), "\n".join(first.log)
        launcher.stop(first.id)
        first.process.wait(timeout=60)
        assert first.status() == "stopped" and not (run_dir / "summary.json").exists()
        second = launcher.resume(first.id)
        assert _opened_run_dir(second) == run_dir and second.command == first.command
        second.process.wait(timeout=300)
        assert second.status() == "finished", "\n".join(second.log)
    sessions = json.loads((run_dir / "sessions.json").read_text())
    assert len(sessions) == 2 and (run_dir / "summary.json").is_file()


@pytest.mark.slow
def test_a_run_stopped_from_the_page_ends_its_mlflow_run_killed_and_says_how_to_resume(tmp_path):
    """Stop interrupts the run as Ctrl-C would: it is shown as stopped at once (not as running until its progress
    record goes stale), its log ends with how to resume instead of a signal dump, and its MLflow run is KILLED."""
    from mlflow.tracking import MlflowClient

    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers), latency_s=1.0) as srv:
        launcher = Launcher(REPO)
        form = {
            "experiment": "searchqa",
            "llm": "compatible",
            "base_url": srv.base_url,
            "smoke": "tiny",
            "extra": f"env.data_dir={tmp_path / 'qa'} env.options.split_source=folders output_dir={tmp_path / 'out'}",
        }
        first = launcher.launch(form)
        run_dir = _opened_run_dir(first)
        deadline = time.monotonic() + 180
        while not ((run_dir / "steps").is_dir() and (run_dir / "mlflow_run.json").is_file()):
            assert time.monotonic() < deadline, "\n".join(first.log)
            time.sleep(0.5)
        launcher.stop(first.id)
        t0 = time.monotonic()
        first.process.wait(timeout=120)
        stop_s = time.monotonic() - t0
        deadline = time.monotonic() + 60
        while not (first.log and first.log[-1].startswith("stopped from the page")):
            assert time.monotonic() < deadline, "\n".join(first.log)
            time.sleep(0.2)
    assert first.status() == "stopped" and str(run_dir) in launcher.stopped_run_dirs()
    row = views.run_row(run_dir.parent, run_dir, stopped=True)
    assert row.status == "stopped"
    text = "\n".join(first.log)
    assert "Resume" in first.log[-1] and first.command in first.log[-1]
    assert "SIGTERM" not in text and "Traceback" not in text, (f"stopped in {stop_s:.1f} s", text[-3000:])
    record = json.loads((run_dir / "mlflow_run.json").read_text())
    status = MlflowClient(tracking_uri=record["tracking_uri"]).get_run(record["run_id"]).info.status
    assert status == "KILLED", (status, stop_s)


EVIL_PAGE = """<!doctype html><html><body>
<iframe name="sink" id="sink"></iframe>
<form id="f" method="POST" action="{base}/api/launch" enctype="text/plain" target="sink">
  <input name='{{"experiment":"searchqa","smoke":"tiny","extra":"output_dir={out} x' value='y"}}'>
</form>
<script>
const body = JSON.stringify({{experiment: "searchqa", smoke: "tiny", extra: "output_dir={out}"}});
const results = [];
const tries = [
  fetch("{base}/api/launch", {{method: "POST", mode: "no-cors", credentials: "include",
    headers: {{"Content-Type": "text/plain"}}, body}}),
  fetch("{base}/api/launch", {{method: "POST", credentials: "include",
    headers: {{"Content-Type": "application/json"}}, body}}),
  fetch("{base}/api/check", {{method: "POST", credentials: "include",
    headers: {{"Content-Type": "application/json"}}, body}}),
  fetch("{base}/api/launches", {{credentials: "include"}}).then((r) => r.text()),
];
Promise.allSettled(tries).then((all) => {{
  document.getElementById("f").submit();
  document.title = "done " + all.map((r) => r.status + ":" + (r.value && r.value.type || r.value || "")).join(" | ");
}});
</script></body></html>"""


@pytest.mark.slow
def test_a_page_from_another_origin_cannot_launch_or_read_in_a_real_browser(tmp_path, need_chromium):
    """The user has the dashboard open (its token in the tab's sessionStorage, no cookie); a page on another port of
    the same host posts to the launch API by fetch and by a text/plain form: no run, and the browser holds no cookie
    of the dashboard's that the other port's server would receive."""
    from playwright.sync_api import sync_playwright

    out = tmp_path / "out"
    out.mkdir()
    port, evil_port = _free_port(), _free_port()
    evil = tmp_path / "evil"
    evil.mkdir()
    base = f"http://127.0.0.1:{port}"
    (evil / "index.html").write_text(EVIL_PAGE.format(base=base, out=out))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    procs = [
        subprocess.Popen(_dashboard_cmd(port, out), cwd=tmp_path, env=env, start_new_session=True),
        subprocess.Popen(
            [sys.executable, "-m", "http.server", str(evil_port), "--bind", "127.0.0.1", "--directory", str(evil)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        ),
    ]
    try:
        _wait_http(f"{base}/api/runs", token=TOKEN)
        _wait_http(f"http://127.0.0.1:{evil_port}/index.html")
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            context = browser.new_context()
            page = context.new_page()
            page.goto(f"{base}/?token={TOKEN}")  # the user's own tab
            page.wait_for_function("sessionStorage.getItem('skillopt-dashboard-token') !== null")
            assert context.cookies() == []
            page.goto(f"http://127.0.0.1:{evil_port}/index.html")
            page.wait_for_function("document.title.startsWith('done')", timeout=30_000)
            title = page.title()
            page.wait_for_timeout(2000)  # the form's POST lands in the iframe
            browser.close()
        # the JSON fetches and the read were blocked (CORS preflight or response refused); the opaque ones changed nothing
        assert title.count("rejected") >= 3, title
        req = urllib.request.Request(f"{base}/api/launches", headers={"Authorization": f"Bearer {TOKEN}"})
        launches = json.loads(urllib.request.urlopen(req, timeout=10).read())["launches"]
        assert launches == [] and not any(out.iterdir())
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)


@pytest.mark.slow
def test_the_launch_forms_placeholders_show_the_latest_presets_whatever_order_the_answers_come_in(
    tmp_path, need_chromium
):
    """Each preset change asks the server for the composed values again; answers to earlier asks that come back
    after the latest one (held back here by the browser) must not overwrite it (seen in CI: epochs showed the
    paper's 4 under +smoke=tiny's 2)."""
    from playwright.sync_api import expect, sync_playwright

    out = tmp_path / "out"
    out.mkdir()
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    server = subprocess.Popen(_dashboard_cmd(port, out), cwd=tmp_path, env=env, start_new_session=True)
    try:
        _wait_http(f"{base}/api/runs", token=TOKEN)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            held = []  # asks without the smoke preset, answered only once the smoke one has been shown

            def hold_stale(route):
                if "smoke=tiny" in route.request.url:
                    route.continue_()
                else:
                    held.append(route)

            page.goto(f"{base}/?token={TOKEN}")
            page.click("#tab-launch")
            page.wait_for_selector("#launch-form select[name=experiment]")
            epochs = page.locator("input[name=epochs]")
            expect(epochs).not_to_have_attribute("placeholder", "", timeout=30_000)  # the form's first answer
            page.route("**/api/schema?*", hold_stale)
            page.select_option("select[name=experiment]", "searchqa")  # held
            page.select_option("select[name=smoke]", "tiny")  # answered
            expect(epochs).to_have_attribute("placeholder", "2", timeout=30_000)
            assert held, "the earlier ask was not held back"
            for route in held:
                route.continue_()
            page.wait_for_timeout(2000)  # the stale answers arrive
            expect(epochs).to_have_attribute("placeholder", "2")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.slow
def test_stop_and_resume_from_the_page_in_a_real_browser(tmp_path, need_chromium):
    """Stop shows "stopped" within seconds (not "running" until the progress record goes stale), the log ends with
    the resume hint, and Resume runs the same command, which finishes the run."""
    from playwright.sync_api import expect, sync_playwright

    out = tmp_path / "out"
    answers = qa_fixture(tmp_path / "qa")
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    with ScriptedServer(Policies(target="rule_gated", answers=answers), latency_s=1.5) as srv:
        server = subprocess.Popen(
            [*_dashboard_cmd(port, out), "--allow-path", str(tmp_path)], cwd=REPO, env=env, start_new_session=True
        )
        try:
            _wait_http(f"http://127.0.0.1:{port}/api/runs", token=TOKEN)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport={"width": 1400, "height": 1200})
                page.goto(f"http://127.0.0.1:{port}/?token={TOKEN}")
                page.click("#tab-launch")
                page.wait_for_selector("#launch-form select[name=experiment]")
                page.select_option("select[name=experiment]", "searchqa")
                page.select_option("select[name=llm]", "compatible")
                page.fill("input[name=base_url]", srv.base_url)
                page.select_option("select[name=smoke]", "tiny")
                page.fill(
                    "input[name=extra]",
                    f"env.data_dir={tmp_path / 'qa'} env.options.split_source=folders tracking=none output_dir={out}",
                )
                page.click("#launch")
                expect(page.locator("#launch-log")).to_contain_text("rollout", timeout=180_000)
                page.click("#launches button[data-stop]")
                t0 = time.monotonic()
                expect(page.locator("#launches tbody .badge")).to_have_text("stopped", timeout=60_000)
                stop_s = time.monotonic() - t0
                expect(page.locator("#launch-log")).to_contain_text("press Resume")
                page.click("#tab-watch")
                expect(page.locator("#run-status")).to_have_text("stopped", timeout=10_000)
                page.screenshot(path=str(tmp_path / "stopped.png"), full_page=True)
                page.click("#tab-launch")
                page.click("#launches button[data-resume]")
                # the server checks the command again (a Hydra composition) before it starts it: seconds under load
                expect(page.locator("#launches tbody tr")).to_have_count(2, timeout=60_000)
                # the second launch (the same command) runs to the end; it continues the stopped run's directory
                # unless the code changed in between (then, as on the command line, it is a new run)
                second = page.locator("#launches tbody tr").nth(1)
                expect(second.locator(".badge")).to_have_text("finished", timeout=300_000)
                expect(second).to_contain_text("python -m skillopt_ray +experiment=searchqa")
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=60)
    assert stop_s < 45, f"Stop took {stop_s:.0f} s to show"
