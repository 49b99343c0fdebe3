"""The judge of rubric tasks (issue 47, item 1) end to end: a night on harvested tasks that carry only a rubric (no
rule check), through Ray and the scripted server, the judge a role of its own on the same endpoint. The scripted
target finishes a task (its reply says DONE-OK) with a probability set by the planted rule; the scripted judge
prefers a finished outcome. A helpful rule is accepted, a harmful one refused; a judge that always prefers the
outcome shown first cannot accept anything (the two orders cancel); an unusable judge reply is counted, never a
win; the ledger books the judge's calls under their own role and stages."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from scripted_server import Policies, ScriptedServer

from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.harvest.task_folder import write_tasks
from skillopt_ray.sleep.harvest.tasks import MinedTask

pytestmark = pytest.mark.slow

P_DONE = {"base": 0.5, "HELPFUL": 0.9, "HARMFUL": 0.1, "NEUTRAL": 0.5}
RULES = {
    "HELPFUL": "- HELPFUL: finish the work and say DONE-OK.",
    "HARMFUL": "- HARMFUL: stop before you finish.",
    "NEUTRAL": "- NEUTRAL: keep a calm tone.",
}
RUBRIC = "The notes file is tidied completely and the reply says the work is finished."


class JudgedNight(Policies):
    """A noisy target (drawn from each episode's sample key), analysts that plant one rule, and a judge.
    judge: fair (prefers the finished outcome), first (always the outcome shown first), broken (never JSON)."""

    def __init__(self, rule: str, judge: str = "fair"):
        super().__init__()
        self.rule, self.judge = rule, judge
        self.judge_log: list[tuple[str, dict[str, Any]]] = []

    def answer(self, body: dict[str, Any], headers: dict[str, str]) -> str:
        if headers.get("x-skillopt-role") == "judge":
            return self.judge_reply(headers.get("x-skillopt-stage", ""), body)
        return super().answer(body, headers)

    def target_reply(self, body: dict[str, Any], key: str) -> str:
        system = "\n".join(str(m.get("content") or "") for m in body["messages"])
        rule = next((r for r in ("HARMFUL", "HELPFUL", "NEUTRAL") if r in system), "base")
        draw = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2**64
        return "Tidied the notes. DONE-OK" if draw < P_DONE[rule] else "I started but gave up."

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
        out["patch"]["edits"] = [{"op": "append", "content": RULES[self.rule]}]
        return out


def rubric_folder(project: Path, n_val: int = 12) -> Path:
    """Harvested tasks with a rubric and no rule check (the heuristic miner's kind): 2 train, n_val val, 1 test."""
    tasks = [MinedTask(f"Please tidy the notes file, part {i}.", "chat", [], RUBRIC) for i in range(n_val + 3)]
    splits = {t.id: "train" if i < 2 else "test" if i == n_val + 2 else "val" for i, t in enumerate(tasks)}
    out = project / ".skillopt" / "tasks"
    write_tasks(out, tasks, splits, project, {"project": str(project)})
    return out


def night(project: Path, policies: JudgedNight) -> tuple[int, dict[str, Any], Path]:
    project.mkdir()
    rubric_folder(project)
    with ScriptedServer(policies) as srv:
        code = sleep_cli.main(
            ["run", "--project", str(project), "--tasks", str(project / ".skillopt" / "tasks"), "llm=compatible",
             f"llm.base_url={srv.base_url}", "tracking=none"]
        )  # fmt: skip
    (run_dir,) = (project / ".skillopt" / "nights" / "runs").glob("night-*")
    rep = run_dir / "night" / "report.json"
    return code, json.loads(rep.read_text()) if rep.is_file() else {}, run_dir


def test_a_helpful_rule_is_accepted_on_rubric_only_tasks_and_the_ledger_books_the_judge(ray_cluster, tmp_path, capsys):
    policies = JudgedNight("HELPFUL")
    code, rep, run_dir = night(tmp_path / "proj", policies)
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert rep["verdict"] == "accepted", rep
    gate = json.loads(next(run_dir.glob("steps/*/gate.json")).read_text())
    t = gate["gate_test"]
    assert t["judge_errors"] == 0 and t["tasks_better"] >= 4 and t["p_value"] <= 0.1, gate["reason"]
    stages = {stage for stage, _ in policies.judge_log}
    assert stages == {"judge_pair", "judge_score"}
    pair = next(d for s, d in policies.judge_log if s == "judge_pair")
    assert pair["rubric"] == RUBRIC and pair["request"].startswith("Please tidy the notes file")
    entries = json.loads((run_dir / "ledger.json").read_text())["entries"]
    assert entries["judge/judge_pair"]["calls"] > 0 and entries["judge/judge_score"]["calls"] > 0
    judged = json.loads((run_dir / "judge.json").read_text())
    # two orders a comparison; a comparison of outcomes already compared is answered by the response cache
    assert 0 < entries["judge/judge_pair"]["calls"] <= 2 * judged["pair_comparisons"]
    assert not any(k.startswith("optimizer/judge") for k in entries)
    assert rep["judge"]["score"] > 0.5 and rep["judge"]["samples"] >= 12 and "judged score" in out.out


def test_a_harmful_rule_is_refused_on_rubric_only_tasks(ray_cluster, tmp_path, capsys):
    code, rep, _run_dir = night(tmp_path / "proj", JudgedNight("HARMFUL"))
    assert code == 0, capsys.readouterr().err[-3000:]
    assert rep["verdict"] == "rejected" and all(g["action"] == "reject" for g in rep["gates"]), rep


def test_a_judge_that_prefers_the_first_shown_cannot_accept_a_useless_rule(ray_cluster, tmp_path, capsys):
    policies = JudgedNight("NEUTRAL", judge="first")
    code, rep, run_dir = night(tmp_path / "proj", policies)
    assert code == 0, capsys.readouterr().err[-3000:]
    assert rep["verdict"] == "rejected", rep
    gate = json.loads(next(run_dir.glob("steps/*/gate.json")).read_text())
    assert gate["gate_test"]["net"] == 0 and gate["gate_test"]["tasks_better"] == 0  # every order pair a tie
    assert json.loads((run_dir / "judge.json").read_text())["order_disagreements"] > 0


def test_an_unusable_judge_reply_is_counted_never_a_win(ray_cluster, tmp_path, capsys):
    code, rep, run_dir = night(tmp_path / "proj", JudgedNight("HELPFUL", judge="broken"))
    err = capsys.readouterr().err
    assert code != 0 and rep == {} and not (tmp_path / "proj" / ".skillopt" / "staging").exists()
    assert "the judge's replies were unusable" in err and "nothing staged" in err
    judged = json.loads((run_dir / "judge.json").read_text())
    assert judged["score_errors"] > 0 and judged["score_errors"] == judged["scores"]
    assert not any(json.loads(p.read_text())["action"].startswith("accept") for p in run_dir.glob("steps/*/gate.json"))
