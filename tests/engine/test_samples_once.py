"""Sample folders are made once even when several processes ask at the same time (the command's checks, the
driver and env actors do): none deletes a folder another has already been handed."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

from skillopt_envs.kit import ensure_samples


def _slow_write(folder: Path) -> None:
    (folder / "manifest").mkdir()
    time.sleep(0.3)  # long enough for the other processes to start writing too
    (folder / "manifest" / "items.json").write_text("[]")


def _ask_and_read(root: str, out: mp.Queue[str]) -> None:
    got = ensure_samples(Path(root), _slow_write, "test")
    handed = (got / "manifest" / "items.json").stat().st_ino
    time.sleep(1.0)  # a reader keeps using the folder while the others finish
    now = got / "manifest" / "items.json"
    out.put("ok" if now.exists() and now.stat().st_ino == handed else "replaced under its reader")


def test_concurrent_askers_all_keep_a_complete_folder(tmp_path):
    ctx = mp.get_context("spawn")
    out: mp.Queue[str] = ctx.Queue()
    procs = [ctx.Process(target=_ask_and_read, args=(str(tmp_path / "s"), out)) for _ in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert sorted(out.get(timeout=5) for _ in procs) == ["ok"] * 4
    assert (tmp_path / "s" / "COMPLETE").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".s-")] == []  # no temporary folder left


def test_a_half_written_folder_is_replaced(tmp_path):
    root = tmp_path / "s"
    (root / "manifest").mkdir(parents=True)  # an interrupted run: no COMPLETE marker
    (root / "stray").write_text("x")
    ensure_samples(root, _slow_write, "test")
    assert (root / "manifest" / "items.json").exists() and not (root / "stray").exists()
