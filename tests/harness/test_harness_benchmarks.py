"""The reference's exec-target rules for DocVQA, LiveMathematicianBench and OfficeQA, pinned without the CLIs: the
agent run is replaced by a recorder that keeps what the harness laid out (the workspace, the prompt, the limits, the
paths it would mount) and answers with scripted final messages. Expected values are the reference's."""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any

import pytest
from skillopt_envs.base import DataError, EpisodeContext

from skillopt_ray import cli
from skillopt_ray.harness import episode as harness_episode
from skillopt_ray.harness.agent_runner import episode_context
from skillopt_ray.harness.runner import AgentRun, HarnessError
from skillopt_ray.harness.skill_md import render_skill_md
from skillopt_ray.harness.trace import AgentTrace

SKILL_FILE = ".agents/skills/skillopt-target/SKILL.md"


class FakeLLM:
    """Only what the harness asks of the LLM handle: the target's harness settings."""

    def __init__(self, harness: str = "codex", trace: bool = True):
        self.settings = {"harness": harness, "model": "m", "agent": {"trace_to_optimizer": trace}}

    def agent_settings(self, role: str) -> dict[str, Any]:
        assert role == "target"
        return self.settings


def _snapshot(wd: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dirpath, dirnames, names in os.walk(wd):
        for name in dirnames + names:
            p = Path(dirpath) / name
            rel = p.relative_to(wd).as_posix()
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_file():
                out[rel] = p.read_bytes()
    return out


class Recorder:
    """Stands in for run_agent: records each run and answers with the next scripted (final message, raw)."""

    def __init__(self, replies: list[Any]):
        self.replies = list(replies)
        self.runs: list[dict[str, Any]] = []

    async def __call__(self, llm, settings, wd, prompt, key, **kw):
        self.runs.append({"settings": settings, "wd": Path(wd), "files": _snapshot(Path(wd)), "prompt": prompt, **kw})
        self.runs[-1]["key"] = key
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        final, raw = reply if isinstance(reply, tuple) else (reply, "")
        return AgentRun(final, raw, "Codex Trace Summary\n- read SKILL.md: success", AgentTrace(), 1)


@pytest.fixture
def recorder(monkeypatch):
    def make(replies):
        rec = Recorder(replies)
        monkeypatch.setattr(harness_episode, "run_agent", rec)
        return rec

    return make


def _ctx(max_turns: int = 1) -> EpisodeContext:
    return EpisodeContext("eval/test", False, max_turns, 0, 42)


async def _play(bench: Any, task: Any, skill: str, llm: FakeLLM, ctx: EpisodeContext) -> Any:
    """An episode as an env actor plays it: the context carries the agent runner of the handle's target."""
    return await bench.run_episode(task, skill, llm, await episode_context(llm, ctx))


# ---------------------------------------------------------------- DocVQA


@pytest.fixture(scope="module")
def docvqa(tmp_path_factory):
    from skillopt_envs.docvqa.benchmark import DocVQABenchmark

    bench = DocVQABenchmark({"options": {"sample_dir": str(tmp_path_factory.mktemp("docvqa"))}})
    return bench, bench.load_split("test")[0]


def test_docvqa_workspace_task_md_and_attachment(docvqa, recorder):
    from skillopt_envs.docvqa import agent as dv_agent

    bench, task = docvqa
    gold = task.payload["answers"][0]
    rec = recorder([f"<answer>{gold}</answer>"])
    r = asyncio.run(_play(bench, task, "  rule 1  ", FakeLLM(), _ctx()))
    (run,) = rec.runs
    image = os.path.realpath(task.payload["image_path"])
    name = Path(image).name
    files = run["files"]
    # the workspace is predictions/<id>/codex_exec, SKILL.md rendered with the benchmark's description and preamble
    assert run["wd"].name == "codex_exec" and run["wd"].parent.name == task.task_id.replace("/", "_")
    assert files[SKILL_FILE].decode() == render_skill_md("rule 1", dv_agent.DESCRIPTION, dv_agent.PREAMBLE)
    assert not any(k in files for k in ("AGENTS.md", "CLAUDE.md"))
    # the page copied to attachments/01_<name> and listed with its source path
    assert files[f"attachments/01_{name}"] == Path(image).read_bytes()
    assert f"- `attachments/01_{name}` (source: `{image}`)" in files["ATTACHMENTS.md"].decode().splitlines()
    # task.md: the chat user text, then the Document Image section naming ATTACHMENTS.md and the original path
    md = files["task.md"].decode()
    parts = md.split("\n\n")
    assert md.startswith(f"{task.payload['question']}\n\n") and "## Previous Attempt" not in md
    doc = md[md.index("## Document Image\n") :]
    assert "ATTACHMENTS.md" in doc and image in doc and len(parts) >= 3
    # the prompt: three lines (use the skill, read task.md and inspect the image, answer in the tags)
    assert len(run["prompt"].splitlines()) == 3 and "skillopt-target" in run["prompt"]
    # Codex gets the original image with -i; the jail mounts it read-only; Claude Code would get its folder
    assert run["images"] == (image,) and image in run["read_only"] and run["add_dirs"] == (os.path.dirname(image),)
    assert run["settings"].timeout_s == 120.0  # exec_timeout
    assert r.hard == 1.0 and r.soft == 1.0 and r.n_turns == 1
    assert r.info["target_system_prompt"] == files[SKILL_FILE].decode() and r.info["target_user_prompt"] == md
    # the conversation: the bare question with the image's name, the reply, the verification
    assert r.trajectory[0] == {"role": "user", "content": f"{task.payload['question']}\n\n[image] {name}"}
    assert r.trajectory[1] == {"type": "message", "turn": 1, "content": f"<answer>{gold}</answer>"}
    assert r.trajectory[2]["role"] == "system" and r.trajectory[2]["content"].startswith("[EVALUATION RESULT]")
    assert r.info["analyst_blocks"][0][0] == "Agent Trace Summary"


def test_docvqa_asks_again_without_tags_while_turns_remain(docvqa, recorder):
    bench, task = docvqa
    rec = recorder(["I think it is in the header", "<answer>ITC Ltd</answer>"])
    r = asyncio.run(_play(bench, task, "", FakeLLM(), _ctx(max_turns=2)))
    assert len(rec.runs) == 2
    second = rec.runs[1]["files"]["task.md"].decode()
    assert "## Previous Attempt\nI think it is in the header" in second
    assert "## Previous Attempt" not in rec.runs[0]["files"]["task.md"].decode()
    assert r.n_turns == 2 and [e.get("turn") for e in r.trajectory[1:3]] == [1, 2]
    assert r.info["target_user_prompt"] == second
    assert "===== TURN BREAK =====" in r.info["agent_summary"] and r.info["agent_turns"] == 2
    # one turn (the default): no second run even without tags
    rec = recorder(["no tags here"])
    r1 = asyncio.run(_play(bench, task, "", FakeLLM(), _ctx()))
    assert len(rec.runs) == 1 and r1.n_turns == 1


def test_docvqa_scores_the_raw_transcript_when_the_final_message_is_empty(docvqa, recorder):
    bench, task = docvqa
    gold = task.payload["answers"][0]
    recorder([("", f"codex\nsome work\n<answer>{gold}</answer>\ntokens used\n12")])
    r = asyncio.run(_play(bench, task, "", FakeLLM(), _ctx()))
    assert r.hard == 1.0 and r.trajectory[1]["content"].startswith("codex\nsome work")


def test_docvqa_broken_agent_is_an_infra_error_never_a_score(docvqa, recorder):
    bench, task = docvqa
    recorder([HarnessError("the codex agent's tools failed: sandbox error")])
    r = asyncio.run(_play(bench, task, "", FakeLLM(), _ctx()))
    assert r.infra_error and r.fail_reason == "infra_error" and r.hard == 0.0 and "sandbox error" in r.error


def test_docvqa_partial_credit_as_in_chat(docvqa, recorder):
    bench, task = docvqa
    task = type(task)(task.task_id, task.task_type, {**task.payload, "answers": ["ITC Limited"]})
    recorder(["<answer>ITC Ltd</answer>"])
    r = asyncio.run(_play(bench, task, "", FakeLLM(), _ctx()))
    assert (r.hard, round(r.soft, 4), r.fail_reason) == (0.0, 0.6364, "")


# ---------------------------------------------------------------- LiveMathematicianBench


@pytest.fixture(scope="module")
def livemath(tmp_path_factory):
    from skillopt_envs.livemathematicianbench.benchmark import LiveMathBenchmark

    bench = LiveMathBenchmark({"options": {"sample_dir": str(tmp_path_factory.mktemp("lm"))}})
    return bench, bench.load_split("test")[0]


def test_livemath_task_md_is_the_user_message_and_scores_the_label(livemath, recorder):
    from skillopt_envs.livemathematicianbench import agent as lm_agent

    bench, task = livemath
    choices, correct = bench.presented(task, 42)
    wrong = next(c["label"] for c in choices if c["label"] != correct["label"])
    rec = recorder([f"<answer>{wrong}</answer>"])
    r = asyncio.run(_play(bench, task, "R", FakeLLM(), _ctx()))
    (run,) = rec.runs
    lines = "\n".join(f"{c['label']}. {c['text']}" for c in choices)
    assert run["files"]["task.md"].decode() == f"## Question\n{task.payload['question']}\n\n## Choices\n{lines}"
    assert run["files"][SKILL_FILE].decode() == render_skill_md("R", lm_agent.DESCRIPTION, lm_agent.PREAMBLE)
    assert len(run["prompt"].splitlines()) == 3
    assert run["images"] == () and run["read_only"] == () and run["settings"].timeout_s == 300.0
    assert r.fail_reason == f"MCQ=0: predicted '{wrong}' but expected '{correct['label']}'"
    assert r.task_description == "" and [e.get("type") for e in r.trajectory] == ["message", None]
    assert r.trajectory[-1]["content"].endswith("Exact Match: 0.0")


def test_livemath_no_timeout_when_exec_timeout_is_not_positive(tmp_path, recorder):
    from skillopt_envs.livemathematicianbench.benchmark import LiveMathBenchmark

    bench = LiveMathBenchmark({"options": {"sample_dir": str(tmp_path), "exec_timeout": 0}})
    task = bench.load_split("test")[0]
    rec = recorder(["thinking", "<answer>A</answer>"])
    r = asyncio.run(_play(bench, task, "", FakeLLM("claude_code"), _ctx(max_turns=3)))
    assert math.isinf(rec.runs[0]["settings"].timeout_s)
    assert len(rec.runs) == 2 and "## Previous Attempt\nthinking" in rec.runs[1]["files"]["task.md"].decode()
    assert r.n_turns == 2 and r.info["predicted_label"] == "A"


# ---------------------------------------------------------------- OfficeQA


@pytest.fixture(scope="module")
def officeqa(tmp_path_factory):
    from skillopt_envs.officeqa.benchmark import OfficeQABenchmark

    bench = OfficeQABenchmark({"options": {"sample_dir": str(tmp_path_factory.mktemp("oq"))}})
    return bench, bench.load_split("test")[0]


def test_officeqa_workspace_links_the_corpus_and_lists_relative_candidates(officeqa, recorder):
    from skillopt_envs.officeqa import agent as oq_agent

    bench, task = officeqa
    (root,) = bench.corpus().roots
    rec = recorder(["x <answer>A</answer> y <answer>B</answer>"])
    r = asyncio.run(_play(bench, task, "", FakeLLM("claude_code"), _ctx(max_turns=24)))
    (run,) = rec.runs
    files = run["files"]
    assert files["docs/root_1"] == ("link", str(root))  # the corpus root, symlinked
    assert run["read_only"] == (str(root),) and run["add_dirs"] == (str(root),)
    assert run["settings"].timeout_s == 180.0  # the reference's fixed limit
    md = files["task.md"].decode()
    src = task.payload["source_files"][0]
    assert f"## Document Corpus\n{oq_agent.CORPUS_NOTE}" in md and f"## Candidate Files\n- docs/root_1/{src}" in md
    assert md.startswith(f"## Question\n{task.payload['question']}\n\n")
    assert "## Source Hints\n- " + task.payload["source_docs"][0] in md
    assert files[SKILL_FILE].decode() == render_skill_md("", oq_agent.DESCRIPTION, oq_agent.PREAMBLE)
    assert len(run["prompt"].splitlines()) == 4
    # the first tag is the answer (quirk: officeqa-first-answer-tag); the conversation starts with the chat
    # path's user message
    assert r.info["predicted_answer"] == "A"
    assert r.trajectory[0]["role"] == "user" and f"- {root / src}" in r.trajectory[0]["content"]
    assert "## Document Corpus" not in r.trajectory[0]["content"]
    assert r.trajectory[1] == {"type": "message", "turn": 1, "content": "x <answer>A</answer> y <answer>B</answer>"}
    assert r.n_turns == 2 and r.info["target_user_prompt"] == md


def test_officeqa_candidates_shown_are_the_first_twenty(tmp_path):
    from skillopt_envs.officeqa import agent as oq_agent
    from skillopt_envs.officeqa import prompts

    roots = [tmp_path / "a", tmp_path / "b"]
    cands = [roots[0] / f"f{i:02d}.txt" for i in range(15)] + [roots[1] / "sub" / f"g{i}.txt" for i in range(10)]
    rel = oq_agent.relative_candidates(cands, roots)
    assert rel[0] == "docs/root_1/f00.txt" and rel[15] == "docs/root_2/sub/g0.txt"
    shown = prompts.user_prompt("Q", "", rel, [], [], corpus_note="N").split("## Candidate Files\n")[1]
    assert shown.splitlines() == [f"- {c}" for c in rel[:20]]


def test_officeqa_exec_loop_budget_and_previous_attempt(officeqa, recorder):
    bench, task = officeqa
    rec = recorder(["still looking", "read the table", "not yet"])
    r = asyncio.run(_play(bench, task, "", FakeLLM(), _ctx(max_turns=3)))
    assert len(rec.runs) == 3
    assert "## Previous Attempt\nstill looking" in rec.runs[1]["files"]["task.md"].decode()
    assert "## Previous Attempt\nread the table" in rec.runs[2]["files"]["task.md"].decode()
    assert r.fail_reason == "Exceeded codex turn budget (3)" and r.hard == 0.0 and r.info["agent_ok"] is False
    assert r.n_turns == 4 and [e.get("turn") for e in r.trajectory[1:]] == [1, 2, 3]


def test_officeqa_refuses_a_corpus_under_a_gold_answer_folder(tmp_path, recorder):
    import shutil

    from skillopt_envs.officeqa.benchmark import OfficeQABenchmark
    from skillopt_envs.officeqa.samples import ensure_samples

    src = ensure_samples(str(tmp_path / "s"))
    bad = tmp_path / "officeqa_split" / "docs"
    shutil.copytree(src / "treasury_bulletins_parsed" / "transformed", bad)
    bench = OfficeQABenchmark({"options": {"sample_dir": str(src), "docs_dirs": [str(bad)]}})
    task = bench.load_split("test")[0]
    rec = recorder(["<answer>1</answer>"])
    with pytest.raises(DataError, match="officeqa_split.*docs_dirs"):
        asyncio.run(_play(bench, task, "", FakeLLM(), _ctx()))
    assert rec.runs == []  # refused before any launch
    # with a harness configured, an env actor refuses it when it loads the corpus, before any episode
    agent_bench = OfficeQABenchmark(
        {"options": {"sample_dir": str(src), "docs_dirs": [str(bad)], "target_harness": "codex"}}
    )
    with pytest.raises(DataError, match="officeqa_split"):
        agent_bench.warm_up()
    OfficeQABenchmark({"options": {"sample_dir": str(src), "target_harness": "codex"}}).warm_up()  # the samples pass


@pytest.mark.parametrize(
    "overrides",
    [["env.options.use_local_tools=false"], ["env.options.search_mode=custom_search", "env.options.search_api_url=x"]],
)
def test_officeqa_harness_only_offline_with_tools(overrides):
    for llm in (["llm=codex"], ["llm=claude_code"], ["llm=compatible", "llm.target.harness=codex"]):
        with pytest.raises(Exception, match="runs OfficeQA only offline with local tools"):
            cli.compose(["+experiment=officeqa", *llm, *overrides])
    obj = cli.compose(["+experiment=officeqa", "llm=codex"])
    data = cli.plain(obj)
    assert data["env"]["options"]["target_harness"] == "codex"
    data = cli.plain(cli.compose(["+experiment=officeqa", "llm=compatible", *overrides]))
    assert data["env"]["options"]["target_harness"] == "chat"


# ---------------------------------------------------------------- images a tool returns


def test_images_a_tool_returns_reach_the_model_after_the_tool_messages():
    """Chat tool messages hold text only: an image a tool returned (Claude Code's Read of the page, Codex's
    view_image) follows the turn's tool messages as a user message, so the model behind the agent sees the page."""
    from skillopt_ray.llm.agent_api import NO_TEXT, TOOL_IMAGES_TEXT, messages_to_chat, responses_to_chat

    png = {"type": "image_url", "image_url": {"url": "data:image/png;base64,UE5H"}}
    body = {
        "messages": [
            {"role": "user", "content": "q"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {"file_path": "/workspace/a.png"}},
                    {"type": "tool_use", "id": "t2", "name": "Bash", "input": {"command": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "content": [
                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "UE5H"}}
                        ],
                    },
                    {"type": "tool_result", "tool_use_id": "t2", "content": "a.png"},
                ],
            },
        ]
    }
    msgs, _ = messages_to_chat(body)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "tool", "user"]
    assert msgs[2]["content"] == NO_TEXT and msgs[3]["content"] == "a.png"
    assert msgs[4]["content"] == [{"type": "text", "text": TOOL_IMAGES_TEXT}, png]
    resp = {
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]},
            {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_image", "image_url": png["image_url"]["url"]}],
            },
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]},
        ]
    }
    msgs, _, _ = responses_to_chat(resp)
    assert [m["role"] for m in msgs] == ["user", "assistant", "tool", "user", "user"]
    assert msgs[3]["content"] == [{"type": "text", "text": TOOL_IMAGES_TEXT}, png] and msgs[4]["content"] == "go on"
    # text-only tool output: nothing added (recorded caches of text-only episodes keep their keys)
    plain, _ = messages_to_chat(
        {"messages": body["messages"][:2] + [{"role": "user", "content": [body["messages"][2]["content"][1]]}]}
    )
    assert [m["role"] for m in plain] == ["user", "assistant", "tool"]
