"""The progress display: live lines cut to an 80-column terminal (checked on a real pseudo-terminal), plain log lines
for pipes and `ray job` logs, notes when they appear, the whole run's planned episodes, and clock times that add up."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from skillopt_ray.engine.driver import plays_episodes
from skillopt_ray.loop.schedule import EpisodePlan, Schedule
from skillopt_ray.runs.progress import PlainDisplay, RunClock, fmt_duration, headline, time_line

REPO = Path(__file__).resolve().parents[2]
NOTE = "ALFWorld: no data configured (env.data_dir / ALFWORLD_DATA) - using built-in sample games in /home/someone/.cache/skillopt_ray/alfworld_samples"

# A run as the driver reports it: start-up, a long stage name, episodes, tokens and cost.
FEED = f"""
import sys, time
from skillopt_ray.runs.progress import make_display
note = {NOTE!r}
d = make_display(sys.argv[1])
snaps = [{{"phase": "starting", "stage": "starting Ray"}}, {{"phase": "starting", "stage": "loading the splits", "notes": [note]}}]
for i in range(0, 19, 6):
    snaps.append({{"phase": "starting", "stage": "validate:selection", "done": i, "total": 18, "notes": [note]}})
for i in range(0, 41, 4):
    snaps.append({{"phase": "train", "epoch": 3, "epochs": 4, "global_step": 12, "total_steps": 16, "stage": "rollout", "done": i,
                  "total": 40, "run_done": 900 + i, "run_total": 1968, "accept": 7, "reject": 3, "skip": 1,
                  "tokens": 12345678 + 1000 * i, "cost_usd": 12.3456, "notes": [note]}})
snaps.append({{"phase": "epoch_boundary", "epoch": 3, "epochs": 4, "stage": "slow:rollout", "done": 5, "total": 40,
               "run_done": 1000, "run_total": 1968, "notes": [note]}})
for s in snaps:
    d.update(s)
    time.sleep(0.12)
d.close()
print("after the display", file=sys.stderr)
"""

CSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][0-9A-Za-z]|\x1b[=>]")


def _on_pty(argv: list[str], columns: int = 80, env: dict | None = None, timeout: float = 120.0) -> str:
    """Run argv with its stdout and stderr on a pseudo-terminal of `columns` columns; everything it wrote."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    full_env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": str(columns), "PYTHONPATH": str(REPO), **(env or {})}
    full_env.pop("NO_COLOR", None)
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=full_env, cwd=REPO, close_fds=True)
    os.close(slave)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed its side
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)
    return b"".join(chunks).decode("utf-8", "replace")


def _segments(raw: str) -> list[str]:
    """What lands on screen between line starts: escape sequences removed, split at CR and LF."""
    return [s for s in re.split(r"[\r\n]", CSI.sub("", raw)) if s]


