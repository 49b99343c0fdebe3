"""Sweeps on Ray Tune (search space, per-step reports, ASHA, dry run) with MLflow parent/child runs, the
comparison shared with `compare`, resume, and the MLflow UI served for real."""

from __future__ import annotations

import csv
import glob
import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from conftest import qa_fixture
from scipy import stats
from scripted_server import Policies, ScriptedServer

from skillopt_ray.cli import UsageError
from skillopt_ray.compare import command as compare
from skillopt_ray.sweep import command as sweep
from skillopt_ray.sweep import spec as sweep_spec
from skillopt_ray.sweep import tune as sweep_tune


def test_presets_combine_with_seeds_and_command_line_params():
    spec, rest = sweep.parse_args(
        ["+experiment=alfworld", "+sweep=[lr,gate]", "sweep.seeds=3", "sweep.max_concurrent=2", "llm=openai"]
    )
    assert spec.grid == {"optimizer.learning_rate": [2, 4, 6], "optimizer.gate_metric": ["hard", "soft", "mixed"]}
    assert spec.seeds == [0, 1, 2] and spec.max_concurrent == 2 and rest == ["+experiment=alfworld", "llm=openai"]
    spec, _ = sweep.parse_args(
        ["+sweep=gate_mixed_weight", "sweep.seeds=[7,9]", "+sweep.params.optimizer.batch_size=[8]"]
    )
    assert (
        spec.fixed == {"optimizer.gate_metric": "mixed"}
        and spec.seeds == [7, 9]
        and spec.grid["optimizer.batch_size"] == [8]
    )
    # a preset's key is replaced by the same key on the command line (Hydra's override, no + needed)
    spec, _ = sweep.parse_args(["+sweep=lr", "sweep.params.optimizer.learning_rate=[4,6]"])
    assert spec.grid == {"optimizer.learning_rate": [4, 6]}
    with pytest.raises(UsageError, match="unknown sweep preset: nope; available: asha, batch"):
        sweep.parse_args(["+sweep=nope"])
    with pytest.raises(UsageError, match="nothing to sweep"):
        sweep.parse_args(["+experiment=alfworld"])
    with pytest.raises(UsageError, match="sweep.seeds must be"):
        sweep.parse_args(["+sweep=lr", "sweep.seeds=zero"])
    # the sweep's options are keys of a schema: a misspelt one is answered with the nearest
    with pytest.raises(UsageError, match="unknown key sweep.max_concurent; did you mean sweep.max_concurrent"):
        sweep.parse_args(["+sweep=lr", "sweep.max_concurent=2"])
    with pytest.raises(UsageError, match=r"add one with \+sweep.params.optimizer.batch_size="):
        sweep.parse_args(["+sweep=lr", "sweep.params.optimizer.batch_size=[8]"])
    with pytest.raises(UsageError, match="sweep.scheduler must be none or asha"):
        sweep.parse_args(["+sweep=lr", "sweep.scheduler=hyperband"])


def test_sweep_bad_inputs_are_one_line_with_the_fix(tmp_path, capsys):
    """--cfg job prints the composed sweep (it was handed to Hydra's lexer as an override); a misspelt option
    names the right one; Hydra's function syntax for a distribution says how to write one; no run made."""
    out = tmp_path / "out"
    base = ["+experiment=searchqa", "+smoke=tiny", f"output_dir={out}", "+sweep=lr", "sweep.seeds=2"]
    assert sweep.main(base + ["--cfg", "job"]) == 0
    shown = yaml.safe_load(capsys.readouterr().out)
    assert (
        shown["sweep"]["params"] == {"optimizer.learning_rate": "grid [2, 4, 6]"} and shown["experiment"] == "searchqa"
    )
    for bad, said in (
        (["sweep.max_concurent=2"], "did you mean sweep.max_concurrent"),
        (["seeds=2"], "did you mean sweep.seeds"),
        (["+sweep.params.optimizer.mixed_weight=uniform(0.1,0.9)"], "one-key map"),
        (["+sweep.params.optimizer.mixed_weight=choice(0.1,0.9)"], "one-key map"),
        (["--cfg", "all"], "--cfg job"),
        (["--bogus"], "unknown flag --bogus"),
    ):
        assert sweep.main(base + bad) == 2, bad
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and "Traceback" not in err[0], (bad, err)
    assert not out.exists()
    # the run command points a sweep preset at the sweep command instead of guessing a key
    from skillopt_ray.cli.app import main as run_main

    assert run_main(["+experiment=searchqa", "+sweep=lr"]) == 2
    assert "python -m skillopt_ray.sweep" in capsys.readouterr().err


def test_presets_from_a_config_dir(tmp_path):
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "mine.yaml").write_text("params:\n  optimizer:\n    batch_size: [4, 8]\n")
    spec, _ = sweep.parse_args(["+sweep=mine"], (str(tmp_path),))
    assert spec.grid == {"optimizer.batch_size": [4, 8]} and spec.search_dirs == (str(tmp_path),)


