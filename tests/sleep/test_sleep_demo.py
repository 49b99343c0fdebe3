"""The shipped demo (examples/sleep-demo, issue 43's "Done when"): the commands the README documents, run as a user
runs them from a clone: a night on the demo's reviewed task folder with the embedded model (offline; it learns
nothing), staged; `adopt` installs the skill it started from (no skill is live yet); `status` shows it adopted. The night writes
only ignored files, says its estimate before its first call, and spends within it. The fast test checks that the
demo's sessions harvest into exactly the shipped task ids."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillopt_ray.sleep.harvest import pipeline
from skillopt_ray.sleep.harvest.stores import Stores
from skillopt_ray.sleep.harvest.tasks import valid_check

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "sleep-demo"


def readme_commands() -> list[str]:
    """The `skillopt_ray.sleep` commands of the README's "A night on sample sessions" section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## A night on sample sessions", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the README's demo section has no bash block"
    return [ln.strip() for ln in block.group(1).splitlines() if "skillopt_ray.sleep" in ln]


def test_the_demo_sessions_harvest_into_the_shipped_task_ids(tmp_path):
    project = tmp_path / "demo"
    project.mkdir()
    rep = pipeline.run(
        pipeline.HarvestOptions(
            project=project,
            stores=Stores("all", DEMO / "sessions" / "codex", DEMO / "sessions" / "claude"),
            scope="all",
            lookback=None,
            lookback_given=True,
        )
    )
    assert rep["sessions"] == {"codex": 3, "claude_code": 3} and rep["redactions"] == {}, rep
    harvested = sorted(p.name for p in (project / ".skillopt" / "tasks").iterdir() if p.is_dir())
    shipped = sorted(p.name for p in (DEMO / "tasks").iterdir() if p.is_dir())
    assert harvested == shipped
    review = json.loads((DEMO / "tasks" / "review.json").read_text())
    assert review["reviewed"] is True and review["tasks"] == shipped
    for t in shipped:
        checks = json.loads((DEMO / "tasks" / t / "task.json").read_text())["metadata"]["checks"]
        assert checks and all(valid_check(c) == c for c in checks), (t, checks)
    for written in (DEMO / ".skillopt" / "staging" / "x", DEMO / ".agents" / "skills" / "learned" / "SKILL.md"):
        ignored = subprocess.run(["git", "check-ignore", "-q", str(written)], cwd=REPO, check=False)
        assert ignored.returncode == 0, written  # what a night and an adoption write leaves the clone clean


@pytest.mark.slow
def test_the_readme_demo_night_stages_adopt_installs_and_status_shows_it(tmp_path):
    clone = tmp_path / "clone"
    shutil.copytree(DEMO, clone / "examples" / "sleep-demo", ignore=shutil.ignore_patterns(".skillopt", ".agents"))
    before = {p: p.read_bytes() for p in clone.rglob("*") if p.is_file()}
    run, adopt, status = readme_commands()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}

    def sh(cmd: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, *cmd.split()[1:]]  # the README's `.venv/bin/python`: this interpreter
        return subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True, timeout=1800, check=False)

    t0 = time.monotonic()
    r = sh(run)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    err = r.stderr
    assert err.index("estimate (before any model call)") < err.index("run directory:")
    project = clone / "examples" / "sleep-demo"
    (night,) = (project / ".skillopt" / "staging").iterdir()
    manifest = json.loads((night / "manifest.json").read_text())
    assert manifest["changed"] is False and manifest["verdict"] == "rejected"  # the embedded model learns nothing
    assert "changed nothing" in r.stdout
    (est_file,) = (project / ".skillopt" / "nights" / "runs").glob("night-*/night/estimate.json")
    est = json.loads(est_file.read_text())
    spent = est["spent"]
    assert est["first_pass"]["calls"] <= spent["calls"] <= est["at_most"]["calls"], est
    assert est["first_pass"]["tokens"] <= spent["tokens"] <= est["at_most"]["tokens"], est
    print(f"\ndemo night: {took:.0f} s, {spent['calls']} calls, {spent['tokens']} tokens; estimate {est}")

    assert "adopting installs the one it started from" in r.stdout
    a = sh(adopt)
    assert a.returncode == 0 and f"adopted night {night.name}" in a.stdout, a.stderr
    assert "its gate accepted no edit" in a.stdout
    live = project / ".agents" / "skills" / "learned" / "SKILL.md"
    (row,) = [r for r in manifest["files"] if r["kind"] == "skill" and r["live_path"] == str(live)]
    assert live.read_bytes() == (night / row["rel"]).read_bytes()
    again = sh(adopt)  # nothing left: the night is adopted
    assert again.returncode == 2 and again.stderr.startswith("error: "), again.stderr
    s = sh(status)
    assert s.returncode == 0 and f"{night.name}  learned  rejected  adopted" in s.stdout, s.stdout
    after = {p: p.read_bytes() for p in before}
    assert after == before  # the shipped files are as they were: the night wrote only under .skillopt/
