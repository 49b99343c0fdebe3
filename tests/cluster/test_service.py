"""The kept cluster's run service: who it serves, what it refuses, and a served run end to end (same result as a
command's own run, Ctrl-C, a killed command, standby actors adopted, another user refused)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from cluster_helpers import _cli, _env  # the kept cluster's command and a command's environment

from skillopt_ray.base import environ
from skillopt_ray.base.exit_codes import EXIT_STOPPED
from skillopt_ray.base.lifeline import start_ticks
from skillopt_ray.cluster import client as service_client
from skillopt_ray.cluster import service

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))


# ---------- the rules, without a cluster


def test_env_difference_ignores_what_a_shell_sets_and_rays_own_settings():
    ours = {"HOME": "/root", "OPENAI_API_KEY": "a", "PWD": "/x", "SHLVL": "1", "RAY_AUTH_MODE": "token"}
    same = dict(ours, PWD="/elsewhere", SHLVL="3", RAY_AUTH_MODE="disabled", COLUMNS="120")
    assert environ.env_difference(same, ours) == []
    assert environ.env_difference(dict(ours, OPENAI_API_KEY="b"), ours) == ["OPENAI_API_KEY"]
    assert environ.env_difference(dict(ours, ALFWORLD_DATA="/d"), ours) == ["ALFWORLD_DATA"]
    gone = dict(ours)
    del gone["OPENAI_API_KEY"]
    assert environ.env_difference(gone, ours) == ["OPENAI_API_KEY"]  # unset since `up` counts too


def test_a_command_started_through_a_pyenv_shim_counts_as_the_same_environment():
    """A pyenv shim sets PYENV_* and puts its folders first on PATH: nothing there changes a run (it was refused, and
    the command ran attached, 2.4 s to its first call instead of 0.3 s)."""
    root = "/home/u/.pyenv"
    ours = {"HOME": "/home/u", "PATH": "/usr/local/bin:/usr/bin", "PYENV_ROOT": root, "OPENAI_API_KEY": "a"}
    shim = dict(ours, PATH=f"{root}/versions/3.11.9/bin:{root}/libexec:{root}/shims:/usr/local/bin:/usr/bin")
    shim |= {"PYENV_VERSION": "3.11.9", "PYENV_DIR": "/work", "PYENV_HOOK_PATH": f"{root}/pyenv.d"}
    assert environ.env_difference(shim, ours) == []
    assert environ.env_difference(dict(shim, PATH="/opt/tools/bin:" + shim["PATH"]), ours) == ["PATH"]  # a real one
    assert environ.env_difference(dict(shim, OPENAI_API_KEY="b"), ours) == ["OPENAI_API_KEY"]


@pytest.mark.parametrize(
    ("argv", "env", "offered"),
    [
        (["+experiment=custom"], {}, True),
        (["+experiment=custom", "--cfg", "job"], {}, False),  # only prints: not worth a round trip
        (["--help"], {}, False),
        (["+experiment=custom", "ray.address=10.0.0.1:6379"], {}, False),  # its own cluster
        (["+experiment=custom", "+ray.address=x:1"], {}, False),
        (["+experiment=custom"], {"RAY_ADDRESS": "x:1"}, False),
        (["+experiment=custom"], {"RAY_JOB_CONFIG_JSON_ENV_VAR": "{}"}, False),  # a `ray job submit` entrypoint
        (["+experiment=custom"], {"SKILLOPT_SERVICE": "off"}, False),
    ],
)
def test_which_commands_are_offered_to_the_service(argv, env, offered):
    assert service_client.wanted(argv, env) is offered


def test_no_kept_cluster_means_the_command_runs_on_its_own(tmp_path, monkeypatch):
    monkeypatch.setenv("SKILLOPT_CLUSTER_HOME", str(tmp_path))
    assert service_client.try_serve(["+experiment=custom"]) is None
    (tmp_path / service.SOCKET).touch()  # a stale socket file (the holder was killed): not an error either
    assert service_client.try_serve(["+experiment=custom"]) is None


def test_a_relayed_stream_drops_what_is_written_after_the_command_left():
    a, b = socket.socketpair()
    relay = service.Relay(a, "out", True, threading.Lock())
    relay.write("hello")
    assert json.loads(b.recv(100)) == {"out": "hello"}
    assert relay.isatty()
    b.close()
    a.close()
    relay.write("x" * 100)  # no exception: a run's late log line must not kill the holder
    assert relay.closed and not relay.isatty()


@pytest.mark.parametrize(
    "line",
    [b"not json\n", b'{"argv": "x", "cwd": "/", "env": {}}\n', b'{"argv": [1], "cwd": "/", "env": {}}\n', b"[]\n"],
)
def test_a_malformed_request_is_refused(line):
    a, b = socket.socketpair()
    b.sendall(line)
    with pytest.raises(ValueError):
        service.read_request(a)


# ---------- a kept cluster serving real commands


@pytest.fixture(scope="module")
def kept(tmp_path_factory):
    """A kept cluster (its own record folder) and a scripted endpoint answering the sum questions after 0.3 s."""
    from bench_small_eval import reply, write_tasks
    from scripted_server import ScriptedServer

    work = tmp_path_factory.mktemp("service")
    home = work / "cluster"
    tasks = write_tasks(work / "data", 6)
    up = _cli(home, "up", "--json", "--object-store-mb", "128")
    assert up.returncode == 0, up.stderr
    rec = json.loads(up.stdout.strip().splitlines()[-1])
    try:
        with ScriptedServer(policy=reply, latency_s=0.3) as srv:
            yield {"home": home, "tasks": tasks, "srv": srv, "rec": rec, "work": work}
    finally:
        _cli(home, "down")


def _eval_cmd(k: dict, out: str, concurrency: int = 16) -> list[str]:
    """The small-eval benchmark's command (scripts/bench_small_eval.py) on this module's tasks and endpoint."""
    from bench_small_eval import eval_command

    return eval_command(k["tasks"], k["srv"].base_url, k["work"] / out, concurrency)


def _served_by(trace: Path) -> set[int]:
    return {int(line.split()[2]) for line in trace.read_text().splitlines() if line.startswith("cli-started")}


@pytest.mark.slow
def test_a_served_run_gives_the_same_result_and_later_runs_adopt_standby_actors(kept, tmp_path):
    trace = tmp_path / "trace.txt"
    runs = []
    for _ in range(2):
        trace.unlink(missing_ok=True)
        env = _env(kept["home"], SKILLOPT_STARTUP_TRACE=str(trace))
        run = subprocess.run(_eval_cmd(kept, "out"), env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
        assert run.returncode == 0, run.stderr
        assert re.search(r"eval on test: hard 1\.000\s+soft 1\.000\s+\(n=6", run.stdout + run.stderr)
        assert _served_by(trace) == {kept["rec"]["pid"]}  # composed and launched in the holder, not in this command
        runs.append(trace.read_text())
        time.sleep(3)  # the holder starts idle copies of the first run's actors after it
    assert "adopted-DriverActor" not in runs[0]  # nothing idle before the first run
    for kind in ("DriverActor", "GatewayActor", "EnvActor"):
        assert f"adopted-{kind}" in runs[1]
    # its own run (no kept cluster involved) reads the same
    own = subprocess.run(
        _eval_cmd(kept, "own"),
        env=_env(kept["home"], SKILLOPT_SERVICE="off"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert own.returncode == 0 and "attached to the Ray cluster kept up" in own.stderr
    assert re.search(r"hard 1\.000\s+soft 1\.000\s+\(n=6", own.stdout + own.stderr)


@pytest.mark.slow
def test_a_command_whose_environment_differs_runs_on_its_own_and_hands_the_difference_to_its_workers(kept, tmp_path):
    code = (
        "import os, ray; from skillopt_ray.cli.ray_session import start_ray; "
        "start_ray({'ray': {'address': None, 'num_cpus': None, 'object_store_memory_mb': 128}}); "
        "f = ray.remote(lambda: os.environ.get('SKILLOPT_TEST_KEY')); print(ray.get(f.remote()))"
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        env=_env(kept["home"], SKILLOPT_TEST_KEY="set-after-up"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "set-after-up"  # the worker saw what the command exported
    served = subprocess.run(
        _eval_cmd(kept, "differs"),
        env=_env(kept["home"], SKILLOPT_TEST_KEY="x"),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert served.returncode == 0, served.stderr
    assert (
        "does not run this command (its environment differs from the kept cluster's (SKILLOPT_TEST_KEY); to serve"
        in (served.stderr)
    )


def _actor_processes(title: bytes) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if (d / "cmdline").read_bytes().startswith(title):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_stopping_the_command_stops_the_served_run_and_the_holder_serves_the_next(kept, tmp_path, how):
    cmd = _eval_cmd(kept, f"stop-{how}", concurrency=1)  # 6 x 0.3 s one after another
    before = len(kept["srv"].state.request_times)
    trace = tmp_path / "trace.txt"
    env = _env(kept["home"], SKILLOPT_STARTUP_TRACE=str(trace))
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(kept["srv"].state.request_times) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(kept["srv"].state.request_times) > before, "the run never called the model"
    drivers = {int(ln.split()[2]) for ln in trace.read_text().splitlines() if ln.startswith("driver-started")}
    proc.send_signal(signal.SIGINT) if how == "ctrl-c" else proc.kill()
    out, err = proc.communicate(timeout=120)
    if how == "ctrl-c":
        assert proc.returncode == EXIT_STOPPED, err  # as a command's own run stopped by Ctrl-C
        assert "interrupted: rerun the same command to resume" in err
    stopped_at = len(kept["srv"].state.request_times)
    time.sleep(2)
    assert len(kept["srv"].state.request_times) - stopped_at <= 1  # no calls go on after the command stopped
    rec = kept["rec"]
    assert start_ticks(rec["pid"]) == rec["start"], "the holder died with the run"
    again = subprocess.run(
        _eval_cmd(kept, "after"), env=_env(kept["home"]), capture_output=True, text=True, timeout=300
    )
    assert again.returncode == 0, again.stderr
    assert re.search(r"hard 1\.000\s+soft 1\.000", again.stdout + again.stderr)
    assert len(drivers) == 1  # the stopped run's driver actor ...
    assert not drivers & set(_actor_processes(b"ray::DriverActor"))  # ... is gone


@pytest.mark.slow
def test_down_during_a_served_run_refuses_then_ends_it_with_a_line_saying_why_and_how_to_resume(tmp_path):
    """`cluster down` during a served run ended it with exit 1 and no line on either side."""
    from bench_small_eval import reply, write_tasks
    from scripted_server import ScriptedServer

    home = tmp_path / "cluster"
    up = _cli(home, "up", "--json", "--object-store-mb", "128")
    assert up.returncode == 0, up.stderr
    rec = json.loads(up.stdout.strip().splitlines()[-1])
    try:
        with ScriptedServer(policy=reply, latency_s=0.5) as srv:
            k = {"tasks": write_tasks(tmp_path / "data", 6), "srv": srv, "work": tmp_path}
            cmd = _eval_cmd(k, "out", concurrency=1)  # 6 x 0.5 s one after another
            proc = subprocess.Popen(cmd, env=_env(home), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 120
            while not srv.state.request_times and time.monotonic() < deadline:
                time.sleep(0.05)
            assert srv.state.request_times, "the run never called the model"
            refused = _cli(home, "down")
            assert refused.returncode == 2 and f"pid {proc.pid} (served: python -m skillopt_ray" in refused.stderr
            assert "--force" in refused.stderr and start_ticks(rec["pid"]) == rec["start"]
            forced = _cli(home, "down", "--force")
            out, err = proc.communicate(timeout=120)
    finally:
        _cli(home, "down", "--force")
    assert forced.returncode == 0 and f"ends 1 run(s): pid {proc.pid}" in forced.stderr
    assert proc.returncode == EXIT_STOPPED, err
    assert f"the kept cluster (holder pid {rec['pid']}) is being stopped" in err
    assert "rerun the same command to resume" in err


def _ask_as(uid: int, sock: str, request: bytes) -> bytes:
    """What the service answers a process of user `uid` (a forked child) that sends `request`."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        answer = b"?"
        try:
            if uid != os.getuid():
                os.setgid(uid)
                os.setuid(uid)
            c = socket.socket(socket.AF_UNIX)
            c.settimeout(20)
            c.connect(sock)
            c.sendall(request)
            answer = c.recv(300) or b"closed"
        except (BrokenPipeError, ConnectionResetError):
            answer = b"closed"  # closed before the request was even read
        except BaseException as e:  # noqa: BLE001 - reported to the parent
            answer = repr(e).encode()[:300]
        os.write(write, answer)
        os._exit(0)
    os.waitpid(pid, 0)
    return os.read(read, 400)


