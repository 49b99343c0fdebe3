"""Stage functions with a deterministic in-process optimizer (no HTTP): hierarchical merge shapes and update modes."""

from __future__ import annotations

import asyncio
import json

from skillopt_ray.llm.types import JsonResult, MalformedOutput
from skillopt_ray.skill.document import SLOW_UPDATE, region_content, set_region
from skillopt_ray.skill.edits import Edit
from skillopt_ray.stages.aggregate import aggregate
from skillopt_ray.stages.reflect import Patch
from skillopt_ray.stages.update import update


class FakeOptimizer:
    """Merges by concatenation (or keeps the first candidate); records every call's key."""

    def __init__(self, fail_keys: tuple[str, ...] = ()):
        self.keys: list[str] = []
        self.fail_keys = fail_keys

    async def chat_json(self, req, schema, name="reply"):
        self.keys.append(req.key)
        if any(k in req.key for k in self.fail_keys):
            raise MalformedOutput("scripted failure")
        prompt = req.messages[-1]["content"]
        if "Candidate 0" in prompt:
            first = prompt.split("### Candidate 0\n", 1)[1].split("\n\n### Candidate", 1)[0].split("\n\nReply as", 1)[0]
            return JsonResult({"skill": first}, "")
        if "## Suggestions" in prompt:
            return JsonResult({"skill": "# rewritten\n" + prompt.split("## Suggestions\n", 1)[1].split("\n\nRewrite", 1)[0]}, "")
        edits = [e for block in prompt.split("### Patch ")[1:] for e in json.loads(block.split("\n", 1)[1].split("\n\n", 1)[0])]
        return JsonResult({"edits": edits}, "")


def _patch(source: str, i: int) -> Patch:
    return Patch(source, edits=[Edit("append", f"- {source} rule {i}", source=source)])


def test_hierarchical_merge_levels_and_failure_first_final_merge():
    llm = FakeOptimizer()
    patches = [_patch("failure", i) for i in range(5)] + [_patch("success", i) for i in range(2)]
    out = asyncio.run(aggregate(llm, patches, mode="patch", merge_batch_size=2, key="k"))
    # 5 failure patches: L0 3 groups (2 merged + 1 passed up), L1 2 groups (1 merged), L2 1 merge -> 4 calls;
    # 2 success patches: 1 call; final merge: 1 call
    assert out.merge_calls == 6 and len(llm.keys) == 6
    assert llm.keys[-1] == "k/merge/final"
    assert [e.content for e in out.edits] == [f"- failure rule {i}" for i in range(5)] + [f"- success rule {i}" for i in range(2)]


def test_failed_merge_falls_back_to_concatenation_and_is_logged():
    llm = FakeOptimizer(fail_keys=("L0/g0",))
    out = asyncio.run(aggregate(llm, [_patch("failure", i) for i in range(3)], mode="patch", merge_batch_size=2, key="k"))
    assert len(out.fallbacks) == 1 and "concatenated" in out.fallbacks[0]
    assert [e.content for e in out.edits] == [f"- failure rule {i}" for i in range(3)]


def test_full_rewrite_candidates_merge_hierarchically_and_keep_protected_regions():
    llm = FakeOptimizer(fail_keys=("merge_cand/L1",))
    patches = [Patch("success", candidate="# s0"), Patch("failure", candidate="# f0"), Patch("failure", candidate="# f1")]
    out = asyncio.run(aggregate(llm, patches, mode="full_rewrite_minibatch", merge_batch_size=2, key="k"))
    assert out.candidate == "# f0"  # failures first; the L1 merge failed and kept its first candidate
    assert out.merge_calls == 2 and len(out.fallbacks) == 1
    skill = set_region("# old body\n", SLOW_UPDATE, "keep me")
    upd = asyncio.run(update(llm, skill, mode="full_rewrite_minibatch", edits=[], suggestions=[], candidate=out.candidate, key="k"))
    assert upd.candidate.startswith("# f0") and region_content(upd.candidate, SLOW_UPDATE) == "keep me"


def test_rewrite_from_suggestions_dedupes_failures_first_and_rewrites_the_body():
    llm = FakeOptimizer()
    patches = [Patch("success", suggestions=["b", "a"]), Patch("failure", suggestions=["a", "c"])]
    agg = asyncio.run(aggregate(llm, patches, mode="rewrite_from_suggestions", merge_batch_size=2, key="k"))
    assert agg.suggestions == ["a", "c", "b"] and agg.merge_calls == 0
    skill = set_region("# old\n", SLOW_UPDATE, "keep me")
    upd = asyncio.run(update(llm, skill, mode="rewrite_from_suggestions", edits=[], suggestions=agg.suggestions, candidate="", key="k"))
    assert upd.candidate.startswith("# rewritten") and region_content(upd.candidate, SLOW_UPDATE) == "keep me"
