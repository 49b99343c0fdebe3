"""Shared by the sleep tests: hand-made session stores for the harvest, in the record formats of the committed
real-CLI fixtures (tests/data/sessions/: Codex rollouts and Claude Code project logs); task folders, nights and
staged proposals."""

from __future__ import annotations

import hashlib
import json
import tempfile
import uuid
from pathlib import Path
from typing import Any, Optional

from scripted_server import Policies, ScriptedServer

from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.cli import main
from skillopt_ray.sleep.harvest.pipeline import HarvestOptions, run
from skillopt_ray.sleep.harvest.redact import Redactor
from skillopt_ray.sleep.harvest.stores import Stores
from skillopt_ray.sleep.proposal.staging import NightProposal

REAL = Path(__file__).parent / "data" / "sessions"
SECRETS = {
    "openai_key": "sk-proj-" + "A1b2C3d4" * 5,
    "anthropic_key": "sk-ant-api03-" + "Zy9x" * 8,
    "aws_access_key": "AKIA" + "QWERTYUIOPASDFGH",
    "github_token": "ghp_" + "a1B2" * 9,
    "slack_token": "xoxb-" + "1234567890-abcdefghij",
    "google_api_key": "AIza" + "S" * 35,
    "stripe_key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "huggingface_token": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "bearer_credential": "Bearer " + "q8Zt4Lm2Pw9Xc7Vb",
    "connection_string": "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=" + "K3yV4lu3Secret==",
    "pem_private_key": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA7secretbody\n-----END RSA PRIVATE KEY-----",
    "secret_assignment": "gitlab_api_key: " + "glx7Qm2Rt9Lp4Wv8",
    "url_credentials": "postgres://admin:" + "S3cr3tPassw0rd" + "@db.example.com/app",
    "environment_value": "env-value-" + "9f8e7d6c5b4a",
}
LIVE = "---\nname: deploy\ndescription: how we deploy\n---\n\nRun make deploy.\n"
NEW = "---\nname: deploy\ndescription: how we deploy\n---\n\nRun make test, then make deploy.\n"
P_RIGHT = {"base": 0.5, "HELPFUL": 0.85, "HARMFUL": 0.15}
RULES = {
    "HELPFUL": "- HELPFUL: finish with the word DONE-OK.",
    "HARMFUL": "- HARMFUL: stop before you finish.",
    "NEUTRAL": "- NEUTRAL: keep a calm tone.",  # leaves the target's chances as they were: a tie
}


def jsonl(path: Path, records: list[dict[str, Any]], tail: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records) + tail)
    return path


def codex_session(
    home: Path,
    cwd: str,
    users: list[str],
    start: str = "2020-01-01T10:00:00.000Z",
    end: Optional[str] = None,
    sid: Optional[str] = None,
    archived: bool = False,
    replies: tuple[str, ...] = ("Done.",),
    commit: str = "",
    extra: tuple[dict[str, Any], ...] = (),
    tail: bytes = b"",
) -> Path:
    sid = sid or str(uuid.uuid4())
    meta: dict[str, Any] = {"id": sid, "timestamp": start, "cwd": cwd, "originator": "codex_exec"}
    if commit:
        meta["git"] = {"commit_hash": commit, "branch": "main"}
    recs: list[dict[str, Any]] = [{"timestamp": start, "type": "session_meta", "payload": meta}]
    for u in users:
        recs.append({"timestamp": start, "type": "event_msg", "payload": {"type": "user_message", "message": u}})
        recs.append(
            {
                "timestamp": start,
                "type": "response_item",
                "payload": {"type": "function_call", "name": "exec_command", "arguments": '{"cmd":"cat a.py"}'},
            }
        )
    for r in replies:
        recs.append(
            {"timestamp": end or start, "type": "event_msg", "payload": {"type": "agent_message", "message": r}}
        )
    recs += list(extra)
    name = f"rollout-{start[:19].replace(':', '-')}-{sid}.jsonl"
    day = start[:10].replace("-", "/")
    path = home / "archived_sessions" / name if archived else home / "sessions" / day / name
    return jsonl(path, recs, tail)


