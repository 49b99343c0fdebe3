"""Shared fixtures: one Ray cluster per session, a scripted OpenAI-compatible server, the shared data."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
# a cluster the developer keeps up (`python -m skillopt_ray.cluster up`) must not serve or host the tests' runs: the
# suite's kept-cluster record lives in a folder of its own (tests of the kept cluster set their own)
if "SKILLOPT_CLUSTER_HOME" not in os.environ:
    import tempfile

    os.environ["SKILLOPT_CLUSTER_HOME"] = tempfile.mkdtemp(prefix="skillopt-test-cluster-")

# the staging key that seals staged nights (skillopt_ray.sleep.proposal.seal) lives in the user's state folder: the
# suite's in one of its own, never the developer's
if "SKILLOPT_STATE_DIR" not in os.environ:
    import tempfile

    os.environ["SKILLOPT_STATE_DIR"] = tempfile.mkdtemp(prefix="skillopt-test-state-")

# every test composes its config afresh (tests count compositions and change config files); the compose cache's own
# tests (tests/cli/test_compose_cache.py) turn it on in a folder of their own
os.environ["SKILLOPT_COMPOSE_CACHE"] = "off"

REPO = Path(__file__).resolve().parent.parent
_ROOT_LOGGING = (list(logging.root.handlers), logging.root.level)


@pytest.fixture(autouse=True)
def _root_logging_as_it_was():
    """Hydra's application layer gives the root logger a console handler bound to the sys.stdout of the moment (a
    test's captured stream, closed after it); a single run no longer goes through that layer, so nothing would
    replace the stale handler, and a later log line (an unclosed aiohttp session's, at garbage collection) would
    fail on the closed stream inside another test's captured output."""
    yield
    handlers, level = _ROOT_LOGGING
    if logging.root.handlers != handlers or logging.root.level != level:
        logging.root.handlers[:] = handlers
        logging.root.setLevel(level)


SHARED = Path(os.environ.get("SKILLOPT_SHARED_DATA", REPO.parent / "shared" / "data"))
ALFWORLD_SHARED = SHARED / "alfworld"


def in_ci() -> bool:
    """CI sets CI=true (`CI=true bash .ci/run`): there a missing prerequisite is a failure, not a skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _missing(what: str, fix: str) -> None:
    if in_ci():
        pytest.fail(f"CI=true but {what}; {fix}", pytrace=False)
    pytest.skip(f"{what} ({fix})")


def need_bwrap() -> str:
    """The bubblewrap binary, or skip (locally) / fail (CI=true) naming the fix."""
    exe = shutil.which("bwrap")
    if exe is None:
        _missing("bubblewrap (bwrap) is not installed", "scripts/install.sh installs it, or apt-get install bubblewrap")
    return exe  # type: ignore[return-value]


def need_harness(name: str) -> str:
    """The agent CLI `codex` or `claude` from the project's npm prefix, or skip (locally) / fail (CI=true)."""
    exe = REPO / ".harnesses" / "bin" / name
    if not exe.exists():
        _missing(f"the {name} agent CLI is not installed in .harnesses/", "run scripts/install_harnesses.sh")
    return str(exe)


def need_shared_data(path: Path, what: str = "") -> Path:
    """`path` (a file or folder of the shared benchmark data), or skip (locally) / fail (CI=true)."""
    if not Path(path).exists():
        _missing(
            f"shared {what or 'benchmark'} data not found at {path}",
            "point SKILLOPT_SHARED_DATA at the folder that holds alfworld/ and spreadsheetbench/",
        )
    return Path(path)


@pytest.fixture(scope="session")
def needs_bwrap() -> str:
    """For a whole module: `pytestmark = pytest.mark.usefixtures("needs_bwrap")`."""
    return need_bwrap()


@pytest.fixture(scope="session")
def alfworld_root() -> Path:
    need_shared_data(ALFWORLD_SHARED / "json_2.1.1", "ALFWorld")
    return ALFWORLD_SHARED


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * 1024 * 1024,
        log_to_driver=False,
        logging_level="ERROR",
        ignore_reinit_error=True,
    )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def walkthroughs(alfworld_root):
    from scripted_server import alfworld_walkthroughs
    from skillopt_envs.alfworld.data import walk_split

    return alfworld_walkthroughs(walk_split(alfworld_root, "all"))


