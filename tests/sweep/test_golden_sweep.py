"""The sweep command's outputs pinned byte for byte, without starting Ray: its help, refusals, `--cfg job`, dry
runs, the per-step and final reports it hands Tune, its trial table, the skill diffs and sweep.json it writes and
its closing messages, on fixed inputs (tests/data/golden/sweep). Written by today's code before sweep.py was split
by job (issue 39: the search space, the Tune run, its report); a change that means to alter an output rewrites the
golden files with SKILLOPT_GOLDEN_WRITE=1 and shows the difference in review."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from golden_helpers import DATA, check

from skillopt_ray.compare import command as compare
from skillopt_ray.sweep import command as sweep
from skillopt_ray.sweep import report as sweep_report

BASE = ["+experiment=searchqa", "+smoke=tiny", "output_dir=out", "+sweep=lr", "sweep.seeds=2"]
# a run directory's name ends in the hash of its whole config: a new config key elsewhere changes it, so it is masked
RUN_ID = re.compile(r"(-seed\d+-)[0-9a-f]{10}\b")


def _main(capsys: Any, tmp_path: Path, *args: str) -> str:
    code = sweep.main(list(args))
    out, err = capsys.readouterr()
    text = f"$ sweep {' '.join(args)}\nexit {code}\n--- stdout\n{out}--- stderr\n{err}"
    return RUN_ID.sub(r"\1<identity>", text.replace(str(tmp_path), "<tmp>"))


def test_sweep_command_lines_print_the_same(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = _main(capsys, tmp_path, "--help")
    for bad in (
        ["sweep.max_concurent=2"],
        ["seeds=2"],
        ["+sweep.params.optimizer.mixed_weight=uniform(0.1,0.9)"],
        ["--cfg", "all"],
        ["--bogus"],
        ["--config-dir", "nowhere"],
        ["+sweep=nope"],
        ["sweep.scheduler=hyperband"],
    ):
        text += _main(capsys, tmp_path, *BASE, *bad)
    text += _main(capsys, tmp_path, "+experiment=searchqa")
    # --cfg job: the sweep's own options as printed; the run config after them lists every schema key (each new key
    # would change it), so only its start is pinned
    shown = _main(capsys, tmp_path, *BASE, "--cfg", "job")
    text += shown[: shown.index("mode: train\n")] + "...\n" + shown[shown.index("--- stderr") :]
    text += _main(capsys, tmp_path, *BASE, "--dry-run")
    text += _main(
        capsys,
        tmp_path,
        *BASE,
        "sweep.params.optimizer.learning_rate=[2,4,4.0]",
        "+sweep.params.optimizer.mixed_weight={uniform:[0.2,0.3]}",
        "sweep.num_samples=2",
        "sweep.scheduler=asha",
        "optimizer.gate_metric=mixed",
        "sweep.dry_run=true",
    )
    assert not (tmp_path / "out").exists()
    check("sweep_commands.txt", text)


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    shutil.copytree(DATA / "sweep" / "runs", tmp_path / "runs")
    return tmp_path / "runs"


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str).replace("NaN", "nan")


def test_step_and_final_reports_are_the_same(runs, tmp_path):
    lines = []
    for rd in sorted(runs.iterdir()):
        last = None
        for h in compare.read_steps(rd):
            last = sweep.step_report(h, rd.name, rd)
            lines.append(_json(last))
        try:
            lines.append(_json(sweep.final_report(rd, rd.name, last)))
        except RuntimeError as e:
            lines.append(f"RuntimeError: {e}")
        lines.append(_json(sweep.final_report(rd, rd.name, None)) if (rd / "summary.json").exists() else "-")
    check("sweep_reports.txt", "\n".join(lines).replace(str(tmp_path), "<tmp>") + "\n")


def test_trial_table_prints_the_same(capsys):
    keys = ["optimizer.learning_rate", "optimizer.mixed_weight"]
    table = sweep_report._TrialTable(keys, 5, 0.0)
    trials = [
        SimpleNamespace(
            config={"optimizer.learning_rate": 4, "optimizer.mixed_weight": 0.123456789, "seed": 42},
            status="RUNNING",
            last_result={"step": 3, "selection_score": 0.5, "candidate_score": math.nan, "best_selection_score": 0.75},
        ),
        SimpleNamespace(
            config={"optimizer.learning_rate": 2.0, "optimizer.mixed_weight": 0.5, "seed": 43},
            status="TERMINATED",
            last_result={
                "step": 6,
                "selection_score": 0.875,
                "candidate_score": 0.625,
                "best_selection_score": 0.875,
                "test_hard_best": 0.6,
            },
        ),
        SimpleNamespace(config={"optimizer.learning_rate": 6, "seed": 42}, status="PENDING", last_result=None),
    ]
    table.report(trials, False)
    table.report(trials, False)  # unchanged: not printed again
    table.report(trials, True)
    assert table.should_report(trials)
    check("sweep_trial_table.txt", capsys.readouterr().out)


def test_skill_diffs_sweep_json_and_closing_words_are_the_same(runs, tmp_path, capsys):
    sdir = tmp_path / "sweep"
    shutil.copytree(DATA / "sweep", sdir)
    meta = json.loads((sdir / "sweep.json").read_text())
    for t in meta["trials"]:
        t["run_dir"] = str(sdir / t["run_dir"])
    (sdir / "sweep.json").write_text(json.dumps(meta))
    comp = compare.sweep_comparison(sdir)
    path = sdir / "skill_diffs.md"
    assert sweep.write_skill_diffs(comp.records, path) == path
    text = "=== skill_diffs.md\n" + path.read_text()

    spec, overrides = sweep.parse_args(BASE + ["sweep.scheduler=asha"])
    trials = [
        sweep.Trial(t["key"], t["params"], t["seed"], {}, Path(t["run_dir"]), {}, status)
        for t, status in zip(meta["trials"], ["finished", "stopped", "unfinished", "new"] * 4)
    ]
    parent = SimpleNamespace(run_id="parent-1", uri="sqlite:///m.db", enabled=True)
    previous = {str(trials[1].run_dir): {"status": "stopped", "stopped": {"by": "asha", "step": 2}}}
    text += (
        "=== sweep.json\n" + _json(sweep_report._sweep_meta("golden", spec, trials, overrides, parent, previous)) + "\n"
    )
    for chosen, failed in (
        (trials[:1], []),
        (trials[:2], []),
        (trials[:3], []),
        (trials[:3], ["lr=2,seed=1: RuntimeError: boom"]),
    ):
        code = sweep_report._sweep_exit(chosen, failed)
        text += f"=== exit {code}\n{capsys.readouterr().err}"
    check("sweep_files.txt", text.replace(str(tmp_path), "<tmp>"))
