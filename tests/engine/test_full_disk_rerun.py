"""A run whose disk fills mid-run, then its rerun once space is freed: the first reply the response cache cannot keep
stops the gateway from sending any new paid call, the run ends in one line naming the full disk and the fix, and the
rerun pays again only for the calls that were in flight then, each counted as lost by the ledger. Before, the run
went on paying for calls whose replies could not be kept, and the rerun paid for them all again.

Each run's output folder is a small tmpfs, filled to its last byte while the scripted server answers its
FILL_AT-th request (so where the disk fills does not depend on the machine's speed)."""

from __future__ import annotations

import errno
import json
import sys
from pathlib import Path

import pytest
from fulldisk_helpers import FillAt, free, small_disk
from helpers import checked
from scripted_server import ScriptedServer

from skillopt_ray import cli

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from bench_small_eval import reply, write_tasks  # noqa: E402

ITEMS = 24
CONCURRENCY = 4  # llm.target.max_concurrency: at most this many calls are in flight when the disk fills
FILL_AT = 6


def _eval_job(url: str, tasks: Path, out: Path, mode: str) -> dict:
    data = cli.plain(
        cli.compose(
            [
                "+experiment=custom",
                f"env.data_dir={tasks}",
                f"eval.skill_path={tasks.parent / 'skill.md'}",
                "mode=eval",
                "eval.split=test",
                "llm=compatible",
                f"llm.base_url={url}",
                f"llm.target.max_concurrency={CONCURRENCY}",
                f"output_dir={out}",
                "debug.progress=off",
                "tracking=none",
                f"ray.mode={mode}",
            ]
        )
    )
    return cli.resolve_paths(data)


def _full_disk_then_rerun(tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str) -> None:
    tasks = write_tasks(tmp_path / "data", ITEMS)
    with small_disk(tmp_path / "disk", mb=32) as disk:
        policy = FillAt(FILL_AT, disk, reply)
        with ScriptedServer(policy=policy, latency_s=0.05) as srv:
            data = _eval_job(srv.base_url, tasks, disk / "out", mode)
            code = cli.run_one(checked(data))
            err = capsys.readouterr().err
            first = srv.state.attempts
            run_dir = cli.run_dir_for(data)
            scored = (run_dir / "summary.json").exists()
            free(disk)
            rerun = cli.run_one(checked(data))
            repaid = srv.state.attempts - ITEMS  # one call per item: any past that was paid twice
            rerun_err = capsys.readouterr().err
        summary = json.loads((run_dir / "summary.json").read_text()) if rerun == 0 else {"tokens": {"lost": None}}
    print(f"{mode}: the first run paid {first} calls, the rerun paid {repaid} of them again "
          f"(lost {summary['tokens']['lost']})")  # fmt: skip
    assert code == 1, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and "disk is full" in last and "rerun the same command" in last, err[-3000:]
    assert not scored  # nothing became a score
    assert rerun == 0, rerun_err[-3000:]
    tokens = summary["tokens"]
    assert 1 <= repaid <= CONCURRENCY  # only the calls in flight when the first reply could not be kept
    assert tokens["lost"] == repaid  # each of them counted lost (paid, its reply not kept)
    assert tokens["calls"] + tokens["lost"] == ITEMS + repaid  # every paid call in the ledger, once
    assert summary["eval"]["hard"] == 1.0 and summary["eval"]["n"] == ITEMS


def test_a_full_disk_stops_paid_calls_and_the_rerun_pays_only_those_in_flight_one_process(tmp_path, capsys):
    _full_disk_then_rerun(tmp_path, capsys, "local")


@pytest.mark.slow
def test_a_full_disk_stops_paid_calls_and_the_rerun_pays_only_those_in_flight_on_ray(ray_cluster, tmp_path, capsys):
    _full_disk_then_rerun(tmp_path, capsys, "cluster")


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (
            OSError(errno.ENOSPC, "No space left on device"),
            "error: the disk is full ([Errno 28] No space left on "
            "device): free space, then rerun the same command to resume",
        ),  # fmt: skip
        (
            OSError(errno.EROFS, "Read-only file system"),
            "error: OSError: [Errno 30] Read-only file system (traceback "
            "in none kept: [Errno 30] Read-only file system)",
        ),  # fmt: skip
    ],
)
def test_a_run_record_the_disk_refuses_ends_the_run_in_one_line(tmp_path, capsys, monkeypatch, raised, said):
    """Not the gateway's stores: a run's own record (here an eval's results) that cannot be written. On a full disk
    the line says so and what to do; otherwise it names the error, and the traceback it could not keep either."""
    from skillopt_ray.runs.rundir import RunDir

    def refused(*a, **k):
        raise raised

    monkeypatch.setattr(RunDir, "write_eval_results", refused)
    monkeypatch.setattr(RunDir, "write_error", refused)
    tasks = write_tasks(tmp_path / "data", 4)
    with ScriptedServer(policy=reply) as srv:
        assert cli.run_one(checked(_eval_job(srv.base_url, tasks, tmp_path / "out", "local"))) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == said, err[-3000:]
