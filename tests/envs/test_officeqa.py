"""OfficeQA as the reference runs it (values computed from its rules): scoring, answer tags, data loading, the
oracle pages, and the chat tool loop against the scripted server through the real client (no Ray)."""

from __future__ import annotations

import asyncio
import csv
import json
from pathlib import Path

import pytest
from scripted_server import ScriptedServer
from skillopt_envs.base import INFRA_KINDS, DataError, EpisodeContext
from skillopt_envs.officeqa import data as oq
from skillopt_envs.officeqa.benchmark import OfficeQABenchmark, OfficeQAOptions, normalise_search_mode
from skillopt_envs.officeqa.oracle import build_context, page_of, references, table_markdown
from skillopt_envs.officeqa.scoring import exact_match, extract_answer, normalize_answer, score, token_f1
from skillopt_envs.officeqa.search import extract_queries, round_policy

from skillopt_ray.config import LLMConfig, LLMRoleConfig
from skillopt_ray.llm.gateway import Gateway, LLMHandle

# ---------- normalisation and metrics, as the reference computes them ----------


@pytest.mark.parametrize(
    "pred,gold,em,f1",
    [
        ("$1,234.5 million", "1234.5", 1, 1.0),
        ("42 billion dollars", "42", 1, 1.0),
        ("2,019", "2019", 1, 1.0),
        ("March 1944", "march, 1944", 1, 1.0),
        ("1,234.50", "1234.5", 0, 0.0),
        ("12.5%", "12.5", 0, 0.0),
        ("(1,234)", "-1234", 0, 0.0),
        ("1.0", "1", 0, 0.0),
        ("The answer is 42", "42", 0, 0.4),  # 1 of 4 tokens: P 1/4, R 1 -> 2*0.25/1.25
        ("U.S. nominal GDP", "us gdp", 0, 0.5),  # u.s. gdp vs us gdp: 1 of 2 each way
        ("-3.2", "\u22123.2", 0, 0.0),
    ],
)
def test_rule19_normalisation_em_f1(pred, gold, em, f1):
    assert int(exact_match(pred, gold)) == em
    assert token_f1(pred, gold) == pytest.approx(f1)


def test_rule19_normal_form_keeps_dot_dash_percent_and_drops_units():
    assert normalize_answer("U.S. nominal GDP") == "u.s. gdp"
    assert normalize_answer(" $(1,234) Millions of Dollars ") == "1234 of"
    assert normalize_answer("-12.5%") == "-12.5%"
    assert token_f1("", "") == 1.0 and token_f1("x", "") == 0.0


def test_scoring_fields_and_empty_answer_not_evaluated():
    s = score("", "42")
    assert (s.hard, s.soft, s.fail_reason, s.agent_ok) == (0, 0.0, "predicted '' but expected '42'", True)
    s = score(" 42 ", "42")
    assert (s.hard, s.soft, s.fail_reason, s.predicted) == (1, 1.0, "", "42")
    s = score("41", "42", "Exceeded tool-turn budget (24)")
    assert (s.hard, s.fail_reason, s.agent_ok) == (0, "Exceeded tool-turn budget (24)", False)


# ---------- the first answer tag (quirk: officeqa-first-answer-tag) ----------


def test_rule20_first_answer_tag_wins():
    assert extract_answer("x <answer>A</answer> y <answer>B</answer>") == "A"
    assert extract_answer("<ANSWER>\n multi\n</Answer>") == "multi"
    assert extract_answer("reasoning\n0.28\n\n") == "0.28"


# ---------- list parsing; docs roots ----------


def test_rule29_list_parsing():
    assert oq.parse_list_field("a.txt\r\nb.txt") == ["a.txt", "b.txt"]
    assert oq.parse_list_field("a.txt, b.txt") == ["a.txt, b.txt"]  # quirk: officeqa-txt-list
    assert oq.parse_list_field("a.csv, b.csv") == ["a.csv", "b.csv"]
    assert oq.parse_list_field('["x", " ", "y "]') == ["x", "y"]
    assert oq.parse_list_field([" p ", ""]) == ["p"]
    assert oq.parse_list_field("one.txt") == ["one.txt"] and oq.parse_list_field(None) == []


def test_rule27_docs_roots(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "transformed").mkdir(parents=True)
    b.mkdir()
    roots = oq.resolve_docs_roots([a, tmp_path / "missing", b, a])
    assert roots == [(a / "transformed").resolve(), b.resolve()]  # transformed/ used; every existing one; no repeat
    with pytest.raises(DataError, match="no OfficeQA corpus directory found.*missing"):
        oq.resolve_docs_roots([tmp_path / "missing"])


