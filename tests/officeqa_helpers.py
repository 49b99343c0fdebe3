"""Helpers shared by test files; fixtures live in conftest.py."""

from __future__ import annotations

import json
import re

from scripted_server import Policies


def tool_agent(types: dict[str, str], optimizer: Policies):
    """The target: grep -> read -> answer (wrong unless the skill holds RULE-<type>); the optimizer: Policies."""

    def policy(body, headers):
        if headers.get("x-skillopt-role") != "target":
            return optimizer.answer(body, headers)
        msgs = body["messages"]
        assert body.get("tools") and body["tool_choice"] == "auto"
        task = re.search(r"/([^/]+)/t\d+$", headers["x-skillopt-key"]).group(1)
        question = msgs[1]["content"].split("\n\n", 1)[0]
        path = re.findall(r"^- (/\S+\.txt)$", msgs[1]["content"], re.M)[0]
        tools = [m for m in msgs if m["role"] == "tool"]
        needle = next((w for w in _WORDS if w in question), "total budget receipts")
        if "public debt" in question:
            needle = re.search(r"end of (\w+) ", question).group(1) + " |"
        if "gold stock" in question:
            needle = re.search(r"end of (\w+) ", question).group(1) + " |"
        if not tools:
            return {"content": "", "tool_calls": [_call(0, "grep", pattern=needle, path=path)]}
        if len(tools) == 1:
            hit = tools[0]["content"].splitlines()[0]
            return {"content": "", "tool_calls": [_call(1, "read", path=path, start=int(hit.split(":")[0]), limit=1)]}
        row = tools[-1]["content"].strip()
        value = row.strip("|").split("|")[-1].strip()
        if f"RULE-{types[task]}" not in msgs[0]["content"] or "gold stock" in question:
            value = "0"  # without the rule (or on a two-bulletin question) this agent gets it wrong
        return f"From the table: <answer>{value}</answer>"

    return policy


_WORDS = ("individual income taxes", "corporation income taxes", "excise taxes", "customs duties")


def _call(i: int, name: str, **args) -> dict:
    return {"id": f"call{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