@pytest.fixture
def bare_service(tmp_path_factory):
    """The service's socket and admission, without a cluster, in a folder any user can reach."""
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="svc-", dir="/tmp"))
    home.chmod(0o755)
    svc = service.Service(home, {"HOME": "/root", "OPENAI_API_KEY": "a"})
    try:
        yield svc
    finally:
        svc.close()
        home.rmdir()


def test_the_socket_is_the_users_own_and_a_differing_environment_is_sent_back(bare_service):
    sock = str(bare_service.path)
    assert bare_service.path.stat().st_mode & 0o777 == 0o700
    request = json.dumps({"argv": [], "cwd": "/", "env": {"HOME": "/root", "OPENAI_API_KEY": "b"}}).encode() + b"\n"
    answer = json.loads(_ask_as(os.getuid(), sock, request))
    assert answer["own"].startswith("its environment differs from the kept cluster's (OPENAI_API_KEY); to serve it")
    assert bare_service._queue.empty()  # nothing was queued to run


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to connect as another user")
def test_another_user_gets_no_answer(bare_service):
    sock = str(bare_service.path)
    request = json.dumps({"argv": [], "cwd": "/", "env": {"HOME": "/root", "OPENAI_API_KEY": "a"}}).encode() + b"\n"
    assert b"Permission" in _ask_as(65534, sock, request)  # the socket is 0700: not even a connection
    os.chmod(sock, 0o777)  # opened here only to reach the uid check behind it
    assert _ask_as(65534, sock, request) == b"closed"  # the connection closed without a word
    assert bare_service._queue.empty()


