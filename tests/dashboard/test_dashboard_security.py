"""The dashboard refuses what a hostile page could send, over real HTTP (uvicorn on a free port): no or a wrong token,
a foreign Host (DNS rebinding) or Origin, a non-JSON POST, and launch-form overrides that read the environment,
reconfigure Hydra, instantiate objects or point at files outside the dashboard's folders; the right token, JSON and
origin still check and launch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import qa_fixture
from dashboard_served import TOKEN, Served, _free_port
from scripted_server import Policies, ScriptedServer

from skillopt_ray.dashboard.security import Guard
from skillopt_ray.dashboard.server import Dashboard

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("dashsec")
    (root / "outputs").mkdir()
    dash = Dashboard(root / "outputs", root, guard=Guard.make(TOKEN, "127.0.0.1"))
    with Served(dash) as s:
        yield s


def _form(served: Served, **extra: str) -> dict:
    out = served.dash.outputs
    return {"experiment": "searchqa", "smoke": "tiny", "extra": f"output_dir={out}", **extra}


def test_api_needs_the_token(served):
    assert httpx.get(served.base + "/api/runs").status_code == 401
    wrong = httpx.get(served.base + "/api/runs", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and "token" in wrong.json()["error"]
    assert httpx.get(served.base + "/api/runs", headers=served.auth()).status_code == 200
    assert httpx.post(served.base + "/api/check", json=_form(served)).status_code == 401


def test_the_token_travels_as_a_header_never_as_a_cookie(served):
    """A cookie for 127.0.0.1 goes to every port of it (another local user's server would log it): the page keeps
    the token its URL brought in sessionStorage (its own origin, port included) and sends it as a header."""
    page = httpx.get(served.base + "/?token=" + TOKEN)
    assert page.status_code == 200 and "set-cookie" not in page.headers
    for name in ("skillopt_dashboard_" + str(served.port), "token"):
        assert httpx.get(served.base + "/api/runs", cookies={name: TOKEN}).status_code == 401
    assert httpx.get(served.base + "/api/runs", headers=served.auth()).status_code == 200
    script = httpx.get(served.base + "/static/app.js").text
    assert "sessionStorage" in script and "Authorization: `Bearer ${token}`" in script


@pytest.mark.parametrize("path", ["/", "/api/runs", "/static/app.js"])
def test_a_foreign_host_header_is_refused_on_every_route(served, path):
    r = httpx.get(served.base + path, headers=served.auth(Host=f"evil.example:{served.port}"))
    assert r.status_code == 403 and "--allowed-hosts" in r.json()["error"]
    assert httpx.get(served.base + path, headers=served.auth(Host=f"localhost:{served.port}")).status_code == 200


def test_an_allowed_host_from_the_command_line_is_answered(tmp_path):
    dash = Dashboard(tmp_path, tmp_path, guard=Guard.make(TOKEN, "127.0.0.1", ["lab-box.internal"]))
    with Served(dash) as s:
        r = httpx.get(s.base + "/api/runs", headers=s.auth(Host=f"lab-box.internal:{s.port}"))
        assert r.status_code == 200
        assert httpx.get(s.base + "/", headers={"Host": "other.internal"}).status_code == 403


def test_a_foreign_origin_is_refused_even_with_the_token(served):
    for origin in ("http://evil.example", f"http://127.0.0.1:{served.port + 1}", "null"):
        r = served.post("/api/check", _form(served), served.auth(Origin=origin))
        assert r.status_code == 403, origin
    assert served.post("/api/launch", _form(served), served.auth(Origin="http://evil.example")).status_code == 403
    # a tag on a page of another port (same site: no Origin header on a GET) is refused too, token or not
    for site in ("same-site", "cross-site"):
        assert httpx.get(served.base + "/api/runs", headers=served.auth(**{"Sec-Fetch-Site": site})).status_code == 403
    assert not any(served.dash.launcher.launches)


def test_a_post_that_is_not_json_is_refused(served):
    body = '{"experiment": "searchqa"}'
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        headers = served.auth(Origin=served.base)
        if ctype:
            headers["Content-Type"] = ctype
        r = httpx.post(served.base + "/api/launch", content=body, headers=headers)
        assert r.status_code == 415 and "application/json" in r.json()["error"], ctype
    bad = httpx.post(
        served.base + "/api/check", content="{nope", headers=served.auth(**{"Content-Type": "application/json"})
    )
    assert bad.status_code == 400 and "JSON" in bad.json()["error"]
    assert not served.dash.launcher.launches


@pytest.mark.parametrize(
    "extra, fields, needle",
    [
        ("seed=${oc.env:HOME}", {}, "interpolation"),
        ("env.data_dir=$HOME/data", {}, "interpolation"),
        ("", {"target_model": "${oc.env:OPENAI_API_KEY}"}, "interpolation"),
        ("hydra.run.dir=/tmp/elsewhere", {}, "Hydra"),
        ("+hydra.callbacks.x._target_=builtins.open", {}, "not accepted"),
        ("+x._target_=builtins.print", {}, "_target_"),
        ("env.options={_target_:os.system}", {}, "_target_"),
        ("+llm@hydra.job=openai", {}, "Hydra"),
        ("--config-dir=/tmp", {}, "flag"),
        ("llm.target.api_key_env=AWS_SECRET_ACCESS_KEY", {}, "environment variable"),
        ("skill_init=/etc/passwd", {}, "--allow-path"),
        ("env.data_dir=/etc", {}, "--allow-path"),
        ("env.manifest_dir=../..", {}, "--allow-path"),
        ("eval.skill_path=/etc/hostname mode=eval", {}, "--allow-path"),
        ("output_dir=/tmp/not-allowed-out", {}, "--allow-path"),
        ("run_name=../../../escaped", {}, "a run name is a name"),  # refused before Hydra composes
        ("llm.target.agent.prefix=/usr", {}, "--allow-path"),
        ("env.options.sample_dir=/var/tmp/x", {}, "--allow-path"),
        ("tracking=mlflow tracking.tracking_uri=sqlite:////tmp/x.db", {}, "--allow-path"),
        ("skill_init={cwd}/.git/config", {}, "hidden"),
        ("skill_init={cwd}/pyproject.toml", {}, "Markdown"),
        ("", {"experiment": "../llm/openai"}, "presets"),
        ("+experiment=spreadsheetbench env.options.sandbox=none", {"experiment": ""}, "sandbox"),
    ],
)
def test_the_form_refuses_overrides_that_reach_past_plain_values(served, extra, fields, needle):
    form = _form(served, **fields)
    extra = extra.replace("{cwd}", str(served.dash.launcher.cwd))
    form["extra"] = f"{form['extra']} {extra}".strip()
    if "output_dir=/tmp/not" in extra:
        form["extra"] = extra
    r = served.post("/api/check", form)
    assert r.status_code == 400, r.text
    message = r.json()["error"]
    assert needle in message and "\n" not in message
    assert "root:" not in message and not served.dash.launcher.launches


def test_skill_init_outside_is_never_shown_as_the_skill(served):
    r = served.post("/api/launch", _form(served, extra=f"output_dir={served.dash.outputs} skill_init=/etc/passwd"))
    assert r.status_code == 400 and "root:" not in r.text
    assert not served.dash.launcher.launches and not list(served.dash.outputs.rglob("*.md"))


def test_the_right_token_json_and_origin_check_a_form(served):
    r = served.post("/api/check", _form(served, learning_rate="3", extra=f"output_dir={served.dash.outputs}"))
    assert r.status_code == 200, r.text
    assert r.json()["command"].startswith("python -m skillopt_ray +experiment=searchqa")
    inside = served.dash.outputs / "skill.md"
    inside.write_text("# a skill\n- be brief\n")
    ok = served.post("/api/check", _form(served, extra=f"output_dir={served.dash.outputs} skill_init={inside}"))
    assert ok.status_code == 200, ok.text


def test_allow_path_lets_a_named_folder_through(tmp_path):
    data = tmp_path / "elsewhere"
    data.mkdir()
    (data / "skill.md").write_text("# s\n")
    work = tmp_path / "work"
    work.mkdir()
    form = {"experiment": "searchqa", "extra": f"skill_init={data / 'skill.md'} output_dir={work / 'outputs'}"}
    for allowed, status in (((), 400), ((data,), 200)):
        dash = Dashboard(work / "outputs", work, guard=Guard.make(TOKEN, "127.0.0.1"), allow_paths=allowed)
        with Served(dash) as s:
            assert s.post("/api/check", form).status_code == status


@pytest.mark.slow
def test_the_right_token_json_and_origin_launch_a_run(tmp_path):
    answers = qa_fixture(tmp_path / "qa")
    dash = Dashboard(tmp_path / "outputs", tmp_path, guard=Guard.make(TOKEN, "127.0.0.1"))
    with ScriptedServer(Policies(target="rule_gated", answers=answers), latency_s=0.5) as srv, Served(dash) as s:
        form = {
            "experiment": "searchqa",
            "llm": "compatible",
            "base_url": srv.base_url,
            "smoke": "tiny",
            "extra": f"env.data_dir={tmp_path / 'qa'} env.options.split_source=folders tracking=none "
            f"output_dir={tmp_path / 'outputs'}",
        }
        r = s.post("/api/launch", form)
        assert r.status_code == 200, r.text
        lid = r.json()["id"]
        launch = dash.launcher.launches[lid]
        assert launch.process is not None and Path(launch.run_dir).parent.parent == tmp_path / "outputs"
        stopped = s.post("/api/stop", {"id": lid})
        assert stopped.status_code == 200
        launch.process.wait(timeout=120)


def test_the_command_prints_a_tokened_url_and_warns_off_loopback(tmp_path):
    """`--host 0.0.0.0` says the token is the only guard; bad arguments are one line and exit 2."""
    port = _free_port()
    cmd = [sys.executable, "-m", "skillopt_ray.dashboard", "--port", str(port), "--outputs", str(tmp_path)]
    proc = subprocess.Popen(
        [*cmd, "--host", "0.0.0.0", "--token", TOKEN],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert f"http://127.0.0.1:{port}/?token={TOKEN}" in line
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "warning: --host 0.0.0.0" in err and "only guard" in err
    bad = subprocess.run([*cmd, "--allow-path", str(tmp_path / "missing")], capture_output=True, text=True)
    assert bad.returncode == 2 and "--allow-path" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_host_names_and_origins_are_parsed_as_browsers_send_them():
    g = Guard.make(TOKEN, "0.0.0.0", ["gpu-box.lab:8765", " "])
    assert g.host_ok("[::1]:8765") and g.host_ok("LOCALHOST:8765") and g.host_ok("gpu-box.lab")
    assert not g.host_ok("0.0.0.0:8765") and not g.host_ok("") and not g.host_ok("localhost.evil.example")
    assert g.origin_ok("http://gpu-box.lab:8765", "http", "127.0.0.1:8765", 8765)
    assert not g.origin_ok("http://gpu-box.lab:9999", "http", "127.0.0.1:8765", 8765)
    assert not g.origin_ok("https://127.0.0.1:8765", "http", "127.0.0.1:8765", 8765)
    assert not g.origin_ok("http://127.0.0.1:notaport", "http", "127.0.0.1:8765", 8765)
    assert (
        len(Guard.make(None, "127.0.0.1").token) >= 40
        and Guard.make(None, "::1").token != Guard.make(None, "::1").token
    )