@pytest.fixture()
def scripted(walkthroughs):
    from scripted_server import Policies, ScriptedServer

    srv = ScriptedServer(Policies(walkthroughs, "rule_gated"))
    srv.start()
    yield srv
    srv.stop()


def qa_fixture(root: Path) -> dict:
    """SearchQA items in train/val/test folders under `root`; returns the scripted server's rule-gated answers."""
    import json

    from skillopt_envs.searchqa.samples import make_items

    items = make_items(seed=3)
    for split, part in (("train", items[:8]), ("val", items[8:12]), ("test", items[12:16])):
        (root / split).mkdir(parents=True)
        (root / split / "items.json").write_text(json.dumps(part))
    return {it["id"]: ("qa", f"<answer>{it['answers'][0]}</answer>", "<answer>I do not know</answer>") for it in items}


@pytest.fixture()
def run():
    """One event loop per test: the SDK's HTTP pool belongs to the loop that opened it."""
    import asyncio

    loop = asyncio.new_event_loop()
    yield loop.run_until_complete
    loop.close()


@pytest.fixture()
def server():
    """A scripted server answering each chat call with its last message as JSON (`{"answer": ...}`)."""
    from helpers import _echo
    from scripted_server import ScriptedServer

    srv = ScriptedServer(policy=_echo)
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture()
def silent_port():
    """A TCP port that accepts connections and never sends a byte."""
    import socket
    import threading

    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(64)
    held, stop = [], threading.Event()

    def accept():
        lsock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(lsock.accept()[0])
            except OSError:
                continue

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield lsock.getsockname()[1]
    stop.set()
    t.join(2)
    for c in held:
        c.close()
    lsock.close()


@pytest.fixture
def proj(tmp_path):
    """A project with a live skill (`.agents/skills/deploy/SKILL.md`) for the adopt tests."""
    from sleep_fixtures import LIVE

    project = tmp_path / "my project"
    live = project / ".agents" / "skills" / "deploy"
    live.mkdir(parents=True)
    (live / "SKILL.md").write_text(LIVE)
    return project


@pytest.fixture()
def local_head():
    """A private Ray head on loopback (every port chosen free), stopped by its pids afterwards."""
    import os
    import subprocess
    import sys
    import tempfile

    from cluster_helpers import _free_ports, head_pids, stop_by_pids, wait_for_job_api

    temp_dir = tempfile.mkdtemp(prefix="rh.", dir="/tmp")  # short: Ray's socket paths have a length limit
    # every port chosen free: Ray's default agent ports clash with other clusters on a busy machine
    gcs, dash, client, agent_http, agent_grpc, runtime_env, metrics = _free_ports(7)
    env = dict(
        os.environ,
        RAY_AUTH_MODE="disabled",
        RAY_USAGE_STATS_ENABLED="0",
        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
    )
    ray_bin = str(Path(sys.executable).parent / "ray")
    subprocess.run(
        [
            ray_bin,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={gcs}",
            f"--dashboard-port={dash}",
            "--dashboard-host=127.0.0.1",
            f"--ray-client-server-port={client}",
            f"--temp-dir={temp_dir}",
            "--num-cpus=2",
            "--include-dashboard=true",
            "--disable-usage-stats",
            f"--dashboard-agent-listen-port={agent_http}",
            f"--dashboard-agent-grpc-port={agent_grpc}",
            f"--runtime-env-agent-port={runtime_env}",
            f"--metrics-export-port={metrics}",
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        wait_for_job_api(f"http://127.0.0.1:{dash}")
        yield env, f"http://127.0.0.1:{dash}"
    finally:
        stop_by_pids(temp_dir)
        assert not head_pids(temp_dir)


@pytest.fixture
def need_chromium():
    """Chromium and Playwright for the browser tests, or skip (locally) / fail (CI=true)."""
    from dashboard_browser import CHROMIUM

    if CHROMIUM is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("CI=true but Chromium is not installed (scripts/install.sh installs the chromium package)")
        pytest.skip("Chromium is not installed")
    pytest.importorskip("playwright")