def test_sweep_definitions_live_in_the_top_level_sweeps_folder(tmp_path):
    """+sweep=NAME composes the project's sweeps/ folder (a Hydra search path entry), never conf/; the
    multi-seed and ASHA definitions are presets like the others; a --config-dir preset of the same name wins."""
    root = Path(__file__).resolve().parents[2]
    assert sweep_spec.SWEEPS_DIR == root / "sweeps" and not (root / "conf" / "sweep").exists()
    assert {"lr", "gate", "batch", "seeds", "asha"} <= set(sweep.preset_names())
    spec, _ = sweep.parse_args(["+sweep=lr"])
    assert spec.grid == {"optimizer.learning_rate": [2, 4, 6]} and spec.presets == ["lr"]
    spec, _ = sweep.parse_args(["+sweep=[lr,seeds,asha]"])
    assert spec.seeds == [0, 1, 2, 3, 4] and spec.scheduler == "asha" and spec.asha["grace_period"] == 1
    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "lr.yaml").write_text("params:\n  optimizer:\n    learning_rate: [3, 5]\n")
    spec, _ = sweep.parse_args(["+sweep=lr"], (str(tmp_path),))
    assert spec.grid == {"optimizer.learning_rate": [3, 5]}
    with pytest.raises(UsageError, match=r"unknown sweep preset: nope; available: asha, batch, .*seeds"):
        sweep.parse_args(["+sweep=nope"])


def test_search_space_is_per_key_with_grids_choices_and_ranges(tmp_path):
    from ray.tune.search.sample import Categorical, Float, Integer

    (tmp_path / "sweep").mkdir()
    (tmp_path / "sweep" / "mine.yaml").write_text(
        "params:\n  optimizer:\n    mixed_weight: {uniform: [0.1, 0.9]}\n    gate_metric: {choice: [hard, soft]}\n"
        "fixed:\n  optimizer:\n    lr_schedule: constant\nnum_samples: 3\n"
    )
    spec, _ = sweep.parse_args(
        [
            "+sweep=[lr,mine]",
            "sweep.seeds=2",
            "sweep.params.optimizer.learning_rate=[4,4.0,6]",
            "+sweep.params.optimizer.min_learning_rate={randint:[1,3]}",
            "+sweep.params.optimizer.batch_size={loguniform: [2, 64]}",
        ],
        (str(tmp_path),),
    )
    assert spec.num_samples == 3 and spec.fixed == {"optimizer.lr_schedule": "constant"}
    space = sweep.search_space(spec, [42, 43])
    # one Tune domain per swept key (not one grid over whole config dicts); 4 and 4.0 are one grid value
    assert space["optimizer.learning_rate"] == {"grid_search": [4, 6]} and space["seed"] == {"grid_search": [42, 43]}
    assert isinstance(space["optimizer.mixed_weight"], Float) and (
        space["optimizer.mixed_weight"].lower,
        space["optimizer.mixed_weight"].upper,
    ) == (0.1, 0.9)
    assert isinstance(space["optimizer.gate_metric"], Categorical) and space["optimizer.gate_metric"].categories == [
        "hard",
        "soft",
    ]
    assert isinstance(space["optimizer.min_learning_rate"], Integer) and isinstance(
        space["optimizer.batch_size"], Float
    )
    assert "trial" not in space and not any(
        isinstance(v, dict) and "grid_search" in v and isinstance(v["grid_search"][0], dict) for v in space.values()
    )
    configs = sweep.expand(space, spec.num_samples, seed=7)
    assert len(configs) == 3 * 2 * 2  # samples x learning-rate grid x seeds
    assert configs == sweep.expand(space, spec.num_samples, seed=7)  # the same seed draws the same trials (resume)
    assert configs != sweep.expand(space, spec.num_samples, seed=8)
    assert all(
        0.1 <= c["optimizer.mixed_weight"] <= 0.9
        and c["optimizer.min_learning_rate"] in (1, 2)
        and 2 <= c["optimizer.batch_size"] <= 64
        and type(c["optimizer.min_learning_rate"]) is int
        for c in configs
    )
    # one draw per sample, the same for every grid value and seed: the seeds of a draw form one group
    assert len({c["optimizer.mixed_weight"] for c in configs}) == 3
    assert all(
        len(
            {
                (c["optimizer.mixed_weight"], c["optimizer.gate_metric"], c["optimizer.min_learning_rate"])
                for c in configs[i * 4 : (i + 1) * 4]
            }
        )
        == 1
        for i in range(3)
    )
    for bad, msg in (
        ("+sweep.params.optimizer.mixed_weight={uniform:[0.9,0.1]}", "two numbers lo < hi"),
        ("+sweep.params.optimizer.mixed_weight={loguniform:[0,1]}", "lo > 0"),
        ("+sweep.params.optimizer.mixed_weight={gauss:[0,1]}", "unknown kind"),
        ("sweep.num_samples=3", "every swept key is a grid"),
    ):
        with pytest.raises(UsageError, match=msg):
            sweep.parse_args(["+sweep=lr", bad])


