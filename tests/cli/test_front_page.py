"""What a user reads first: the lines a run ends with, the report's wording, the README as a front page (its
length, its first commands, links that resolve) and the docs site (the generated configuration page is current)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path

import yaml

from skillopt_ray.cli.report import mlflow_lines, report
from skillopt_ray.runs.report import lr_text


def _outcome(uri: str) -> dict:
    summary = {
        "mode": "eval",
        "split": "test",
        "eval": {"hard": 0.5, "soft": 0.5, "n": 2, "infra_errors": 0, "per_type": {}},
    }
    ml = {"run_id": "abc123", "experiment_id": "7", "tracking_uri": uri}
    return {"status": "ok", "summary": summary, "run_dir": "/tmp/run", "mlflow": ml, "timing": None}


def test_a_run_ends_with_each_mlflow_line_once_and_the_light_server_command(capsys):
    assert report(_outcome("sqlite:////tmp/out/mlflow.db")) == 0
    out = capsys.readouterr().out
    assert out.count("view with") == 1 and out.count("mlflow run: abc123") == 1
    assert out.count("all runs of the experiment") == 1 and "mlflow ui" not in out
    assert (
        "  view with: mlflow server --backend-store-uri sqlite:////tmp/out/mlflow.db --host 127.0.0.1 --port 5000 "
        "--workers 1, then open http://127.0.0.1:5000/#/experiments/7/runs/abc123?workflowType=machine_learning"
    ) in out
    # a run tracked by a server is viewed on that server: no command to start one, links to it
    lines = mlflow_lines({"run_id": "r", "experiment_id": "3", "tracking_uri": "http://mlflow.lab:5000/"})
    assert "mlflow server" not in "\n".join(lines)
    assert lines[1].endswith("http://mlflow.lab:5000/#/experiments/3/runs/r?workflowType=machine_learning")
    assert lines[2].endswith("http://mlflow.lab:5000/#/experiments/3/runs?workflowType=machine_learning")


def test_the_learning_rate_is_said_as_the_schedule_makes_it():
    assert lr_text({"learning_rate": 4, "min_learning_rate": 2, "lr_schedule": "constant"}) == (
        "learning rate 4 every step (constant)"
    )
    assert lr_text({"learning_rate": 4, "min_learning_rate": 2, "lr_schedule": "cosine"}) == (
        "learning rate 4 decaying to 2 (cosine)"
    )
    assert "unlimited" in lr_text({"learning_rate": 4, "min_learning_rate": 2, "lr_schedule": "autonomous"})
    chosen = lr_text({"learning_rate": 4, "lr_schedule": "cosine", "lr_control_mode": "autonomous"})
    assert "chosen by the optimizer" in chosen and "->" not in chosen


ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_docs", ROOT / "scripts" / "gen_config_docs.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


def test_the_configuration_page_is_the_schemas():
    """docs/configuration.md is generated from the typed schema: a key added, removed or re-explained in
    skillopt_ray/config/schema.py without regenerating the page fails here (python scripts/gen_config_docs.py)."""
    from skillopt_ray import config

    gen = _generator()
    page = (DOCS / "configuration.md").read_text(encoding="utf-8")
    assert page == gen.render(), "docs/configuration.md is stale: run python scripts/gen_config_docs.py"
    # every key of every section is on the page, with its default
    for f in dataclasses.fields(config.OptimizerConfig):
        assert f"| `optimizer.{f.name}` |" in page
    for f in dataclasses.fields(config.LLMRoleConfig):
        assert f"| `llm.<role>.{f.name}` |" in page
    assert "| `optimizer.learning_rate` | int | `4` |" in page and "`+sweep=lr`" in page


def test_the_generator_notices_a_changed_schema(tmp_path, monkeypatch):
    """The staleness check can fail: a new field, or a changed comment, changes what the page must say."""
    gen = _generator()
    before = gen.render()
    source = tmp_path / "schema.py"
    source.write_text(
        "from dataclasses import dataclass\n@dataclass\nclass OptimizerConfig:\n    epochs: int = 4  # passes, reworded\n"
    )
    notes = gen.field_notes(source)
    assert notes[("OptimizerConfig", "epochs")] == "passes, reworded"
    monkeypatch.setattr(gen, "field_notes", lambda path: notes if path.name == "schema.py" else {})
    assert gen.render() != before and "passes, reworded" in gen.render()


def _nav_pages(nav) -> list[str]:
    out: list[str] = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_docs_page_is_in_the_site_and_its_links_resolve():
    """mkdocs.yml's nav lists every page under docs/ and nothing else; relative links between pages point at files
    that exist (CI also builds the site with mkdocs build --strict, which checks the anchors)."""
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    pages = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    broken = [
        f"{page}: {target}"
        for page in pages
        for target in LINK.findall((DOCS / page).read_text(encoding="utf-8"))
        if not target.startswith(("http://", "https://", "#", "mailto:"))
        and not (DOCS / page).parent.joinpath(target.split("#")[0]).resolve().exists()
    ]
    assert not broken, broken


def _readme() -> str:
    return (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_readme_is_a_front_page():
    """At most 250 lines; its first two code blocks are the two commands (install and run, then the tests); it
    links the docs for your own tasks and the differences from the reference."""
    text = _readme()
    assert len(text.splitlines()) <= 250
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    assert "bash scripts/install.sh .venv" in blocks[0] and "python -m skillopt_ray +experiment=" in blocks[0]
    assert blocks[1].strip() == "bash .ci/run"
    for page in ("docs/your-own-tasks.md", "docs/differences.md", "docs/index.md", "docs/configuration.md"):
        assert f"]({page}" in text, page
    assert "![" in text and "+experiment=custom env.data_dir=" in text


def test_every_relative_link_of_the_readme_resolves():
    targets = [t for t in LINK.findall(_readme()) if not t.startswith(("http://", "https://", "#", "mailto:"))]
    assert len(targets) >= 20
    missing = [t for t in targets if not (ROOT / t.split("#")[0]).exists()]
    assert not missing, missing
