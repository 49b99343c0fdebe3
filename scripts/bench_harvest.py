"""How long does `harvest` take on 1,000 sessions? Half Codex, half Claude Code, each made from the committed logs
of the real CLIs (tests/data/sessions/) with their turns repeated `--turns` times (a working session of that many
requests, each with a command, its output and a reply), with new session ids. The heuristic miner (no model), so
the time is the reading, scoping, redaction, mining and writing alone. Every session is read and mined
(--max-sessions = --sessions); the task folder keeps the default 40 tasks.

    .venv/bin/python scripts/bench_harvest.py                 # 1,000 sessions, 10 turns each; target under 2 s
    .venv/bin/python scripts/bench_harvest.py --sessions 5000 --turns 30
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
REAL = REPO / "tests" / "data" / "sessions"


def _turn_slice(records: list[dict], source: str) -> tuple[list[dict], list[dict], list[dict]]:
    """(head, one turn, tail) of a real log: the turn is the records from the user's request to the reply."""
    if source == "codex":
        start = next(i for i, r in enumerate(records) if _codex_user(r))
        end = max(i for i, r in enumerate(records) if (r.get("payload") or {}).get("role") == "assistant") + 1
    else:
        start = next(i for i, r in enumerate(records) if r.get("type") == "user")
        end = max(i for i, r in enumerate(records) if r.get("type") == "assistant") + 1
    return records[:start], records[start:end], records[end:]


def _codex_user(r: dict) -> bool:
    p = r.get("payload") or {}
    text = json.dumps(p.get("content") or "")
    return p.get("role") == "user" and "environment_context" not in text


def make_stores(root: Path, project: Path, sessions: int, turns: int) -> int:
    """Write the stores; returns their total size in bytes."""
    total = 0
    templates = {
        s: [
            [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
            for f in sorted((REAL / ("codex" if s == "codex" else "claude")).rglob("*.jsonl"))
        ]
        for s in ("codex", "claude")
    }
    for n in range(sessions):
        source = "codex" if n % 2 == 0 else "claude"
        records = templates[source][(n // 2) % len(templates[source])]
        head, turn, tail = _turn_slice(records, source)
        old = (records[0].get("payload") or {}).get("id") if source == "codex" else records[0].get("sessionId")
        sid = str(uuid.UUID(int=n + 1))
        text = "\n".join(json.dumps(r) for r in head + turn * turns + tail).replace(str(old), sid)
        text = text.replace("{PROJECT}", str(project)).replace("Add a --verbose", f"Task {n}: add a --verbose")
        text = text.replace("Summarise what", f"Task {n}: summarise what")
        if source == "codex":
            path = root / "codex" / "sessions" / "2026" / "11" / "28" / f"rollout-2026-11-28T00-00-00-{sid}.jsonl"
        else:
            path = root / "claude" / "projects" / "-proj" / f"{sid}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        total += path.stat().st_size
    return total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, str(REPO))
    from skillopt_ray.sleep.harvest.pipeline import HarvestOptions, run
    from skillopt_ray.sleep.harvest.redact import Redactor
    from skillopt_ray.sleep.harvest.stores import Stores

    with tempfile.TemporaryDirectory() as t:
        root = Path(t)
        project = root / "proj"
        project.mkdir()
        size = make_stores(root, project, a.sessions, a.turns)
        times: list[float] = []
        cpus: list[float] = []
        for _ in range(a.repeats):
            opts = HarvestOptions(
                project=project,
                stores=Stores("all", root / "codex", root / "claude"),
                lookback=None,
                lookback_given=True,
                output=root / f"out-{len(times)}",
                max_sessions=a.sessions,  # every session read and mined; the task file keeps the default 40
            )
            start, cpu = time.perf_counter(), time.process_time()
            report = run(opts, None, Redactor.from_environment())
            times.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(
            f"{a.sessions} sessions ({a.turns} turns each, {size / 2**20:.1f} MiB): harvest "
            f"{statistics.median(times):.2f} s median of {a.repeats} ({', '.join(f'{x:.2f}' for x in times)}), "
            f"CPU {statistics.median(cpus):.2f} s; load average {os.getloadavg()[0]:.1f}; "
            f"sessions {report['sessions']}, {report['tasks_new']} tasks; peak RSS {peak:.0f} MB"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
