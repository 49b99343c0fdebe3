"""The dashboard against what is left behind its token and its output folder: config-group values that are paths,
a run folder whose files carry HTML, URLs from the form that would take a key to another host, run names that are
paths, and requests too large or too deep; and the command starting on IPv6 and right after a Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from dashboard_browser import CHROMIUM, _dashboard_cmd, _wait_http
from dashboard_browser import TOKEN as CMD_TOKEN
from dashboard_served import TOKEN, Served, _free_port

from skillopt_ray.cli.compose import CONF_DIR
from skillopt_ray.dashboard.security import Guard
from skillopt_ray.dashboard.server import Dashboard

SECRET = "sk-the-users-own-key-1234"


def _dash(root: Path, **kw) -> Dashboard:
    (root / "outputs").mkdir(exist_ok=True)
    return Dashboard(root / "outputs", root, guard=Guard.make(TOKEN, "127.0.0.1"), **kw)


def _form(root: Path, **fields: str) -> dict:
    extra = fields.pop("extra", "")
    return {
        "experiment": "searchqa",
        "smoke": "tiny",
        "extra": f"output_dir={root / 'outputs'} {extra}".strip(),
        **fields,
    }


def _evil_llm(folder: Path) -> str:
    """A copy of the openai preset outside conf/ sending the user's key as the model name to a listener; its name
    as a path from conf/llm/."""
    folder.mkdir(parents=True, exist_ok=True)
    text = (
        (CONF_DIR / "llm" / "openai.yaml").read_text().replace("model: gpt-4o-mini", "model: ${oc.env:OPENAI_API_KEY}")
    )
    (folder / "evil_llm.yaml").write_text(
        text.replace("backend: openai", "backend: openai\nbase_url: http://127.0.0.1:9/v1")
    )
    return os.path.relpath(folder / "evil_llm", CONF_DIR / "llm")


def test_config_group_values_are_the_shipped_presets_never_a_path(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    evil_llm = _evil_llm(tmp_path / "evil")
    exp = (CONF_DIR / "experiment" / "searchqa.yaml").read_text()
    (tmp_path / "evil" / "evil_exp.yaml").write_text(exp + "\nrun_name: ${oc.env:OPENAI_API_KEY}\n")
    evil_exp = os.path.relpath(tmp_path / "evil" / "evil_exp", CONF_DIR / "experiment")
    with Served(_dash(tmp_path)) as s:
        for form in (
            _form(tmp_path, extra=f"llm={evil_llm}"),
            {**_form(tmp_path, extra=f"+experiment={evil_exp}"), "experiment": ""},
            _form(tmp_path, extra="tracking=../llm/openai"),
            _form(tmp_path, extra="+llm/target=openai"),
        ):
            r = s.post("/api/check", form)
            assert r.status_code == 400, (form, r.text)
            assert "preset" in r.json()["error"] or "nested config groups" in r.json()["error"], r.text
            assert SECRET not in r.text and "\n" not in r.json()["error"]
        ok = s.post("/api/check", _form(tmp_path, extra="tracking=none"))
        assert ok.status_code == 200, ok.text
        assert not s.dash.launcher.launches


def test_a_run_name_from_the_form_is_a_name_not_a_path(tmp_path):
    (tmp_path / "mydata").mkdir()
    with Served(_dash(tmp_path)) as s:
        for name in ("../../mydata", "a/b", ".."):
            r = s.post("/api/check", _form(tmp_path, extra=f"run_name={name}"))
            assert r.status_code == 400 and "a run name is a name" in r.json()["error"], r.text
        assert s.post("/api/check", _form(tmp_path, extra="run_name=my-run_1.b")).status_code == 200
    assert not any((tmp_path / "mydata").iterdir())


def test_a_url_from_the_form_gets_no_key_meant_for_another_host(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "mlflow-secret")
    form = _form(tmp_path, llm="openai", base_url="http://listener.example:8000/v1")
    tracking = _form(tmp_path, llm="openai", extra="tracking=mlflow tracking.tracking_uri=http://listener.example:5000")
    with Served(_dash(tmp_path)) as s:
        r = s.post("/api/check", form)
        assert r.status_code == 400, r.text
        msg = r.json()["error"]
        assert "OPENAI_API_KEY" in msg and "listener.example" in msg and "--allow-endpoint" in msg
        r = s.post("/api/check", tracking)
        assert r.status_code == 400 and "MLFLOW_TRACKING_TOKEN" in r.json()["error"], r.text
        # the preset's own endpoint: the form says which key goes where
        ok = s.post("/api/check", _form(tmp_path, llm="openai"))
        assert ok.status_code == 200, ok.text
        keys = {(k["setting"], k["key_env"], k["host"], k["set"]) for k in ok.json()["keys"]}
        assert ("llm.target", "OPENAI_API_KEY", "api.openai.com", True) in keys
        assert SECRET not in ok.text
        assert not s.dash.launcher.launches
    with Served(_dash(tmp_path, allow_endpoints=("listener.example:8000",))) as s:
        ok = s.post("/api/check", form)
        assert ok.status_code == 200, ok.text
        assert ("llm.target", "listener.example") in {(k["setting"], k["host"]) for k in ok.json()["keys"]}
        # the MLflow token goes only to the server the environment names, never to one allowed for model keys
        assert s.post("/api/check", tracking).status_code == 400
        other_port = _form(tmp_path, llm="openai", base_url="http://listener.example:8001/v1")
        assert s.post("/api/check", other_port).status_code == 400  # an allowed host:port opens no other port


def test_a_body_over_the_limit_answers_413_at_once(tmp_path):
    with Served(_dash(tmp_path)) as s:
        started = time.monotonic()
        big = httpx.post(
            s.base + "/api/check", json=_form(tmp_path, extra="seed=1 " * 1_500_000), headers=s.auth(), timeout=30
        )
        assert big.status_code == 413 and "KiB" in big.json()["error"]
        assert time.monotonic() - started < 10
        # under the byte limit, thousands of overrides would keep Hydra busy for seconds: refused before it parses
        many = s.post("/api/check", _form(tmp_path, extra="seed=1 " * 8000))
        assert many.status_code == 400 and "at most" in many.json()["error"]
        assert time.monotonic() - started < 15
        assert s.post("/api/check", _form(tmp_path)).status_code == 200  # still serving


def test_long_ids_and_deep_json_answer_4xx_not_500(tmp_path):
    with Served(_dash(tmp_path)) as s:
        deep = "[" * 30_000 + "]" * 30_000
        r = httpx.post(s.base + "/api/check", content=deep, headers=s.auth(**{"Content-Type": "application/json"}))
        assert r.status_code == 400 and "JSON" in r.json()["error"], r.text
        long_id = "a" * 5000
        for path in (
            f"/api/run?id={long_id}",
            f"/api/diff?id={long_id}&step=e1s1",
            f"/api/compare?ids={long_id}",
            f"/api/skill_diff?a={long_id}&b={long_id}",
            f"/api/run?id={'b/' * 2500}",
        ):
            r = httpx.get(s.base + path, headers=s.auth())
            assert r.status_code == 404, (path[:40], r.status_code, r.text[:200])
        assert s.post("/api/check", _form(tmp_path)).status_code == 200  # still serving


def _start(port: int, outputs: Path, *more: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*_dashboard_cmd(port, outputs), *more],
        cwd=outputs,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _first_line(proc: subprocess.Popen) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        return proc.stderr.read() if proc.stderr else ""
    return line


def test_the_command_starts_on_ipv6(tmp_path):
    port = _free_port()
    for host in ("::1", "::"):
        proc = _start(port, tmp_path, "--host", host)
        try:
            line = _first_line(proc)
            assert f"http://[::1]:{port}/?token={CMD_TOKEN}" in line, line
            _wait_http(f"http://[::1]:{port}/api/runs", token=CMD_TOKEN)
        finally:
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=30)


def test_the_command_starts_again_right_after_ctrl_c(tmp_path):
    port = _free_port()
    # a browser's kept-alive connection is closed by the server at Ctrl-C: the port sits in TIME_WAIT for a minute
    proc = _start(port, tmp_path)
    try:
        assert "dashboard: http://127.0.0.1" in _first_line(proc)
        with httpx.Client(headers={"Authorization": f"Bearer {CMD_TOKEN}"}) as client:
            for _ in range(3):
                assert client.get(f"http://127.0.0.1:{port}/api/runs").status_code == 200
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=30)
        # Ctrl-C is how the dashboard stops: a clean end, not a KeyboardInterrupt traceback
        assert proc.returncode == 0 and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
    again = _start(port, tmp_path)
    try:
        line = _first_line(again)
        assert "dashboard: http://127.0.0.1" in line, line
    finally:
        again.send_signal(signal.SIGINT)
        again.communicate(timeout=30)
    # a port another server still listens on is refused, as before
    (tmp_path / "x").mkdir()
    with Served(_dash(tmp_path / "x")) as s:
        busy = _start(s.port, tmp_path)
        assert busy.wait(timeout=60) == 2 and "already in use" in (busy.stderr.read() if busy.stderr else "")


def _payload_run(outputs: Path) -> Path:
    """A run folder someone placed in the output folder, its ledger and budget carrying HTML that runs script."""
    run = outputs / "runs" / "planted"
    run.mkdir(parents=True)
    img = '<img src=x onerror="window.__pwned=(window.__pwned||0)+1">'
    (run / "config.yaml").write_text(
        "experiment: searchqa\nseed: 1\nllm:\n  budget:\n"
        + "".join(f"    {k}: '{img}'\n" for k in ("max_tokens", "max_calls", "max_cost_usd"))
    )
    (run / "identity.json").write_text("{}")
    totals = {"calls": img, "prompt_tokens": img, "completion_tokens": 1, "cost_usd": 0.5}
    entries = {img: {"calls": img, "prompt_tokens": img, "completion_tokens": 2, "cost_usd": img}}
    (run / "ledger.json").write_text(json.dumps({"totals": totals, "entries": entries}))
    (run / "state.json").write_text(json.dumps({"global_step": img, "initial_score": 0.5, "current_version": 0}))
    return run


@pytest.mark.slow
def test_html_in_a_run_folder_stays_text_in_a_real_browser(tmp_path, need_chromium):
    """A planted run's ledger and budget are shown as text: no element is made from them and no script runs, and
    the page's own script still runs under a Content-Security-Policy that forbids inline script."""
    from playwright.sync_api import expect, sync_playwright

    out = tmp_path / "out"
    _payload_run(out)
    port = _free_port()
    proc = _start(port, out)
    try:
        _wait_http(f"http://127.0.0.1:{port}/api/runs", token=CMD_TOKEN)
        head = httpx.get(f"http://127.0.0.1:{port}/?token={CMD_TOKEN}")
        csp = head.headers.get("content-security-policy", "")
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            page = browser.new_page()
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(f"http://127.0.0.1:{port}/?token={CMD_TOKEN}")
            expect(page.locator("#costs")).to_contain_text("onerror", timeout=30_000)
            page.wait_for_timeout(2500)  # a poll or two redraws the cards
            assert page.evaluate("window.__pwned") is None
            assert page.locator("main img").count() == 0
            page.click("#tab-compare")
            expect(page.locator("#runs tbody")).to_contain_text("planted")
            page.click("#tab-launch")
            page.wait_for_selector("#launch-form select[name=experiment] option[value=searchqa]", state="attached")
            assert page.evaluate("window.__pwned") is None and not errors, errors
            browser.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


@pytest.mark.parametrize("port", ["99999", "-1", "0"])
def test_a_port_out_of_range_is_one_line(port, capsys):
    """--port 99999 ended in an OverflowError traceback from bind()."""
    from skillopt_ray.dashboard.__main__ import main

    assert main(["--port", port]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --port {port} is not a TCP port; give one from 1 to 65535", err