def test_dry_run_lists_the_trials_without_starting_ray(tmp_path, monkeypatch, capsys):
    import ray

    def refuse(*_a, **_k):
        raise AssertionError("the dry run started Ray")

    monkeypatch.setattr(sweep_tune, "start_ray", refuse)
    monkeypatch.setattr(ray, "init", refuse)
    out = tmp_path / "out"
    args = [
        "+experiment=searchqa",
        "+smoke=tiny",
        f"output_dir={out}",
        "+sweep=lr",
        "sweep.params.optimizer.learning_rate=[2,4,4.0]",
        "+sweep.params.optimizer.mixed_weight={uniform:[0.2,0.3]}",
        "sweep.num_samples=2",
        "sweep.seeds=2",
    ]
    assert sweep.main(args + ["--dry-run"]) == 0
    text = capsys.readouterr().out
    rows = [line.split() for line in text.splitlines() if line.split() and line.split()[0] in ("2", "4")]
    assert len(rows) == 2 * 2 * 2  # 4 and 4.0 are one value: 2 rates x 2 samples x 2 seeds
    assert (
        {r[0] for r in rows} == {"2", "4"}
        and {r[2] for r in rows} == {"42", "43"}
        and all(0.2 <= float(r[1]) <= 0.3 for r in rows)
    )
    assert len({r[1] for r in rows}) == 2  # one draw per sample, shared by its rates and seeds
    assert (
        all(r[3] == "new" and r[4].startswith("searchqa-train-seed") for r in rows) and len({r[4] for r in rows}) == 8
    )
    assert "uniform(0.2, 0.3)" in text and "8 trials: 8 new" in text
    assert not out.exists()  # nothing written
    assert sweep.main(args + ["sweep.dry_run=true"]) == 0 and capsys.readouterr().out == text


def test_asha_max_t_is_one_past_the_runs_last_step(tmp_path):
    qa_fixture(tmp_path / "qa")  # 8 train items
    base = ["+experiment=searchqa", f"env.data_dir={tmp_path / 'qa'}", "env.options.split_source=folders"]
    from skillopt_ray.cli import load

    runs = [load(base + [f"optimizer.batch_size={b}", "optimizer.epochs=2"]) for b in (3, 8)]
    assert [sweep.training_steps(d) for d in runs] == [2 * 3, 2 * 1]  # epochs x ceil(8 / batch size)
    assert sweep.asha_max_t(runs) == 7
    limited = load(base + ["optimizer.batch_size=2", "optimizer.epochs=1", "env.limit_train=4"])
    assert sweep.training_steps(limited) == 2


def test_trial_resources_and_concurrency_follow_cpus_and_the_endpoint():
    data = {
        "ray": {"env_actors": 4, "episodes_per_actor": 4, "actor_num_cpus": 0.0},
        "llm": {"target": {"max_concurrency": 32, "requests_per_minute": 0}},
    }
    assert sweep.trial_cpus(data) == 1.0
    assert (
        sweep.max_concurrent_trials(data, 16, None) == 2
    )  # the endpoint takes 32 calls; each trial keeps 16 in flight
    data["llm"]["target"]["max_concurrency"] = 256
    assert sweep.max_concurrent_trials(data, 2, None) == 2  # now the 2 CPUs bind
    assert sweep.max_concurrent_trials(data, 16, 3) == 3


def test_statistics_match_hand_computed_values_and_intervals_stay_in_range():
    st = compare.summarize([1.0, 2.0, 3.0])
    assert st["mean"] == 2.0 and st["std"] == 1.0 and not st["clipped"]
    assert st["ci_hi"] - 2.0 == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert math.isnan(compare.summarize([5.0])["std"])
    recs = [
        compare.Record({"lr": lr}, seed, {"test_hard_best": v})
        for lr, seed, v in [("4", 0, 0.5), ("4", 1, 0.6), ("6", 0, 0.7), ("6", 1, 0.9)]
    ]
    (p,) = compare.Comparison(recs, ["lr"]).paired({"lr": "4.0"})
    assert p["lr"] == "6" and p["pairs"] == 2 and p["diff_mean"] == pytest.approx(0.25)

    # scores near 1 and near 0: the t interval would leave [0, 1]; it is clipped there and marked
    def metrics(hard: float) -> dict:
        return {
            "test_hard_best": hard,
            "test_soft_best": hard,
            "best_selection_score": 1 - hard,
            "improvement_hard": hard,
            "tokens": 10.0,
            "cost_usd": 0.0,
            "wall_time_s": 1.0,
        }

    recs = [compare.Record({"lr": "4"}, s, metrics(v)) for s, v in enumerate([1.0, 0.8, 1.0])]
    comp = compare.Comparison(recs, ["lr"])
    (row,) = comp.rows()
    raw = compare.summarize([1.0, 0.8, 1.0])
    assert (
        raw["ci_hi"] > 1
        and row["test_hard_best_ci_hi"] == 1.0
        and row["test_hard_best_ci_lo"] == pytest.approx(raw["ci_lo"])
    )
    assert row["best_selection_score_ci_lo"] == 0.0 and row["test_hard_best_ci_clipped"] == 1
    assert "clipped to the metric's range" in comp.markdown() and "1.000]*" in comp.markdown()
    for c in comp.curve_stats(recs) + comp.curve_stats(recs, "candidate"):
        assert math.isnan(c["ci_lo"]) or 0.0 <= c["ci_lo"] <= c["ci_hi"] <= 1.0


def test_values_are_normalised_so_spellings_form_one_group():
    assert [compare.norm_value(v) for v in (4, 4.0, "4.0", "4", " 4 ")] == ["4"] * 5
    assert [compare.norm_value(v) for v in (0.5, "0.50", True, "True", None, "mixed")] == [
        "0.5",
        "0.5",
        "true",
        "true",
        "null",
        "mixed",
    ]
    recs = [
        compare.Record({"optimizer.learning_rate": v}, s, {"test_hard_best": 0.5})
        for s, v in enumerate([4, 4.0, "4.0", 6])
    ]
    groups = compare.Comparison(recs, ["optimizer.learning_rate"]).groups()
    assert {k: len(v) for k, v in groups.items()} == {("4",): 3, ("6",): 1}