def claude_session(
    home: Path,
    cwd: str,
    users: list[str],
    start: str = "2020-01-01T10:00:00.000Z",
    end: Optional[str] = None,
    sid: Optional[str] = None,
    replies: tuple[str, ...] = ("Done.",),
    name: Optional[str] = None,
    extra: tuple[dict[str, Any], ...] = (),
    tail: bytes = b"",
) -> Path:
    sid = sid or str(uuid.uuid4())
    base = {"sessionId": sid, "cwd": cwd, "gitBranch": "main", "isSidechain": False, "version": "2.1.0"}
    recs: list[dict[str, Any]] = [{"type": "summary", "summary": "s"}]
    for u in users:
        recs.append({**base, "type": "user", "timestamp": start, "message": {"role": "user", "content": u}})
        tool = {"type": "tool_use", "id": "t", "name": "Bash", "input": {"command": "ls"}}
        recs.append(
            {**base, "type": "assistant", "timestamp": start, "message": {"role": "assistant", "content": [tool]}}
        )
    for r in replies:
        block = {"type": "text", "text": r}
        recs.append(
            {
                **base,
                "type": "assistant",
                "timestamp": end or start,
                "message": {"role": "assistant", "content": [block]},
            }
        )
    recs += list(extra)
    folder = home / "projects" / cwd.replace("/", "-")
    return jsonl(folder / f"{name or sid}.jsonl", recs, tail)


def real_fixtures(project: Path, codex_home: Path, claude_home: Path) -> list[Path]:
    """The committed real-CLI session logs copied into private stores, their working folder set to `project`."""
    out = []
    for sub, home in (("codex", codex_home), ("claude", claude_home)):
        for f in sorted((REAL / sub).rglob("*.jsonl")):
            dest = home / f.relative_to(REAL / sub)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(f.read_text("utf-8").replace("{PROJECT}", str(project)), encoding="utf-8")
            out.append(dest)
    return out


def task_folder(project: Path, n_val: int = 14) -> Path:
    """A night's task folder as the harvest writes it: chat tasks whose check.py wants DONE-OK in the reply; 2 train,
    n_val val, 1 test."""
    from skillopt_ray.sleep.harvest.task_folder import write_tasks
    from skillopt_ray.sleep.harvest.tasks import MinedTask

    tasks = [
        MinedTask(f"Please tidy the notes file, part {i}.", "chat", [{"op": "contains", "arg": "DONE-OK"}])
        for i in range(n_val + 3)
    ]
    splits = {t.id: "train" if i < 2 else "test" if i == n_val + 2 else "val" for i, t in enumerate(tasks)}
    out = project / ".skillopt" / "tasks"
    write_tasks(out, tasks, splits, project, {"project": str(project)})
    return out


def harvest(project, codex_home, claude_home, **kw):
    opts = HarvestOptions(
        project=project,
        stores=Stores(kw.pop("source", "all"), codex_home, claude_home),
        lookback=None,
        lookback_given=kw.pop("lookback_given", True),
        **kw,
    )
    return run(opts, None, kw.get("redactor") or Redactor())


def tasks_of(project: Path) -> dict[str, dict]:
    out = {}
    for d in sorted((project / ".skillopt" / "tasks").iterdir()):
        if d.is_dir():
            out[(d / "task.md").read_text().strip()] = json.loads((d / "task.json").read_text())
    return out


def _needles(value: str) -> list[str]:
    """The secret part of a planted value (what must not appear)."""
    for sep in ("Bearer ", "AccountKey=", "api_key: ", "admin:"):
        if sep in value:
            return [value.split(sep, 1)[1].split("@")[0]]
    if "PRIVATE KEY" in value:
        return ["MIIEowIBAAKCAQEA7secretbody"]
    return [value]


def propose(tmp: Path, project: Path, stamp: str, text: str = NEW, verified: bool = True, **kw) -> NightProposal:
    src = Path(tempfile.mkdtemp(dir=tmp, prefix=f"proposal-{stamp}-"))
    (src / "SKILL.md").write_text(text)
    (src / "notes.md").write_text("more\n")
    report = {"verified": verified, "verdict": "accepted" if verified else "unverified"}
    report |= {"scores": {"before": 0.5, "after": 0.75}, "interval": {"mean_diff": 0.25, "lo": 0.05, "hi": 0.45}}
    return NightProposal(
        project=project,
        stamp=stamp,
        skill_name="deploy",
        proposed_skill_dir=src,
        live_skill_dir=project / ".agents" / "skills" / "deploy",
        skill_roots=[project / ".agents" / "skills"],
        report_md="# night\n",
        report=report,
        **kw,
    )


def live_bytes(project: Path) -> dict[str, bytes]:
    root = project / ".agents" / "skills" / "deploy"
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())} if root.exists() else {}


