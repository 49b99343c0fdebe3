"""The run directory: every file a run writes, written atomically, readable after a crash.

config.yaml            resolved config (secrets redacted)
state.json             run state (the resume point)
history.jsonl          one record per step, appended (history.json: the same list, at epoch ends)
scores.jsonl           every evaluation of a skill on a split, appended (the score cache)
skills/skill_vNNNN.md  every accepted skill version; best_skill.md
steps/eEE_sSSS/        per-stage records of a step (rollout, reflect, aggregate, select, update, gate)
epochs/eEE/            slow-update and meta-skill records
final/                 final evaluation; summary.json
llm_cache.sqlite       response cache; ledger.json token/cost ledger
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import yaml

from skillopt_ray.utils.io import atomic_write_json, atomic_write_text, read_json


class RunDir:
    def __init__(self, root: str | Path):
        self.root = Path(root)

    def ensure(self) -> RunDir:
        for sub in ("skills", "steps", "epochs", "final"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        return self

    # paths
    @property
    def state_path(self) -> Path:
        return self.root / "state.json"

    @property
    def cache_path(self) -> Path:
        return self.root / "llm_cache.sqlite"

    @property
    def ledger_path(self) -> Path:
        return self.root / "ledger.json"

    @staticmethod
    def step_dir(epoch: int, step: int) -> str:
        """A step's record folder, relative to the run root."""
        return f"steps/e{epoch:02d}_s{step:03d}"

    @staticmethod
    def epoch_dir(epoch: int) -> str:
        """An epoch boundary's record folder, relative to the run root."""
        return f"epochs/e{epoch:02d}"

    def skill_path(self, version: int) -> Path:
        return self.root / "skills" / f"skill_v{version:04d}.md"

    # io
    def write_config(self, cfg: dict[str, Any]) -> None:
        atomic_write_text(self.root / "config.yaml", yaml.safe_dump(cfg, sort_keys=False))

    def write_json(self, rel: str | Path, data: Any) -> Path:
        path = self.root / rel
        atomic_write_json(path, data)
        return path

    def read_json(self, rel: str | Path) -> Optional[Any]:
        path = self.root / rel
        return read_json(path) if path.exists() else None

    def write_text(self, rel: str | Path, text: str) -> Path:
        path = self.root / rel
        atomic_write_text(path, text)
        return path

    def load_state(self) -> Optional[dict[str, Any]]:
        return read_json(self.state_path) if self.state_path.exists() else None

    def save_state(self, state: dict[str, Any]) -> None:
        atomic_write_json(self.state_path, state)

    def write_skill(self, version: int, text: str) -> Path:
        path = self.skill_path(version)
        atomic_write_text(path, text)
        return path

    def summary(self) -> Optional[dict[str, Any]]:
        p = self.root / "summary.json"
        return json.loads(p.read_text()) if p.exists() else None
