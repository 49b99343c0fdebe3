"""What the dashboard shows, computed from run directories only.

Every value here is read from a run's own files through `RunDir`; nothing re-runs or re-derives the loop's
decisions (the gate's action and reason, flipped tasks, scores and costs are shown as the run recorded them). So
the page works the same for a run started from the CLI, a sweep, `ray job submit` or the dashboard itself, and for
a finished run of an older version.
"""

from __future__ import annotations

import difflib
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, TypedDict, cast

from skillopt_envs.jsontypes import JSONObject, JSONValue, as_object

from skillopt_ray.base import untrusted
from skillopt_ray.base.stats import GateTestDict
from skillopt_ray.runs.records import Progress, RecordError, Summary
from skillopt_ray.runs.rundir import STEP_DIFF, RunDir

# The six stages of a training step, in order (the strip at the top of the watch view).
STAGES = ("rollout", "reflect", "aggregate", "select", "update", "gate")
# The initial skill's evaluation, the epoch boundary's stages and the final evaluation, shown beside the strip.
EXTRA_STAGES = ("initial", "slow_update", "meta_skill", "final")
# A run whose live progress record is older than this, with no process of ours alive, is not running any more.
LIVE_WINDOW_S = 30.0
# How deep under an output folder run directories are looked for (outputs/runs/<run>, sweeps/<sweep>/<trial>/...).
MAX_DEPTH = 5


def is_run_dir(path: Path) -> bool:
    return RunDir(path).is_launched()


def find_runs(root: Path) -> list[Path]:
    """Run directories under `root` (itself included), sorted by path (see `walk_runs`)."""
    return walk_runs(root).found


def walk_runs(root: Path) -> untrusted.Walk:
    """Run directories under `root`: hidden folders and symlinks skipped, the walk bounded in entries and time (an
    output folder of `/` or of 20,000 empty folders must not make every poll walk them all)."""
    walk = untrusted.find_dirs(Path(root), is_run_dir, MAX_DEPTH)
    top = Path(root).resolve()
    # a folder swapped for a symlink while it was walked leads nowhere outside
    walk.found = [p for p in walk.found if p.resolve() == top or top in p.resolve().parents]
    return walk


# A config's keys as compared between runs: a real one has a few hundred, a few levels deep.
MAX_FLAT_KEYS = 5000
MAX_FLAT_DEPTH = 16


def _flatten(d: JSONValue, prefix: str = "", depth: int = 0) -> JSONObject:
    """dotted.key -> value, bounded in keys and depth (a run folder's config is anyone's to write)."""
    if not isinstance(d, dict):
        return {prefix: d}
    out: JSONObject = {}
    for k, v in list(d.items())[:MAX_FLAT_KEYS]:
        key = f"{prefix}.{k}" if prefix else str(k)
        deeper = isinstance(v, dict) and depth < MAX_FLAT_DEPTH
        out.update(_flatten(v, key, depth + 1) if deeper else {key: v if not isinstance(v, dict) else "{...}"})
        if len(out) >= MAX_FLAT_KEYS:
            break
    return out


class CurvePoint(TypedDict, total=False):
    """One point of a run's score curve (step 0: the initial skill, with no epoch or action)."""

    step: Optional[int]
    epoch: Optional[int]
    current: Optional[float]
    candidate: Optional[float]
    best: Optional[float]
    action: Optional[str]


class StepView(TypedDict):
    """One step on a run's page: the gate's decision and why, the flipped tasks, the edits."""

    id: str
    epoch: int
    step: int
    global_step: Optional[int]
    action: str
    edit_budget: Optional[int]
    edits: dict[str, int]
    rollout_hard: Optional[float]
    current: Optional[float]
    candidate: Optional[float]
    best: Optional[float]
    reason: str
    flipped: dict[str, list[str]]
    has_diff: bool
    gate_test: Optional[GateTestDict]


class EpochView(TypedDict):
    """An epoch boundary on a run's page: the slow update and the meta skill."""

    epoch: int
    slow_update: str
    slow_action: str
    slow_reason: str
    meta_skill: str
    meta_action: str


class CostsView(TypedDict):
    entries: JSONValue  # the ledger's rows per role and stage, as it saved them
    totals: JSONValue
    budget: JSONValue  # llm.budget of the run's config


class ErrorsView(TypedDict):
    infra: dict[str, int]
    data: int


class SkillView(TypedDict):
    version: Optional[int]
    text: str


class RunDetail(TypedDict):
    """Everything a run's page shows (GET /api/run)."""

    row: dict[str, object]  # RunRow's fields
    stages: list[str]
    extra_stages: list[str]
    live: Progress
    curve: list[CurvePoint]
    steps: list[StepView]
    epochs: list[EpochView]
    skill: SkillView
    costs: CostsView
    errors: ErrorsView
    summary: Optional[JSONObject]  # Summary.to_dict()


