"""How far past a token cap a night spends: `python -m skillopt_ray.sleep run --max-tokens N` on a scripted night
(tests/sleep/test_sleep_night.py's task folder and planted-rule server), its ledger's tokens printed beside the cap.

    python scripts/bench_night_budget.py [--cap 1500] [--python PATH]

`--python` runs the night with another interpreter, e.g. the lead's checkout's venv, to compare before and after
with the same server and tasks (the server runs here; the night is a subprocess).

Measured 2026-11-29 (2 cores): caps of 800 / 1,500 / 4,000 tokens ended at 2,951 / 2,951 / 4,699 tokens when only
answered calls counted, and at 1,905 / 1,905 / 4,019 with budget holds (the night's largest call, an analyst call,
is 1,185 tokens; it is admitted alone once the calls before it settle). Measured 2026-12-07 (2 cores) with each
call's worst case held against the cap and the last completion limit cut to what remains: caps of 1,500 / 4,000
ended at 720 / 2,951 by the server's count, never past the cap (the next call, that 1,185-token analyst call, did
not fit in what remained, so the night stopped before it)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=int, default=1500)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--latency", type=float, default=0.05, help="the scripted server's seconds per reply")
    a = ap.parse_args()

    from scripted_server import ScriptedServer
    from test_sleep_night import PlantedRule, task_folder

    with tempfile.TemporaryDirectory(prefix="bench-night-budget-") as tmp:
        if os.environ.get("BENCH_KEEP"):
            tmp = tempfile.mkdtemp(prefix="bench-night-budget-kept-")
        project = Path(tmp) / "proj"
        project.mkdir()
        task_folder(project)
        with ScriptedServer(PlantedRule("HELPFUL"), latency_s=a.latency) as srv:
            argv = [a.python, "-m", "skillopt_ray.sleep", "run", "--project", str(project),
                    "--tasks", str(project / ".skillopt" / "tasks"), "--max-tokens", str(a.cap),
                    "llm=compatible", f"llm.base_url={srv.base_url}", "tracking=none", "ray.address=local"]  # fmt: skip
            env = dict(os.environ, RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0", COMPATIBLE_API_KEY="k")
            t0 = time.monotonic()
            p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp)
            wall = time.monotonic() - t0
            served = srv.state.prompt_tokens + srv.state.completion_tokens
        (ledger,) = (project / ".skillopt" / "nights" / "runs").glob("night-*/ledger.json")
        totals = json.loads(ledger.read_text())["totals"]
    last = [ln for ln in p.stderr.splitlines() if "cap" in ln][-1:] or p.stderr.splitlines()[-1:]
    print(
        f"cap {a.cap} tokens: exit {p.returncode}, ledger {totals['tokens']} tokens in {totals['calls']} calls "
        f"(server served {served}), {totals['tokens'] / a.cap:.2f}x the cap, {wall:.1f} s; {' '.join(last)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
