"""Comments, tests and docs say what the reference does in the project's own words: no tracked file outside docs/
cites the external specification (its file name, its section numbers or its quirk numbers), which is not in the
repository. Reference behaviours and quirks are described in docs/reference-behaviours.md, and every
`quirk: <name>` the tree mentions, the documentation pages included, is one of its entries."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "reference-behaviours.md"
# Built from pieces so that this file does not match its own pattern.
CITATION = re.compile("|".join(["REFERENCE" + "_SPEC", "\u00a7" + " ?[0-9]", "QUIRK" + "-[0-9]"]))
QUIRK_NAME = re.compile(r"quirk: ([a-z0-9][a-z0-9-]*[a-z0-9])")
DOC_ENTRY = re.compile(r"\*\*`quirk: ([a-z0-9-]+)`\*\*")
NOT_A_NAME = {"name"}  # the differences page's "a `quirk: name` is an entry of ..."


def tracked_files(with_docs: bool = False) -> list[Path]:
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / p for p in out.decode().split("\0") if p and (with_docs or not p.startswith("docs/"))]


def texts(with_docs: bool = False) -> list[tuple[str, str]]:
    """(path, text) of every tracked text file outside docs/ (or everywhere, with_docs)."""
    out = []
    for path in tracked_files(with_docs):
        try:
            data = path.read_bytes()
        except OSError:  # listed but deleted in the working tree
            continue
        if b"\0" not in data[:8192]:
            out.append((str(path.relative_to(ROOT)), data.decode("utf-8", errors="replace")))
    return out


def test_the_pattern_finds_each_kind_of_citation():
    for text in ("see REFERENCE" + "_SPEC.md", "as in \u00a7" + "3.6", "(\u00a7" + " 14)", "(QUIRK" + "-28)"):
        assert CITATION.search(text), text
    for text in ("section three", "quirk: empty-gold-anls", "QUIRKS", "$3.6"):
        assert not CITATION.search(text), text


def test_no_tracked_file_outside_docs_cites_the_external_spec():
    found = [
        f"{path}:{n}: {line.strip()[:100]}"
        for path, text in texts()
        for n, line in enumerate(text.splitlines(), 1)
        if CITATION.search(line)
    ]
    assert not found, "say what the reference does, or name its entry in docs/reference-behaviours.md:\n" + "\n".join(
        found
    )


def test_every_quirk_named_in_the_tree_is_described_in_the_behaviours_page():
    described = set(DOC_ENTRY.findall(DOC.read_text(encoding="utf-8")))
    assert len(described) >= 30
    unknown = sorted(
        f"{path}: {name}"
        for path, text in texts(with_docs=True)
        for name in set(QUIRK_NAME.findall(text)) - NOT_A_NAME
        if name not in described
    )
    assert not unknown, "quirk names without an entry in docs/reference-behaviours.md:\n" + "\n".join(unknown)