def _metrics(sel: float, tokens: float = 100.0) -> dict:
    return {
        "test_hard_best": 0.5,
        "test_soft_best": 0.5,
        "best_selection_score": sel,
        "improvement_hard": 0.0,
        "tokens": tokens,
        "cost_usd": 0.0,
        "wall_time_s": 1.0,
    }


def test_step_records_come_from_history_jsonl_while_a_run_goes_on(tmp_path):
    rows = [{"step": 1, "current_score": 0.5}, {"step": 2, "current_score": 0.25}, {"step": 2, "current_score": 0.75}]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 3, "curr')
    (tmp_path / "history.json").write_text(json.dumps(rows[:1]))  # written at epoch ends only: behind
    steps = compare.read_steps(tmp_path)
    assert [(h.step, h.current_score) for h in steps] == [
        (1, 0.5),
        (2, 0.75),
    ]  # redone step: last record; half line skipped
    (tmp_path / "history.jsonl").unlink()
    assert [(h.step, h.current_score) for h in compare.read_steps(tmp_path)] == [
        (1, 0.5)
    ]  # runs from before history.jsonl
    assert compare.read_steps(tmp_path / "missing") == []


def test_ties_for_the_best_configuration_are_reported():
    recs = [
        compare.Record({"lr": "2"}, 0, _metrics(0.75, tokens=900)),
        compare.Record({"lr": "4"}, 0, _metrics(0.75, tokens=100)),
        compare.Record({"lr": "6"}, 0, _metrics(0.5, tokens=10)),
    ]
    recs[0].metrics["test_hard_best"], recs[1].metrics["test_hard_best"] = 0.9, 0.6
    comp = compare.Comparison(recs, ["lr"])
    best = comp.best()
    # a tie on selection has no winner: not the one with fewer tokens (which here has the lower test score)
    assert best["params"] is None and not best["winner"] and best["tied"] == [{"lr": "2"}, {"lr": "4"}]
    assert best["rule"] == "no winner on selection: 2 configurations tie at mean best selection score 0.750"
    text = comp.markdown()
    assert "Best configuration: none, no winner on selection" in text
    assert "lr=2: 0.900; lr=4: 0.600." in text
    alone = compare.Comparison(recs[1:], ["lr"]).best()
    assert alone["winner"] and alone["params"] == {"lr": "4"} and alone["rule"] == "highest mean best selection score"
    assert (
        "Best configuration: lr=4 (highest mean best selection score)."
        in compare.Comparison(recs[1:], ["lr"]).markdown()
    )


def test_paired_clipped_interval_is_marked_and_wall_time_is_the_runs(tmp_path):
    base = [compare.Record({"lr": "2"}, seed, _metrics(0.5)) for seed in (1, 2)]
    other = [compare.Record({"lr": "4"}, seed, _metrics(0.5)) for seed in (1, 2)]
    for r, v in zip(base, (0.0, 0.0)):
        r.metrics["test_hard_best"] = v
    for r, v in zip(other, (1.0, 0.9)):
        r.metrics["test_hard_best"] = v
    comp = compare.Comparison(base + other, ["lr"])
    (p,) = comp.paired({"lr": "2"})
    assert p["diff_ci_hi"] == 1.0 and p["diff_ci_clipped"] == 1  # the t interval passes 1: clipped there
    assert "[0.315, 1.000]* |" in comp.markdown({"lr": "2"})
    # "wall s" is the run's time over its commands (sessions.json), not the training loop's (summary's 3 s)
    rd = _fake_run(tmp_path, "w", [0.5], [1], 0.5)
    (rd / "sessions.json").write_text(json.dumps([{"wall_s": 40.0}, {"wall_s": 10.5}]))
    assert compare.record_from_run_dir({}, 1, rd).metrics["wall_time_s"] == 50.5
    (rd / "sessions.json").unlink()
    assert compare.record_from_run_dir({}, 1, rd).metrics["wall_time_s"] == 3.0


def _fake_run(root: Path, name: str, sel: list[float], epochs: list[int], test: float) -> Path:
    """A finished run directory with the files the comparison reads."""
    rd = root / "runs" / name
    rd.mkdir(parents=True)
    hist = [
        {
            "step": i + 1,
            "epoch": e,
            "current_score": s,
            "candidate_gate_score": s,
            "best_score": max(sel[: i + 1]),
            "action": "accept" if i == 0 or s > sel[i - 1] else "reject",
        }
        for i, (s, e) in enumerate(zip(sel, epochs))
    ]
    (rd / "history.json").write_text(json.dumps(hist))
    (rd / "state.json").write_text(json.dumps({"phase": "done"}))
    (rd / "summary.json").write_text(
        json.dumps(
            {
                "test": {k: {"hard": test, "soft": test} for k in ("initial", "best", "final")},
                "selection": {"initial": 0.25, "best": max(sel), "final": sel[-1]},
                "tokens": {"tokens": 50, "cost_usd": 0.0},
                "wall_time_s": 3.0,
            }
        )
    )
    return rd


