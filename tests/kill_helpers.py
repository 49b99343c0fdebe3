"""Shared by the tests that kill a run: the holding scripted server, the run's actors, its cache, ledger and decisions."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from scripted_server import Policies, ScriptedServer, ServerState

from skillopt_ray.llm.ledger import journal_path, read_journal

REPO = Path(__file__).resolve().parent.parent


LATENCY_S = 0.3


_VOLATILE = {
    "identity.json",
    "mlflow_run.json",
    "sessions.json",
    "ledger.json",
    "ledger.journal.jsonl",
    "llm_cache.sqlite",
    "progress.json",  # the live progress record: times and counts of the command that wrote it last
    "provenance.json",  # one entry per command that ran: a killed run's reruns each add theirs
}


class HoldingServer(ScriptedServer):
    """The scripted server with a switch in front of its answers.

    `answer`: answer as usual; `hold`: requests wait before being answered (not counted as answered);
    `refuse`: waiting and new requests get a 503, not counted. `hold_at=n` switches to `hold` as the n-th
    answer (across every process since `reset`) is sent, in the server's own loop, so exactly n are answered.
    Tokens are counted per (role, stage) beside the base server's per-(role, stage) request counts."""

    def __init__(self, policies: Policies):
        super().__init__(policies, latency_s=0.0)  # the latency is served here, before the switch
        self.reset()

    def reset(self) -> None:
        self.state = ServerState()
        self.mode = "answer"
        self.hold_at: int | None = None
        self.arrivals: list[float] = []
        self.tokens: Counter = Counter()  # (role, stage, "prompt"|"completion") -> tokens answered
        self.refused = 0
        self.undecided = 0  # requests that arrived and were neither answered nor refused yet
        self.last_answered = ""

    @property
    def answered(self) -> int:
        return sum(self.state.requests.values())

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append(time.monotonic())
        self.undecided += 1
        try:
            await request.read()  # the body is cached: the base handler below runs without yielding to the loop
            await asyncio.sleep(LATENCY_S)
            while self.mode == "hold":
                await asyncio.sleep(0.01)
        finally:
            self.undecided -= 1
        if self.mode == "refuse":
            self.refused += 1
            return web.json_response({"error": {"message": "refused after a kill", "type": "test"}}, status=503)
        st = self.state
        before = (self.answered, st.prompt_tokens, st.completion_tokens)
        resp = await super()._chat(request)
        if self.answered > before[0]:
            key = (request.headers.get("x-skillopt-role", ""), request.headers.get("x-skillopt-stage", ""))
            self.tokens[(*key, "prompt")] += st.prompt_tokens - before[1]
            self.tokens[(*key, "completion")] += st.completion_tokens - before[2]
            self.last_answered = "/".join(key)
            if self.hold_at is not None and self.answered >= self.hold_at:
                self.mode, self.hold_at = "hold", None
        return resp

    def refuse_waiting(self) -> int:
        """Once the run that sent them is gone: refuse every request still waiting, then answer again. Returns how many."""
        self.mode, refused = "refuse", self.refused
        deadline = time.monotonic() + 30
        while self.undecided and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not self.undecided, f"{self.undecided} requests still undecided"
        self.mode = "answer"
        return self.refused - refused

    def served(self) -> dict[str, dict[str, int]]:
        """What the endpoint answered, in the ledger's terms: `role/stage` -> calls and tokens."""
        return {
            f"{r}/{s}": {
                "calls": n,
                "prompt_tokens": self.tokens[(r, s, "prompt")],
                "completion_tokens": self.tokens[(r, s, "completion")],
            }
            for (r, s), n in sorted(self.state.requests.items())
        }


def _cli(url: str, tmp_path: Path, out: Path, mode: str = "cluster") -> subprocess.Popen:
    """The tiny SearchQA training command; `mode` is ray.mode (cluster: the Ray path, whose actors must end with the
    command; local: the one-process engine)."""
    args = [
        sys.executable,
        "-m",
        "skillopt_ray",
        "+experiment=searchqa",
        "+smoke=tiny",
        "llm=compatible",
        f"llm.base_url={url}",
        f"output_dir={out}",
        f"env.data_dir={tmp_path / 'qa'}",
        "env.options.split_source=folders",
        "debug.progress=off",
        f"ray.mode={mode}",
    ]
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_AUTH_MODE="disabled", RAY_USAGE_STATS_ENABLED="0")
    args.append("ray.episodes_per_actor=8")  # many calls in flight at the kill
    return subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _kill_when(p: subprocess.Popen, ready: Callable[[], bool], what: str, delay_s: float, actors: set[int]) -> float:
    """SIGKILL the CLI `delay_s` after `ready()` first holds, noting the run's actors; returns when it was killed."""
    deadline = time.monotonic() + 180
    while not ready() and time.monotonic() < deadline and p.poll() is None:
        actors.update(_run_actors(p.pid))
        time.sleep(0.02)
    assert ready(), f"the CLI ended or timed out before {what}: " + (
        p.communicate()[1][-2000:] if p.poll() is not None else ""
    )
    end = time.monotonic() + delay_s
    while time.monotonic() < end:
        actors.update(_run_actors(p.pid))
        time.sleep(0.02)
    assert p.poll() is None, f"the CLI ended before the kill ({what}): " + p.communicate()[1][-2000:]
    actors.update(_run_actors(p.pid))
    p.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    p.wait()
    return killed_at