def test_docs_candidates_order_and_relative_paths(tmp_path):
    got = oq.docs_candidates(["rel", str(tmp_path / "abs")], tmp_path / "data", {oq.DOCS_ENV: "e1,e2"})
    assert got[:4] == [tmp_path / "data" / "rel", tmp_path / "abs", tmp_path / "data" / "e1", tmp_path / "data" / "e2"]
    assert got[4] == tmp_path / "data" / "officeqa_docs_official"
    assert str(got[-1]).endswith("officeqa/treasury_bulletins_parsed")


def test_rows_to_items_from_csv_and_json(tmp_path):
    (tmp_path / "train").mkdir()
    with (tmp_path / "train" / "b.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["uid", "question", "answer", "source_files", "source_docs", "difficulty"])
        w.writeheader()
        w.writerow(
            dict(
                uid="U1",
                question="  Q?\n",  # the reference strips the question
                answer=" 7 ",
                source_files="x.txt\r\ny.txt",
                source_docs="u?page=2",
                difficulty="hard",
            )
        )
    (tmp_path / "train" / "a.json").write_text(json.dumps([{"id": "J"}]))
    items = oq.read_split_folder(tmp_path / "train", "train")  # the CSV is preferred over the JSON
    assert items == [
        {
            "id": "U1",
            "uid": "U1",
            "question": "Q?",
            "ground_truth": "7",
            "answers": ["7"],
            "task_type": "hard",
            "category": "hard",  # kept beside task_type, as the reference's loader does
            "source_files": ["x.txt", "y.txt"],
            "source_docs": ["u?page=2"],
            "split": "train",
        }
    ]
    assert oq.row_to_item({"id": "z", "question": "q", "ground_truth": "g"}, "val")["task_type"] == "officeqa"
    assert oq.task_types([]) == ["officeqa"]


def test_shipped_paper_split_counts_and_categories():
    cats = {}
    ids = []
    for split, n in oq.PAPER_COUNTS.items():
        entries = oq.read_manifest(oq.PAPER_SPLIT_DIR, split)
        assert len(entries) == n
        cats[split] = sum(e["category"] == "easy" for e in entries), sum(e["category"] == "hard" for e in entries)
        ids += [e["id"] for e in entries]
    assert cats == {"train": (23, 27), "val": (11, 13), "test": (79, 93)}
    assert sorted(ids) == [f"UID{i:04d}" for i in range(1, 247)]
    assert (oq.PAPER_SPLIT_DIR / "NOTICE").read_text().count("CC-BY-SA 4.0") == 1


def test_full_csv_with_the_paper_split(tmp_path):
    rows = [
        dict(uid=f"UID{i:04d}", question=f"q{i}", answer=str(i), source_files="f.txt", source_docs="d", difficulty="x")
        for i in range(1, 247)
    ]
    with (tmp_path / oq.FULL_CSV).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (tmp_path / "docs").mkdir()
    b = OfficeQABenchmark({"data_dir": str(tmp_path), "options": {"docs_dirs": ["docs"]}})
    val = b.load_split("selection")
    assert [t.task_id for t in val][:3] == ["UID0001", "UID0027", "UID0039"]
    assert val[0].task_type == "hard" and val[0].payload["ground_truth"] == "1"  # the manifest's category wins
    assert len(b.load_split("test")) == 172 and len(b.load_split("train")) == 50
    rows.pop(0)
    with (tmp_path / oq.FULL_CSV).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(DataError) as e:
        b.load_split("val")
    msg = str(e.value)  # the ids are missing from the given data (not a missing download): how many, and a few
    assert "1 ids of the val split" in msg and f"missing from the given data {tmp_path / oq.FULL_CSV} (UID0001)" in msg
    assert "\n" not in msg
    gone = {t.task_id for t in val[:5]}
    rows = [r for r in rows if r["uid"] not in gone]
    with (tmp_path / oq.FULL_CSV).open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    with pytest.raises(DataError, match=r"^5 ids of the val split .*\(UID0001, UID0027, UID0039, \.\.\.\)"):
        b.load_split("val")


# ---------- oracle pages (values the reference's renderer produces) ----------


def _oracle_json(path: Path) -> None:
    table = (
        "<table><tr><th>Year</th><th>Value</th></tr><tr><td>1944</td><td>1,234</td></tr>"
        "<tr><td> </td><td></td></tr><tr><td>1945|x</td></tr></table>"
    )
    elements = [
        {"content": table, "bbox": [{"page_id": 3}]},
        {"content": "Note &amp; more\r\n\r\n\r\n\r\nend", "bbox": [{"page_id": 3}, {"page_id": 4}]},
        {"content": "other page", "bbox": [{"page_id": 5}]},
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"document": {"elements": elements}}))


