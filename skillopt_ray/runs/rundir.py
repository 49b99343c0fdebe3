"""The run directory: every file a run writes, written atomically, readable after a crash.

`RunDir` is the only code that opens run-directory files; the records it reads and writes are the typed ones
of skillopt_ray.runs.records. Layout:

config.yaml            resolved config (secrets redacted)
state.json             run state (the resume point)                          RunState
history.jsonl          one record per step, appended (history.json: the same list, at epoch ends)   StepRecord
scores.jsonl           every evaluation of a skill on a split, appended (the score cache)         ScoreEntry
lr_history.jsonl       autonomous learning-rate decisions                    LrDecision
skills/skill_vNNNN.md  every skill version; best_skill.md                    SkillVersion
steps/eEE_sSSS/        per-stage records of a step (rollout, reflect, aggregate, select, update, gate, step_record)
epochs/eEE/            slow-update and meta-skill records                   SlowUpdateRecord, MetaSkillRecord
final/                 final evaluation (test_*.json, evaluation.json)      Evaluation
summary.json           the run's summary                                    Summary
sessions.json          wall time per command on this directory
provenance.json        what made the run: each command's line, overrides, config, version, git commit, code hash
llm_cache.sqlite       response cache; ledger.json token/cost ledger

Files other tools own (mlflow_run.json, jobs.json, identity.json, progress.json, provenance) go through the
generic `read_json` / `write_json` until they get a record of their own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional, Union, cast

import yaml
from skillopt_envs.jsontypes import JSONObject

from skillopt_ray.base import untrusted
from skillopt_ray.base.io import append_json_line, atomic_write_json, atomic_write_text
from skillopt_ray.runs.records import (
    EpochRecord,
    Evaluation,
    GateRecord,
    Identity,
    Job,
    LedgerState,
    LrDecision,
    MetaSkillRecord,
    MlflowRun,
    Progress,
    Provenance,
    RecordError,
    ScoreEntry,
    Session,
    SkillVersion,
    SlowUpdateRecord,
    StepRecord,
    Summary,
)
from skillopt_ray.runs.state import RunState, StateBrief, state_brief

CONFIG = "config.yaml"
STATE = "state.json"
HISTORY = "history.jsonl"
HISTORY_LIST = "history.json"
SCORES = "scores.jsonl"
LR_HISTORY = "lr_history.jsonl"
SUMMARY = "summary.json"
BEST_SKILL = "best_skill.md"
JUDGE = "judge.json"
SESSIONS = "sessions.json"
PROVENANCE = "provenance.json"
MLFLOW_RUN = "mlflow_run.json"
SKILL_VERSIONS = "skill_versions.json"
SKILL_HISTORY = "skill_history.html"
LEDGER = "ledger.json"
CACHE = "llm_cache.sqlite"
ERROR = "error.txt"
FINAL_EVALUATION = "final/evaluation.json"
STEP_RECORD = "step_record.json"
GATE = "gate.json"
SLOW_RESULT = "slow_result.json"
META_RESULT = "meta_skill_result.json"
META_SKILL = "meta_skill.md"
STEP_DIFF = "diff.md"
STEP_CANDIDATE = "candidate.md"
PROGRESS = "progress.json"
IDENTITY = "identity.json"
JOBS = "jobs.json"
EMBEDDED_LOG = "embedded_server.log"

Rel = Union[str, Path]
# The score cache holds every evaluation's per-task results: a long run on a large benchmark writes far more than any
# other file, and losing it would pay for the evaluations again.
SCORES_MAX_BYTES = 1 << 30
CONFIG_MAX_BYTES = 4 << 20  # a resolved config is a few KB
CONFIG_MAX_ALIASES = 20


class RunDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def ensure(self) -> RunDir:
        for sub in ("skills", "steps", "epochs", "final"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self

    def is_run(self) -> bool:
        """A run directory: a folder with a config or a state."""
        return self.is_file(CONFIG) or self.is_file(STATE)

    def is_launched(self) -> bool:
        """A run a command has launched: a state, or a config beside its identity (a lone config.yaml may be any
        folder's). What the dashboard lists, including a run still starting."""
        return self.is_file(STATE) or self.is_file(CONFIG) and self.is_file(IDENTITY)

    def is_file(self, rel: Rel) -> bool:
        """A regular file of the run's own (reached through no symlink)."""
        return untrusted.is_file(self.root, rel)

    def check(self) -> RunDir:
        """This folder as a run directory, or a one-line RecordError saying why it is not one."""
        if not self.root.is_dir():
            raise RecordError(f"{self.root} is not a run directory (no such folder)")
        if not self.is_run():
            raise RecordError(f"{self.root} is not a run directory (no {CONFIG} or {STATE})")
        return self

    # ---------------------------------------------------------------- paths
    @property
    def state_path(self) -> Path:
        return self.root / STATE

    @property
    def cache_path(self) -> Path:
        return self.root / CACHE

    @property
    def ledger_path(self) -> Path:
        return self.root / LEDGER

    @property
    def summary_path(self) -> Path:
        return self.root / SUMMARY

    @property
    def best_skill_path(self) -> Path:
        return self.root / BEST_SKILL

    @property
    def embedded_log_path(self) -> Path:
        """Where the embedded model server started for this run logs."""
        return self.root / EMBEDDED_LOG

    def has_state(self) -> bool:
        """A state was committed: the run has started and can resume."""
        return self.state_path.exists()

    @staticmethod
    def step_name(epoch: int, step: int) -> str:
        """A step's folder name (e01_s002): the id pages and tools use for a step."""
        return f"e{epoch:02d}_s{step:03d}"

    @staticmethod
    def parse_step_name(name: str) -> Optional[tuple[int, int]]:
        """(epoch, step in epoch) of a step folder name, None when `name` is not one."""
        m = re.fullmatch(r"e(\d+)_s(\d+)", name)
        return (int(m.group(1)), int(m.group(2))) if m else None

    @staticmethod
    def step_dir(epoch: int, step: int) -> str:
        """A step's record folder, relative to the run root."""
        return f"steps/{RunDir.step_name(epoch, step)}"

    @staticmethod
    def epoch_dir(epoch: int) -> str:
        """An epoch boundary's record folder, relative to the run root."""
        return f"epochs/e{epoch:02d}"

    @staticmethod
    def skill_rel(version: int) -> str:
        """A skill version's file, relative to the run root (also its artifact name)."""
        return f"skills/skill_v{version:04d}.md"

    def skill_path(self, version: int) -> Path:
        return self.root / self.skill_rel(version)

    def path(self, rel: Rel) -> Path:
        return self.root / rel

    # ---------------------------------------------------------------- generic io
    def write_json(self, rel: Rel, data: Any) -> Path:
        path = self.root / rel
        atomic_write_json(path, data)
        return path

    def read_json(self, rel: Rel) -> Optional[Any]:
        """A JSON file's content; None when it is missing; RecordError (one line) when it is not JSON, or not a
        plain file of the run's own (a symlink, a FIFO, a device: a run folder is anyone's to write into), or too
        large. Every run file is read through `untrusted`."""
        try:
            return untrusted.read_json(self.root, rel)
        except untrusted.Missing:
            return None
        except untrusted.Untrusted as e:
            raise RecordError(
                f"{Path(rel).name} cannot be read as JSON: {e}; the file is damaged or was planted"
            ) from None

    def _lines(self, rel: Rel, limit: int = untrusted.MAX_BYTES) -> list[Any]:
        """A JSON-lines file's records ([] when missing or refused: the step folders still hold the steps)."""
        try:
            return untrusted.read_json_lines(self.root, rel, limit)
        except untrusted.Untrusted:
            return []

    def write_text(self, rel: Rel, text: str) -> Path:
        path = self.root / rel
        atomic_write_text(path, text)
        return path

    def read_text(self, rel: Rel, limit: int = untrusted.MAX_BYTES) -> Optional[str]:
        """A text file's content; None when it is missing, or refused (see `read_json`)."""
        try:
            return untrusted.read_text(self.root, rel, limit)
        except untrusted.Untrusted:
            return None

    def exists(self, rel: Rel) -> bool:
        return untrusted.lstat(self.root, rel) is not None

    def _record(self, cls: Any, rel: Rel) -> Any:
        data = self.read_json(rel)
        return None if data is None else cls.from_dict(data, str(self.root / rel))

    # ---------------------------------------------------------------- config, state, errors
    def write_config(self, cfg: Mapping[str, object]) -> None:
        atomic_write_text(self.root / CONFIG, yaml.safe_dump(cfg, sort_keys=False))

    def read_config(self) -> JSONObject:
        """The resolved config as written ({} when missing or unreadable: a story without it is still a story).

        A config this code wrote has no YAML aliases; one with many is refused unread, since a few nested aliases
        (a "billion laughs" file) expand to more values than any reader can walk or any answer can hold."""
        text = self.read_text(CONFIG, CONFIG_MAX_BYTES) or ""
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's: a run's config in ms, not 0.15 s
        try:
            aliases = sum(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text, Loader=loader))
            data = yaml.load(text, Loader=loader) if aliases <= CONFIG_MAX_ALIASES else None
        except (yaml.YAMLError, RecursionError):
            return {}
        return data if isinstance(data, dict) else {}

    def read_state(self) -> Optional[RunState]:
        """The resume point; StateVersionError (one line) when another optimizer version wrote it."""
        data = self.read_json(STATE)
        return None if data is None else RunState.from_dict(data)

    def write_state(self, state: RunState) -> None:
        atomic_write_json(self.state_path, state.to_dict())

    def read_state_brief(self) -> StateBrief:
        """state.json's headline fields, for views of any run: older and partial states included, where
        `read_state` refuses them ({} when there is no state)."""
        return state_brief(self.read_json(STATE))

    def read_progress(self) -> Progress:
        """The driver's latest live progress snapshot ({} when the run writes none or it cannot be read)."""
        try:
            data = self.read_json(PROGRESS)
        except RecordError:
            return {}  # a snapshot is rewritten every few seconds; a damaged one is as good as none
        return cast(Progress, data) if isinstance(data, dict) else {}

    def write_progress(self, snapshot: Progress) -> None:
        self.write_json(PROGRESS, snapshot)

    def read_ledger(self) -> LedgerState:
        """The token/cost ledger as last saved (entries, totals); {} before the first save. As read: a reader of a
        run it did not make checks the numbers' types."""
        data = self.read_json(LEDGER)
        return cast(LedgerState, data) if isinstance(data, dict) else {}

    def write_error(self, text: str) -> Path:
        return self.write_text(ERROR, text)

    def clear_error(self) -> None:
        """Remove the traceback of an earlier command of this run (a link is removed, never followed)."""
        (self.root / ERROR).unlink(missing_ok=True)

    # ---------------------------------------------------------------- skills
    def write_skill(self, version: int, text: str) -> Path:
        path = self.skill_path(version)
        atomic_write_text(path, text)
        return path

    def read_skill(self, version: int) -> str:
        return self.skill_path(version).read_text(encoding="utf-8")

    def find_skill(self, version: int) -> Optional[str]:
        """A skill version's text, None when that version is not on disk."""
        return self.read_text(self.skill_rel(version))

    def _listed(self, folder: str, pattern: str, dirs: bool = False) -> list[str]:
        """Names in one of the run's folders matching `pattern` (plain files, or plain folders), sorted."""
        return [
            e.name
            for e in untrusted.list_dir(self.root, folder)
            if (e.is_dir if dirs else e.is_file) and re.fullmatch(pattern, e.name)
        ]

    def _skill_numbers(self) -> list[int]:
        return [int(n[7:-3]) for n in self._listed("skills", r"skill_v\d+\.md")]

    def latest_skill_version(self) -> Optional[int]:
        """The highest skill version on disk (None before the first)."""
        return max(self._skill_numbers(), default=None)

    def skill_versions(self) -> list[SkillVersion]:
        """Every skill version on disk, in version order."""
        return [SkillVersion(n, self.find_skill(n) or "") for n in sorted(self._skill_numbers())]

    def write_judge(self, stats: dict[str, int], counted: Optional[dict[str, int]] = None) -> Path:
        """judge.json: what the judge of rubric tasks did in this run (stages/judge.JudgeStats, summed over commands:
        `stats` already holds the earlier commands' counts), and under `counted` how many meetings of each comparison
        those counts hold (so a resumed command counts none twice)."""
        return self.write_json(JUDGE, {**stats, "counted": dict(sorted((counted or {}).items()))})

    def _judge_json(self) -> JSONObject:
        try:
            data = self.read_json(JUDGE)  # through `untrusted`, as every run file
        except RecordError:
            return {}
        return data if isinstance(data, dict) else {}

    def read_judge(self) -> dict[str, int]:
        """judge.json's counts ({} when the run judged nothing; a value that is not a count is left out)."""
        return {str(k): v for k, v in self._judge_json().items() if isinstance(v, int) and not isinstance(v, bool)}

    def read_judge_counted(self) -> dict[str, int]:
        """judge.json's `counted`: each comparison's meetings the counts already hold ({} when none or not counts)."""
        raw = self._judge_json().get("counted")
        items = raw.items() if isinstance(raw, dict) else ()
        return {str(k): v for k, v in items if isinstance(v, int) and not isinstance(v, bool) and v > 0}

    def write_best_skill(self, text: str) -> Path:
        return self.write_text(BEST_SKILL, text)

    def read_best_skill(self) -> Optional[str]:
        return self.read_text(BEST_SKILL)

    # ---------------------------------------------------------------- steps
    def write_step_text(self, epoch: int, step: int, name: str, text: str) -> Path:
        """A text file of a step (candidate.md, diff.md)."""
        return self.write_text(f"{self.step_dir(epoch, step)}/{name}", text)

    def read_step_text(self, epoch: int, step: int, name: str) -> Optional[str]:
        return self.read_text(f"{self.step_dir(epoch, step)}/{name}")

    def step_ids(self) -> list[tuple[int, int]]:
        """(epoch, step in epoch) of every step with a record folder, in order (a step in progress included)."""
        found = [self.parse_step_name(n) for n in self._listed("steps", r"e\d+_s\d+", dirs=True)]
        return sorted(f for f in found if f is not None)

    def has_step_text(self, epoch: int, step: int, name: str) -> bool:
        return self.is_file(f"{self.step_dir(epoch, step)}/{name}")

    def read_stage(self, epoch: int, step: int, stage: str) -> Optional[Any]:
        """A stage's record of a step as written (rollout, reflect, aggregate, select, update, appendix_notes);
        the stage's own output class decodes it."""
        return self.read_json(f"{self.step_dir(epoch, step)}/{stage}.json")

    def write_gate(self, epoch: int, step: int, gate: GateRecord) -> None:
        self.write_json(f"{self.step_dir(epoch, step)}/{GATE}", gate.to_dict())

    def read_gate(self, epoch: int, step: int) -> Optional[GateRecord]:
        return self._record(GateRecord, f"{self.step_dir(epoch, step)}/{GATE}")

    def gates(self) -> list[GateRecord]:
        """Every step's gate record written so far, in step order (the sequential gate's samples live in them)."""
        return [g for _, g in self.step_gates()]

    def step_gates(self) -> list[tuple[str, GateRecord]]:
        """Every step's gate record written so far with its step's name (e01_s002), in step order."""
        found = ((self.step_name(e, s), self.read_gate(e, s)) for e, s in self.step_ids())
        return [(name, g) for name, g in found if g is not None]

    def commit_step(self, rec: StepRecord) -> None:
        """Append a completed step to history.jsonl (before the state commit, so a rerun of the step replaces it)."""
        append_json_line(self.root / HISTORY, rec.to_dict())

    def write_step_record(self, rec: StepRecord) -> None:
        epoch, step = rec.step_id
        self.write_json(f"{self.step_dir(epoch, step)}/{STEP_RECORD}", rec.to_dict())

    def write_history(self, history: list[StepRecord]) -> None:
        """The whole list as one file (history.json), as the reference keeps it."""
        self.write_json(HISTORY_LIST, [h.to_dict() for h in history])

    def history(self, upto: Optional[int] = None) -> list[StepRecord]:
        """The one history reader: one record per step in step order, up to global step `upto` if given.

        history.jsonl first (a line cut by a kill is skipped; a step redone after a resume: the last line wins),
        then history.json and the step folders' step_record.json for steps the lines lack (older runs)."""
        return [StepRecord.from_dict(d, str(self.root / HISTORY)) for d in self._history_objects(upto)]

    def _history_objects(self, upto: Optional[int]) -> list[JSONObject]:
        found: dict[int, JSONObject] = {}
        for d in self._lines(HISTORY):
            if isinstance(d, dict) and "step" in d:
                found[int(d["step"])] = d
        try:
            listed = self.read_json(HISTORY_LIST) or []
        except RecordError:
            listed = []  # a damaged copy: the lines and the step folders still hold the steps
        for d in listed if isinstance(listed, list) else []:
            if isinstance(d, dict) and "step" in d:
                found.setdefault(int(d["step"]), d)
        for epoch, step in self.step_ids():
            try:
                d = self.read_json(f"{self.step_dir(epoch, step)}/{STEP_RECORD}")
            except RecordError:
                continue
            if isinstance(d, dict) and "step" in d:
                found.setdefault(int(d["step"]), d)
        return [found[s] for s in sorted(found) if upto is None or s <= upto]

    def append_lr_decision(self, rec: LrDecision) -> None:
        append_json_line(self.root / LR_HISTORY, rec.to_dict())

    def lr_decisions(self) -> list[LrDecision]:
        return [LrDecision.from_dict(d, LR_HISTORY) for d in self._lines(LR_HISTORY)]

    # ---------------------------------------------------------------- the score cache
    def append_score(self, key: str, ev: Evaluation) -> None:
        append_json_line(self.root / SCORES, ScoreEntry(key=key, eval=ev).to_dict())

    def scores(self) -> dict[str, Evaluation]:
        """The score cache: evaluation key -> Evaluation (a key evaluated twice: the last line wins)."""
        out = {}
        for d in self._lines(SCORES, SCORES_MAX_BYTES):
            e = ScoreEntry.from_dict(d, str(self.root / SCORES))
            out[e.key] = e.eval
        return out

    # ---------------------------------------------------------------- epoch boundaries
    def write_slow_update(self, epoch: int, rec: SlowUpdateRecord) -> None:
        self.write_json(f"{self.epoch_dir(epoch)}/{SLOW_RESULT}", rec.to_dict())

    def read_slow_update(self, epoch: int) -> Optional[SlowUpdateRecord]:
        return self._record(SlowUpdateRecord, f"{self.epoch_dir(epoch)}/{SLOW_RESULT}")

    def write_meta_skill(self, epoch: int, rec: MetaSkillRecord) -> None:
        self.write_json(f"{self.epoch_dir(epoch)}/{META_RESULT}", rec.to_dict())

    def read_meta_skill(self, epoch: int) -> Optional[MetaSkillRecord]:
        return self._record(MetaSkillRecord, f"{self.epoch_dir(epoch)}/{META_RESULT}")

    def write_epoch_text(self, epoch: int, name: str, text: str) -> Path:
        """A text file of an epoch boundary (prompts, candidate_skill.md, meta_skill.md)."""
        return self.write_text(f"{self.epoch_dir(epoch)}/{name}", text)

    def read_epoch_text(self, epoch: int, name: str) -> Optional[str]:
        return self.read_text(f"{self.epoch_dir(epoch)}/{name}")

    def epochs(self) -> dict[int, EpochRecord]:
        """Every epoch boundary with a folder, by epoch number."""
        out = {}
        for name in self._listed("epochs", r"e\d+", dirs=True):
            n = int(name[1:])
            out[n] = EpochRecord(
                n, self.read_slow_update(n), self.read_meta_skill(n), self.read_epoch_text(n, META_SKILL)
            )
        return out

    # ---------------------------------------------------------------- the end of a run
    def write_eval_results(self, split: str, rows: list[JSONObject]) -> None:
        """An eval-only run's per-episode results on `split`."""
        self.write_json(f"final/eval_{split}_results.json", rows)

    def read_eval_results(self, split: str) -> list[JSONObject]:
        """An eval-only run's per-episode results on `split` ([] when it wrote none)."""
        data = self.read_json(f"final/eval_{split}_results.json")
        return [r for r in data if isinstance(r, dict)] if isinstance(data, list) else []

    def write_final_evaluation(self, test: dict[str, Evaluation]) -> None:
        self.write_json(FINAL_EVALUATION, {k: v.to_dict() for k, v in test.items()})

    def write_summary(self, summary: Summary) -> Path:
        return self.write_json(SUMMARY, summary.to_dict())

    def read_summary(self) -> Optional[Summary]:
        return self._record(Summary, SUMMARY)

    def finished(self) -> bool:
        """The run ran to its end: a summary, and a state whose phase is done."""
        try:
            state = self.read_state_brief()
        except RecordError:
            return False
        return self.is_file(SUMMARY) and state.get("phase") == "done"

    # ---------------------------------------------------------------- time on the run
    def read_sessions(self) -> list[Session]:
        try:
            data = self.read_json(SESSIONS)
        except RecordError:
            data = None
        return [cast(Session, s) for s in data if isinstance(s, dict)] if isinstance(data, list) else []

    def write_sessions(self, sessions: list[Session]) -> None:
        self.write_json(SESSIONS, sessions)

    # ---------------------------------------------------------------- what made the run
    def write_provenance(self, record: Provenance) -> None:
        """Append one command's provenance (command line, overrides, resolved config, version, git commit and dirty
        flag, code hash) to provenance.json: the first entry made the run, later ones resumed it."""
        try:
            entries = self.read_json(PROVENANCE)
        except RecordError:
            entries = None
        entries = entries if isinstance(entries, list) else []
        self.write_json(PROVENANCE, [*entries, record])

    # ---------------------------------------------------------------- the inputs' identity and the jobs
    def read_identity(self) -> Optional[Identity]:
        """The identity record of the inputs that made the run (identity.json), None before the first command."""
        data = self.read_json(IDENTITY)
        return cast(Identity, data) if isinstance(data, dict) else None

    def write_identity(self, record: Identity) -> None:
        self.write_json(IDENTITY, record)

    def read_jobs(self) -> list[Job]:
        """The `ray job submit` submissions that worked on this run (jobs.json), oldest first."""
        data = self.read_json(JOBS)
        return [cast(Job, j) for j in data if isinstance(j, dict)] if isinstance(data, list) else []

    def add_job(self, entry: Job) -> None:
        self.write_json(JOBS, [*self.read_jobs(), entry])

    # ---------------------------------------------------------------- views for MLflow
    def read_mlflow_run(self) -> Optional[MlflowRun]:
        """The run's MLflow record (run id, tracking URI, experiment id), or None when it has none (yet)."""
        try:
            data = self.read_json(MLFLOW_RUN)
        except RecordError:
            return None
        return cast(MlflowRun, data) if isinstance(data, dict) else None

    def write_mlflow_run(self, record: MlflowRun) -> None:
        self.write_json(MLFLOW_RUN, record)

    def write_skill_history(self, versions: list[JSONObject], page: str) -> list[Path]:
        """skill_versions.json (one row per skill version) and skill_history.html (the page with the diffs)."""
        return [self.write_json(SKILL_VERSIONS, versions), self.write_text(SKILL_HISTORY, page)]

    def read_provenance(self, which: int = 0) -> Optional[Provenance]:
        """One command's provenance: the one that made the run (0, default) or the latest (-1); None before any."""
        try:
            entries = self.read_json(PROVENANCE)
        except RecordError:
            return None
        if not isinstance(entries, list) or not entries:
            return None
        entry = entries[which]
        return cast(Provenance, entry) if isinstance(entry, dict) else None
