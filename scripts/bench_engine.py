"""ALFWorld engine cost per episode with and without envs/alfworld/speedups.py, in one process.

Plays each game's walkthrough (after 3 `look`s) three times: on stock textworld; with the speedups
and an empty compile cache (a game's first load on this machine); and again with the cache
on disk but nothing in memory (every later load: another actor, epoch, run or sweep trial).
Checks that every observation and admissible-command list is identical across the three.

    python scripts/bench_engine.py --games 12
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["SKILLOPT_TEXTWORLD_SPEEDUPS"] = "0"  # the first pass must run on stock textworld
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def play_all(tasks: list, compile_cache_dir: Path | None = None) -> tuple[float, str, int]:
    """CPU seconds per episode, a digest of every observation, and the number of games won."""
    from skillopt_envs.alfworld.game import AlfWorldGame

    log, wins = [], 0
    t0 = time.process_time()
    for t in tasks:
        game = AlfWorldGame(t.payload["gamefile"], compile_cache_dir)
        first = game.reset()
        log.append(first.observation + "|".join(first.admissible))
        walk = json.loads(Path(t.payload["gamefile"]).read_text())["walkthrough"]
        for action in ["look"] * 3 + walk:
            out = game.step(action)
            log.append(out.observation + "|".join(out.admissible))
            if out.won:
                wins += 1
                break
        game.close()
    cpu = (time.process_time() - t0) / len(tasks)
    return cpu, hashlib.sha256("\n".join(log).encode()).hexdigest(), wins


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--data", default=os.environ.get("ALFWORLD_DATA") or str(REPO.parent / "shared" / "data" / "alfworld")
    )
    ap.add_argument("--games", type=int, default=12)
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)
    from skillopt_envs.alfworld.data import walk_split

    root = Path(a.data)
    if not (root / "json_2.1.1").is_dir():
        from skillopt_envs.alfworld.samples import ensure_sample_games

        root = ensure_sample_games()
    tasks = walk_split(root, "all")[: a.games]
    play_all(tasks[:1])  # warm-up: imports and first-use costs stay out of every timing
    stock_cpu, stock_digest, stock_wins = play_all(tasks)
    from skillopt_envs.alfworld import speedups

    with tempfile.TemporaryDirectory() as tmp:
        cache_dir = Path(tmp) / "sas"
        compiled = speedups.install(cache_dir)
        cold_cpu, cold_digest, cold_wins = play_all(tasks, cache_dir)
        compiled.memory.clear()  # what a fresh actor process sees: compiled parts on disk only
        warm_cpu, warm_digest, warm_wins = play_all(tasks, cache_dir)
        disk = compiled.disk
        assert disk is not None
    out = {
        "games": len(tasks),
        "stock_cpu_s_per_episode": round(stock_cpu, 3),
        "speedups_cold_cache_cpu_s_per_episode": round(cold_cpu, 3),
        "speedups_warm_cache_cpu_s_per_episode": round(warm_cpu, 3),
        "cold_over_stock": round(cold_cpu / stock_cpu, 3),
        "warm_over_stock": round(warm_cpu / stock_cpu, 3),
        "compiled": compiled.computed,
        "disk_cache_hits": disk.hits,
        "identical_observations": stock_digest == cold_digest == warm_digest,
        "won": [stock_wins, cold_wins, warm_wins],
    }
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2))
    return 0 if out["identical_observations"] else 1


if __name__ == "__main__":
    sys.exit(main())
