"""Stores that survive a kill at any moment: the MLflow sqlite store and the MLflow run it holds.

A kill while MLflow migrates a fresh store used to leave a file on which every rerun failed
(`duplicate column name: storage_location`); a transient store error used to fork a second run."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skillopt_ray.runs.tracking import Tracker, TrackingError, ensure_store, sqlite_path, store_state

REPO = Path(__file__).resolve().parents[2]


def half_made_store(path: Path) -> None:
    """What a kill in the middle of MLflow's migrations leaves: the revision before `acf3f17fdcc7` recorded,
    but that migration's column already added (sqlite commits the DDL before alembic bumps the version)."""
    from alembic import command
    from mlflow.store.db.utils import _get_alembic_config, create_sqlalchemy_engine
    from mlflow.store.tracking.dbmodels.initial_models import Base as InitialBase

    engine = create_sqlalchemy_engine(f"sqlite:///{path}")
    InitialBase.metadata.create_all(engine)
    config = _get_alembic_config(str(engine.url))
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "2d6e25af4d3e")
    engine.dispose()
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE model_versions ADD COLUMN storage_location VARCHAR(500)")
    db.commit()
    db.close()


def test_a_store_half_made_by_a_killed_start_is_rebuilt_and_used(tmp_path):
    db = tmp_path / "mlflow.db"
    half_made_store(db)
    assert store_state(db)[0] == "half_made"
    notes: list[str] = []
    tr = Tracker(True, f"sqlite:///{db}", "exp", tmp_path / "art")
    notes = tr.notes
    assert any("half-made" in n and "created again" in n for n in notes), notes
    assert store_state(db) == ("ok", "")
    saved: dict = {}
    run_id = tr.start({}, "r1", {}, saved.update)
    tr.log_metrics({"x": 1.0}, 0)
    assert tr.client.get_run(run_id).data.metrics == {"other/x": 1.0}  # ungrouped names land under other/
    assert list(tmp_path.glob("mlflow.db.broken-*")), "the half-made file is kept aside, not deleted"


def test_a_store_with_runs_and_an_old_schema_is_never_touched(tmp_path):
    db = tmp_path / "mlflow.db"
    half_made_store(db)
    con = sqlite3.connect(db)
    con.execute("INSERT INTO experiments (experiment_id, name, lifecycle_stage) VALUES (7, 'kept', 'active')")
    con.execute(
        "INSERT INTO runs (run_uuid, experiment_id, lifecycle_stage, status, start_time, source_type, source_name, "
        "entry_point_name, user_id, artifact_uri) VALUES ('abc', 7, 'active', 'FINISHED', 0, 'LOCAL', '', '', '', '')"
    )
    con.commit()
    con.close()
    before = db.read_bytes()
    with pytest.raises(TrackingError, match="mlflow db upgrade"):
        ensure_store(f"sqlite:///{db}")
    assert db.read_bytes() == before


def test_a_new_store_is_migrated_without_a_disk_sync_per_commit_and_synced_once_whole(tmp_path, monkeypatch):
    """Building a fresh store waited for the disk at every one of its migrations' commits (a first run's MLflow open:
    2-3 s idle of 3 s); the private build file is synced once, whole, before it is linked into place."""
    import mlflow.store.db.utils as db_utils

    upgrade, seen, synced = db_utils._upgrade_db, [], []

    def spying_upgrade(engine):
        with engine.connect() as conn:
            seen.append(conn.exec_driver_sql("PRAGMA synchronous").scalar())
        upgrade(engine)

    fsync = os.fsync

    def spying_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        fsync(fd)

    monkeypatch.setattr(db_utils, "_upgrade_db", spying_upgrade)
    monkeypatch.setattr(os, "fsync", spying_fsync)
    db = tmp_path / "mlflow.db"
    ensure_store(f"sqlite:///{db}")
    assert seen == [0]  # synchronous=OFF while the private file is built
    assert len(synced) == 1 and ".mlflow.db.building-" in synced[0]
    assert store_state(db) == ("ok", "")
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA synchronous").fetchone()[0] == 2  # a per-connection setting: the store's users sync
    finally:
        con.close()


