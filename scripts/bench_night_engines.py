"""A night on the sleep demo's reviewed tasks, on the one-process engine and on Ray, in the same rounds.

    .venv/bin/python scripts/bench_night_engines.py                  # 2 rounds, 1 s per model call
    .venv/bin/python scripts/bench_night_engines.py --rounds 3 --latency 0.2

Each round copies `examples/sleep-demo` afresh and runs `python -m skillopt_ray.sleep run --project <copy> --tasks
<copy>/tasks` against the scripted OpenAI-compatible server (`tests/scripted_server.py`: a target that always says the
same thing, analysts that plant one rule), once with `ray.mode=local` and once with `ray.mode=cluster`, one after the
other so both see the same machine load. It prints each night's wall time (command -> exit), its model calls and the
peak proportional set size of its processes, then the medians and the ratio local / Ray.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "scripts"))

from bench_small_eval import MemorySampler, bench_parser, child_env  # noqa: E402


def night(project: Path, url: str, mode: str, srv: Any, env: dict[str, str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "skillopt_ray.sleep", "run", "--project", str(project), "--tasks",
           str(project / "tasks"), "llm=compatible", f"llm.base_url={url}", f"ray.mode={mode}"]  # fmt: skip
    before = len(srv.state.request_times)
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with MemorySampler([p.pid]) as mem:
        out, err = p.communicate(timeout=1800)
    wall = time.monotonic() - t0
    if p.returncode:
        raise SystemExit(f"the {mode} night failed ({p.returncode}): {err[-3000:]}")
    return {"wall_s": wall, "calls": len(srv.state.request_times) - before, "pss_mb": mem.peak_mb}


def main() -> None:
    ap = bench_parser(__doc__, rounds=2, latency=1.0)
    a = ap.parse_args()
    from scripted_server import Policies, ScriptedServer

    work = Path(tempfile.mkdtemp(prefix="bench_night_engines_"))
    env = child_env({"SKILLOPT_CLUSTER_HOME": str(work / "no-cluster")})
    rows: dict[str, list[dict[str, Any]]] = {"local": [], "cluster": []}
    with ScriptedServer(Policies(target="nonsense"), latency_s=a.latency) as srv:
        for i in range(a.rounds):
            for mode in rows:
                project = work / f"r{i}-{mode}"
                shutil.copytree(REPO / "examples" / "sleep-demo", project, ignore=shutil.ignore_patterns(".skillopt"))
                rows[mode].append(night(project, srv.base_url, mode, srv, env))
            shown = "  ".join(
                f"{m}: {r[-1]['wall_s']:.1f} s, {r[-1]['calls']} calls, {r[-1]['pss_mb']:.0f} MB"
                for m, r in rows.items()
            )
            print(f"round {i + 1}: {shown}", flush=True)
    med = {m: {k: statistics.median(x[k] for x in r) for k in r[0]} for m, r in rows.items()}
    ratio = statistics.median(x["wall_s"] / y["wall_s"] for x, y in zip(rows["local"], rows["cluster"]))
    for m, v in med.items():
        print(f"{m:>8}: wall {v['wall_s']:.1f} s  calls {v['calls']:.0f}  resident {v['pss_mb']:.0f} MB")
    print(f"local / Ray wall, same round: {ratio:.2f}x")
    if a.json:
        a.json.write_text(json.dumps({"rounds": rows, "median": med, "local_over_ray": ratio}, indent=1))


if __name__ == "__main__":
    main()
