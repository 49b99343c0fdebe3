"""The OfficeQA tool runtime on a real corpus folder: the reference's access rule, limits and command strings,
and that nothing outside the allowed files can be read."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from skillopt_envs.officeqa.tools import CorpusReadError, ToolRuntime


@pytest.fixture()
def corpus(tmp_path) -> Path:
    root = tmp_path / "parsed" / "transformed"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("".join(f"line {i} Gold stock\n" for i in range(1, 201)))
    (root / "b.txt").write_text("short\n")
    (root / "sub" / "c.txt").write_text("x" * 10_000 + "\n" + "y\n")
    for i in range(60):
        (root / "sub" / f"many_{i:02d}.txt").write_text("m\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    os.symlink(tmp_path / "secret.txt", root / "link.txt")
    return root


def test_rule24_read(corpus):
    rt = ToolRuntime([corpus], {"a.txt", "c.txt"})
    p = str(corpus / "a.txt")
    r = rt.read(p, 0)
    assert r.command == f"read(path={p!r}, start=1, limit=80)"
    assert r.output.splitlines() == [f"line {i} Gold stock" for i in range(1, 81)] and r.output.endswith("\n")
    assert rt.read(p, 199, 5).output == "line 199 Gold stock\nline 200 Gold stock\n"
    assert rt.read(p, 201).output == "[empty file]"  # start past the end
    assert rt.read(p, 10_000, 3).output == "[empty file]"
    big = rt.read(str(corpus / "sub" / "c.txt"))
    assert len(big.output) == 4000 and set(big.output) == {"x"}  # cut to 4,000 characters
    assert rt.read("").command == "read(path='')" and rt.read("").output == "[read error: missing path]"
    assert rt.read(p, "two").output == "[read error: start and limit must be integers]"
    assert rt.read(str(corpus / "nothere" / "a.txt")).output == "[read error: no such file]"


def test_rule25_grep(corpus):
    rt = ToolRuntime([corpus], {"a.txt", "b.txt"})
    p = str(corpus / "a.txt")
    r = rt.grep("GOLD Stock", p)
    assert r.command == f"grep(pattern='gold stock', path={p!r})"
    lines = r.output.splitlines()
    assert len(lines) == 20 and lines[0] == "1: line 1 Gold stock" and lines[-1] == "20: line 20 Gold stock"
    assert rt.grep("line 150 ", p).output == "150: line 150 Gold stock"
    assert rt.grep("absent", p).output == "[no matches]"
    assert rt.grep("", p).output == "[grep error: missing pattern or path]"
    assert rt.grep("x", "").output == "[grep error: missing pattern or path]"
    assert rt.grep(".*", p).output == "[no matches]"  # literal, not a regular expression


def test_glob_limits_and_filters(corpus):
    rt = ToolRuntime([corpus], set())  # no source_files: every file allowed
    r = rt.glob("*.txt")
    assert r.command == "glob(pattern='*.txt')" and len(r.output.splitlines()) == 50
    assert rt.glob("sub/c.txt").output == str(corpus / "sub" / "c.txt")  # the path relative to the root matches
    assert rt.glob("c.txt").output == str(corpus / "sub" / "c.txt")  # and so does the basename
    assert rt.glob(None).command == "glob(pattern='*')"
    assert rt.glob("nothing*").output == "[no matches]"
    only = ToolRuntime([corpus], {"b.txt"})
    assert only.glob("*").output == str(corpus / "b.txt")  # files outside source_files are skipped


def test_rule26_access_control(corpus, tmp_path, monkeypatch):
    rt = ToolRuntime([corpus], {"a.txt", "link.txt", "passwd", "secret.txt"})
    denied = "[read error: path not allowed]"
    assert rt.read(str(corpus / "b.txt")).output == denied  # a corpus file outside source_files
    assert rt.grep("short", str(corpus / "b.txt")).output == "[grep error: path not allowed]"
    assert rt.read("/etc/passwd").output == denied
    assert rt.grep("root", "/etc/passwd").output == "[grep error: path not allowed]"
    assert rt.read(str(corpus / ".." / ".." / "secret.txt")).output == denied  # ..
    assert rt.read(str(corpus / "sub" / ".." / ".." / ".." / "secret.txt")).output == denied
    assert rt.read(str(corpus / "link.txt")).output == denied  # a symlink out of the root
    assert rt.read(str(tmp_path / "secret.txt")).output == denied
    monkeypatch.chdir(corpus)
    assert rt.read("a.txt").output.startswith("line 1 ")  # relative paths start at the working directory
    monkeypatch.chdir(tmp_path)
    assert rt.read("a.txt").output == denied
    every = ToolRuntime([corpus], set())
    assert every.read(str(corpus / "b.txt")).output == "short\n"  # empty source_files: every corpus file
    assert every.read("/etc/passwd").output == denied
    assert every.read(str(corpus)).output == "[read error: not a file]"  # the root itself: a mistake, not infra
    assert every.grep("x", str(corpus / "sub")).output == "[grep error: not a file]"
    assert every.read(str(corpus / ("n" * 5000))).output == "[read error: no such file]"  # a name too long
    assert every.read(str(corpus / "link.txt")).output == denied


def test_run_dispatch_unknown_tool_and_bad_arguments(corpus):
    rt = ToolRuntime([corpus], {"a.txt"})
    r = rt.run("delete", '{"path": "/"}')
    assert (r.command, r.output) == ("delete", "[tool error: unknown tool delete]")
    assert rt.run("read", "").output == "[read error: missing path]"  # empty arguments mean {}
    assert rt.run("read", "{not json").output.startswith("[tool error: arguments are not valid JSON")
    assert rt.run("grep", '["a"]').output == "[tool error: arguments must be a JSON object]"
    assert rt.run("read", {"path": str(corpus / "a.txt"), "start": 2, "limit": 1}).output == "line 2 Gold stock\n"


def test_unreadable_allowed_file_raises_corpus_read(corpus):
    bad = corpus / "a.txt"
    bad.write_bytes(b"\xff\xfe\xfa")
    rt = ToolRuntime([corpus], {"a.txt"})
    with pytest.raises(CorpusReadError) as e:
        rt.read(str(bad))
    assert e.value.kind == "corpus_read" and str(bad) in str(e.value)
    if os.geteuid() != 0:  # root reads files whatever their mode
        (corpus / "b.txt").chmod(0)
        with pytest.raises(CorpusReadError):
            ToolRuntime([corpus], set()).grep("x", str(corpus / "b.txt"))


def test_line_cache_gives_the_same_answers_and_sees_edits(corpus):
    from skillopt_envs.officeqa.tools import LineCache

    cache = LineCache(max_files=2)
    cached, plain = ToolRuntime([corpus], set(), cache), ToolRuntime([corpus], set())
    p = str(corpus / "a.txt")
    for args in ((p, 5, 3), (p, 199, 80), (p, 0, None)):
        assert cached.read(*args) == plain.read(*args)
    assert cached.grep("gold", p) == plain.grep("gold", p)
    assert len(cache._lines) == 1  # one file read once
    (corpus / "a.txt").write_text("edited line\n")
    assert cached.read(p).output == "edited line\n"  # size and mtime changed: read afresh
    for name in ("b.txt", "sub/c.txt"):
        cached.read(str(corpus / name))
    assert len(cache._lines) == 2  # bounded
    assert cached.read(str(corpus / "gone.txt")).output == "[read error: no such file]"


def test_grep_by_offsets_equals_the_line_by_line_rule():
    import random

    from skillopt_envs.officeqa.tools import Doc

    rng = random.Random(3)
    for _ in range(2000):  # includes 'İ', whose lower-case form is longer (the line-by-line path then)
        text = "".join(rng.choice("abcAB \n|İ1") for _ in range(rng.randint(0, 60)))
        needle = "".join(rng.choice("abAB |1\n") for _ in range(rng.randint(1, 3))).lower()
        doc = Doc(text)
        assert doc.grep(needle, 5) == [i for i, ln in enumerate(doc.lines) if needle in ln.lower()][:5]
