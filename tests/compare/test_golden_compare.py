"""`python -m skillopt_ray.compare` pinned byte for byte on a fixed sweep folder (tests/data/golden/sweep): what it
prints, the files it writes (comparison.md, comparison.csv, paired.csv), what its plots draw, and its refusals.
Written by today's code before compare.py was split by job (issue 39: grouping, statistics, rendering); a change
that means to alter an output rewrites the golden files with SKILLOPT_GOLDEN_WRITE=1 and shows the difference."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from golden_helpers import DATA, check

from skillopt_ray.compare import command as compare

BASELINE = "optimizer.learning_rate=2,optimizer.gate_metric=hard"


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    """The fixed sweep folder, copied, with its trials' run directories made absolute (as a sweep writes them)."""
    sdir = tmp_path / "sweep"
    shutil.copytree(DATA / "sweep", sdir)
    meta = json.loads((sdir / "sweep.json").read_text())
    for t in meta["trials"]:
        t["run_dir"] = str(sdir / t["run_dir"])
    (sdir / "sweep.json").write_text(json.dumps(meta, indent=2))
    return sdir


def _run(capsys: Any, sdir: Path, *args: str) -> str:
    code = compare.main(list(args))
    out, err = capsys.readouterr()
    text = f"$ compare {' '.join(args)}\nexit {code}\n--- stdout\n{out}--- stderr\n{err}"
    return text.replace(str(sdir), "<sweep>")


def _num(v: Any) -> str:
    return "nan" if isinstance(v, float) and math.isnan(v) else f"{float(v):.6g}"


def _artist_lines(fig: Any) -> list[str]:
    """What a figure draws, as text: axes titles and labels, ticks, every line's data, bands, texts, legends."""
    fig.canvas.draw()
    out = []
    for i, ax in enumerate(fig.axes):
        out.append(f"axes {i}: title={ax.get_title()!r} x={ax.get_xlabel()!r} y={ax.get_ylabel()!r}")
        out.append(f"  xlim={[_num(v) for v in ax.get_xlim()]} ylim={[_num(v) for v in ax.get_ylim()]}")
        out.append(f"  xticks={[t.get_text() for t in ax.get_xticklabels()]} at {[_num(v) for v in ax.get_xticks()]}")
        for ln in ax.get_lines():
            xs, ys = [_num(v) for v in ln.get_xdata()], [_num(v) for v in ln.get_ydata()]
            out.append(
                f"  line {ln.get_label()!r} marker={ln.get_marker()!r} ls={ln.get_linestyle()!r} "
                f"color={ln.get_color()!r} x={xs} y={ys}"
            )
        for coll in ax.collections:
            for path in coll.get_paths():
                out.append(f"  band {[(_num(x), _num(y)) for x, y in path.vertices]}")
        for t in ax.texts:
            out.append(f"  text {t.get_text()!r} at {_num(t.get_position()[0])}")
        legend = ax.get_legend()
        if legend is not None:
            out.append(f"  legend {[t.get_text() for t in legend.get_texts()]}")
    return out


def test_compare_prints_and_writes_the_same_files(sweep_dir, capsys):
    out = sweep_dir / "compare"
    text = _run(capsys, sweep_dir, "--sweep-dir", str(sweep_dir), "--baseline", BASELINE)
    for name in ("comparison.md", "comparison.csv", "paired.csv"):
        text += f"=== {name}\n{(out / name).read_text()}"
    text += "=== files\n" + "\n".join(sorted(p.name for p in out.iterdir())) + "\n"
    check("compare_sweep.txt", text)


def test_compare_regrouped_prints_the_same(sweep_dir, capsys):
    text = _run(
        capsys,
        sweep_dir,
        "--sweep-dir",
        str(sweep_dir),
        "--group-by",
        "optimizer.gate_metric",
        "--baseline",
        "optimizer.gate_metric=soft",
        "--out",
        str(sweep_dir / "by_gate"),
    )
    check("compare_by_gate.txt", text)


def test_compare_plots_draw_the_same(sweep_dir):
    import matplotlib.pyplot as plt

    figs = compare.sweep_comparison(sweep_dir).figures()
    lines = []
    for name, fig in figs.items():
        lines += [f"== {name}", *_artist_lines(fig)]
        plt.close(fig)
    check("compare_plots.txt", "\n".join(lines) + "\n")


def test_compare_ties_and_statistics_read_the_same():
    """A tie on selection (no winner), a clipped interval, runs with and without a per-run interval."""

    def rec(lr: str, seed: int, sel: float, test: float, **extra: float) -> compare.Record:
        metrics = {
            "test_hard_best": test,
            "test_soft_best": test,
            "best_selection_score": sel,
            "improvement_hard": test - 0.25,
            "tokens": 100.0 * seed,
            "cost_usd": 0.01 * seed,
            "wall_time_s": 10.0 + seed,
            **extra,
        }
        return compare.Record({"lr": lr}, seed, metrics)

    recs = [
        rec("2", 1, 0.75, 1.0, test_hard_best_task_halfwidth=0.2, test_tasks=8.0),
        rec("2", 2, 0.75, 0.875),
        rec("4", 1, 0.75, 0.5),
        rec("4", 2, 0.75, 0.625, test_hard_best_task_halfwidth=0.1, test_tasks=16.0),
        rec("6", 1, 0.5, 0.0),
    ]
    comp = compare.Comparison(recs, ["lr"], {"trials": 7, "finished": 5, "stopped": 1, "unfinished": 1})
    text = comp.markdown({"lr": "4"}) + "\n"
    text += json.dumps(comp.best(), sort_keys=True, default=str) + "\n"
    text += json.dumps(comp.rows(), sort_keys=True, default=str) + "\n"
    text += json.dumps(comp.paired({"lr": "2"}), sort_keys=True, default=str) + "\n"
    text += json.dumps(comp.curve_stats(recs), sort_keys=True, default=str) + "\n"
    text += json.dumps([compare.summarize(v, b) for v, b in (([], (0, 1)), ([0.5], (0, 1)), ([0.9, 1.0], (0, 1)))])
    check("compare_statistics.txt", text + "\n")


def test_compare_refusals_are_the_same(sweep_dir, capsys, monkeypatch):
    monkeypatch.chdir(sweep_dir)
    text = _run(capsys, sweep_dir)
    text += _run(capsys, sweep_dir, "--sweep-dir", str(sweep_dir / "runs"))
    text += _run(capsys, sweep_dir, "--sweep-dir", str(sweep_dir), "--baseline", "lr")
    text += _run(capsys, sweep_dir, "--sweep-dir", str(sweep_dir), "--baseline", "optimizer.learning_rate=8")
    text += _run(capsys, sweep_dir, "--sweep-dir", str(sweep_dir), "--out", str(sweep_dir / "o"))
    text += _run(capsys, sweep_dir, "--sweep-dir", str(sweep_dir), "--out", str(sweep_dir / "o"))
    empty = sweep_dir / "empty"
    empty.mkdir()
    (empty / "sweep.json").write_text(json.dumps({"keys": ["x"], "trials": []}))
    text += _run(capsys, sweep_dir, "--sweep-dir", str(empty))
    check("compare_refusals.txt", text)


def test_compare_help_is_the_same(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # argparse wraps the help to the terminal's width
    with pytest.raises(SystemExit) as done:
        compare.main(["--help"])
    check("compare_help.txt", f"exit {done.value.code}\n{capsys.readouterr().out}")
