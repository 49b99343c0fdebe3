"""The real agent CLIs, jailed, on DocVQA, LiveMathematicianBench and OfficeQA against the scripted server through
the gateway's agent endpoints. The scripted model reads the skill from .agents/skills/skillopt-target/SKILL.md with
the harness's own shell tool (the server asserts it saw it), then does what the benchmark needs: DocVQA's page image
reaches it with the first request (Codex's -i), LiveMathematicianBench's choices are read from task.md, OfficeQA's
corpus is searched under docs/ (the jail mounts the linked roots read-only). It answers right only when the skill
holds the rule for the task's type, so the score is the agent's."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import need_bwrap, need_harness
from harness_helpers import SKILL_FILE, _eval, _gateway
from scripted_server import ScriptedServer

pytestmark = pytest.mark.slow


def _tool_call(n: int, names: set[str], cmd: str) -> dict[str, Any]:
    """A shell call in the harness's own tool: Codex's exec_command or Claude Code's Bash."""
    if "exec_command" in names:
        call = {"name": "exec_command", "arguments": json.dumps({"cmd": cmd})}
    else:
        call = {"name": "Bash", "arguments": json.dumps({"command": cmd, "description": "run a command"})}
    return {"content": "", "tool_calls": [{"id": f"call-{n}", "type": "function", "function": call}]}


class ShellAgent:
    """The target: runs `steps(task_id, tool outputs so far)` commands one per request, the first always reading
    SKILL.md, then answers with `answer(task_id, tool text)`. Records the skill reads and the bodies it saw."""

    def __init__(self, steps, answer):
        self.steps, self.answer = steps, answer
        self.skill_reads: list[str] = []
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, body, headers):
        assert headers.get("x-skillopt-role") == "target" and body.get("tools"), "only the agent calls the model"
        self.bodies.append(body)
        names = {t["function"]["name"] for t in body["tools"]}
        outputs = [str(m.get("content")) for m in body["messages"] if m["role"] == "tool"]
        task_id = re.search(r"/(?:eval/test/)?([^/]+?)(?:/t\d+)?/a\d+$", headers.get("x-skillopt-key", "")).group(1)
        cmds = [f"cat {SKILL_FILE}", *self.steps(task_id)]
        if len(outputs) < len(cmds):
            return _tool_call(len(outputs), names, cmds[len(outputs)])
        assert 'name: "skillopt-target"' in outputs[0] and "## Dynamic Guidance" in outputs[0], outputs[0][:300]
        self.skill_reads.append(task_id)
        return self.answer(task_id, "\n".join(outputs))