_CREATE = """
import sys, time
from pathlib import Path
import mlflow.store.db.utils, mlflow.tracking  # imports first: the kill must land while the store is being made
from skillopt_ray.runs.tracking import Tracker  # noqa: E402
print("ready", flush=True)
Tracker(True, sys.argv[1], "exp", Path(sys.argv[2]))
print("made", flush=True)
"""


def test_kill_at_any_moment_of_store_creation_leaves_a_store_the_rerun_uses(tmp_path):
    """SIGKILL at random moments while the store is made; each rerun must open it (or make it) and log."""
    rng = random.Random(int(os.environ.get("SKILLOPT_KILL_SEED", "14")))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    outcomes = []
    for i in range(4):
        out = tmp_path / f"o{i}"
        out.mkdir()
        uri = f"sqlite:///{out / 'mlflow.db'}"
        proc = subprocess.Popen(
            [sys.executable, "-c", _CREATE, uri, str(out / "art")], stdout=subprocess.PIPE, text=True, env=env
        )
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 1.5))  # a fresh store takes about 2 s to make on this machine
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        db = out / "mlflow.db"
        outcomes.append("absent" if not db.exists() else store_state(db)[0])
        tr = Tracker(True, uri, "exp", out / "art")  # the rerun
        run_id = tr.start({}, "r", {}, lambda rec: None)
        tr.log_metrics({"ok": 1.0}, 0)
        assert tr.client.get_run(run_id).data.metrics["other/ok"] == 1.0
        assert not [p for p in out.iterdir() if ".building-" in p.name]
    assert set(outcomes) <= {"absent", "ok"}, outcomes  # never a half-made file in place


def test_resume_survives_a_kill_between_creating_the_run_and_saving_its_id(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    record: dict = {}
    tr = Tracker(True, uri, "exp", tmp_path / "art")
    first = tr.start(record, "r", {}, record.update)  # the run id itself was never saved: a kill right after creation
    assert "run_id" not in record and record["run_uid"]
    again = Tracker(True, uri, "exp", tmp_path / "art").start(dict(record), "r", {}, record.update)
    assert again == first
    assert len(tr.client.search_runs([tr.experiment_id])) == 1


def test_a_transient_store_error_is_retried_and_never_forks_a_second_run(tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    monkeypatch.setattr("skillopt_ray.runs.tracking.time.sleep", lambda s: None)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tr = Tracker(True, uri, "exp", tmp_path / "art")
    run_id = tr.start({}, "r", {}, lambda rec: None)
    real_get = MlflowClient.get_run
    fails = {"n": 2}

    def flaky(self, rid):
        if fails["n"]:
            fails["n"] -= 1
            raise MlflowException("(sqlite3.OperationalError) database is locked")
        return real_get(self, rid)

    monkeypatch.setattr(MlflowClient, "get_run", flaky)
    tr2 = Tracker(True, uri, "exp", tmp_path / "art")
    assert tr2.start({"run_id": run_id}, "r", {}, lambda rec: None) == run_id
    fails["n"] = 100  # a store that stays down: one line, no second run
    with pytest.raises(TrackingError, match=r"failed to read the run to resume after 5 attempts: .*database is locked"):
        Tracker(True, uri, "exp", tmp_path / "art").start({"run_id": run_id}, "r", {}, lambda rec: None)
    monkeypatch.setattr(MlflowClient, "get_run", real_get)
    assert len(tr.client.search_runs([tr.experiment_id])) == 1


def test_a_wiped_store_starts_a_new_run_with_a_note(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tr = Tracker(True, uri, "exp", tmp_path / "art")
    run_id = tr.start({"run_id": "0" * 32}, "r", {}, lambda rec: None)
    assert run_id != "0" * 32 and any("is not in" in n for n in tr.notes)


def test_sqlite_path():
    assert sqlite_path("sqlite:////a/b.db") == Path("/a/b.db")
    assert sqlite_path("http://x:5000") is None and sqlite_path("sqlite:///:memory:") is None