def _fake_sweep(tmp_path: Path) -> Path:
    """A sweep folder whose sweep.json lists one run directory twice (as 4 and as 4.0) and one run per other seed."""
    sdir = tmp_path / "sweeps" / "s1"
    sdir.mkdir(parents=True)
    a = _fake_run(tmp_path, "a", [0.5, 0.75, 0.5], [1, 1, 2], 0.5)
    b = _fake_run(tmp_path, "b", [0.5, 0.5, 0.75], [1, 1, 2], 0.75)
    c = _fake_run(tmp_path, "c", [0.25, 0.5, 0.5], [1, 1, 2], 0.25)
    trials = [
        {
            "key": "lr=4,seed=1",
            "params": {"optimizer.learning_rate": "4"},
            "seed": 1,
            "run_dir": str(a),
            "status": "finished",
        },
        {
            "key": "lr=4.0,seed=1",
            "params": {"optimizer.learning_rate": "4.0"},
            "seed": 1,
            "run_dir": str(a),
            "status": "finished",
        },
        {
            "key": "lr=4,seed=2",
            "params": {"optimizer.learning_rate": 4},
            "seed": 2,
            "run_dir": str(b),
            "status": "finished",
        },
        {
            "key": "lr=6,seed=1",
            "params": {"optimizer.learning_rate": "6"},
            "seed": 1,
            "run_dir": str(c),
            "status": "finished",
        },
        {
            "key": "lr=6,seed=2",
            "params": {"optimizer.learning_rate": "6"},
            "seed": 2,
            "run_dir": str(tmp_path / "gone"),
            "status": "stopped",
        },
    ]
    (sdir / "sweep.json").write_text(
        json.dumps(
            {
                "name": "s1",
                "keys": ["optimizer.learning_rate"],
                "trials": trials,
                "parent_run_id": None,
                "tracking_uri": None,
            }
        )
    )
    return sdir


def test_sweep_and_compare_count_the_same_runs_and_compare_never_overwrites(tmp_path, capsys):
    sdir = _fake_sweep(tmp_path)
    own = compare.sweep_comparison(sdir)
    own.write(sdir / "comparison", force=True)
    stamp = {p.name: p.stat().st_mtime_ns for p in (sdir / "comparison").iterdir()}
    assert compare.main(["--sweep-dir", str(sdir)]) == 0
    mine = list(csv.DictReader(open(sdir / "comparison" / "comparison.csv")))
    theirs = list(csv.DictReader(open(sdir / "compare" / "comparison.csv")))
    assert [(r["optimizer.learning_rate"], r["n"], r["seeds"]) for r in mine] == [("4", "2", "1 2"), ("6", "1", "1")]
    assert mine == theirs  # one source of truth: the same runs, the same numbers
    assert (
        "3 finished of 4 trials, 1 stopped early by the scheduler (not counted)"
        in (sdir / "compare" / "comparison.md").read_text()
    )
    # a second compare into the same folder, or into the sweep's own comparison/, is refused; files untouched
    before = (sdir / "compare" / "comparison.csv").read_bytes()
    capsys.readouterr()
    assert compare.main(["--sweep-dir", str(sdir)]) == 2
    assert (
        "already holds comparison.md" in capsys.readouterr().err
        and (sdir / "compare" / "comparison.csv").read_bytes() == before
    )
    assert compare.main(["--sweep-dir", str(sdir), "--out", str(sdir / "comparison")]) == 2
    assert {p.name: p.stat().st_mtime_ns for p in (sdir / "comparison").iterdir()} == stamp
    assert compare.main(["--sweep-dir", str(sdir), "--force", "--baseline", "optimizer.learning_rate=4.0"]) == 0
    assert list(csv.DictReader(open(sdir / "compare" / "paired.csv")))[0]["pairs"] == "1"


