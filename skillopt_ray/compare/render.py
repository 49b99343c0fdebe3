"""Rendering a comparison: the markdown summary and tables, the CSV files, and the learning-curve and accept-rate
plots, written into a folder that does not already hold them."""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.compare.groups import Record
from skillopt_ray.compare.records import record_from_run_dir, sweep_records
from skillopt_ray.compare.stats import METRICS, SCORE_RANGE, RunStatistics, _fmt, summarize

OUTPUT_FILES = ("comparison.md", "comparison.csv", "paired.csv", "learning_curves.png", "accept_rate.png")


def sweep_comparison(sweep_dir: Path) -> Comparison:
    records, group_by, counts = sweep_records(sweep_dir)
    return Comparison(records, group_by, counts)


class Comparison(RunStatistics):
    """Training runs compared: grouped (compare_groups), counted (compare_stats), and rendered here."""

    @staticmethod
    def from_run_dirs(items: list[tuple[dict[str, Any], int, Path]], group_by: list[str]) -> Comparison:
        return Comparison([record_from_run_dir(p, s, d) for p, s, d in items], group_by)

    def markdown(self, baseline: Optional[dict[str, str]] = None) -> str:
        lines, any_clipped = self._table_lines()
        intro = [
            "Mean ± std over seeds [95% t interval, clipped to the metric's range: scores in [0, 1], the test gain in "
            "[-1, 1], tokens, cost and time at 0 or more"
            + ("; * marks a clipped interval" if any_clipped else "")
            + "]. "
            "n counts runs (one per run directory); an interval needs n >= 2."
        ]
        within = self.within_run()
        if within:
            intro.append(within)
        if self.counts:
            c = self.counts
            intro.append(
                f"Runs: {c['finished']} finished of {c['trials']} trials"
                + (f", {c['stopped']} stopped early by the scheduler (not counted)" if c.get("stopped") else "")
                + (f", {c['unfinished']} unfinished (not counted)" if c.get("unfinished") else "")
                + "."
            )
        best = self._best_line()
        if best:
            intro.append(best)
        text = "\n\n".join(intro) + "\n\n" + "\n".join(lines)
        if baseline:
            text += self._paired_markdown(baseline)
        return text

    def _table_lines(self) -> tuple[list[str], bool]:
        """The per-configuration table's lines (mean ± std [interval] per metric) and whether any interval is clipped."""
        head = self.group_by + ["n"] + [label for _m, label in METRICS]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        any_clipped = False
        for row in self.rows():
            cells = [str(row[k]) for k in self.group_by] + [str(row["n"])]
            for m, _label in METRICS:
                digits = 0 if m in ("tokens", "wall_time_s") else 3
                mean, lo, hi = row[f"{m}_mean"], row[f"{m}_ci_lo"], row[f"{m}_ci_hi"]
                mark = "*" if row[f"{m}_ci_clipped"] else ""
                any_clipped |= bool(mark)
                ci = f" [{_fmt(lo, digits)}, {_fmt(hi, digits)}]{mark}" if not math.isnan(lo) else ""
                cells.append(f"{_fmt(mean, digits)} ± {_fmt(row[f'{m}_std'], digits)}{ci}")
            lines.append("| " + " | ".join(cells) + " |")
        return lines, any_clipped

    def _best_line(self) -> str:
        """The best configuration in a sentence, or the tie and the tied configurations' test scores ("" if none)."""
        best = self.best()
        if best is not None and best["winner"]:
            return f"Best configuration: {_params_text(best['params'])} ({best['rule']})."
        if best is not None:
            tests = "; ".join(
                f"{_params_text(t['params'])}: {_fmt(t['test_hard_best_mean'])}"
                + ("" if math.isnan(t["test_hard_best_std"]) else f" ± {_fmt(t['test_hard_best_std'])}")
                for t in best["tied_test"]
            )
            return (
                f"Best configuration: none, {best['rule']}. Their test hard scores (for reporting, not for "
                f"choosing): {tests}."
            )
        return ""

    def _paired_markdown(self, baseline: dict[str, str]) -> str:
        """The table of test-hard differences to the baseline, paired by seed, with its heading."""
        pl = [
            "| " + " | ".join(self.group_by + ["pairs", "test hard diff vs baseline", "95% CI", "p"]) + " |",
            "|" + "---|" * (len(self.group_by) + 4),
        ]
        for p in self.paired(baseline):
            pl.append(
                "| "
                + " | ".join(
                    [str(p[k]) for k in self.group_by]
                    + [
                        str(p["pairs"]),
                        _fmt(p["diff_mean"]),
                        f"[{_fmt(p['diff_ci_lo'])}, {_fmt(p['diff_ci_hi'])}]" + ("*" if p["diff_ci_clipped"] else ""),
                        _fmt(p["p_value"]),
                    ]
                )
                + " |"
            )
        return (
            f"\n\nPaired by seed against the baseline {baseline} (* marks an interval clipped to [-1, 1]):\n\n"
            + "\n".join(pl)
        )

    # ---- plots ---------------------------------------------------------------------------------

    def figures(self) -> dict[str, Any]:
        """The plots as open matplotlib figures (`plot` saves and closes them)."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        groups = self.groups()
        count = max(1, len(groups))
        fig, (ax, axt) = plt.subplots(1, 2, figsize=(11, 4.6), gridspec_kw={"width_ratios": [2.2, 1]})
        fig2, ax2 = plt.subplots(figsize=(7, 4.5))
        handles = []
        boundaries: dict[float, set[int]] = {}
        for i, (key, recs) in enumerate(groups.items()):
            dodge = (i - (count - 1) / 2) * 0.08  # overlapping groups side by side
            style = {"marker": MARKERS[i % len(MARKERS)], "ls": STYLES[(i // len(MARKERS) + i) % len(STYLES)]}
            label = f"{self.label(key)} (n={len(recs)})"
            line = self._plot_curves(ax, recs, dodge, style, label)
            handles.append(line)
            _epoch_starts(recs, boundaries)
            _plot_tests(axt, recs, dodge, style, line.get_color())
            _plot_accepts(ax2, recs, dodge, style, line.get_color(), label)
        _mark_epochs((ax, ax2), boundaries)
        _label_axes(ax, axt, ax2, handles)
        for f in (fig, fig2):
            f.tight_layout()
        return {"learning_curves.png": fig, "accept_rate.png": fig2}

    def _plot_curves(self, ax: Any, recs: list[Record], dodge: float, style: dict[str, str], label: str) -> Any:
        """A group's mean selection score per step with its interval band, and its candidates at the gate."""
        mk, ls = style["marker"], style["ls"]
        cur = self.curve_stats(recs, "current")
        xs = [c["step"] + dodge for c in cur]
        line = ax.plot(xs, [c["mean"] for c in cur], marker=mk, linestyle=ls, label=label)[0]
        color = line.get_color()
        ax.fill_between(xs, [c["ci_lo"] for c in cur], [c["ci_hi"] for c in cur], color=color, alpha=0.15, linewidth=0)
        cand = [c for c in self.curve_stats(recs, "candidate") if not math.isnan(c["mean"])]
        if cand:
            ax.plot(
                [c["step"] + dodge for c in cand],
                [c["mean"] for c in cand],
                marker=mk,
                linestyle="none",
                markerfacecolor="none",
                color=color,
                alpha=0.8,
            )
        return line

    def plot(self, out_dir: Path) -> list[Path]:
        import matplotlib.pyplot as plt

        paths = []
        for name, fig in self.figures().items():
            fig.savefig(out_dir / name, dpi=110)
            plt.close(fig)
            paths.append(out_dir / name)
        return paths

    def write(self, out_dir: Path, baseline: Optional[dict[str, str]] = None, force: bool = False) -> list[Path]:
        """Write the comparison files; a folder that already holds them is refused unless `force`."""
        existing = [n for n in OUTPUT_FILES if (out_dir / n).exists()]
        if existing and not force:
            raise FileExistsError(
                f"{out_dir} already holds {', '.join(existing)}; choose another --out or pass --force to replace them"
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        for n in existing:
            (out_dir / n).unlink()
        rows = self.rows()
        files = [out_dir / "comparison.md", out_dir / "comparison.csv"]
        files[0].write_text(self.markdown(baseline) + "\n")
        with open(files[1], "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else self.group_by + ["n"])
            w.writeheader()
            w.writerows(rows)
        if baseline:
            paired = self.paired(baseline)
            files.append(out_dir / "paired.csv")
            with open(files[-1], "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(paired[0]) if paired else self.group_by)
                w.writeheader()
                w.writerows(paired)
        if self.records:
            files += self.plot(out_dir)
        return files


MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">"]
STYLES = ["-", "--", "-.", ":"]
TEST_SKILLS = ("initial", "best", "final")


def _epoch_starts(recs: list[Record], boundaries: dict[float, set[int]]) -> None:
    """Where an epoch starts on the step axis (half a step before its first step), by run."""
    for r in recs:
        prev = None
        for p in r.curve:
            if p.epoch is not None and prev is not None and p.epoch != prev:
                boundaries.setdefault(p.step - 0.5, set()).add(int(p.epoch))
            if p.epoch is not None and p.step > 0:
                prev = p.epoch


def _plot_tests(axt: Any, recs: list[Record], dodge: float, style: dict[str, str], color: Any) -> None:
    """A group's test scores of the initial, best and final skills: means with intervals, joined."""
    mk = style["marker"]
    for j, what in enumerate(TEST_SKILLS):
        vals = [r.test[what] for r in recs if not math.isnan(r.test.get(what, math.nan))]
        st = summarize(vals, SCORE_RANGE)
        if math.isnan(st["mean"]):
            continue
        err = [[st["mean"] - st["ci_lo"]], [st["ci_hi"] - st["mean"]]] if not math.isnan(st["ci_lo"]) else None
        axt.errorbar([j + dodge], [st["mean"]], yerr=err, marker=mk, color=color, capsize=3, linestyle="none")
    means = [_mean([r.test.get(w, math.nan) for r in recs]) for w in TEST_SKILLS]
    tx = [j + dodge for j, m in enumerate(means) if not math.isnan(m)]
    ty = [m for m in means if not math.isnan(m)]
    if tx:
        axt.plot(tx, ty, color=color, linestyle=style["ls"], alpha=0.6)


def _plot_accepts(ax2: Any, recs: list[Record], dodge: float, style: dict[str, str], color: Any, label: str) -> None:
    """A group's fraction of seeds accepting at each step."""
    acc_steps = sorted({p.step for r in recs for p in r.curve if p.accepted is not None})
    rates = [
        _mean([p.accepted for r in recs for p in r.curve if p.step == s and p.accepted is not None]) for s in acc_steps
    ]
    ax2.plot(
        [s + dodge for s in acc_steps], rates, marker=style["marker"], linestyle=style["ls"], color=color, label=label
    )


def _mark_epochs(axes: tuple[Any, ...], boundaries: dict[float, set[int]]) -> None:
    for x, epochs in sorted(boundaries.items()):
        for a in axes:
            a.axvline(x, color="grey", linestyle=":", linewidth=1)
        for a in axes:
            a.text(
                x + 0.04,
                0.02,
                f"epoch {min(epochs)}",
                transform=a.get_xaxis_transform(),
                fontsize=7,
                color="grey",
                va="bottom",
            )


def _label_axes(ax: Any, axt: Any, ax2: Any, handles: list[Any]) -> None:
    """Titles, labels, integer step ticks, legends (the band, the candidate marker and the epoch line explained)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    epoch_line = Line2D([], [], color="grey", linestyle=":", label="epoch start")
    handles = handles + [
        Patch(color="grey", alpha=0.25, label="95% t interval over seeds (clipped to [0, 1])"),
        Line2D(
            [], [], color="grey", marker="o", markerfacecolor="none", linestyle="none", label="candidate at the gate"
        ),
        epoch_line,
    ]
    ax.set(
        xlabel="step", ylabel="selection score", title="Selection score of the current skill per step (mean over seeds)"
    )
    axt.set(ylabel="test hard score", title="Test: initial, best, final skill", ylim=(-0.05, 1.05))
    axt.set_xticks([0, 1, 2], list(TEST_SKILLS))
    ax2.set(
        xlabel="step",
        ylabel="fraction of seeds accepting",
        ylim=(-0.05, 1.05),
        title="Accepted (1) vs rejected/skipped (0) steps",
    )
    for a in (ax, ax2):
        a.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(handles=handles, fontsize=7, loc="best")
    ax2.legend(
        handles=ax2.get_legend_handles_labels()[0] + [Line2D([], [], color="grey", linestyle=":", label="epoch start")],
        fontsize=7,
        loc="best",
    )
    for a in (ax, axt, ax2):
        a.grid(alpha=0.3)


def _mean(values: list[Any]) -> float:
    vals = [v for v in values if v is not None and not math.isnan(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _params_text(params: Mapping[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items()) or "(no swept keys)"
