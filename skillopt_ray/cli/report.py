"""What the CLI prints when a run ends: notes, the summary table, the clock, where the run and its MLflow run are."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from skillopt_ray.base.exit_codes import EXIT_OK
from skillopt_ray.base.startup_trace import mark
from skillopt_ray.runs.records import MlflowRun, Outcome
from skillopt_ray.runs.report import kinds_text


def summary_table(s: dict[str, Any]) -> str:
    if s.get("mode") == "eval":
        e = s["eval"]
        rows = [
            f"eval on {s['split']}: hard {e['hard']:.3f}  soft {e['soft']:.3f}  (n={e['n']}{_scored(e, ', ')}, infra errors {e['infra_errors']}{kinds_text(e.get('infra_kinds'))}, data errors {e.get('data_errors', 0)})"
        ]
        rows += [f"  {t:<34} hard {v['hard']:.3f} soft {v['soft']:.3f} n={v['n']}" for t, v in e["per_type"].items()]
        return "\n".join(rows)
    rows = ["", f"{'skill':<9}{'selection':>11}{'test hard':>11}{'test soft':>11}"]
    sel = s["selection"]
    for k in ("initial", "best", "final"):
        t = s["test"][k]
        rows.append(
            f"{k:<9}{(sel[k] if sel[k] is not None else float('nan')):>11.3f}{t['hard']:>11.3f}{t['soft']:>11.3f}"
            + _scored(t, "  test ")
        )
    c = s["counts"]
    rows.append(f"steps {s['steps']}: {c['accept']} accepted, {c['reject']} rejected, {c['skip']} skipped")
    partial = any(_scored(s["test"][k], "") for k in ("initial", "best"))
    rows.append(
        f"test hard delta (best - initial) {s['delta_test_hard_best_vs_initial']:+.3f}"
        + (" (over the scored test episodes only)" if partial else "")
    )
    tok = s["tokens"]
    rows.append(
        f"model calls {tok['calls']} (+{tok['cache_hits']} from cache), tokens {tok['tokens']}, cost ${tok['cost_usd']:.4f}"
    )
    if tok.get("lost"):
        rows.append(lost_line(tok))
    if tok.get("unread"):  # 200s whose body was cut off in transit (llm/ledger.py)
        rows.append(
            f"plus {tok['unread']} replies billed but cut off in transit, never read (~{tok['unread_tokens_est']} tokens estimated)"
        )
    rows.append(
        "per task type (test, best skill): "
        + ", ".join(f"{t} {v['hard']:.2f}" for t, v in s["test"]["best"]["per_type"].items())
    )
    return "\n".join(rows)


def _scored(stats: dict[str, Any], lead: str) -> str:
    """`scored n of N` when some episodes of an evaluation were not scored (infra or data errors): its score is the
    mean over those n alone; "" when every episode was scored (the line reads as it always did)."""
    n, scored = stats.get("n"), stats.get("n_scored")
    if n is None or scored is None or scored >= n:
        return ""
    return f"{lead}scored {scored} of {n}"


def lost_line(tok: Mapping[str, float]) -> str:
    """The calls a session sent whose replies were lost: a kill ended it before they came back, or a full disk kept the
    response cache from keeping them (the ledger's journal knows them)."""
    cost = f", ~${tok.get('lost_cost_usd_est', 0.0):.4f}" if tok.get("lost_cost_usd_est") else ""
    return (
        f"plus {tok['lost']} calls sent before a kill or a full disk whose replies were lost (~{tok.get('lost_tokens_est', 0)} tokens "
        f"estimated{cost}; maybe billed, asked again, counted by the budget caps)"
    )


def report(outcome: Outcome) -> int:
    """Print a run's outcome; returns the exit code."""
    for note in outcome.get("notes", []):
        print(f"note: {note}", file=sys.stderr)
    if outcome["status"] != "ok":
        print(f"error: {outcome['message']}", file=sys.stderr)
        return int(outcome["exit"])
    print(summary_table(outcome["summary"]))
    from skillopt_ray.runs.progress import time_line

    print(time_line(outcome.get("timing")))
    print(f"run directory: {outcome['run_dir']}")
    ml = outcome.get("mlflow")
    if ml:
        print("\n".join(mlflow_lines(ml)))
    print(f"the run's story: python -m skillopt_ray.report {outcome['run_dir']}")
    _tiny_model_note(outcome["run_dir"])
    mark("reported")
    return EXIT_OK


def _tiny_model_note(run_dir: Any) -> None:
    """A run on the shipped tiny model ends by saying what its scores mean (llm/embedded.py)."""
    from skillopt_ray.llm.embedded import tiny_model_note
    from skillopt_ray.runs.rundir import RunDir

    try:
        note = tiny_model_note(RunDir(run_dir).read_config())
    except (OSError, ValueError):
        return
    if note:
        print(note)


def mlflow_lines(ml: MlflowRun) -> list[str]:
    """Where the run's MLflow record is and how to look at it, each said once: the command that serves a local
    store (the light `mlflow server --workers 1`, as the docs say) or the server already holding it, the run's
    page, and its experiment's runs table (the bare experiment link opens MLflow's GenAI Traces view)."""
    from skillopt_ray.runs.tracking import ui_link

    uri = str(ml["tracking_uri"])
    if uri.startswith(("http://", "https://")):
        base = uri.rstrip("/")
        how = f"  view with: the MLflow server at {base}, open {ui_link(ml, base)}"
    else:
        base = "http://127.0.0.1:5000"
        how = (
            f"  view with: mlflow server --backend-store-uri {uri} --host 127.0.0.1 --port 5000 --workers 1, "
            f"then open {ui_link(ml, base)}"
        )
    experiment = ui_link({"experiment_id": ml.get("experiment_id")}, base)
    return [f"mlflow run: {ml['run_id']} in {uri}", how, f"  all runs of the experiment: {experiment}"]
