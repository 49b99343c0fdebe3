"""The judge of rubric tasks (issue 47, item 1) end to end: a night on harvested tasks that carry only a rubric (no
rule check), through Ray and the scripted server, the judge a role of its own on the same endpoint. The scripted
target finishes a task (its reply says DONE-OK) with a probability set by the planted rule; the scripted judge
prefers a finished outcome. A helpful rule is accepted, a harmful one refused; a judge that always prefers the
outcome shown first cannot accept anything (the two orders cancel); an unusable judge reply is counted, never a
win; the ledger books the judge's calls under their own role and stages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from scripted_server import ScriptedServer
from sleep_fixtures import JUDGE_RUBRIC as RUBRIC
from sleep_fixtures import JudgedNight, rubric_folder

from skillopt_ray.sleep import cli as sleep_cli

pytestmark = pytest.mark.slow

SERVER: dict[str, Any] = {}  # the last night's counts by the scripted server


def night(project: Path, policies: JudgedNight) -> tuple[int, dict[str, Any], Path]:
    project.mkdir()
    rubric_folder(project)
    with ScriptedServer(policies) as srv:
        code = sleep_cli.main(
            ["run", "--project", str(project), "--tasks", str(project / ".skillopt" / "tasks"), "llm=compatible",
             f"llm.base_url={srv.base_url}", "tracking=none"]
        )  # fmt: skip
        SERVER.update(
            calls=sum(srv.state.requests.values()),
            tokens=srv.state.prompt_tokens + srv.state.completion_tokens,
            requests=dict(srv.state.requests),
        )
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
    # the printed estimate counts the judge's calls, within 2x of what the judge then cost by the server's count
    est = json.loads((run_dir / "night" / "estimate.json").read_text())
    judge_calls = sum(n for (role, _stage), n in SERVER["requests"].items() if role == "judge")
    assert judge_calls == sum(v["calls"] for k, v in entries.items() if k.startswith("judge/"))
    planned, most = est["judge"]["planned"]["calls"], est["judge"]["at_most"]["calls"]
    assert planned / 2 <= judge_calls <= min(2 * planned, most), (judge_calls, est["judge"])
    assert est["first_pass"]["calls"] <= SERVER["calls"] <= est["at_most"]["calls"], (SERVER, est)
    assert "the judge's calls are in these figures" in out.err
    print(
        f"\njudged night: server {SERVER['calls']} calls ({judge_calls} the judge's), {SERVER['tokens']} tokens; "
        f"estimate planned {est['planned']['calls']} calls ({planned} the judge's), at most {est['at_most']['calls']}"
    )


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