def test_docvqa_eval_in_codex_sends_the_page_image_and_scores_the_reply(tmp_path):
    need_bwrap()
    need_harness("codex")
    from skillopt_envs.docvqa.benchmark import DocVQABenchmark

    bench = DocVQABenchmark({"options": {"sample_dir": str(tmp_path / "samples")}})
    tasks = bench.load_split("test")[:2]
    by_id = {t.task_id: t for t in tasks}

    def answer(task_id, tools):
        t = by_id[task_id]
        right = f"RULE-{t.task_type}" in tools
        return f"<answer>{t.payload['answers'][0] if right else 'not on the page'}</answer>"

    agent = ShellAgent(lambda _t: ["cat ATTACHMENTS.md && cat task.md"], answer)
    skill = " ".join(f"RULE-{t.task_type}" for t in tasks)
    with ScriptedServer(policy=agent) as srv:
        res = asyncio.run(_eval(_gateway(srv.base_url, "codex", tmp_path / "a"), bench, tasks, skill))
        wrong = asyncio.run(_eval(_gateway(srv.base_url, "codex", tmp_path / "b"), bench, tasks, ""))
    assert [r.hard for r in res] == [1.0, 1.0], [(r.error, r.fail_reason) for r in res]
    assert [r.hard for r in wrong] == [0.0, 0.0] and not any(r.infra_error for r in wrong)
    assert sorted(set(agent.skill_reads)) == sorted(by_id)
    # Codex got the page with -i: the first user message carries the image as a data URL of the page's bytes
    pages = {Path(t.payload["image_path"]).read_bytes() for t in tasks}
    sent = [
        base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
        for b in agent.bodies
        for m in b["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]
    assert sent and set(sent) <= pages and set(sent) == pages
    tool_text = "\n".join(str(m.get("content")) for b in agent.bodies for m in b["messages"] if m["role"] == "tool")
    assert "attachments/01_" in tool_text and "## Document Image" in tool_text  # ATTACHMENTS.md and task.md read
    for r, t in zip(res, tasks):
        assert r.info["target_system_prompt"].startswith('---\nname: "skillopt-target"')
        assert r.info["target_user_prompt"].startswith(t.payload["question"])
        assert r.trajectory[0] == {
            "role": "user",
            "content": f"{t.payload['question']}\n\n[image] {Path(t.payload['image_path']).name}",
        }
        assert r.trajectory[-1]["content"].startswith("[EVALUATION RESULT]")
        assert r.info["analyst_blocks"][0][0] == "Agent Trace Summary" and SKILL_FILE in r.info["analyst_blocks"][0][1]


def test_livemath_eval_in_claude_code_reads_the_choices_from_task_md(tmp_path):
    need_bwrap()
    need_harness("claude")
    from skillopt_envs.livemathematicianbench.benchmark import LiveMathBenchmark

    bench = LiveMathBenchmark({"options": {"sample_dir": str(tmp_path / "samples")}})
    tasks = bench.load_split("test")[:2]
    by_id = {t.task_id.replace("/", "_"): t for t in tasks}

    def answer(task_id, tools):
        t = by_id[task_id]
        # the label the correct text carries in task.md's (shuffled) choices
        label = re.search(rf"^([A-Z])\. {re.escape(t.payload['correct_choice']['text'])}$", tools, re.M).group(1)
        wrong = next(ln[0] for ln in re.findall(r"^[A-Z]\. .*$", tools, re.M) if ln[0] != label)
        return f"Checked every option.\n<answer>{label if f'RULE-{t.task_type}' in tools else wrong}</answer>"

    agent = ShellAgent(lambda _t: ["cat task.md"], answer)
    skill = " ".join(f"RULE-{t.task_type}" for t in tasks)
    with ScriptedServer(policy=agent) as srv:
        res = asyncio.run(_eval(_gateway(srv.base_url, "claude_code", tmp_path / "a"), bench, tasks, skill))
        wrong = asyncio.run(_eval(_gateway(srv.base_url, "claude_code", tmp_path / "b"), bench, tasks, ""))
    assert [r.hard for r in res] == [1.0, 1.0], [(r.error, r.fail_reason) for r in res]
    assert [r.hard for r in wrong] == [0.0, 0.0] and all(r.fail_reason.startswith("MCQ=0: ") for r in wrong)
    assert sorted(set(agent.skill_reads)) == sorted(by_id)
    for r in res:
        assert (
            r.info["target_user_prompt"].startswith("## Question\n") and "## Choices\n" in r.info["target_user_prompt"]
        )
        assert [e.get("type") for e in r.trajectory] == ["message", None]  # no user entry, then the verification
        assert r.task_description == ""


@pytest.mark.parametrize("harness,cli", [("codex", "codex"), ("claude_code", "claude")])
def test_officeqa_eval_searches_the_linked_corpus(tmp_path, harness, cli):
    need_bwrap()
    need_harness(cli)
    from skillopt_envs.officeqa.benchmark import OfficeQABenchmark

    bench = OfficeQABenchmark({"options": {"sample_dir": str(tmp_path / "samples")}})
    tasks = bench.load_split("test")[:2]
    by_id = {t.task_id: t for t in tasks}

    def value(task_id):
        return f"{float(by_id[task_id].payload['ground_truth']):,.1f}"

    def answer(task_id, tools):
        t = by_id[task_id]
        hit = re.search(rf"^docs/root_1/\S+\.txt:\d+:.*{re.escape(value(task_id))}", tools, re.M)
        assert hit, tools[-800:]  # the agent's grep found the figure in the corpus through docs/root_1
        got = value(task_id).replace(",", "") if f"RULE-{t.task_type}" in tools else "0"
        return f"<answer>{got}</answer>"

    agent = ShellAgent(lambda t: [f"cat task.md; echo; grep -Rn '{value(t)}' docs/ | head -5"], answer)
    skill = " ".join(f"RULE-{t.task_type}" for t in tasks)
    with ScriptedServer(policy=agent) as srv:
        res = asyncio.run(_eval(_gateway(srv.base_url, harness, tmp_path / "a"), bench, tasks, skill))
        wrong = asyncio.run(_eval(_gateway(srv.base_url, harness, tmp_path / "b"), bench, tasks, ""))
    assert [r.hard for r in res] == [1.0, 1.0], [(r.error, r.fail_reason) for r in res]
    assert [r.hard for r in wrong] == [0.0, 0.0] and not any(r.infra_error for r in wrong)
    assert all(r.fail_reason.startswith("predicted '0' but expected '") for r in wrong)
    assert sorted(set(agent.skill_reads)) == sorted(by_id)
    for r in res:
        md = r.info["target_user_prompt"]
        assert "## Document Corpus\n" in md and "- docs/root_1/treasury_bulletin_" in md
        assert "## Document Corpus" not in r.trajectory[0]["content"] and r.trajectory[0]["role"] == "user"
        assert [e.get("turn") for e in r.trajectory[1:]] == [1] and r.n_turns == 2


def test_linked_corpus_and_page_are_read_only_and_their_neighbours_hidden(tmp_path):
    """The jail mounts only the corpus roots and the page image (read-only): the agent reads them through the
    workspace's docs/ link and the image's own path, cannot write there, and sees nothing beside them."""
    need_bwrap()
    need_harness("codex")
    from harness_helpers import EscapingModel

    from skillopt_ray.harness.episode import HarnessTask, run_harness_task

    corpus = tmp_path / "data" / "corpus"
    corpus.mkdir(parents=True)
    (corpus / "bulletin.txt").write_text("CORPUS-LINE\n")
    (tmp_path / "data" / "gold.csv").write_text("GOLD-ANSWER\n")
    page = tmp_path / "pages" / "p1.png"
    page.parent.mkdir()
    page.write_bytes(b"PAGE-BYTES")
    (tmp_path / "pages" / "p2.png").write_bytes(b"OTHER-PAGE")
    script = "; ".join(
        [
            "cat docs/root_1/bulletin.txt",
            "echo x > docs/root_1/new.txt || echo CORPUS-WRITE-FAILED",
            f"cat {tmp_path / 'data' / 'gold.csv'} || echo GOLD-UNREADABLE",
            f"cat {page}; echo",
            f"cat {tmp_path / 'pages' / 'p2.png'} || echo NEIGHBOUR-UNREADABLE",
            "cat attachments/01_p1.png; echo",
        ]
    )
    model = EscapingModel(script)
    settings = {"harness": "codex", "model": "m", "agent": {"timeout_s": 60}}
    ht = HarnessTask("D", "", "t", "go", 60.0, images=[str(page)], link_dirs={"docs/root_1": str(corpus)})
    out = asyncio.run(run_harness_task(model, settings, "t1", "", ht, "k"))
    assert out.run is not None, out.error
    o = model.output
    assert "CORPUS-LINE" in o and "CORPUS-WRITE-FAILED" in o and not (corpus / "new.txt").exists()
    assert "GOLD-ANSWER" not in o and "GOLD-UNREADABLE" in o
    assert o.count("PAGE-BYTES") == 2 and "OTHER-PAGE" not in o and "NEIGHBOUR-UNREADABLE" in o


def test_docvqa_eval_in_claude_code_reads_the_page_with_its_read_tool(tmp_path):
    """Claude Code gets no -i: the model asks its Read tool for attachments/01_<page>, and the page reaches the model
    behind it as an image after the tool result."""
    need_bwrap()
    need_harness("claude")
    from skillopt_envs.docvqa.benchmark import DocVQABenchmark

    bench = DocVQABenchmark({"options": {"sample_dir": str(tmp_path / "samples")}})
    (task,) = bench.load_split("test")[:1]
    page = Path(task.payload["image_path"]).read_bytes()
    seen: list[bytes] = []

    def policy(body, headers):
        msgs = body["messages"]
        tools = [m for m in msgs if m["role"] == "tool"]
        if not tools:
            return _tool_call(0, {"Bash"}, f"cat {SKILL_FILE}")
        if len(tools) == 1:
            name = Path(task.payload["image_path"]).name
            call = {"name": "Read", "arguments": json.dumps({"file_path": f"/workspace/attachments/01_{name}"})}
            return {"content": "", "tool_calls": [{"id": "call-1", "type": "function", "function": call}]}
        for m in msgs:
            if m["role"] == "user" and isinstance(m["content"], list):
                seen.extend(
                    base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
                    for p in m["content"]
                    if p.get("type") == "image_url"
                )
        assert "## Dynamic Guidance" in str(tools[0]["content"])
        return f"<answer>{task.payload['answers'][0] if seen else 'no page seen'}</answer>"

    with ScriptedServer(policy=policy) as srv:
        (r,) = asyncio.run(_eval(_gateway(srv.base_url, "claude_code", tmp_path / "a"), bench, [task], "R"))
    assert r.hard == 1.0, (r.error, r.fail_reason, r.trajectory)
    assert seen == [page]


def test_transfer_runs_the_three_benchmarks_in_codex_on_ray(ray_cluster, tmp_path, capsys):
    """The transfer command (one Ray job, env actors) with a Codex target on DocVQA, LiveMathematicianBench and
    OfficeQA (their built-in samples): the skill with the rules scores every item, the plain one none."""
    need_bwrap()
    need_harness("codex")
    from skillopt_envs.docvqa.benchmark import DocVQABenchmark
    from skillopt_envs.livemathematicianbench.benchmark import LiveMathBenchmark
    from skillopt_envs.officeqa.benchmark import OfficeQABenchmark

    from skillopt_ray.compare.transfer import main

    tasks = {
        t.task_id: (b.name, t)
        for b in (DocVQABenchmark({}), LiveMathBenchmark({}), OfficeQABenchmark({}))
        for t in b.load_split("test")
    }

    def answer(task_id, tools):
        name, t = tasks[task_id]
        p = t.payload
        if name == "docvqa":
            right, wrong = p["answers"][0], "none"
        elif name == "officeqa":
            right, wrong = p["ground_truth"], "0"
        else:
            right = re.search(rf"^([A-Z])\. {re.escape(p['correct_choice']['text'])}$", tools, re.M).group(1)
            wrong = next(ln[0] for ln in re.findall(r"^[A-Z]\. .*$", tools, re.M) if ln[0] != right)
        return f"<answer>{right if f'RULE-{t.task_type}' in tools else wrong}</answer>"

    agent = ShellAgent(lambda _t: ["cat task.md"], answer)
    ruled, plain = tmp_path / "ruled.md", tmp_path / "plain.md"
    ruled.write_text(" ".join(sorted({f"RULE-{t.task_type}" for _n, t in tasks.values()})) + "\n")
    plain.write_text("Be careful.\n")
    with ScriptedServer(policy=agent) as srv:
        code = main(
            ["--skills", f"{ruled},{plain}", "--targets", "codex",
             "--benchmarks", "docvqa,livemathematicianbench,officeqa", "--out", str(tmp_path / "out"), "--",
             "llm=compatible", f"llm.base_url={srv.base_url}", "env.limit_test=2", "debug.progress=off",
             "ray.env_actors=1"]
        )  # fmt: skip
    capsys.readouterr()
    assert code == 0
    table = (tmp_path / "out" / "transfer.md").read_text().splitlines()
    cols = ["codex / docvqa", "codex / livemathematicianbench", "codex / officeqa"]
    assert table[0] == "| skill | " + " | ".join(cols) + " |"
    assert table[2] == "| ruled | " + " | ".join(["1.000 (n=2, 0.34-1.00)"] * 3) + " |"
    assert table[3] == "| plain | " + " | ".join(["0.000 (n=2, 0.00-0.66)"] * 3) + " |"
    assert len(set(agent.skill_reads)) == 6  # 2 items of each benchmark, each read the skill
