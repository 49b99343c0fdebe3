"""Run bookkeeping under failure: a link loop where the CLI walks (data fingerprints, the code hash) is one line
and exit 2; a dead or silent endpoint stops a run within about a minute (its episodes are not replayed after the
client gave up on the endpoint); a driver actor that dies is one line saying to rerun, and the rerun finishes."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import qa_fixture
from helpers import checked, llm_config
from scripted_server import Policies, ScriptedServer

from skillopt_ray import cli
from skillopt_ray.cli import launch

# ---------- link loops where the CLI walks ----------


def test_a_link_loop_in_a_data_folder_is_one_line_exit_2(tmp_path, capsys):
    from skillopt_envs.officeqa.samples import ensure_samples

    data = ensure_samples(str(tmp_path / "data"))
    (data / "notes").mkdir()
    os.symlink("b", data / "notes" / "a")
    os.symlink("a", data / "notes" / "b")
    out = tmp_path / "out"
    code = cli.main(
        [
            "+experiment=officeqa",
            f"env.data_dir={data}",
            f"output_dir={out}",
            "llm=compatible",
            "llm.base_url=http://127.0.0.1:9/v1",
            "ray.address=127.0.0.1:9",
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: ") and "\n" not in err, err
    assert f"{data / 'notes'}/" in err and "link loop" in err and "OSError" not in err, err
    assert not (out / "runs").exists()


def test_the_data_fingerprint_walks_a_linked_folder_once(tmp_path):
    from skillopt_ray.cli.identity import tree_fingerprint

    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "sub" / "x.txt").write_text("1")
    plain = tree_fingerprint(tmp_path / "d")
    os.symlink("..", tmp_path / "d" / "sub" / "up")  # a cycle: d/sub/up/sub/up/...
    started = time.monotonic()
    assert (
        tree_fingerprint(tmp_path / "d") == plain and time.monotonic() - started < 30
    )  # walked once, not 200,000 files
    (tmp_path / "d" / "sub" / "x.txt").write_text("22")
    assert tree_fingerprint(tmp_path / "d") != plain  # still sees edits


def test_the_code_hash_survives_link_loops(tmp_path, monkeypatch):
    from skillopt_ray.cli import provenance

    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(provenance, "code_roots", lambda: [tmp_path / "pkg"])
    provenance.code_hash.cache_clear()
    try:
        plain = provenance.code_hash()
        provenance.code_hash.cache_clear()
        os.symlink("lb.py", tmp_path / "pkg" / "la.py")
        os.symlink("la.py", tmp_path / "pkg" / "lb.py")
        os.symlink("..", tmp_path / "pkg" / "sub" / "up")
        assert provenance.code_hash() == plain
    finally:
        provenance.code_hash.cache_clear()


# ---------- a dead or silent endpoint ----------


def test_the_pool_does_not_replay_an_episode_whose_endpoint_is_down(ray_cluster):
    """The client's retries already spanned its window: the episode is an `llm` infra error at once, not replayed
    (an actor that died is still replaced and its episode replayed: tests/engine/test_envpool.py)."""
    import asyncio

    import ray
    from skillopt_envs.base import EpisodeContext
    from skillopt_envs.synthetic.benchmark import SyntheticBenchmark

    from skillopt_ray.engine.envpool import EnvPool, PoolSettings
    from skillopt_ray.llm.gateway import GatewayActor

    role = {"provider": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1", "structured_output": "none"}
    fast = {"retry_base_s": 0.05, "retry_max_s": 0.1, "retry_window_s": 1.0}
    gw = GatewayActor.remote(
        llm_config({"backend": "compatible", "target": role, "optimizer": role, **fast}), None, None
    )
    env = {"options": {"tasks": 2}}
    tasks = SyntheticBenchmark(env).load_split("train")
    pool = EnvPool("synthetic", env, gw, PoolSettings(1, 2, 0.0, 60.0, 2))
    try:
        results = asyncio.run(pool.run(tasks, "# s", EpisodeContext("down", False, 1, 0)))
    finally:
        pool.shutdown()
        ray.kill(gw)
    assert [r.task_id for r in results] == [t.task_id for t in tasks]
    assert all(r.infra_error and r.error_kind == "llm" and "endpoint unavailable" in r.error for r in results)
    assert pool.retried_episodes == 0 and pool.replaced == 0


class DeadEndpoint:
    """A TCP listener that reads each request's first line and then either hangs up (`hang_up`, as a server that
    crashes on every request) or never answers (`silent`). Records when the first request came and the requests."""

    def __init__(self, mode: str):
        self.mode = mode
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.requests: list[tuple[float, str]] = []
        self.held: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            try:
                first = conn.recv(65536).split(b"\r\n", 1)[0].decode("latin-1")
            except OSError:
                first = ""
            self.requests.append((time.monotonic(), first))
            if self.mode == "silent":
                self.held.append(conn)
            else:
                conn.close()

    def posts(self) -> list[float]:
        return [t for t, line in self.requests if line.startswith("POST ")]

    def __enter__(self) -> DeadEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(5)
        for c in self.held:
            c.close()
        self.sock.close()


def _searchqa(url: str, tmp_path: Path, *extra: str) -> dict[str, Any]:
    qa_fixture(tmp_path / "qa")
    overrides = [
        "+experiment=searchqa",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={tmp_path / 'out'}",
        "debug.progress=off",
        f"env.data_dir={tmp_path / 'qa'}",
        "env.options.split_source=folders",
        *extra,
    ]
    cfg = cli.plain(cli.compose(overrides))
    return cli.resolve_paths(cfg)


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "said"), [("hang_up", "Server disconnected"), ("silent", "nothing answered")])
def test_a_dead_endpoint_stops_the_run_within_a_minute(ray_cluster, tmp_path, capsys, mode, said):
    """With the default retry settings: the client's retry window (50 s) for a server that hangs up, the silence
    probe (30 s, then a 10 s probe) for one that never answers; then the episode is an infrastructure failure at
    once (it used to be replayed twice more, three windows: 155-182 s), and the run stops on it."""
    with DeadEndpoint(mode) as ep:
        cfg = _searchqa(ep.base_url, tmp_path)
        started = time.monotonic()
        code = cli.run_one(checked(cfg))
        ended = time.monotonic()
        posts = ep.posts()
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert code == 1 and len(lines) == 1, err
    assert "endpoint unavailable" in lines[0] and ep.base_url in lines[0] and said in lines[0], lines[0]
    assert "rerun the same command to resume" in lines[0] and "Traceback" not in err
    assert posts, "the run never called the endpoint"
    stop_s = ended - posts[0]
    print(f"{mode}: stopped {stop_s:.1f}s after the first call ({ended - started:.1f}s in all), {len(posts)} calls")
    assert stop_s < 90, f"the run took {stop_s:.0f}s to stop after its first call"
    # one episode's attempts only: no replay of the episode after the client gave up (the smoke plays one task); a
    # silent endpoint gets the call and its liveness probe (a POST to the same route)
    assert len(posts) <= (2 if mode == "silent" else 7), posts


# ---------- a driver actor that dies ----------


@pytest.mark.slow
def test_a_dead_driver_actor_is_one_line_and_the_rerun_finishes(ray_cluster, tmp_path, capsys, monkeypatch):
    import ray

    answers = qa_fixture(tmp_path / "qa0")
    answered = threading.Event()
    policies = Policies(target="rule_gated", answers=answers)

    def policy(body: dict[str, Any], headers: dict[str, str]) -> Any:
        if headers.get("x-skillopt-role") == "optimizer":
            answered.set()  # the run is past its first rollout: kill the driver now
        return policies.answer(body, headers)

    real_follow = launch.follow

    def follow_then_kill(driver: Any, ref: Any, progress: Any, clock: Any) -> None:
        assert answered.wait(240), "the run never reached the optimizer"
        pid = ray.get(driver.__ray_call__.remote(lambda self: os.getpid()), timeout=30)
        os.kill(pid, signal.SIGKILL)
        real_follow(driver, ref, progress, clock)

    with ScriptedServer(policy=policy, latency_s=0.2) as srv:
        cfg = _searchqa(srv.base_url, tmp_path)
        monkeypatch.setattr(launch, "follow", follow_then_kill)
        code = cli.run_one(checked(cfg))
        err = capsys.readouterr().err
        lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
        assert code == 1 and len(lines) == 1, err
        assert lines[0].startswith("error: the driver actor died (") and "\n" not in lines[0]
        assert lines[0].endswith("rerun the same command to resume") and str(cli.run_dir_for(cfg)) in lines[0]
        assert "Traceback" not in err and "ActorDiedError" not in err
        monkeypatch.setattr(launch, "follow", real_follow)
        code = cli.run_one(checked(cfg))
        err = capsys.readouterr().err
    assert code == 0, err
    assert f"resuming run in {cli.run_dir_for(cfg)}" in err
    assert (cli.run_dir_for(cfg) / "summary.json").is_file()
