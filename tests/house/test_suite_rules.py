"""Rules of the test suite itself: shared fixtures live in conftest.py and shared helpers in helper modules, so no
test file imports another (importing one runs its module and hands its fixtures to a second module by accident)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def test_no_test_file_imports_another():
    found = [
        f"{path.relative_to(TESTS)} imports {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for module in sorted(_imported_modules(path))
        if module.split(".")[-1].startswith("test_")
    ]
    assert not found, "move what they share into conftest.py or a helper module:\n" + "\n".join(found)


def test_the_rule_sees_an_import_of_a_test_file(tmp_path):
    planted = tmp_path / "test_x.py"
    planted.write_text("from test_other import helper\nimport tests.test_more\n")
    assert {"test_other", "tests.test_more"} <= _imported_modules(planted)