def test_modules_a_run_imported_from_the_users_folders_are_forgotten_and_libraries_kept(tmp_path, monkeypatch):
    (tmp_path / "my_bench_plugin.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    loaded = set(sys.modules)
    import my_bench_plugin  # noqa: F401  (a user's benchmark module, as env.benchmark=module:Class imports it)

    import_later = [m for m in ("colorsys", "skillopt_ray.report") if m not in sys.modules]
    for name in import_later:
        __import__(name)
    dropped = service.forget_user_modules(loaded)
    assert dropped == ["my_bench_plugin"] and "my_bench_plugin" not in sys.modules
    assert all(m in sys.modules for m in import_later)  # the standard library and this package stay loaded
    (tmp_path / "my_bench_plugin.py").write_text("VALUE = 2\n")  # the user edits the plugin ...
    import my_bench_plugin as again

    assert again.VALUE == 2  # ... and the next run imports the edit
    del sys.modules["my_bench_plugin"]


def test_a_code_edit_since_up_is_sent_back_to_run_on_its_own(bare_service, monkeypatch):
    from skillopt_ray.cli import provenance

    assert bare_service._code_changed() == ""  # nothing edited under this test
    edited = type("Cached", (), {"__call__": lambda self: "loaded", "__wrapped__": staticmethod(lambda: "on-disk")})()
    monkeypatch.setattr(provenance, "code_hash", edited)
    assert "code changed since the kept cluster started" in bare_service._code_changed()
    request = json.dumps({"argv": [], "cwd": "/", "env": {"HOME": "/root", "OPENAI_API_KEY": "a"}}).encode() + b"\n"
    answer = json.loads(_ask_as(os.getuid(), str(bare_service.path), request))
    assert "python -m skillopt_ray.cluster down && python -m skillopt_ray.cluster up" in answer["own"]


def test_the_holder_composes_a_repeated_command_once_until_a_config_file_changes(tmp_path, monkeypatch):
    import shutil
    from types import SimpleNamespace

    from skillopt_ray.cli import app
    from skillopt_ray.engine.warm import StandbyPool, serve

    conf = tmp_path / "conf"
    shutil.copytree(REPO / "conf", conf)
    args = SimpleNamespace(config_path=str(conf), config_name=None, config_dir=None)
    job = ["+experiment=custom", f"env.data_dir={REPO / 'examples/python-functions/tasks.jsonl'}", "seed=7"]
    real = app.compose_node
    calls = []
    monkeypatch.setattr(app, "compose_node", lambda *a, **k: calls.append(1) or real(*a, **k))
    memo: dict = {}
    with serve(StandbyPool(), None, memo):
        first = app.composed(args, job, [])
        first.seed = 99  # a caller's change does not reach the remembered copy
        second = app.composed(args, job, [])
        assert len(calls) == 1 and second.seed == 7
        (conf / "optimizer" / "paper.yaml").write_text((conf / "optimizer" / "paper.yaml").read_text() + "\n# edited\n")
        app.composed(args, job, [])
        assert len(calls) == 2  # an edited config file: composed again
        app.composed(args, [*job[:-1], "seed=8"], [])
        assert len(calls) == 3  # other overrides: composed again
    app.composed(args, job, [])
    assert len(calls) == 4  # outside the holder nothing is remembered


def test_a_fresh_actor_of_a_served_run_gets_the_handed_variables_in_its_runtime_env():
    """The holder's first run of a kind has no idle actor to adopt: the start-up trace it was handed must reach the
    freshly started actor through its runtime environment, beside what the options already set."""
    from skillopt_ray.engine.warm import with_env

    options = {"num_cpus": 0, "runtime_env": {"env_vars": {"A": "1"}, "working_dir": "/x"}}
    got = with_env(options, {"SKILLOPT_STARTUP_TRACE": "/tmp/t"})
    assert got["runtime_env"] == {"env_vars": {"A": "1", "SKILLOPT_STARTUP_TRACE": "/tmp/t"}, "working_dir": "/x"}
    assert options["runtime_env"]["env_vars"] == {"A": "1"}  # the caller's options are left as they were
    assert with_env({"num_cpus": 0}, {}) == {"num_cpus": 0}


def test_the_cluster_help_offers_up_status_and_down_only(capsys):
    """`_hold` is the holder's own entry point: the help listed it beside the user's commands."""
    from skillopt_ray.cluster.command import parser

    ap = parser()
    help_text = ap.format_help()
    assert "{up,status,down}" in help_text and "_hold" not in help_text
    assert ap.parse_args(["_hold", "--idle-minutes", "1"]).command == "_hold"  # still there for spawn_holder