@dataclass
class RunRow:
    """One line of the comparison table."""

    id: str
    path: str
    experiment: str = ""
    seed: Optional[int] = None
    status: str = "unknown"
    steps: int = 0
    best_selection: Optional[float] = None
    test_initial: Optional[float] = None
    test_best: Optional[float] = None
    test_final: Optional[float] = None
    cost_usd: float = 0.0
    tokens: int = 0
    swept: JSONObject = field(default_factory=dict)
    sweep: str = ""  # the sweep this run is a trial of ("" for a run of its own)
    trial: str = ""  # the trial's key within its sweep
    error: str = ""  # why the run's files could not be read (one line); the other rows are shown all the same


def _run_id(root: Path, path: Path) -> str:
    try:
        rel = path.resolve().relative_to(root.resolve())
        return str(rel) if str(rel) != "." else path.name
    except ValueError:
        return str(path)


def status_of(rd: RunDir, alive: bool = False, stopped: bool = False) -> str:
    """running / finished / stopped / failed, from the run's own records (and whether our process still runs).

    `stopped`: the dashboard stopped this run and its process has ended, so it is not shown as running while its
    last progress record is still fresh. A command that ended says so in its session record (interrupted, error),
    which also wins over a fresh progress record."""
    if alive:
        return "running"
    summary = rd.read_summary()
    sessions = rd.read_sessions()
    last = sessions[-1].get("status") if sessions else None
    if stopped and summary is None:
        return "stopped"
    live = rd.read_progress()
    fresh = bool(live) and time.time() - float(live.get("written_at", 0)) < LIVE_WINDOW_S
    if fresh and live.get("phase") != "done" and last in (None, "running"):
        return "running"
    if summary is not None:
        return "finished"
    if last in ("error", "failed"):
        return "failed"
    return "stopped" if sessions else "starting"