def _cells(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def test_episode_stages():
    for stage in ("rollout", "validate:selection", "validate:test:initial", "slow_update:rollout"):
        assert plays_episodes(stage), stage
    for stage in ("reflect", "aggregate", "select", "update", "gate", "meta_skill", "slow_update", ""):
        assert not plays_episodes(stage), stage


def test_live_display_fits_an_80_column_terminal():
    raw = _on_pty([sys.executable, "-c", FEED, "auto"])
    segs = _segments(raw)
    too_wide = [s for s in segs if _cells(s) > 80]
    assert not too_wide, too_wide[:3]
    text = "\n".join(segs)
    # rich was chosen on the terminal: live lines with bars, the stage's and the run's episodes, ETA, tokens and cost
    assert "━" in text and "\x1b[" in raw
    assert "training · epoch 3/4 · step 12/16 · rollout" in text
    assert "40/40 episodes" in text and re.search(r"9\d\d/1968 episodes · eta \d", text)
    assert "tokens 12.4M" in text and "$12.3456" in text
    assert "start-up · starting Ray" in text and "slow update: paired rollouts" in text
    # the note is printed once, whole (broken between words, never cut), before the training lines
    flat = " ".join(text.split())
    assert " ".join(("note: " + NOTE).split()) in flat
    assert text.count("note: ALFWorld") == 1
    assert text.index("note: ALFWorld") < text.index("training · epoch")
    # the display stopped before the end of the run: where it was stays on screen
    assert "stopped during: epoch boundary · epoch 3/4 · slow update: paired rollouts" in text
    assert text.rstrip().endswith("after the display")


def test_plain_lines_for_pipes():
    out = subprocess.run(
        [sys.executable, "-c", FEED, "auto"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert (
        "\x1b" not in out.stderr
        and "\r" not in out.stderr
        and all(line.isascii() for line in lines if not line.startswith("note:"))
    )
    progress = [line for line in lines if line.startswith("[progress ")]
    # one line per phase or stage change (within a stage, at most one per 30 s)
    assert [re.sub(r"^\[progress \w+\] ", "", line).split(" | ")[0] for line in progress] == [
        "start-up, starting Ray",
        "start-up, loading the splits",
        "start-up, selection evaluation",
        "training, epoch 3/4, step 12/16, rollout",
        "epoch boundary, epoch 3/4, slow update: paired rollouts",
    ]
    assert (
        "episodes 0/40 | run 900/1968 episodes | accepted 7, rejected 3, skipped 1, tokens 12.3M, $12.3456"
        in progress[3]
    )
    assert lines.index("note: " + NOTE) == 1 and sum(line.startswith("note:") for line in lines) == 1


def test_plain_lines_within_a_stage_are_throttled():
    now = [0.0]
    lines: list[str] = []
    stream = SimpleNamespace(write=lambda s: lines.append(s), flush=lambda: None)
    d = PlainDisplay(stream, clock=lambda: now[0], every_s=30)
    snap = {"phase": "train", "epoch": 1, "global_step": 1, "total_steps": 4, "stage": "rollout", "total": 40}
    for i in range(10):
        now[0] = i * 2.0
        d.update({**snap, "done": i})
    printed = [s for s in lines if s.startswith("[progress")]
    assert len(printed) == 1 and "episodes 0/40" in printed[0]
    now[0] = 31.0
    d.update({**snap, "done": 20})
    printed = [s for s in lines if s.startswith("[progress")]
    assert len(printed) == 2 and printed[1].startswith("[progress 31s]") and "episodes 20/40" in printed[1]


def test_headline_names_phase_step_and_stage():
    assert (
        headline({"phase": "final", "stage": "validate:test:best"}) == "final evaluation · test evaluation (best skill)"
    )
    assert (
        headline({"phase": "train", "epoch": 2, "epochs": 4, "global_step": 5, "total_steps": 8, "stage": "gate"})
        == "training · epoch 2/4 · step 5/8 · gate"
    )
    assert headline({"phase": "eval", "stage": "eval:test"}) == "evaluation · evaluation on test"


def _plan_run(plan: EpisodePlan, per_epoch: int) -> list[int]:
    """Walk a whole run's positions as the trainer reports them; the planned episodes done at each."""
    st = SimpleNamespace(phase="train", epoch=1, step=1, global_step=0, initial_score=None)
    seen = []

    def at(phase, stage="", done=0):
        seen.append(plan.done(st, {"phase": phase, "stage": stage, "done": done}))

    for d in range(plan.selection + 1):
        at("starting", "validate:selection", d)
    st.initial_score = 0.0
    for epoch in range(1, plan.epochs + 1):
        st.epoch = epoch
        for step in range(1, per_epoch + 1):
            st.step = step
            batch = plan.batches[step - 1]
            for d in range(batch + 1):
                at("train", "rollout", d)
            for stage in ("reflect", "aggregate", "select", "update", "gate"):
                at("train", stage)
            for d in range(plan.selection + 1):
                at("train", "validate:selection", d)
            st.global_step += 1
            st.step += 1
        if epoch >= 2:
            for d in range(plan.pairs + 1):
                at("epoch_boundary", "slow:rollout", d)
            at("epoch_boundary", "slow_update")
            for d in range(plan.selection + 1):
                at("epoch_boundary", "validate:selection", d)
        else:
            at("epoch_boundary")
    st.phase, st.epoch = "final", plan.epochs + 1
    for d in range(plan.selection + 1):
        at("final", "validate:selection", d)
    for which in ("initial", "best", "final"):
        for d in range(plan.test + 1):
            at("final", f"validate:test:{which}", d)
    st.phase = "done"
    at("done")
    return seen


def test_episode_plan_counts_the_whole_run():
    trainer = SimpleNamespace(
        cfg=SimpleNamespace(
            optimizer=SimpleNamespace(
                batch_size=4,
                epochs=3,
                slow_update=True,
                meta_skill=True,
                slow_update_samples=2,
                slow_update_gate=True,
                slow_update_force_validate=True,
            )
        ),
        splits=SimpleNamespace(train=list(range(10)), selection=list(range(3)), test=list(range(5))),
        steps_per_epoch=lambda: 3,
    )
    plan = Schedule(trainer.cfg.optimizer, trainer.splits, 0).plan()
    assert plan.batches == [4, 4, 2] and plan.boundary == 2 * 2 + 3
    # baseline 3 + 3 epochs x (10 rollouts + 3 gates x 3) + 2 boundaries x 7 + final 3 + 3 x 5 test
    assert plan.total == 3 + 3 * 19 + 2 * 7 + 3 + 15 == 92
    seen = _plan_run(plan, 3)
    assert seen == sorted(seen), "the run's count never goes back"
    assert seen[0] == 0 and seen[-1] == plan.total and seen[-2] == plan.total  # every planned episode counted once


def test_run_clock_adds_up_commands(tmp_path):
    first = RunClock(tmp_path, started=time.time() - 100).begin()
    assert first.end("error")["sessions"] == 1
    assert 99 <= first.timing()["command_s"] <= 102
    fresh = time_line(first.timing())
    assert fresh.startswith("time: 1m40s this command (wall clock)") and "resumed" not in fresh
    second = RunClock(tmp_path, started=time.time() - 30).begin()
    t = second.end("ok")
    assert t["sessions"] == 2 and 129 <= t["run_total_s"] <= 133 and 29 <= t["command_s"] <= 32
    assert time_line(t) == "time: 30s this command (wall clock); 2m10s in all over 2 commands (resumed run)"
    sessions = json.loads((tmp_path / "sessions.json").read_text())
    assert [s["status"] for s in sessions] == ["error", "ok"]


def test_command_clock_counts_from_the_process_start():
    code = (
        "import time; time.sleep(1.5)\n"
        "from skillopt_ray.runs.progress import _process_start\n"
        "print(time.time() - _process_start())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert 1.5 <= float(out.stdout) < 10


def test_durations_read_like_a_clock():
    assert [fmt_duration(s) for s in (0, 23, 109, 3600 + 125)] == ["0s", "23s", "1m49s", "1h02m"]


@pytest.mark.slow
def test_cli_run_on_an_80_column_terminal(alfworld_root, tmp_path):
    """The real command on a pseudo-terminal: live lines fit, the data note comes first, the summary's time is the clock's."""
    from scripted_server import Policies, ScriptedServer, alfworld_walkthroughs
    from skillopt_envs.alfworld.data import walk_split

    with ScriptedServer(
        Policies(alfworld_walkthroughs(walk_split(alfworld_root, "all")), "rule_gated"), latency_s=0.02
    ) as srv:
        argv = [
            sys.executable,
            "-m",
            "skillopt_ray",
            "+experiment=alfworld",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"env.data_dir={alfworld_root}",
            f"output_dir={tmp_path / 'out'}",
            "env.options.skip_missing_games=true",
            "env.max_turns=10",
            "ray.num_cpus=2",
        ]
        t0 = time.monotonic()
        raw = _on_pty(argv, env={"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}, timeout=420)
        wall = time.monotonic() - t0
    segs = _segments(raw)
    text = "\n".join(segs)
    assert "time: " in text, text[-3000:]
    assert not [
        s
        for s in segs
        if _cells(s) > 80
        and not s.startswith(
            ("run directory:", "mlflow run:", "  view with:", "  all runs of the experiment:", "the run's story:")
        )
    ]
    # the training line names epoch and step of the 2 x 1 schedule (a fast step may finish between two refreshes)
    # a phase after start-up is drawn (a fast scripted step may finish between two refreshes of the live line)
    later = re.search(r"(training · epoch [12]/2|epoch boundary|final evaluation)", text)
    assert "start-up · starting Ray" in text and later
    # the data note and the split sizes (conf/smoke/tiny.yaml: limit_train 1) are printed once, at the start
    assert text.count("note: ALFWorld: games from") == 1 and text.count("note: tasks: 1 train") == 1
    assert text.index("note: ALFWorld: games from") < later.start() < text.index("test hard")
    # the summary's time is this command's wall time (the process ends a moment after printing it)
    m = re.search(r"time: (?:(\d+)m)?(\d+)s this command \(wall clock\)", text)
    printed = int(m.group(1) or 0) * 60 + int(m.group(2))
    assert wall - 8 <= printed <= wall + 1, (printed, wall)
    assert "wall " not in text.split("test hard", 1)[1].split("time:")[0]