def _after_kill(srv: HoldingServer, actors: set[int], killed_at: float) -> None:
    """No actor of the killed run still runs a second later, and no request reaches the endpoint after that;
    then the requests held at the kill are refused (nobody is left to read them) and answering resumes."""
    time.sleep(max(0.0, killed_at + 1.0 - time.monotonic()))
    lingering = _running(actors)
    assert not lingering, f"{len(lingering)} of the run's {len(actors)} actors still run 1 s after the kill"
    time.sleep(4)  # Ray's own clean-up of a dead driver takes 2-5 s: look past it for late requests
    late = [t - killed_at for t in list(srv.arrivals) if t > killed_at + 1.0]
    assert not late, f"{len(late)} requests arrived more than 1 s after the kill (last {max(late):.1f} s after)"
    srv.refuse_waiting()


def _comparable(run_dir: Path) -> dict[str, Any]:
    """Every file of the run directory as it should be whoever ran it and however often it was killed."""
    out: dict[str, Any] = {}
    for f in sorted(run_dir.rglob("*")):
        rel = f.relative_to(run_dir).as_posix()
        if not f.is_file() or rel in _VOLATILE or rel.startswith("llm_cache.sqlite"):
            continue
        text = (
            f.read_text(encoding="utf-8")
            .replace(str(run_dir.parent.parent), "<output_dir>")
            .replace(run_dir.name, "<run>")
        )
        if rel == "config.yaml":
            text = re.sub(r"(?m)^(\s*base_url:).*$", r"\1 <url>", text)
        if rel in ("state.json", "summary.json"):
            data = json.loads(text)
            data.pop("wall_time_s")
            if rel == "summary.json":
                data["tokens"].pop(
                    "cache_hits"
                )  # replays after a kill are hits; the paid part is checked against the endpoint
                for k in ("lost", "lost_tokens_est", "lost_cost_usd_est"):  # calls in flight at a kill: checked apart
                    data["tokens"].pop(k, None)
            text = json.dumps(data, indent=1, sort_keys=True)
        out[rel] = text
    return out


def _cache(run_dir: Path) -> dict[str, str]:
    db = sqlite3.connect(f"file:{run_dir / 'llm_cache.sqlite'}?mode=ro", uri=True)
    try:
        return dict(db.execute("SELECT key, response FROM responses"))
    finally:
        db.close()


def _ledger(run_dir: Path) -> dict[str, dict[str, int]]:
    """The ledger's paid part per `role/stage`, from ledger.json, which must agree with its journal."""
    saved = json.loads((run_dir / "ledger.json").read_text())["entries"]
    journal = {k: v.__dict__ for k, v in read_journal(journal_path(str(run_dir / "ledger.json"))).items()}
    assert saved == journal, "ledger.json and ledger.journal.jsonl disagree"
    for k, e in saved.items():
        assert e["errors"] == e["truncated"] == e["filtered"] == 0, (k, e)
    return {
        k: {f: e[f] for f in ("calls", "prompt_tokens", "completion_tokens")} for k, e in saved.items() if e["calls"]
    }


def _decisions(run_dir: Path) -> list[tuple]:
    return [
        (
            h["step"],
            h["action"],
            h["skill_version"],
            h["candidate_hash"],
            h["candidate_gate_score"],
            h["current_score"],
            h["best_score"],
        )
        for h in map(json.loads, (run_dir / "history.jsonl").read_text().splitlines())
    ]


def _run_actors(cli_pid: int) -> set[int]:
    """The run's actor processes (the driver, the LLM gateway, env actors): Ray workers below this CLI."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            title = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if not any(n in title for n in (b"ray::DriverActor", b"ray::GatewayActor", b"ray::EnvActor")):
            continue
        pid = int(entry)
        for _ in range(10):
            pid = _ppid_and_state(pid)[0]
            if pid == cli_pid:
                found.add(int(entry))
                break
            if pid <= 1:
                break
    return found


def _running(pids: set[int]) -> list[int]:
    return [a for a in pids if _ppid_and_state(a)[1] not in ("gone", "Z")]  # a zombie has exited


def _ppid_and_state(pid: int) -> tuple[int, str]:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0]
    except (OSError, IndexError, ValueError):
        return 0, "gone"
