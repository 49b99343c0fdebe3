"""OfficeQA under hostile or broken input: the tools stream large files with bounded memory and cap what they
return (saying so); the corpus index holds only files inside the roots; a missing named corpus folder and a
link loop are one-line errors; and the loader / page / command rules computed from the reference's own."""

from __future__ import annotations

import csv
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from skillopt_envs.base import DataError
from skillopt_envs.officeqa import data as oq
from skillopt_envs.officeqa import stream, tools
from skillopt_envs.officeqa.benchmark import OfficeQABenchmark
from skillopt_envs.officeqa.oracle import build_context, page_of, references
from skillopt_envs.officeqa.samples import ensure_samples
from skillopt_envs.officeqa.tools import ToolRuntime

# ---------- streaming: the same answers as reading the file whole ----------


def _random_text(rng: random.Random) -> str:
    """Lines of random length (some far past a piece), mixed line ends (\\n, \\r\\n, a lone \\r), trailing blanks,
    non-ASCII letters (İ lowers to two characters) and sometimes no final newline."""
    parts = []
    for _ in range(rng.randint(0, 40)):
        n = rng.choice([0, 1, 3, 10, 40, 130, 700])
        parts.append("".join(rng.choice("abcAB Gold|İé1 \t") for _ in range(n)))
        parts.append(rng.choice(["\n", "\n", "\r\n", "\r", "  \n"]))
    if parts and rng.random() < 0.3:
        parts.pop()
    return "".join(parts)


def test_streamed_read_and_grep_equal_the_whole_file_path(tmp_path, monkeypatch):
    rng = random.Random(11)
    path = tmp_path / "doc.txt"
    rt = ToolRuntime([tmp_path], set())
    for _ in range(150):
        path.write_bytes(_random_text(rng).encode("utf-8"))
        calls = [("read", (str(path), rng.randint(0, 50), rng.choice([None, 1, 3, 80]))) for _ in range(3)]
        calls += [("grep", ("".join(rng.choice("abGİ |1\n") for _ in range(rng.randint(1, 3))), str(path)))]
        calls += [("grep", ("gold", str(path)))]
        monkeypatch.setattr(tools, "WHOLE_FILE_BYTES", 1 << 30)
        whole = [getattr(rt, name)(*args) for name, args in calls]
        monkeypatch.setattr(tools, "WHOLE_FILE_BYTES", 0)  # every file streamed ...
        monkeypatch.setattr(stream, "CHUNK_CHARS", rng.choice([1, 2, 7, 64]))  # ... in chunks lines run past
        streamed = [getattr(rt, name)(*args) for name, args in calls]
        assert streamed == whole, path.read_bytes()


def test_a_10mb_line_comes_back_cut_and_says_so(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    line = "gold " + "x" * (10 << 20)
    (root / "one.txt").write_text("first\n" + line + "\nlast gold\n")
    rt = ToolRuntime([root], set())
    out = rt.grep("GOLD", str(root / "one.txt")).output.splitlines()
    assert (
        out[0]
        == f"2: gold {'x' * (tools.GREP_LINE_CHARS - 5)} [... line cut: 2000 of its {len(line)} characters shown]"
    )
    assert out[1] == "3: last gold" and len(out) == 2
    r = rt.read(str(root / "one.txt"), 2)  # read keeps the reference's silent 4,000-character cut
    assert r.output == (line[:4000]) and r.command == f"read(path={str(root / 'one.txt')!r}, start=2, limit=80)"


def test_grep_output_is_capped_in_total_with_a_note(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "wide.txt").write_text("".join(f"gold {i} " + "y" * 1500 + "\n" for i in range(30)))
    out = ToolRuntime([root], set()).grep("gold", str(root / "wide.txt")).output
    rows = out.splitlines()
    assert len(out) <= tools.GREP_CHARS + 200
    assert rows[-1].startswith("[... grep output cut at 20000 characters: 13 of 20 matching lines shown")
    assert rows[0].startswith("1: gold 0 yyy") and rows[12].startswith("13: gold 12 ")
    # a normal grep is the reference's form, with no note
    (root / "n.txt").write_text("a gold\nb\nGold c  \n")
    assert ToolRuntime([root], set()).grep("gold", str(root / "n.txt")).output == "1: a gold\n3: Gold c"


_RSS_PROBE = """
import resource, sys
from pathlib import Path
from skillopt_envs.officeqa.tools import ToolRuntime
p = Path(sys.argv[1])
rt = ToolRuntime([p.parent], set())
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
g = rt.grep("needle", str(p)).output
r = rt.read(str(p), 3).output
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print((after - before) // 1024, len(g), len(r))
"""


def test_a_large_file_costs_bounded_memory(tmp_path):
    """A 96 MB file (one 64 MB line, then 32 MB of short lines): grep and read in a fresh process grow its peak
    resident memory by a few MB, not the several hundred the whole-file reading took."""
    big = tmp_path / "big.txt"
    with big.open("w") as f:
        f.write("z" * (64 << 20) + " needle\n")
        f.write("row of a table | 1,234.5 | needle\n" * (1 << 20))
    out = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE, str(big)], capture_output=True, text=True, check=True, timeout=300
    )
    grown_mb, grep_len, read_len = map(int, out.stdout.split())
    assert grep_len < tools.GREP_CHARS + 200 and read_len == len("row of a table | 1,234.5 | needle\n") * 80
    assert grown_mb < 64, f"peak RSS grew by {grown_mb} MB"