def _number(value: Any) -> float:
    """A count or cost as a run file holds it; 0 for what is not a number (a run folder is anyone's to write, and
    one bad file must not take the whole table down)."""
    try:
        out = float(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0.0
    return out if out == out and abs(out) != float("inf") else 0.0


def _seed(value: JSONValue) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def run_row(root: Path, path: Path, alive: bool = False, stopped: bool = False) -> RunRow:
    rd = RunDir(path)
    cfg = rd.read_config()
    summary = rd.read_summary() or Summary()
    state = rd.read_state_brief()
    ledger = rd.read_ledger().get("totals")
    ledger = ledger if isinstance(ledger, dict) else {}
    sel = summary.selection or {}
    best_sel = sel.get("best", state.get("best_score"))
    return RunRow(
        id=_run_id(root, path),
        path=str(path),
        experiment=str(cfg.get("experiment") or summary.experiment or ""),
        seed=_seed(cfg.get("seed", summary.seed)),
        status=status_of(rd, alive, stopped),
        steps=int(_number(state.get("global_step")) or len(rd.history())),
        best_selection=best_sel,
        test_initial=summary.test_score("initial"),
        test_best=summary.test_score("best"),
        test_final=summary.test_score("final"),
        cost_usd=_number(ledger.get("cost_usd")),
        tokens=int(_number(ledger.get("prompt_tokens")) + _number(ledger.get("completion_tokens"))),
    )


# What a run folder anyone could write into may throw at the readers: a damaged or planted file, or a value of the
# wrong type where a record expects another. One such run is shown as unreadable, never the whole table lost.
ROW_ERRORS = (RecordError, ValueError, TypeError, AttributeError, KeyError, OverflowError, RecursionError)


def safe_row(root: Path, path: Path, alive: bool = False, stopped: bool = False) -> RunRow:
    """`run_row`, or a row saying in one line why this run's files cannot be read."""
    try:
        return run_row(root, path, alive, stopped)
    except ROW_ERRORS as e:
        return RunRow(id=_run_id(root, path), path=str(path), status="unreadable", error=str(e).splitlines()[0][:300])


RowCache = untrusted.StatCache[str, tuple[RunRow, JSONObject]]


def cached_row(root: Path, path: Path, alive: bool, stopped: bool, cache: RowCache) -> tuple[RunRow, JSONObject]:
    """A run's row and config, read again only when a file at the run's top changed (the live status is always
    read afresh: it depends on the clock)."""

    def read() -> tuple[RunRow, JSONObject]:
        return safe_row(root, path), RunDir(path).read_config()

    row, cfg = cache.get(str(path), untrusted.stamp_of(path), read)
    row = RunRow(**asdict(row))
    if not row.error:
        try:
            row.status = status_of(RunDir(path), alive, stopped)
        except ROW_ERRORS as e:
            row.status, row.error = "unreadable", str(e).splitlines()[0][:300]
    return row, cfg


def _incidental(key: str) -> bool:
    """Keys that differ between runs without making them different experiments (the seed has its own column)."""
    return key in ("seed", "output_dir", "run_name") or key.startswith(("debug.", "tracking."))


def _group_key(cfg: JSONObject) -> tuple[str, str, str]:
    """Runs worth comparing key by key: one benchmark, one mode, one sweep (or none)."""
    tags = as_object(as_object(cfg.get("tracking")).get("tags"))
    return (str(cfg.get("experiment") or ""), str(cfg.get("mode") or ""), str(tags.get("sweep") or ""))


def swept_keys(flat: list[JSONObject]) -> list[str]:
    """The config keys whose values differ between these runs (the seed, output paths and tracking aside).

    A key only some runs have (added to the schema after the older ones ran) is compared among those that have it,
    so a version's new keys do not all look swept."""
    keys = sorted(k for k in {k for f in flat for k in f} if not _incidental(k))
    return [k for k in keys if len({repr(f[k]) for f in flat if k in f}) > 1]


def compare_rows(
    root: Path,
    paths: list[Path],
    alive: Optional[set[str]] = None,
    stopped: Optional[set[str]] = None,
    cache: Optional[RowCache] = None,
) -> list[JSONObject]:
    """Table rows for runs. Each row's swept values are the keys that differ within its group of comparable runs
    (same benchmark, mode and sweep), so runs of other benchmarks do not make every key look swept; a sweep's
    trials carry the sweep's name and their trial key."""
    alive, stopped, cache = alive or set(), stopped or set(), cache or untrusted.StatCache()
    both = [cached_row(root, p, str(p) in alive, str(p) in stopped, cache) for p in paths]
    rows, configs = [r for r, _ in both], [c for _, c in both]
    groups: dict[tuple[str, str, str], list[int]] = {}
    for i, cfg in enumerate(configs):
        groups.setdefault(_group_key(cfg), []).append(i)
    for members in groups.values():
        flat = [_flatten(configs[i]) for i in members]
        keys = swept_keys(flat) if len(members) > 1 else []
        for i, f in zip(members, flat):
            rows[i].swept = {k: f.get(k) for k in keys}
    for row, cfg in zip(rows, configs):
        tags = as_object(as_object(cfg.get("tracking")).get("tags"))
        row.sweep, row.trial = str(tags.get("sweep") or ""), str(tags.get("sweep.trial") or "")
    return [asdict(r) for r in rows]


def curve(rd: RunDir) -> list[CurvePoint]:
    """Scores per step: the current skill's, the candidate's and the best so far, as the run recorded them."""
    state = rd.read_state_brief()
    points: list[CurvePoint] = [
        {"step": 0, "current": state.get("initial_score"), "candidate": None, "best": state.get("initial_score")}
    ]
    for h in rd.history():
        points.append(
            {
                "step": h.step,
                "epoch": h.epoch,
                "current": h.current_score,
                "candidate": h.candidate_gate_score,
                "best": h.best_score,
                "action": h.action,
            }
        )
    return points


def steps(rd: RunDir) -> list[StepView]:
    """Per step: what the gate decided and why, the tasks that flipped, the edits, and whether a diff exists."""
    by_key = {(h.epoch, h.step_in_epoch): h for h in rd.history()}
    out: list[StepView] = []
    for epoch, step in rd.step_ids():
        decision = _or(None, rd.read_gate, epoch, step)
        gate = decision.to_dict() if decision is not None else {}
        rec = by_key.get((epoch, step))
        out.append(
            {
                "id": RunDir.step_name(epoch, step),
                "epoch": epoch,
                "step": step,
                "global_step": rec.step if rec else None,
                "action": (rec.action if rec else "") or gate.get("action") or "(in progress)",
                "edit_budget": rec.edit_budget if rec else None,
                "edits": (rec.edit_apply_summary if rec else None) or {},
                "rollout_hard": rec.rollout_hard if rec else None,
                "current": gate.get("current_score"),
                "candidate": gate.get("candidate_score"),
                "best": gate.get("best_score"),
                "reason": gate.get("reason", ""),
                "flipped": gate.get("flipped") or {},
                "has_diff": rd.has_step_text(epoch, step, STEP_DIFF),
                "gate_test": gate.get("gate_test"),  # the paired gate's test (optimizer.gate_test), when one ran
            }
        )
    return out


def epochs(rd: RunDir) -> list[EpochView]:
    """The epoch boundary's blocks: the slow update (its text and gate decision) and the meta skill."""
    out: list[EpochView] = []
    for epoch, rec in rd.epochs().items():
        slow, meta = rec.slow, rec.meta
        out.append(
            {
                "epoch": epoch,
                "slow_update": (slow.slow_update_content if slow else None) or "",
                "slow_action": slow.action if slow else "",
                "slow_reason": (slow.reason if slow else None) or "",
                "meta_skill": (meta.meta_skill_content if meta else None) or "",
                "meta_action": meta.action if meta else "",
            }
        )
    return out


def costs(rd: RunDir, cfg: JSONObject) -> CostsView:
    """Tokens, calls and cost per role/stage, with the configured budget caps beside the totals."""
    ledger = rd.read_ledger()
    budget = as_object(as_object(cfg.get("llm")).get("budget"))
    return {"entries": ledger.get("entries", {}), "totals": ledger.get("totals", {}), "budget": budget}


def errors(rd: RunDir) -> ErrorsView:
    """Infra errors by kind and data errors, summed over the steps' rollouts."""
    kinds: dict[str, int] = {}
    data = 0
    for h in rd.history():
        for k, n in (h.infra_kinds or {}).items():
            kinds[k] = kinds.get(k, 0) + int(n)
        data += int(h.data_errors or 0)
    return {"infra": kinds, "data": data}


def current_skill(rd: RunDir) -> tuple[Optional[int], str]:
    version: Optional[int] = rd.read_state_brief().get("current_version")
    if version is None:
        version = rd.latest_skill_version()
        if version is None:
            return None, ""
    return version, rd.find_skill(int(version)) or ""


def _summary(rd: RunDir) -> Optional[JSONObject]:
    s = rd.read_summary()
    return None if s is None else s.to_dict()


def live(rd: RunDir) -> Progress:
    """The driver's latest progress snapshot (stage, epoch/step, episodes done, ETA), if the run writes one."""
    return rd.read_progress()


def _or(default: Any, read: Any, *args: Any) -> Any:
    """One part of a run's page, or `default` when its files cannot be read (the rest of the page is still shown)."""
    try:
        return read(*args)
    except ROW_ERRORS:
        return default


def run_detail(root: Path, path: Path, alive: bool = False, stopped: bool = False) -> RunDetail:
    rd = RunDir(path)
    cfg = rd.read_config()
    version, skill = _or((None, ""), current_skill, rd)
    return {
        "row": asdict(safe_row(root, path, alive, stopped)),
        "stages": list(STAGES),
        "extra_stages": list(EXTRA_STAGES),
        "live": live(rd),
        "curve": _or([], curve, rd),
        "steps": _or([], steps, rd),
        "epochs": _or([], epochs, rd),
        "skill": {"version": version, "text": skill},
        "costs": _or({"entries": {}, "totals": {}, "budget": {}}, costs, rd, cfg),
        "errors": _or({"infra": {}, "data": 0}, errors, rd),
        "summary": _or(None, _summary, rd),
    }


DetailCache = untrusted.StatCache[str, RunDetail]


def cached_detail(
    root: Path, path: Path, alive: bool, stopped: bool, rows: RowCache, details: DetailCache
) -> RunDetail:
    """A run's page, read again only when a file at its top or a step or epoch folder changed; its row's status and
    the live progress are read afresh (they depend on the clock)."""
    stamp = untrusted.stamp_of(path, (".", "steps", "epochs"))
    detail = cast(RunDetail, dict(details.get(str(path), stamp, lambda: run_detail(root, path))))
    detail["row"] = asdict(cached_row(root, path, alive, stopped, rows)[0])
    detail["live"] = live(RunDir(path))
    return detail


def unfenced(text: str) -> str:
    """A step's diff.md holds its diff in a Markdown ```diff fence; the page shows the diff itself."""
    m = re.match(r"^```[A-Za-z]*\n(.*?)\n?```\s*$", text, re.S)
    if not m:
        return text
    body = m.group(1)
    return body + "\n" if body and not body.endswith("\n") else body


def step_diff(path: Path, step_id: str) -> str:
    found = RunDir.parse_step_name(step_id)
    if found is None:
        raise ValueError(f"bad step id {step_id!r}")
    return unfenced(RunDir(path).read_step_text(*found, STEP_DIFF) or "")


def best_skill(path: Path) -> str:
    rd = RunDir(path)
    return rd.read_best_skill() or _or((None, ""), current_skill, rd)[1]


def skill_diff(path_a: Path, path_b: Path) -> str:
    """A unified diff of two runs' best skills (a's lines removed, b's added)."""
    a, b = best_skill(path_a), best_skill(path_b)
    return "".join(
        difflib.unified_diff(
            a.splitlines(keepends=True), b.splitlines(keepends=True), fromfile=str(path_a), tofile=str(path_b)
        )
    )