def test_plots_have_integer_steps_a_labelled_band_epoch_marks_falling_curves_and_distinct_groups(tmp_path):
    sdir = _fake_sweep(tmp_path)
    comp = compare.sweep_comparison(sdir)
    figs = comp.figures()
    fig = figs["learning_curves.png"]
    ax = fig.axes[0]
    fig.canvas.draw()
    ticks = [float(t) for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks and all(t.is_integer() for t in ticks)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("95%" in label and "interval" in label for label in labels) and any(
        "lr" not in label and "epoch" in label for label in labels
    )
    assert "learning_rate=4 (n=2)" in labels and "learning_rate=6 (n=1)" in labels
    group_lines = [ln for ln in ax.get_lines() if ln.get_label().startswith("learning_rate=")]
    assert len({(ln.get_marker(), ln.get_linestyle()) for ln in group_lines}) == 2
    xs = [tuple(round(x - round(x), 6) for x in ln.get_xdata()) for ln in group_lines]
    assert xs[0] != xs[1]  # dodged: overlapping groups do not hide each other
    four = group_lines[0].get_ydata()
    assert list(four) == pytest.approx([0.25, 0.5, 0.625, 0.625])  # means as recorded, step 0..3
    six = group_lines[1].get_ydata()
    assert list(six) == pytest.approx([0.25, 0.25, 0.5, 0.5])
    run_a = [0.25, 0.5, 0.75, 0.5]  # run a falls at step 3: a running max would hide it
    assert comp.curve_stats([comp.groups()[("4",)][0]])[3]["mean"] == 0.5 and max(run_a[:4]) == 0.75
    epoch_lines = [ln for ln in ax.get_lines() if ln.get_linestyle() == ":" and list(ln.get_xdata()) == [2.5, 2.5]]
    assert epoch_lines  # epoch 2 starts after step 2
    for coll in ax.collections:
        for path in coll.get_paths():
            ys = path.vertices[:, 1]
            assert ys.min() >= 0.0 and ys.max() <= 1.0
    test_ax = fig.axes[1]
    assert [t.get_text() for t in test_ax.get_xticklabels()] == ["initial", "best", "final"]
    acc = figs["accept_rate.png"].axes[0]
    figs["accept_rate.png"].canvas.draw()
    assert all(float(t).is_integer() for t in acc.get_xticks())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tune_results(sdir: Path) -> list[list[dict]]:
    """Per trial of the latest Tune run in a sweep folder: the results Tune recorded, in order."""
    runs = sorted((sdir / "tune").iterdir(), key=lambda p: p.stat().st_mtime)
    out = []
    for f in sorted(glob.glob(str(runs[-1] / "trial_*" / "result.json"))):
        out.append([json.loads(line) for line in open(f) if line.strip()])
    return out


def _metric_named(client, run_id: str, name: str) -> list:
    keys = client.get_run(run_id).data.metrics
    (key,) = [k for k in keys if k.rsplit("/", 1)[-1] == name]
    return client.get_metric_history(run_id, key)


@pytest.mark.slow
def test_sweep_reports_steps_resumes_logs_parent_and_children_and_compares(ray_cluster, tmp_path, capsys):
    answers = qa_fixture(tmp_path / "qa")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        args = [
            "+experiment=searchqa",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            f"env.data_dir={tmp_path / 'qa'}",
            "env.options.split_source=folders",
            "+sweep=lr",
            "sweep.params.optimizer.learning_rate=[2,4]",
            "sweep.seeds=2",
            "sweep.report_every_s=1",
        ]
        assert sweep.main(args + ["sweep.max_concurrent=1", "sweep.interrupt_after=1"]) == 3  # stopped: rerun to resume
        (sdir,) = (tmp_path / "out" / "sweeps").iterdir()
        meta = json.loads((sdir / "sweep.json").read_text())
        done = [Path(t["run_dir"]) for t in meta["trials"] if (Path(t["run_dir"]) / "summary.json").exists()]
        assert len(done) == 1
        stamp = (done[0] / "summary.json").stat().st_mtime_ns
        calls_before = srv.state.attempts
        capsys.readouterr()
        assert sweep.main(args + ["sweep.max_concurrent=2"]) == 0
        printed = capsys.readouterr().out
        assert (done[0] / "summary.json").stat().st_mtime_ns == stamp  # the finished trial was not rerun
        assert srv.state.attempts > calls_before
    meta = json.loads((sdir / "sweep.json").read_text())
    assert len(meta["trials"]) == 4 and all((Path(t["run_dir"]) / "summary.json").exists() for t in meta["trials"])
    assert {t["status"] for t in meta["trials"]} == {"finished"}

    # Tune's live trial table: the swept key, the seed and the per-step score columns
    assert (
        "Number of trials: 4/4" in printed
        and "learning_rate" in printed
        and "selection" in printed
        and "test hard" in printed
    )
    # every trial reported to Tune once per training step (then once more with its final scores);
    # the finished trial replayed its recorded steps
    results = _tune_results(sdir)
    assert len(results) == 4
    for trial in results:
        history = compare.read_steps(Path(trial[0]["run_dir"]))
        steps = [r for r in trial if not r["finished"]]
        assert [r["step"] for r in steps] == [h.step for h in history] and len(history) >= 2
        assert [r["selection_score"] for r in steps] == [h.current_score for h in history]
        assert (
            trial[-1]["finished"] == 1
            and trial[-1]["test_hard_best"]
            == json.loads((Path(trial[0]["run_dir"]) / "summary.json").read_text())["test"]["best"]["hard"]
        )

    # MLflow: one parent, four children tagged with their swept value and seed, each with skill artifacts
    from mlflow.tracking import MlflowClient

    client = MlflowClient(meta["tracking_uri"])
    parent = client.get_run(meta["parent_run_id"])
    assert parent.info.status == "FINISHED" and "best_config" in parent.data.tags
    assert json.loads(parent.data.tags["best_config_tied"]) and parent.data.tags["best_config_rule"].startswith(
        ("highest mean best selection", "no winner on selection")
    )
    assert parent.data.params["sweep.space.optimizer.learning_rate"] == "grid [2, 4]"
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 4
    assert sorted((c.data.tags["sweep.param.optimizer.learning_rate"], c.data.tags["seed"]) for c in children) == [
        ("2", "42"),
        ("2", "43"),
        ("4", "42"),
        ("4", "43"),
    ]
    for c in children:
        assert c.info.status == "FINISHED"
        assert "skill_v0000.md" in {Path(a.path).name for a in client.list_artifacts(c.info.run_id, "skills")}
        assert [m.step for m in _metric_named(client, c.info.run_id, "current_score")] == [0, 1, 2]  # initial at 0
    assert {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "comparison")} >= {
        "comparison.md",
        "comparison.csv",
        "learning_curves.png",
        "accept_rate.png",
        "skill_diffs.md",  # each trial's best skill against the top trial's
    }

    # compare over the sweep: the same n and numbers as the sweep's own table, checked against the runs
    sweep_rows = list(csv.DictReader(open(sdir / "comparison" / "comparison.csv")))
    own = {p.name: p.stat().st_mtime_ns for p in (sdir / "comparison").iterdir()}
    out = tmp_path / "cmp"
    assert compare.main(["--sweep-dir", str(sdir), "--baseline", "optimizer.learning_rate=2.0", "--out", str(out)]) == 0
    rows = list(csv.DictReader(open(out / "comparison.csv")))
    assert rows == sweep_rows and [(r["optimizer.learning_rate"], r["n"]) for r in rows] == [("2", "2"), ("4", "2")]
    assert {p.name: p.stat().st_mtime_ns for p in (sdir / "comparison").iterdir()} == own  # the sweep's files untouched
    assert compare.main(["--sweep-dir", str(sdir), "--out", str(out)]) == 2  # no silent overwrite
    for r in rows:
        mine = [
            c for c in children if c.data.tags["sweep.param.optimizer.learning_rate"] == r["optimizer.learning_rate"]
        ]
        summaries = [json.loads((Path(c.data.tags["run_dir"]) / "summary.json").read_text()) for c in mine]
        for metric, vals in (
            ("tokens", [s["tokens"]["tokens"] for s in summaries]),
            ("test_hard_best", [s["test"]["best"]["hard"] for s in summaries]),
        ):
            mean, sd = statistics.mean(vals), statistics.stdev(vals)
            half = stats.t.ppf(0.975, len(vals) - 1) * sd / math.sqrt(len(vals))
            lo, hi = (0.0, 1.0) if metric == "test_hard_best" else (0.0, math.inf)
            assert float(r[f"{metric}_mean"]) == pytest.approx(mean)
            assert float(r[f"{metric}_std"]) == pytest.approx(sd)
            assert float(r[f"{metric}_ci_lo"]) == pytest.approx(max(lo, mean - half)) and float(
                r[f"{metric}_ci_hi"]
            ) == pytest.approx(min(hi, mean + half))
    paired = list(csv.DictReader(open(out / "paired.csv")))
    assert len(paired) == 1 and paired[0]["pairs"] == "2"
    for png in ("learning_curves.png", "accept_rate.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert "| optimizer.learning_rate | n | test hard |" in (out / "comparison.md").read_text()
    assert {Path(a.path).name for a in client.list_artifacts(parent.info.run_id, "compare/cmp")} >= {"comparison.md"}

    # a dry run of the same command lists the four trials as finished
    assert sweep.main(args + ["--dry-run"]) == 0
    assert "4 trials: 4 finished" in capsys.readouterr().out

    # the MLflow UI, served for real on loopback: the page, the REST API and a skill artifact
    port = _free_port()
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            meta["tracking_uri"],
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                page = urllib.request.urlopen(base + "/", timeout=5).read().decode()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.5)
        assert "<html" in page.lower() and "mlflow" in page.lower()
        exp_id = parent.info.experiment_id
        req = urllib.request.Request(
            base + "/api/2.0/mlflow/runs/search",
            data=json.dumps({"experiment_ids": [exp_id]}).encode(),
            headers={"Content-Type": "application/json"},
        )
        runs = json.loads(urllib.request.urlopen(req, timeout=10).read())["runs"]
        assert len(runs) == 5  # the parent and its four trials
        child = children[0].info.run_id
        skill = (
            urllib.request.urlopen(f"{base}/get-artifact?path=best_skill.md&run_uuid={child}", timeout=10)
            .read()
            .decode()
        )
        run_dir = Path(children[0].data.tags["run_dir"])
        assert skill == (run_dir / "best_skill.md").read_text()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