# ---------- the corpus index ----------


def test_the_index_holds_only_files_inside_the_roots(tmp_path):
    root = tmp_path / "parsed" / "transformed"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a\n")
    (tmp_path / "gold_answers.txt").write_text("42\n")
    os.symlink(tmp_path / "gold_answers.txt", root / "gold_answers.txt")  # out of the corpus
    os.symlink("/etc/passwd", root / "passwd")
    os.symlink(root / "a.txt", root / "sub" / "alias.txt")  # inside: kept, as the file it names
    os.symlink(tmp_path / "gone.txt", root / "dangling.txt")
    os.mkfifo(root / "pipe.txt")
    index = oq.CorpusIndex.build([root.resolve()])
    assert index.files == [(root / "a.txt").resolve()]
    assert index.candidates(["gold_answers.txt", "passwd"]) == [] and index.candidates([]) == index.files


def test_a_link_loop_in_the_corpus_is_one_line(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    os.symlink("b.txt", root / "a.txt")
    os.symlink("a.txt", root / "b.txt")
    with pytest.raises(DataError) as e:
        oq.CorpusIndex.build([root])
    assert "\n" not in str(e.value) and str(root / "a.txt") in str(e.value) and "link loop" in str(e.value)


def test_a_named_docs_folder_that_does_not_exist_is_an_error(tmp_path):
    data = ensure_samples(str(tmp_path / "s"))  # the data folder has a corpus of its own
    for named, where in (("nowhere", data / "nowhere"), (str(tmp_path / "abs"), tmp_path / "abs")):
        b = OfficeQABenchmark({"data_dir": str(data), "options": {"docs_dirs": [named]}})
        with pytest.raises(DataError) as e:
            b.preflight(["train"])
        assert "\n" not in str(e.value) and f"docs_dirs names {where}, which does not exist" in str(e.value)
    (tmp_path / "file.txt").write_text("x")
    b = OfficeQABenchmark({"data_dir": str(data), "options": {"docs_dirs": [str(tmp_path / "file.txt")]}})
    with pytest.raises(DataError, match="which is not a folder"):
        b.warm_up()
    ok = OfficeQABenchmark({"data_dir": str(data), "options": {"docs_dirs": ["treasury_bulletins_parsed"]}})
    ok.preflight(["train"])
    assert len(ok.corpus().index.files) == 4


# ---------- the reference's rules ----------


def test_loader_strips_the_question_and_keeps_the_category(tmp_path):
    (tmp_path / "val").mkdir()
    rows = [
        {"uid": "U1", "question": "\n  How much gold?  \t", "answer": "1", "category": "easy"},
        {"uid": "U2", "question": "Q2", "answer": "2", "difficulty": "hard"},
        {"uid": "U3", "question": "Q3", "answer": "3"},
    ]
    with (tmp_path / "val" / "v.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["uid", "question", "answer", "category", "difficulty"])
        w.writeheader()
        w.writerows(rows)
    items = oq.read_split_folder(tmp_path / "val", "val")
    assert [it["question"] for it in items] == ["How much gold?", "Q2", "Q3"]
    assert [(it["task_type"], it["category"]) for it in items] == [("easy", "easy"), ("hard", "hard")] + [
        ("officeqa", "officeqa")
    ]


def test_page_numbers_follow_int_as_the_reference_reads_them():
    assert page_of("https://fraser.example/b?page=-3") == -3  # int("-3")
    assert page_of(" https://x/b?page=+4 ") == 4 and page_of("https://x/b?page= 5") == 5
    assert page_of("https://x/b?page=abc&page=6") == 6  # the first value that reads as an integer
    assert page_of("https://x/b?page=²") is None  # a digit int() refuses: no page, no crash
    assert page_of("https://x/b#frag&page=8") == 8  # the page=N pattern after & anywhere in the text
    assert page_of("https://x/b#page=7") is None and page_of("") is None
    assert references(["f.txt"], ["u?page=-3", "u?page=-3"]) == [("f.txt", -3, "u?page=-3")]


def test_read_commands_show_what_the_reference_shows(tmp_path):
    (tmp_path / "a.txt").write_text("x\n")
    rt = ToolRuntime([tmp_path], {"a.txt"})
    p = str(tmp_path / "a.txt")
    assert rt.run("read", {"path": p}).command == f"read(path={p!r}, start=1, limit=80)"  # defaults filled in
    assert rt.run("read", {"path": p, "start": 0, "limit": 0}).command == f"read(path={p!r}, start=1, limit=80)"
    assert rt.run("read", {"path": p, "start": 3, "limit": 2}).command == f"read(path={p!r}, start=3, limit=2)"
    denied = rt.run("read", {"path": "/etc/passwd", "start": 5})  # not allowed: only the path, before the window
    assert (denied.command, denied.output) == ("read(path='/etc/passwd')", "[read error: path not allowed]")
    assert rt.run("read", {"path": "/etc/passwd", "start": "x"}).command == "read(path='/etc/passwd')"


def _pages_json(root: Path, elements: list[dict]) -> Path:
    (root / "transformed").mkdir(parents=True)
    (root / "jsons").mkdir()
    (root / "jsons" / "b.json").write_text(json.dumps({"document": {"elements": elements}}))
    return root / "transformed"


def test_oracle_pages_read_page_ids_and_text_as_the_reference(tmp_path):
    elements = [
        {"content": "  \r\nFirst\r\rSecond &lt;x&gt;  \n", "bbox": [{"page_id": "3"}]},  # a string id is int()'d
        {"content": "float page", "bbox": [{"page_id": 3.0}, {"page_id": "x"}, "junk"]},
        {"content": "   ", "bbox": [{"page_id": 3}]},  # blank: no section
        {"content": "elsewhere", "bbox": [{"page_id": 4}]},
    ]
    ctx = build_context(["b.txt"], ["u?page=3"], [_pages_json(tmp_path / "p", elements)])
    block = ctx.text.split("\n\n", 1)[1]
    # content stripped; CR LF and a lone CR are newlines; blank-line runs cut to one; sections joined by a blank line
    assert block == "### b.txt page 3\nSource URL: u?page=3\n\nFirst\n\nSecond <x>\n\nfloat page"


def test_oracle_caps_trim_the_cut_and_a_full_context_takes_no_note(tmp_path):
    head = len("### b.txt page 1\nSource URL: u?page=1\n\n")
    texts = ["x" * 23_999 + " " * 11 + "y" * 10, "a" * 24_000, "c" * 24_000]
    first_cut = "x" * 23_999 + "\n\n[... 20 characters omitted from this parsed page ...]"
    texts.append("d" * (80_000 - 4 * head - len(first_cut) - 2 * 24_000))  # fills the 80,000 exactly
    texts.append("e" * 100)  # the context is full before this page
    elements = [{"content": t, "bbox": [{"page_id": i + 1}]} for i, t in enumerate(texts)]
    ctx = build_context(["b.txt"], [f"u?page={i + 1}" for i in range(5)], [_pages_json(tmp_path / "p", elements)])
    first = "### " + ctx.text.split("\n\n### ")[1]
    # cut at 24,000, trailing blanks trimmed, the omitted count is of the whole page
    assert first.endswith(first_cut) and len(first) == head + len(first_cut)
    assert ctx.pages == 4 and "page 5" not in ctx.text and "truncated" not in ctx.text