def test_rule28_oracle_context(tmp_path):
    root = tmp_path / "parsed" / "transformed"
    root.mkdir(parents=True)
    _oracle_json(tmp_path / "parsed" / "jsons" / "treasury_bulletin_1944_01.json")
    url = "https://fraser.example/jan-1944?page=3"
    ctx = build_context(["treasury_bulletin_1944_01.txt"], [url, url.replace("=3", "=4")], [root])
    intro, rest = ctx.text.split("\n\n", 1)
    assert "oracle source page" in intro and "primary evidence" in intro and "tools" in intro
    block3, block4 = rest.split("\n\n### ")
    assert block3.startswith(f"### treasury_bulletin_1944_01.txt page 3\nSource URL: {url}\n\n")
    assert "| Year | Value |\n| --- | --- |\n| 1944 | 1,234 |\n| 1945\\|x |  |" in block3
    assert "Note & more\n\nend" in block3  # entities unescaped, blank-line runs reduced to one blank line
    assert block4.startswith("treasury_bulletin_1944_01.txt page 4") and "Note & more" in block4  # spans pages 3-4
    assert "other page" not in ctx.text and ctx.pages == 2


def test_rule28_caps(tmp_path):
    root = tmp_path / "transformed"
    root.mkdir()
    big = [{"content": "x" * 30_000, "bbox": [{"page_id": p}]} for p in range(1, 6)]
    (tmp_path / "jsons").mkdir()
    (tmp_path / "jsons" / "b.json").write_text(json.dumps({"document": {"elements": big}}))
    ctx = build_context(["b.txt"], [f"u?page={p}" for p in range(1, 6)], [root])
    assert "[... 6000 characters omitted from this parsed page ...]" in ctx.text
    assert ctx.text.endswith("[... oracle parsed page context truncated ...]")
    body = ctx.text.split("\n\n", 1)[1]
    assert 80_000 < len(body) < 80_000 + 200 and ctx.pages == 4


def test_oracle_pages_and_pairing():
    assert page_of("https://x/y?pagenum=9") == 9 and page_of("page=12") == 12 and page_of("https://x/y#page=7") is None
    assert page_of("https://x/y?page=21&deep=true") == 21
    assert references(["a", "b"], ["p?page=1", "p?page=2", "p?page=3"]) == [("a", 1, "p?page=1"), ("b", 2, "p?page=2")]
    assert [r[0] for r in references(["a"], ["p?page=1", "q?page=2"])] == ["a", "a"]
    assert references([], ["p?page=1"]) == [] and references(["a"], ["nopage"]) == []
    assert table_markdown("<table><tr><td></td></tr></table>") == ""


# ---------- custom-search queries and round policy ----------


def test_rule30_query_extraction():
    q = lambda body: extract_queries(f"<search_queries>{body}</search_queries>")  # noqa: E731
    assert q('["q1","q2","q1"]') == ["q1", "q2"]
    assert q('{"queries":"one"}') == ["one"]
    assert q('\n- treasury 1944\n- "gold stock"\n') == ["treasury 1944", "gold stock"]
    assert q("a; b, c") == ["a", "b", "c"]
    assert extract_queries("no tag here") == []
    assert q("[]") == ["[]"]  # quirk: empty-query-list kept


def test_rule31_round_policy():
    first = round_policy(1, 24, 4)
    assert "1/24" in first and "23 model rounds remain" in first and "at most 4 queries" in first
    last = round_policy(24, 24, 4)
    assert "final round (24/24)" in last and "do not emit <search_queries>" in last


