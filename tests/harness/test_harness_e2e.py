"""The real agent CLIs, jailed, against the scripted server through the gateway's agent endpoints: a SearchQA
evaluation with each harness (the skill read from .agents/skills/skillopt-target/SKILL.md, the ledger equal to
what the server answered, a replayed run making no upstream call), and a codex training run reaching the gate."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from conftest import need_bwrap, need_harness, qa_fixture
from harness_helpers import SKILL_FILE, AgentPolicy, _eval, _gateway
from helpers import checked
from scripted_server import ScriptedServer


@pytest.mark.parametrize("harness,cli", [("codex", "codex"), ("claude_code", "claude")])
def test_searchqa_eval_in_each_harness_through_the_gateway(tmp_path, harness, cli):
    need_bwrap()
    need_harness(cli)
    from skillopt_envs.searchqa.benchmark import SearchQABenchmark

    answers = qa_fixture(tmp_path / "qa")
    bench = SearchQABenchmark({"data_dir": str(tmp_path / "qa"), "options": {"split_source": "folders"}})
    tasks = bench.load_split("test")[:2]
    policy = AgentPolicy(answers)
    with ScriptedServer(policy=policy) as srv:
        res = asyncio.run(
            _eval(_gateway(srv.base_url, harness, tmp_path / "rec"), bench, tasks, "RULE-qa: answer briefly")
        )
        assert [r.hard for r in res] == [1.0, 1.0], [r.error for r in res]
        assert sorted(t for t, _ in policy.skill_reads) == sorted(t.task_id for t in tasks)
        assert {p for _, p in policy.skill_reads} == {SKILL_FILE}
        for r in res:
            assert r.info["target_system_prompt"].startswith('---\nname: "skillopt-target"')
            assert "RULE-qa" in r.info["target_system_prompt"]
            assert r.info["agent_summary"] and "cat " + SKILL_FILE in r.info["analyst_blocks"][0][1]
            assert "usage_warning" not in r.info, r.info.get("usage_warning")
        ledger = json.loads((tmp_path / "rec" / "ledger.json").read_text())
        assert "target/rollout" not in ledger["entries"]  # an evaluation's agent calls are not training calls
        entry = ledger["entries"]["target/validate"]
        st = srv.state
        assert entry["calls"] == st.requests[("target", "validate")] == policy.target_calls == 4
        assert (entry["prompt_tokens"], entry["completion_tokens"]) == (st.prompt_tokens, st.completion_tokens)
        # per episode: the gateway's tokens and cost, the agent's own reports equal to them, in the summary
        assert sum(r.info["agent_tokens"][0] for r in res) == entry["prompt_tokens"]
        assert sum(r.info["agent_cost_usd"] for r in res) == pytest.approx(entry["cost_usd"]) and entry["cost_usd"] > 0
        assert all(r.info["agent_reported_tokens"] == r.info["agent_tokens"] for r in res)
        assert all("gateway usage: 2 calls (0 from the cache)" in r.info["agent_summary"] for r in res)
        assert not any("WARNING" in r.info["agent_summary"] for r in res)
        attempts = st.attempts
        # replay from the recorded cache: the same answers and not one request upstream
        (tmp_path / "rep").mkdir()
        (tmp_path / "rep" / "cache.sqlite").write_bytes((tmp_path / "rec" / "cache.sqlite").read_bytes())
        again = asyncio.run(
            _eval(_gateway(srv.base_url, harness, tmp_path / "rep", "replay"), bench, tasks, "RULE-qa: answer briefly")
        )
        assert [r.hard for r in again] == [1.0, 1.0], [r.error for r in again]
        assert st.attempts == attempts
        # a rerun in record mode on the same cache (a killed run resumed) pays for nothing twice
        (tmp_path / "res").mkdir()
        (tmp_path / "res" / "cache.sqlite").write_bytes((tmp_path / "rec" / "cache.sqlite").read_bytes())
        resumed = asyncio.run(
            _eval(_gateway(srv.base_url, harness, tmp_path / "res"), bench, tasks, "RULE-qa: answer briefly")
        )
        assert [r.hard for r in resumed] == [1.0, 1.0] and st.attempts == attempts
        assert (
            json.loads((tmp_path / "res" / "ledger.json").read_text())["entries"]["target/validate"]["cache_hits"] == 4
        )
        # without the rule the scripted model answers wrong: the score is the agent's
        wrong = asyncio.run(_eval(_gateway(srv.base_url, harness, tmp_path / "w"), bench, tasks, ""))
        assert [r.hard for r in wrong] == [0.0, 0.0] and not any(r.infra_error for r in wrong)


# the last one is what voided Claude Code episodes: the words and a non-zero exit together
NOISY = (
    "ps aux; echo bwrap --seccomp 12 --die-with-parent",
    'echo "seccomp bwrap: execution error"',
    "false",
    'echo "bwrap: seccomp execution error" >&2; exit 3',
)


class NoisyCommandsPolicy:
    """Target: run `ps aux` and print a jail's command line (--seccomp and all), echo the words a word list once took
    for broken tools, run `false` (exit 1), print them and exit 3, then answer right. Records what each command's
    output looked like."""

    def __init__(self, answers: dict):
        self.answers = answers
        self.outputs: list[str] = []  # the last tool output the model saw, per call after the first

    def __call__(self, body, headers):
        tool_msgs = [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]
        if tool_msgs:
            self.outputs.append(tool_msgs[-1])
        if len(tool_msgs) < len(NOISY):
            cmd = NOISY[len(tool_msgs)]
            names = {t["function"]["name"] for t in body["tools"]}
            if "exec_command" in names:
                call = {"name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
            else:
                call = {"name": "Bash", "arguments": json.dumps({"command": cmd, "description": "look around"})}
            return {"content": "", "tool_calls": [{"id": f"n{len(tool_msgs)}", "type": "function", "function": call}]}
        m = re.search(r"/([^/]+)/a\d+$", headers.get("x-skillopt-key", ""))
        return self.answers[m.group(1)][1]  # the right answer


@pytest.mark.parametrize("harness,cli", [("codex", "codex"), ("claude_code", "claude")])
def test_commands_that_print_alarming_words_or_exit_non_zero_leave_the_episode_scored(tmp_path, harness, cli):
    """Issue 29: a correct answer was voided as an infra error because `ps aux` printed `--seccomp`. With both
    real CLIs in their jail: the three commands run, the model sees their output, and the answer is scored."""
    need_bwrap()
    need_harness(cli)
    from skillopt_envs.searchqa.benchmark import SearchQABenchmark

    answers = qa_fixture(tmp_path / "qa")
    bench = SearchQABenchmark({"data_dir": str(tmp_path / "qa"), "options": {"split_source": "folders"}})
    tasks = bench.load_split("val")[:1]
    policy = NoisyCommandsPolicy(answers)
    with ScriptedServer(policy=policy) as srv:
        gw = _gateway(srv.base_url, harness, tmp_path / "rec")
        (res,) = asyncio.run(_eval(gw, bench, tasks, "RULE-qa", key="eval/0123abcd"))
        requests = dict(srv.state.requests)
    assert not res.infra_error and res.hard == 1.0, (res.error, res.fail_reason)
    assert len(policy.outputs) == 4
    assert "--seccomp" in policy.outputs[0]  # the model saw a jail's flags
    # the CLI runs in a PID namespace of its own (under the jail's init): ps shows no host process, bwrap included
    ps_lines = [ln for ln in policy.outputs[0].splitlines() if ln.startswith("agent ")]
    commands = [ln.split(None, 10)[-1] for ln in ps_lines]
    assert commands and not any(c.split()[0].endswith("bwrap") for c in commands), commands
    assert "seccomp bwrap: execution error" in policy.outputs[1]
    assert ("exited with code 1" if harness == "codex" else "Exit code 1") in policy.outputs[2]
    assert ("exited with code 3" if harness == "codex" else "Exit code 3") in policy.outputs[3]
    assert "bwrap: seccomp execution error" in policy.outputs[3]
    assert all(cmd in res.info["analyst_blocks"][0][1] for cmd in NOISY)
    assert "- tool errors: none" in res.info["analyst_blocks"][0][1]
    # an evaluation episode (the gate's selection split, the final test split): its agent calls are booked there
    ledger = json.loads((tmp_path / "rec" / "ledger.json").read_text())["entries"]
    assert ledger["target/validate"]["calls"] == requests[("target", "validate")] == 5
    assert "target/rollout" not in ledger


@pytest.mark.parametrize("key,stage", [("train/e1s2", "rollout"), ("slow/e2/prev", "slow:rollout")])
def test_agent_calls_are_booked_under_the_stage_the_episode_runs_in(tmp_path, key, stage):
    """A training batch's agent episode is booked under rollout, an epoch boundary's paired rollout under its own
    stage, as the server saw each call (the X-SkillOpt-Stage header) and the ledger counted it."""
    need_bwrap()
    need_harness("codex")
    from skillopt_envs.searchqa.benchmark import SearchQABenchmark

    answers = qa_fixture(tmp_path / "qa")
    bench = SearchQABenchmark({"data_dir": str(tmp_path / "qa"), "options": {"split_source": "folders"}})
    policy = AgentPolicy(answers)
    with ScriptedServer(policy=policy) as srv:
        gw = _gateway(srv.base_url, "codex", tmp_path / "rec")
        (res,) = asyncio.run(_eval(gw, bench, bench.load_split("train")[:1], "RULE-qa", key=key))
        requests = dict(srv.state.requests)
    assert res.hard == 1.0, res.error
    ledger = json.loads((tmp_path / "rec" / "ledger.json").read_text())["entries"]
    assert {k for k in ledger if k.startswith("target/")} == {f"target/{stage}"}
    assert ledger[f"target/{stage}"]["calls"] == requests[("target", stage)] == 2


@pytest.mark.slow
def test_codex_target_training_step_reaches_the_gate(ray_cluster, tmp_path):
    """`+experiment=searchqa llm=codex` through the CLI: the rule-gated target answers wrong until the analysts
    write the rule into the skill, which the agent reads from SKILL.md; the gate accepts the step."""
    need_bwrap()
    need_harness("codex")
    from skillopt_ray import cli

    answers = qa_fixture(tmp_path / "qa")
    policy = AgentPolicy(answers)
    with ScriptedServer(policy=policy) as srv:
        overrides = [
            "+experiment=searchqa",
            "+smoke=tiny",
            "llm=codex",
            f"llm.base_url={srv.base_url}",
            f"output_dir={tmp_path / 'out'}",
            "debug.progress=off",
            f"env.data_dir={tmp_path / 'qa'}",
            "env.options.split_source=folders",
        ]
        data = cli.plain(cli.compose(overrides))
        data = cli.resolve_paths(data)
        code, rd = cli.run_one(checked(data)), cli.run_dir_for(data)
        assert code == 0
        summary = json.loads((rd / "summary.json").read_text())
        assert summary["test"]["initial"]["hard"] == 0.0 and summary["test"]["best"]["hard"] == 1.0, summary["test"]
        assert summary["counts"]["accept"] >= 1 and "RULE-qa" in (rd / "best_skill.md").read_text()
        assert policy.skill_reads and {p for _, p in policy.skill_reads} == {SKILL_FILE}
        ledger = json.loads((rd / "ledger.json").read_text())
        assert ledger["entries"]["target/rollout"]["calls"] == srv.state.requests[("target", "rollout")]
        # the gate's selection and the final test episodes are booked under validate, not with the training batches
        assert ledger["entries"]["target/validate"]["calls"] == srv.state.requests[("target", "validate")] > 0


class SheetAgentPolicy:
    """Target: read SKILL.md, then write solution.py (the right one only when the skill has the task type's rule)
    and run it with run_solution.py, then say it is done."""

    def __init__(self, solutions: dict):
        self.solutions = solutions  # task id -> (task type, right code, wrong code)
        self.ran: list[str] = []

    def __call__(self, body, headers):
        tool_text = "\n".join(str(m.get("content")) for m in body["messages"] if m["role"] == "tool")
        m = re.search(r"/([^/]+)/a\d+$", headers.get("x-skillopt-key", ""))
        task_type, right, wrong = self.solutions[m.group(1)]
        n_tools = sum(1 for m in body["messages"] if m["role"] == "tool")
        if n_tools == 0:
            cmd = f"cat {SKILL_FILE}"
        elif n_tools == 1:
            code = right if f"RULE-{task_type}" in tool_text else wrong
            cmd = f"cat > solution.py <<'PYEOF'\n{code}\nPYEOF\npython run_solution.py"
        else:
            self.ran.append(tool_text.rsplit("\n", 3)[-2:][0])
            return "solution.py is written and tested."
        call = {"name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
        return {"content": "", "tool_calls": [{"id": f"c{n_tools}", "type": "function", "function": call}]}


def test_spreadsheetbench_single_mode_in_codex_collects_solution_py(tmp_path):
    need_bwrap()
    need_harness("codex")
    from skillopt_envs.spreadsheetbench.benchmark import SpreadsheetBenchmark
    from skillopt_envs.spreadsheetbench.samples import SOLUTIONS, TEMPLATES

    wrong = "import shutil\nshutil.copy(INPUT_PATH, OUTPUT_PATH)\n"
    solutions = {}
    for t in TEMPLATES:
        kind = "cell_level" if t.kind.startswith("Cell") else "sheet_level"
        for split in ("train", "val", "test"):
            for i in range(4):
                solutions[f"sample-{t.name}-{split}{i}"] = (kind, SOLUTIONS[t.name], wrong)
    bench = SpreadsheetBenchmark({"options": {"sample_dir": str(tmp_path / "samples")}})
    task = bench.load_split("test")[0]
    policy = SheetAgentPolicy(solutions)
    with ScriptedServer(policy=policy) as srv:
        (good,) = asyncio.run(
            _eval(_gateway(srv.base_url, "codex", tmp_path / "a"), bench, [task], "RULE-cell_level RULE-sheet_level")
        )
        (bad,) = asyncio.run(_eval(_gateway(srv.base_url, "codex", tmp_path / "b"), bench, [task], ""))
    assert good.hard == 1.0 and good.info["solution_file"] is True, (good.error, good.fail_reason)
    assert "solution.py ran" in policy.ran[0]  # the agent ran the project's Python (openpyxl) inside its jail
    assert bad.hard == 0.0 and not bad.infra_error and bad.fail_reason.startswith("eval-mismatch")
    assert good.info["target_system_prompt"].startswith('---\nname: "skillopt-target"')
    assert good.info["analyst_blocks"][0][0] == "Spreadsheet Preview"