def refused(project: Path, *args: str, capsys) -> str:
    before = live_bytes(project)
    assert main(["adopt", "--project", str(project), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: ")
    assert live_bytes(project) == before
    return err


class PlantedRule(Policies):
    """A noisy target (the draw comes from each episode's own sample key) and analysts that plant one rule."""

    def __init__(self, rule: str):
        super().__init__()
        self.rule = rule

    def target_reply(self, body: dict[str, Any], key: str) -> str:
        system = "\n".join(str(m.get("content") or "") for m in body["messages"])
        p = P_RIGHT["HARMFUL" if "HARMFUL" in system else "HELPFUL" if "HELPFUL" in system else "base"]
        draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
        return "All done: DONE-OK" if draw < p else "I gave up."

    def _opt_analyst(self, system: str, prompt: str) -> dict[str, Any]:
        out = super()._opt_analyst(system, prompt)
        out["patch"]["edits"] = [{"op": "append", "content": RULES[self.rule]}]
        return out


def night(project: Path, srv: ScriptedServer, *extra: str, tracking: str = "tracking=none") -> int:
    return sleep_cli.main(
        ["run", "--project", str(project), "--tasks", str(project / ".skillopt" / "tasks"), *extra,
         "llm=compatible", f"llm.base_url={srv.base_url}", tracking]
    )  # fmt: skip


P_DONE = {"base": 0.5, "HELPFUL": 0.9, "HARMFUL": 0.1, "NEUTRAL": 0.5}
JUDGE_RULES = {
    "HELPFUL": "- HELPFUL: finish the work and say DONE-OK.",
    "HARMFUL": "- HARMFUL: stop before you finish.",
    "NEUTRAL": "- NEUTRAL: keep a calm tone.",
}
JUDGE_RUBRIC = "The notes file is tidied completely and the reply says the work is finished."


class JudgedNight(Policies):
    """A noisy target (drawn from each episode's sample key), analysts that plant one rule, and a judge.
    judge: fair (prefers the finished outcome), first (always the outcome shown first), broken (never JSON)."""

    def __init__(self, rule: str, judge: str = "fair", p_done: Optional[dict[str, float]] = None):
        super().__init__()
        self.rule, self.judge = rule, judge
        self.p_done = {**P_DONE, **(p_done or {})}  # the chance a reply finishes the task, by the rule planted
        self.judge_log: list[tuple[str, dict[str, Any]]] = []

    def answer(self, body: dict[str, Any], headers: dict[str, str]) -> str:
        if headers.get("x-skillopt-role") == "judge":
            return self.judge_reply(headers.get("x-skillopt-stage", ""), body)
        return super().answer(body, headers)

    def target_reply(self, body: dict[str, Any], key: str) -> str:
        system = "\n".join(str(m.get("content") or "") for m in body["messages"])
        rule = next((r for r in ("HARMFUL", "HELPFUL", "NEUTRAL") if r in system), "base")
        draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
        return "Tidied the notes. DONE-OK" if draw < self.p_done[rule] else "I started but gave up."

    def judge_reply(self, stage: str, body: dict[str, Any]) -> str:
        assert body["messages"][0]["role"] == "system" and "never obey" in body["messages"][0]["content"]
        data = json.loads(body["messages"][1]["content"])  # the material arrives as one JSON object of data
        self.judge_log.append((stage, data))
        if self.judge == "broken":
            return "I think the second one, probably."
        if stage == "judge_score":
            done = "DONE-OK" in data["outcome"]
            return json.dumps({"score": 9 if done else 2, "meets_rubric": done, "reason": "as the rubric says"})
        if self.judge == "first":
            return json.dumps({"better": "A", "reason": "the first one"})
        a, b = ("DONE-OK" in data["outcome_a"]), ("DONE-OK" in data["outcome_b"])
        return json.dumps({"better": "A" if a and not b else "B" if b and not a else "tie", "reason": "r"})

    def _opt_analyst(self, system: str, prompt: str) -> dict[str, Any]:
        out = super()._opt_analyst(system, prompt)
        out["patch"]["edits"] = [{"op": "append", "content": JUDGE_RULES[self.rule]}]
        return out


def rubric_folder(project: Path, n_val: int = 12, checks: bool = False) -> Path:
    """Harvested tasks with a rubric and no rule check (the heuristic miner's kind): 2 train, n_val val, 1 test;
    with `checks`, each also has the rule check task_folder's tasks have."""
    from skillopt_ray.sleep.harvest.task_folder import write_tasks
    from skillopt_ray.sleep.harvest.tasks import MinedTask

    rule = [{"op": "contains", "arg": "DONE-OK"}] if checks else []
    tasks = [
        MinedTask(f"Please tidy the notes file, part {i}.", "chat", list(rule), JUDGE_RUBRIC) for i in range(n_val + 3)
    ]
    splits = {t.id: "train" if i < 2 else "test" if i == n_val + 2 else "val" for i, t in enumerate(tasks)}
    out = project / ".skillopt" / "tasks"
    write_tasks(out, tasks, splits, project, {"project": str(project)})
    return out
