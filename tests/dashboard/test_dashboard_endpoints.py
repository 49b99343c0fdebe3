"""Keys go only where their preset sends them (scheme, host and port), the MLflow token only to the tracking server
the environment names, only plain sqlite:/// stores from the page; and the dashboard's smaller holes: a nested list,
1e999, a custom experiment, Check's output folder, `[::1]`, short tokens, the Nights project found at each poll."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from dashboard_served import TOKEN, Served

from skillopt_ray.dashboard import __main__ as dashboard_main
from skillopt_ray.dashboard.keys import allowed_endpoint, endpoint_of, key_routes, tracking_is_home
from skillopt_ray.dashboard.security import Guard
from skillopt_ray.dashboard.server import Dashboard
from skillopt_ray.sleep.proposal import staging

KEY = "sk-compatible-key-0123456789"


def _dash(root: Path, **kw) -> Dashboard:
    (root / "outputs").mkdir(exist_ok=True)
    return Dashboard(root / "outputs", root, guard=Guard.make(TOKEN, "127.0.0.1"), **kw)


def _form(root: Path, extra: str = "", **fields) -> dict:
    out = root / "outputs" / "runs-here"
    return {"experiment": "searchqa", "smoke": "tiny", "extra": f"output_dir={out} {extra}".strip(), **fields}


@pytest.fixture()
def compatible(monkeypatch):
    monkeypatch.setenv("COMPATIBLE_API_KEY", KEY)
    monkeypatch.setenv("COMPATIBLE_BASE_URL", "http://127.0.0.1:8000/v1")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_another_port_of_the_presets_host_gets_no_key(tmp_path, compatible):
    other = _form(tmp_path, llm="compatible", base_url="http://127.0.0.1:28999/v1")
    same = _form(tmp_path, llm="compatible", base_url="HTTP://127.0.0.1:8000/v1")
    with Served(_dash(tmp_path)) as s:
        r = s.post("/api/check", other)
        assert r.status_code == 400 and "COMPATIBLE_API_KEY" in r.json()["error"], r.text
        assert "127.0.0.1:28999" in r.json()["error"] and KEY not in r.text
        assert s.post("/api/check", same).status_code == 200  # the preset's own endpoint, in any letter case
    with Served(_dash(tmp_path, allow_endpoints=("127.0.0.1:28999",))) as s:
        assert s.post("/api/check", other).status_code == 200
        third = _form(tmp_path, llm="compatible", base_url="http://127.0.0.1:28998/v1")
        assert s.post("/api/check", third).status_code == 400


def test_allow_endpoint_names_a_port():
    assert allowed_endpoint("127.0.0.1:8000") == "127.0.0.1:8000"
    assert allowed_endpoint("http://VLLM.lab:8000/v1") == "vllm.lab:8000"
    with pytest.raises(ValueError, match="HOST:PORT"):
        allowed_endpoint("vllm.lab")
    assert endpoint_of("HTTPS://Api.OpenAI.com/v1") == "https://api.openai.com:443"
    assert endpoint_of("http://127.0.0.1/v1") == "http://127.0.0.1:80"
    assert dashboard_main.main(["--allow-endpoint", "vllm.lab"]) == 2


def test_the_mlflow_token_goes_only_to_the_environments_tracking_server(tmp_path, compatible, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "mlflow-secret-token")
    upper = _form(tmp_path, extra="tracking=mlflow tracking.tracking_uri=HTTP://127.0.0.1:28999")
    routes = key_routes({"tracking": {"mlflow": True, "tracking_uri": "HTTP://127.0.0.1:28999"}})
    assert {r.key_env for r in routes} == {"MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_PASSWORD"}  # Check names it
    with Served(_dash(tmp_path, allow_endpoints=("127.0.0.1:28999",))) as s:
        r = s.post("/api/check", upper)
        assert r.status_code == 400 and "MLFLOW_TRACKING_TOKEN" in r.json()["error"], r.text
        monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:28999")
        assert s.post("/api/check", upper).status_code == 200  # the server the user's environment names
    assert tracking_is_home({"tracking": {"mlflow": True, "tracking_uri": "http://127.0.0.1:28999/"}})
    assert not tracking_is_home({"tracking": {"mlflow": True, "tracking_uri": "http://127.0.0.1:28998"}})


def test_only_a_plain_sqlite_uri_under_the_allowed_folders(tmp_path, compatible):
    elsewhere = tmp_path.parent / "elsewhere-db"
    with Served(_dash(tmp_path)) as s:
        for uri in (
            f"sqlite+pysqlite:///{elsewhere}/x.db",
            f"SQLite:///{elsewhere}/x.db",
            f"sqlite:///{elsewhere}/x.db",
        ):
            r = s.post("/api/check", _form(tmp_path, extra=f"tracking=mlflow tracking.tracking_uri={uri}"))
            assert r.status_code == 400 and "tracking.tracking_uri" in r.json()["error"], (uri, r.text)
        inside = f"sqlite:///{tmp_path / 'outputs' / 'x.db'}"
        assert s.post("/api/check", _form(tmp_path, extra=f"tracking=mlflow tracking.tracking_uri={inside}")).status_code == 200  # fmt: skip
    assert not elsewhere.exists()


def test_deep_lists_and_huge_numbers_are_400s(tmp_path):
    with Served(_dash(tmp_path)) as s:
        deep = "[" * 200 + "]" * 200
        r = s.post("/api/check", _form(tmp_path, extra=f"+foo={deep}"))
        assert r.status_code == 400 and "nested" in r.json()["error"], r.text
        for value in ("1e999", "1.5", "true", "-1e999"):
            body = json.dumps(_form(tmp_path))[:-1] + f', "seed": {value}}}'
            r = httpx.post(s.base + "/api/check", content=body, headers=s.auth(Origin=s.base, **{"Content-Type": "application/json"}))  # fmt: skip
            assert r.status_code == 400 and "whole number" in r.json()["error"], (value, r.text)
        assert s.post("/api/check", _form(tmp_path, seed=7)).status_code == 200


def test_a_custom_experiment_is_checked_from_the_page_and_check_makes_no_folder(tmp_path):
    # the page's check is the command's (cli.preflight): the custom benchmark's tasks are read, so there are some
    (tmp_path / "tasks").mkdir()
    rows = [{"id": f"t{i}", "prompt": f"What is {i} + 1?", "answer": str(i + 1)} for i in range(12)]
    (tmp_path / "tasks" / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    form = {"experiment": "custom", "extra": f"env.data_dir={tmp_path / 'tasks' / 'tasks.jsonl'} output_dir={tmp_path / 'outputs' / 'new'}"}  # fmt: skip
    with Served(_dash(tmp_path)) as s:
        schema = httpx.get(s.base + "/api/schema", params={"experiment": "custom"}, headers=s.auth())
        assert schema.status_code == 200 and schema.json()["epochs"]["placeholder"] != "", schema.text
        r = s.post("/api/check", form)
        assert r.status_code == 200, r.text
        assert s.post("/api/check", _form(tmp_path)).status_code == 200
    assert not (tmp_path / "outputs" / "new").exists() and not (tmp_path / "outputs" / "runs-here").exists()


def test_the_printed_address_and_the_token_rules(tmp_path, monkeypatch):
    assert dashboard_main._url("[::1]", 8765, "t") == "http://[::1]:8765/?token=t"
    assert dashboard_main._url("::1", 8765, "t") == "http://[::1]:8765/?token=t"
    cmd = [sys.executable, "-m", "skillopt_ray.dashboard", "--outputs", str(tmp_path), "--port", "1"]
    short = subprocess.run([*cmd, "--token", "a"], capture_output=True, text=True, timeout=120)
    assert short.returncode == 2 and "at least 16" in short.stderr and len(short.stderr.strip().splitlines()) == 1
    env_short = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={"SKILLOPT_DASHBOARD_TOKEN": "abc", "PATH": "/usr/bin"})  # fmt: skip
    assert env_short.returncode == 2 and "SKILLOPT_DASHBOARD_TOKEN" in env_short.stderr


def test_the_nights_project_is_found_at_each_poll(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    d = Dashboard(project / "outputs", project, guard=Guard.make(TOKEN, "127.0.0.1"))
    with Served(d) as s:
        assert httpx.get(s.base + "/api/nights", headers=s.auth()).json()["nights"] == []
        proposed = project / "proposal"
        proposed.mkdir()
        (proposed / "SKILL.md").write_text("---\nname: tidy\ndescription: t\n---\n\nKeep it tidy.\n")
        skills = project / ".agents" / "skills"
        staging.stage_night(
            staging.NightProposal(
                project,
                "20261128T031500Z",
                "tidy",
                proposed,
                skills / "tidy",
                [skills],
                "# n\n",
                {"verdict": "accepted"},
            )  # fmt: skip
        )
        rows = httpx.get(s.base + "/api/nights", headers=s.auth()).json()["nights"]
        assert [r["stamp"] for r in rows] == ["20261128T031500Z"]


def test_a_run_folders_mlflow_record_sends_the_token_nowhere(tmp_path, monkeypatch):
    import http.server
    import threading

    from skillopt_ray.dashboard.launcher import mark_killed

    seen: list[str] = []

    class Listener(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the handler's protocol
            seen.append(self.headers.get("Authorization") or "")
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "mlflow-secret-token")
        monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
        uri = f"HTTP://127.0.0.1:{server.server_port}"
        (tmp_path / "mlflow_run.json").write_text(json.dumps({"run_id": "r1", "tracking_uri": uri}))
        note = mark_killed(tmp_path)
    finally:
        server.shutdown()
    assert seen == [] and note is not None and "not the server MLFLOW_TRACKING_URI names" in note