@pytest.mark.slow
def test_asha_stops_a_trial_between_steps_and_its_run_resumes_when_asked(ray_cluster, tmp_path, capsys):
    answers = qa_fixture(tmp_path / "qa")
    # model calls slow enough that the rest of the run (step 2, the epoch boundary, the tests) outlasts ASHA's
    # decision after step 1; on a quiet machine an instant server let the run finish first
    with ScriptedServer(Policies(target="rule_gated", answers=answers), latency_s=0.4) as srv:
        args = [
            "+experiment=searchqa",
            "+smoke=tiny",
            "llm=compatible",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            f"env.data_dir={tmp_path / 'qa'}",
            "env.options.split_source=folders",
            "+sweep.params.optimizer.learning_rate=[2]",
            "sweep.seeds=1",
        ]
        # ASHA's max_t=1: every trial is stopped once it reports step 1 (a tiny run has 2 steps)
        assert sweep.main(args + ["sweep.scheduler=asha", "sweep.asha.max_t=1"]) == 0
        (sdir,) = (tmp_path / "out" / "sweeps").iterdir()
        (t,) = json.loads((sdir / "sweep.json").read_text())["trials"]
        rd = Path(t["run_dir"])
        assert t["status"] == "stopped" and t["stopped"]["by"] == "asha" and t["stopped"]["step"] == 1
        history = compare.read_steps(rd)
        state = json.loads((rd / "state.json").read_text())
        assert 1 <= len(history) <= 2 and state["phase"] != "done" and not (rd / "summary.json").exists()
        time.sleep(2)
        assert compare.read_steps(rd) == history  # the run's actors stopped with the trial
        from mlflow.tracking import MlflowClient

        info = json.loads((rd / "mlflow_run.json").read_text())
        child = MlflowClient(info["tracking_uri"]).get_run(info["run_id"])
        assert (
            child.info.status == "KILLED"
            and child.data.tags["sweep.status"] == "stopped"
            and child.data.tags["sweep.stopped_at_step"] == "1"
        )
        capsys.readouterr()
        # a rerun keeps the stopped trial stopped (no model calls); sweep.resume_stopped=true finishes its run directory
        calls = srv.state.attempts
        assert sweep.main(args + ["sweep.scheduler=asha", "sweep.asha.max_t=1"]) == 0
        assert srv.state.attempts == calls and "1 stopped early by the scheduler" in capsys.readouterr().out
        assert sweep.main(args + ["sweep.resume_stopped=true"]) == 0
        (t,) = json.loads((sdir / "sweep.json").read_text())["trials"]
        assert t["status"] == "finished" and (rd / "summary.json").exists()
        resumed = compare.read_steps(rd)
        assert resumed[: len(history)] == history and len(resumed) == 2