def test_modes_and_options():
    assert [normalise_search_mode(m) for m in ("custom", "azure_search", "AZURE", "x", "")] == [
        "custom_search",
        "azure_search",
        "azure_search",
        "offline",
        "offline",
    ]
    with pytest.raises(DataError, match="azure_search is not implemented"):
        OfficeQAOptions.parse({"search_mode": "azure"})
    with pytest.raises(DataError, match="search_api_url"):
        OfficeQAOptions.parse({"search_mode": "custom"})
    with pytest.raises(DataError, match="unknown env.options key"):
        OfficeQAOptions.parse({"max_tool_turns": 3})
    assert OfficeQAOptions.parse({"target_provider": "embedded"}).text_protocol
    assert not OfficeQAOptions.parse({"target_provider": "openai"}).text_protocol
    assert "corpus_read" in INFRA_KINDS


# ---------- the tool loop through the real client ----------


def _call(name: str, **args) -> dict:
    return {"id": f"c_{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _files(body) -> list[str]:
    import re

    return re.findall(r"^- (/\S+\.txt)$", body["messages"][1]["content"], re.M)


def _play(tmp_path, policy, max_turns=24, task_index=0, corpus_fix=None, **opts):
    root = tmp_path / "samples"
    bench = OfficeQABenchmark({"options": {"sample_dir": str(root), **opts}})
    if corpus_fix:
        corpus_fix(bench)
    task = bench.load_split("train")[task_index]
    with ScriptedServer(policy=policy) as srv:
        role = LLMRoleConfig(provider="openai", model="m", base_url=srv.base_url, api_key_env="", timeout_s=5)
        gw = Gateway(LLMConfig(backend="compatible", target=role, optimizer=role), None)
        loop = asyncio.new_event_loop()
        try:
            r = loop.run_until_complete(
                bench.run_episode(task, "", LLMHandle(gw), EpisodeContext("k", True, max_turns, 0))
            )
            loop.run_until_complete(gw.close())
        finally:
            loop.close()
        bodies = list(srv.state.bodies)
    return task, r, bodies


def test_rule21_tool_call_beats_answer_and_tools_are_offered(tmp_path):
    def policy(body, headers):
        if sum(m["role"] == "tool" for m in body["messages"]) == 0:
            return {
                "content": "<answer>too early</answer>",
                "tool_calls": [_call("grep", pattern="TOTAL", path=_files(body)[0])],
            }
        return "<answer>5</answer> and later <answer>6</answer>"

    task, r, bodies = _play(tmp_path, policy)
    assert [b["tools"][i]["function"]["name"] for b in bodies[:1] for i in range(3)] == ["glob", "read", "grep"]
    assert bodies[0]["tool_choice"] == "auto" and len(bodies) == 2
    assert bodies[1]["messages"][2]["tool_calls"][0]["function"]["name"] == "grep"  # the assistant turn, then the tool
    assert bodies[1]["messages"][3]["role"] == "tool" and bodies[1]["messages"][3]["tool_call_id"] == "c_grep"
    kinds = [e.get("type") or e.get("role") for e in r.trajectory]
    assert kinds == ["user", "message", "tool_call", "message"] and r.n_turns == 4
    assert r.trajectory[2]["command"].startswith("grep(pattern='total', path=")
    assert r.info["predicted_answer"] == "5"  # the first tag of the answering reply; the early one was ignored
    assert r.fail_reason == f"predicted '5' but expected '{task.payload['ground_truth']}'"
    # the reference gives OfficeQA no verification entry
    assert not any(e.get("role") == "system" for e in r.trajectory)


def test_rule22_neither_tool_nor_answer(tmp_path):
    def policy(body, headers):
        tools = sum(m["role"] == "tool" for m in body["messages"])
        return {"content": "", "tool_calls": [_call("glob", pattern="*")]} if tools < 2 else "thinking aloud"

    _, r, bodies = _play(tmp_path, policy)
    assert len(bodies) == 3  # turn 3 of 24
    assert r.fail_reason == "Model neither produced a tool request nor a final answer"
    assert (r.hard, r.soft, r.info["agent_ok"]) == (0.0, 0.0, False)


def test_rule23_tool_calls_on_the_last_turn(tmp_path):
    def policy(body, headers):
        return {"content": "", "tool_calls": [_call("glob", pattern="*1950*"), _call("glob", pattern="*1944*")]}

    task, r, bodies = _play(tmp_path, policy, max_turns=2)
    assert len(bodies) == 2
    assert r.fail_reason == f"predicted '' but expected '{task.payload['ground_truth']}'"
    assert r.info["agent_ok"] is True and r.hard == 0.0
    assert r.n_turns == 1 + 2 + 4  # the user entry, 2 messages, 4 tool calls


def test_budget_exceeded_on_the_last_turn(tmp_path):
    def policy(body, headers):
        if sum(m["role"] == "tool" for m in body["messages"]) == 0:
            return {"content": "", "tool_calls": [_call("glob", pattern="*")]}
        return "no idea"

    _, r, _ = _play(tmp_path, policy, max_turns=2)
    assert r.fail_reason == "Exceeded tool-turn budget (2)" and r.info["agent_ok"] is False


def test_a_right_answer_after_grep_and_read(tmp_path):
    def policy(body, headers):
        msgs = body["messages"]
        tools = [m for m in msgs if m["role"] == "tool"]
        if not tools:
            return {"content": "", "tool_calls": [_call("grep", pattern="income taxes", path=_files(body)[0])]}
        if len(tools) == 1:
            line = int(tools[0]["content"].split(":", 1)[0])
            return {"content": "", "tool_calls": [_call("read", path=_files(body)[0], start=line, limit=1)]}
        row = tools[1]["content"]
        return f"<answer>{row.split('|')[3].strip()}</answer>"

    task, r, _ = _play(tmp_path, policy, task_index=0)
    assert "income taxes" in task.payload["question"]
    assert (r.hard, r.soft, r.fail_reason) == (1.0, 1.0, "") and r.info["tool_calls"] == 2


def test_rule32_unreadable_corpus_file_is_an_infra_error_with_the_conversation(tmp_path):
    def policy(body, headers):
        return {"content": "", "tool_calls": [_call("read", path=_files(body)[0])]}

    def break_file(bench):
        for p in bench.corpus().index.files:
            if p.suffix == ".txt":
                p.write_bytes(b"\xff\xfe not utf-8 \xff")

    _, r, _ = _play(tmp_path, policy, corpus_fix=break_file)
    assert r.infra_error and r.error_kind == "corpus_read" and r.fail_reason == "infra_error"
    assert "cannot be read" in r.error and not r.scored
    assert r.info["target_system_prompt"] and r.info["target_user_prompt"] and len(r.trajectory) == 3


def test_no_tools_mode_and_oracle_page_in_the_prompt(tmp_path):
    seen = {}

    def policy(body, headers):
        seen["body"] = body
        return "<answer>1</answer>"

    root = tmp_path / "samples"
    bench = OfficeQABenchmark({"options": {"sample_dir": str(root), "use_local_tools": False}})
    idx = next(i for i, t in enumerate(bench.load_split("train")) if "?page=3" in t.payload["source_docs"][0])
    _, r, bodies = _play(tmp_path, policy, task_index=idx, use_local_tools=False)
    assert len(bodies) == 1 and "tools" not in bodies[0]
    user = bodies[0]["messages"][1]["content"]
    assert "## Oracle Parsed Pages\n" in user and "page 3\nSource URL:" in user and "| Month | Public debt |" in user
    assert "## Candidate Files\n- /" in user and "## Source Hints\n- https://" in user
    assert r.info["oracle_parsed_pages_included"] and r.info["use_local_tools"] is False


def test_text_protocol_for_endpoints_without_function_calling(tmp_path):
    def policy(body, headers):
        assert "tools" not in body
        msgs = body["messages"]
        if len(msgs) == 2:
            call = json.dumps({"name": "grep", "arguments": {"pattern": "Total budget", "path": _files(body)[0]}})
            return f"Let me look.\n<tool_call>{call}</tool_call>\n<answer>early</answer>"
        assert msgs[-1]["role"] == "user" and msgs[-1]["content"].startswith("## Tool Results\n### grep(")
        return "<answer>2</answer>"

    _, r, bodies = _play(tmp_path, policy, tool_protocol="text")
    assert "<tool_call>" in bodies[0]["messages"][0]["content"]  # the protocol is explained in the system prompt
    assert [e.get("type") or e.get("role") for e in r.trajectory] == ["user", "message", "tool_call", "message"]
    assert r.info["predicted_answer"] == "2"


def test_missing_corpus_is_one_line_naming_the_path(tmp_path):
    b = OfficeQABenchmark({"options": {"sample_dir": str(tmp_path / "s")}})
    import shutil

    shutil.rmtree(tmp_path / "s" / "treasury_bulletins_parsed")
    with pytest.raises(DataError) as e:
        b.warm_up()
    where = str(tmp_path / "s" / "treasury_bulletins_parsed")  # a fallback looked at
    assert "\n" not in str(e.value) and where in str(e.value) and "OFFICEQA_DOCS_DIR" in str(e.value)


def test_show_gold_gives_the_analysts_a_gold_block(tmp_path):
    _, r, _ = _play(tmp_path, lambda body, headers: "<answer>x</answer>", show_gold=True)
    ((title, gold),) = r.info["analyst_blocks"]
    assert title == "Gold Answer" and gold == r.info["gold_answers"][0] and gold in r.fail_reason
    _, plain, _ = _play(tmp_path, lambda body, headers: "<answer>x</answer>")
    assert "analyst_blocks" not in plain.info  # the reference's view: the gold only in a wrong answer's reason


def test_custom_search_loop_against_a_local_search_proxy(tmp_path, monkeypatch):
    """custom_search: the controller runs the model's queries on the search proxy (raw token as Authorization) and
    sends the results back with the next round's policy; the model answers on round 2."""
    import http.server
    import threading

    seen = []

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server hook's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append((self.headers["Authorization"], body))
            out = {"results": [{"title": f"T {body['query']}", "link": "https://x", "snippet": "gold was 22.7"}]}
            data = json.dumps(out).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    monkeypatch.setenv("OFFICEQA_CUSTOM_SEARCH_AUTH", "tok-123")

    def policy(body, headers):
        if len(body["messages"]) == 2:
            assert "## Round Policy\nThis is round 1/3." in body["messages"][1]["content"]
            return '<search_queries>["gold 1944", "gold 1944", "stock"]</search_queries>'
        last = body["messages"][-1]["content"]
        assert last.startswith(
            "## Search Results Round 1\n## Query 1\nQuery: gold 1944\n[1] T gold 1944\nURL: https://x"
        )
        assert "This is round 2/3." in last and "1 model rounds remain" in last
        return "<answer>22.7</answer>"

    url = f"http://127.0.0.1:{httpd.server_address[1]}/search"
    try:
        _, r, bodies = _play(tmp_path, policy, max_turns=3, search_mode="custom", search_api_url=url)
    finally:
        httpd.shutdown()
    assert [b["query"] for _, b in seen] == ["gold 1944", "stock"] and {a for a, _ in seen} == {"tok-123"}
    assert seen[0][1]["max_num_results"] == 4 and seen[0][1]["provider"] == "duckduckgo"
    assert "tools" not in bodies[0] and "## File Hints\n- treasury_bulletin_" in bodies[0]["messages"][1]["content"]
    kinds = [e.get("type") or e.get("role") for e in r.trajectory]
    assert kinds == ["user", "message", "tool_call", "user", "message"]
    assert r.trajectory[2]["command"] == "custom_search(['gold 1944', 'stock'])"
    assert r.info["predicted_answer"] == "22.7"


def test_manifest_ids_missing_from_the_split_files_are_counted_and_named(tmp_path):
    """A data folder of split files with env.manifest_dir naming ids: the manifest picks from every split file's
    questions; ids the files lack are counted and named, never 'holds neither train/ val/ test/'."""
    data, man = tmp_path / "data", tmp_path / "man"
    for i, s in enumerate(("train", "val", "test")):
        (data / s).mkdir(parents=True)
        rows = [{"uid": f"U{i}{j}", "question": f"q{i}{j}", "answer": str(j), "category": "easy"} for j in range(2)]
        (data / s / "items.json").write_text(json.dumps(rows))
        (man / s).mkdir(parents=True)
    (man / "train" / "items.json").write_text(json.dumps([{"id": "U21"}, {"id": "U00"}]))
    (man / "val" / "items.json").write_text(json.dumps([{"id": "U10", "category": "hard"}]))
    (man / "test" / "items.json").write_text(json.dumps([{"id": "U11"}, {"id": "GONE1"}, {"id": "GONE2"}]))
    (data / "docs").mkdir()
    b = OfficeQABenchmark({"data_dir": str(data), "manifest_dir": str(man), "options": {"docs_dirs": ["docs"]}})
    assert [t.task_id for t in b.load_split("train")] == ["U21", "U00"]  # the manifest's order, from any file
    assert [t.task_type for t in b.load_split("val")] == ["hard"]  # the manifest's category wins
    with pytest.raises(DataError) as e:
        b.preflight(["train", "val", "test"])
    msg = str(e.value)
    assert msg.startswith("2 ids of the test split") and "(GONE1, GONE2)" in msg and "holds neither" not in msg
    assert "\n" not in msg
