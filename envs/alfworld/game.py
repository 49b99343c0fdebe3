"""One ALFWorld game on the real engine: textworld's PDDL backend with ALFWorld's wrappers."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


def _ensure_alfworld_data_env() -> None:
    # `import alfworld` points ALFWORLD_DATA at ~/.cache/alfworld when unset; keep users' value.
    os.environ.setdefault("ALFWORLD_DATA", str(Path.home() / ".cache" / "alfworld"))


def import_engine(compile_cache_dir: Optional[Path] = None) -> None:
    """Import the engine (ALFWORLD_DATA set first) and install the speedups (unless
    SKILLOPT_TEXTWORLD_SPEEDUPS=0); cheap after the first call in a process."""
    _ensure_alfworld_data_env()
    import alfworld.agents.environment.alfred_tw_env  # noqa: F401
    import textworld.envs.pddl  # noqa: F401

    if os.environ.get("SKILLOPT_TEXTWORLD_SPEEDUPS", "1") != "0":
        from skillopt_envs.alfworld import speedups

        speedups.install(compile_cache_dir)


@dataclass
class StepOutcome:
    observation: str
    done: bool
    won: bool
    admissible: list[str]


class AlfWorldGame:
    """Load, reset and step one `game.tw-pddl` file."""

    def __init__(self, gamefile: str | Path, compile_cache_dir: Optional[Path] = None):
        """`compile_cache_dir`: where PDDL->SAS translations are kept across processes (None: memory only)."""
        import_engine(compile_cache_dir)
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
        from textworld.envs.pddl import PddlEnv

        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        self.gamefile = str(gamefile)
        self.env = AlfredInfos(AlfredDemangler(PddlEnv(infos), shuffle=False))
        self.env.load(self.gamefile)

    def reset(self) -> StepOutcome:
        st = self.env.reset()
        return StepOutcome(st.feedback, False, bool(st["won"]), list(st["admissible_commands"] or []))

    def step(self, action: str) -> StepOutcome:
        st, _score, done = self.env.step(action)
        return StepOutcome(st.feedback, bool(done), bool(st["won"]), list(st["admissible_commands"] or []))

    def close(self) -> None:
        env, self.env = self.env, None
        if env is None:
            return
        try:
            env.close()
        except Exception:  # noqa: BLE001 - closing a finished game must not fail an episode
            pass
        from skillopt_envs.alfworld.speedups import release_planner

        release_planner(env.unwrapped)


def read_walkthrough(gamefile: str | Path) -> list[str]:
    with open(gamefile, encoding="utf-8") as f:
        return list(json.load(f).get("walkthrough") or [])
