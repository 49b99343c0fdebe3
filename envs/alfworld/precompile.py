"""Compile ALFWorld games ahead of training, in parallel, into the on-disk compile cache.

A game's first load on a machine costs 0.2-1.4 CPU-seconds (PDDL->SAS translation, grammar
parsing); later loads read the cache (see `compile_cache`). Training fills the cache as it goes,
so this is optional: run it once per machine (or per cluster node) to take the first epoch's load
cost off the clock.

    python -m skillopt_envs.alfworld.precompile                      # $ALFWORLD_DATA, or the built-in samples
    python -m skillopt_envs.alfworld.precompile --data ~/alfworld --split all --workers 8
    python -m skillopt_envs.alfworld.precompile --data ~/alfworld --split paper   # only the paper split's 191 games
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Optional

from skillopt_envs.alfworld.compile_cache import resolve_dir


def _compile(gamefile: str, cache_dir: str) -> int:
    """Load one game (filling the cache); the number of parts computed rather than read."""
    from skillopt_envs.alfworld import speedups
    from skillopt_envs.alfworld.game import AlfWorldGame
    from skillopt_envs.alfworld.openings import Opening, Openings

    compiled = speedups.install(Path(cache_dir))
    before = sum(compiled.computed.values())
    game = AlfWorldGame(gamefile, Path(cache_dir))
    first = game.reset()  # its opening kept too: an episode then asks its first call before loading the game
    Openings.open(Path(cache_dir)).put(gamefile, Opening(first.observation, tuple(first.admissible)))
    game.close()
    return sum(compiled.computed.values()) - before


PARTS_PER_GAME = 2  # the SAS translation and the grammar (the replanning translation is made on demand)


def precompile(gamefiles: list[str], cache_dir: Path, workers: int) -> dict[str, float]:
    t0 = time.monotonic()
    # spawn: the caller may hold threads (Ray, a server) that a forked child would inherit mid-lock
    with ProcessPoolExecutor(max_workers=max(1, workers), mp_context=multiprocessing.get_context("spawn")) as pool:
        computed = sum(pool.map(_compile, gamefiles, [str(cache_dir)] * len(gamefiles)))
    return {
        "games": len(gamefiles),
        "compiled": computed,
        "already_cached": PARTS_PER_GAME * len(gamefiles) - computed,
        "seconds": round(time.monotonic() - t0, 2),
    }


def main(argv: Optional[list[str]] = None) -> int:
    import os

    from skillopt_envs.alfworld import data as alf_data
    from skillopt_envs.base import DataError

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--data", default=None, help="folder holding json_2.1.1 (default: $ALFWORLD_DATA, else the built-in samples)"
    )
    ap.add_argument(
        "--split",
        default="all",
        help="train, val, test or all (default): every game under the split folders; "
        "paper: the games of SkillOpt's paper split (39/18/134) that the data holds",
    )
    ap.add_argument(
        "--cache",
        default="auto",
        help="compile cache directory (default: auto = ~/.cache/skillopt_ray/alfworld_compiled_v1)",
    )
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    a = ap.parse_args(argv)
    cache_dir = resolve_dir(a.cache)
    if cache_dir is None:
        print("error: --cache off leaves nothing to fill; give a directory or auto", file=sys.stderr)
        return 2
    try:
        root = alf_data.resolve_root(a.data)
        if root is None:
            from skillopt_envs.alfworld.samples import ensure_sample_games

            root = ensure_sample_games()
        if a.split == "paper":
            tasks = alf_data.manifest_split(root, alf_data.PAPER_SPLIT_DIR, "all", skip_missing=True)
        else:
            tasks = alf_data.walk_split(root, a.split)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report = precompile([t.payload["gamefile"] for t in tasks], cache_dir, a.workers)
    print(
        f"{report['games']} games from {root} ({a.split}): {report['compiled']} parts compiled, "
        f"{report['already_cached']} already cached or shared with another game, {report['seconds']} s; cache: {cache_dir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