def test_trials_share_one_embedded_server_when_their_settings_agree():
    from skillopt_ray.sweep.command import shared_embedded_settings

    def trial(provider="embedded", ctx=8192, url=None, cache_mode="record"):
        emb = {
            "model_path": None,
            "ctx_size": ctx,
            "threads": 2,
            "parallel": 2,
            "startup_timeout_s": 120.0,
            "server_url": url,
        }
        return {
            "llm": {
                "target": {"provider": provider},
                "optimizer": {"provider": provider},
                "embedded": emb,
                "cache_mode": cache_mode,
            }
        }

    shared = shared_embedded_settings([trial(), trial()], concurrent=3)
    assert shared == {"model_path": None, "ctx_size": 3 * 8192, "threads": 2, "parallel": 6, "startup_timeout_s": 120.0}
    assert shared_embedded_settings([trial("openai"), trial("openai")], 2) is None  # nobody needs it
    assert shared_embedded_settings([trial(cache_mode="replay")], 2) is None  # answers come from the cache
    assert shared_embedded_settings([trial(), trial(ctx=4096)], 2) is None  # settings differ: one server each
    assert shared_embedded_settings([trial(url="http://127.0.0.1:9/v1")], 2) is None  # the user gave one


def test_a_planted_tracking_address_in_a_trial_folder_gets_no_request(tmp_path, capsys):
    """A trial folder's MLflow record is a file anyone could plant: marking the trial stopped talks only to the
    sweep's own store, never to an address the folder names (it would receive the sweep's MLflow credentials)."""
    import socket

    from skillopt_ray.runs.rundir import RunDir
    from skillopt_ray.sweep.report import _mark_child

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.5)
    planted = f"http://127.0.0.1:{listener.getsockname()[1]}"
    run_dir = tmp_path / "trial"
    run_dir.mkdir()
    RunDir(run_dir).write_mlflow_run({"run_id": "abc", "tracking_uri": planted, "experiment_id": "1"})
    _mark_child(run_dir, "KILLED", {"sweep.status": "stopped"}, f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(socket.timeout):
        listener.accept()
    listener.close()
    assert "records another MLflow store than the sweep's" in capsys.readouterr().err


def test_a_planted_run_id_in_the_sweeps_own_store_marks_no_unrelated_run(tmp_path, capsys):
    """A trial folder's MLflow record could name the sweep's own store and the id of any run in it: marking the
    trial stopped touches only a run whose `run_dir` tag is that trial's folder, never an unrelated run."""
    from mlflow.tracking import MlflowClient

    from skillopt_ray.runs.rundir import RunDir
    from skillopt_ray.sweep.report import _mark_child

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    exp = client.create_experiment("e")
    other = client.create_run(exp, tags={"run_dir": str(tmp_path / "someone-else")}).info.run_id
    trial_dir, own_dir = tmp_path / "trial", tmp_path / "own"
    own = client.create_run(exp, tags={"run_dir": str(own_dir)}).info.run_id
    for folder, run_id in ((trial_dir, other), (own_dir, own)):
        folder.mkdir()
        RunDir(folder).write_mlflow_run({"run_id": run_id, "tracking_uri": uri, "experiment_id": exp})
        _mark_child(folder, "KILLED", {"sweep.status": "stopped"}, uri)
    unrelated = client.get_run(other)
    assert unrelated.info.status == "RUNNING" and "sweep.status" not in unrelated.data.tags
    assert (
        "trial: its MLflow record names a run of another folder; that run is left as it is" in capsys.readouterr().err
    )
    mine = client.get_run(own)  # the trial's own run is still marked
    assert mine.info.status == "KILLED" and mine.data.tags["sweep.status"] == "stopped"


def test_a_best_selection_score_of_zero_is_reported_as_zero_not_missing(tmp_path):
    """A run whose every skill scored 0 on selection has a best selection score of 0.0: Tune's last report (the trial
    table's "best selection" column) said nan, as if the run had none."""
    import shutil

    from skillopt_ray.sweep import report as sweep_report

    src = Path(__file__).parent.parent / "data" / "golden" / "sweep" / "runs" / "lr2-hard-s1"
    rd = tmp_path / "run"
    shutil.copytree(src, rd)
    summary = json.loads((rd / "summary.json").read_text())
    summary["selection"] = {"initial": 0.0, "best": 0.0, "final": 0.0}
    (rd / "summary.json").write_text(json.dumps(summary))
    out = sweep_report.final_report(rd, "t", None)
    assert out["best_selection_score"] == 0.0 and out["selection_score"] == 0.0


def test_a_dry_run_refuses_what_the_sweep_would_refuse(tmp_path, capsys, monkeypatch):
    """`--dry-run` listed every trial as `new` for a data folder that does not exist; the sweep itself then refused
    it. The dry run makes the same checks (and still makes nothing)."""
    monkeypatch.chdir(tmp_path)
    code = sweep.main(
        ["+experiment=custom", f"env.data_dir={tmp_path / 'nowhere'}", "+sweep=lr", "output_dir=out", "--dry-run"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: env.data_dir=") and "does not exist" in err[-1], err
    assert not (tmp_path / "out").exists()
