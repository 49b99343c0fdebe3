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
from scripted_server import Policies, ScriptedServer

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.dashboard import views
from skillopt_ray.dashboard.launcher import Launcher, form_schema, overrides_from_form
from skillopt_ray.rundir import RunDir

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


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


# ---------------------------------------------------------------- the page in a real browser


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@pytest.fixture
def need_chromium():
    if CHROMIUM is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true but Chromium is not installed (scripts/install.sh installs the chromium package)")
        pytest.skip("Chromium is not installed")
    pytest.importorskip("playwright")


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
            [sys.executable, "-m", "skillopt_ray.dashboard", "--port", str(port), "--outputs", str(out)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        try:
            _wait_http(f"http://127.0.0.1:{port}/api/runs")
            with sync_playwright() as p:
                browser = p.chromium.launch(
                    executable_path=CHROMIUM,
                    args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-sync"],
                )
                page = browser.new_page(viewport={"width": 1400, "height": 1500})
                page.goto(f"http://127.0.0.1:{port}/")
                page.click("#tab-launch")
                page.wait_for_selector("#launch-form select[name=experiment]")
                page.select_option("select[name=experiment]", "searchqa")
                page.select_option("select[name=llm]", "compatible")
                page.fill("input[name=base_url]", srv.base_url)
                page.select_option("select[name=smoke]", "tiny")
                page.fill("input[name=seed]", "7")
                page.fill(
                    "input[name=extra]",
                    f"env.data_dir={tmp_path / 'qa'} env.options.split_source=folders tracking=none output_dir={out}",
                )
                page.click("#check")
                expect(page.locator("#command")).to_contain_text("python -m skillopt_ray +experiment=searchqa")
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
        run_dir = Path(first.run_dir)
        deadline = time.monotonic() + 120
        while not (run_dir / "steps").is_dir() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert (run_dir / "steps").is_dir(), "\n".join(first.log)
        launcher.stop(first.id)
        first.process.wait(timeout=60)
        assert first.status() == "stopped" and not (run_dir / "summary.json").exists()
        second = launcher.launch(form)
        assert second.run_dir == first.run_dir and second.command == first.command
        second.process.wait(timeout=300)
        assert second.status() == "finished", "\n".join(second.log)
    sessions = json.loads((run_dir / "sessions.json").read_text())
    assert len(sessions) == 2 and (run_dir / "summary.json").is_file()
