"""What made a run: the run directory keeps each command's line, overrides, resolved config, version, git commit and
dirty flag, and the code hash; the code hash is part of the run's identity, so edited code or prompts make a new run
(or a named run refuses to resume, in one line)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from skillopt_ray.cli import identity, provenance
from skillopt_ray.cli.errors import UsageError
from skillopt_ray.runs.rundir import RunDir  # noqa: E402


def test_a_command_record_has_line_overrides_config_version_commit_and_hash(monkeypatch):
    monkeypatch.setattr("sys.orig_argv", ["python", "-m", "skillopt_ray", "+experiment=alfworld"], raising=False)
    rec = provenance.collect(
        ["+experiment=alfworld", "+tracking.tags.hf_token=hf-live-secret-123"],
        {"experiment": "alfworld", "llm": {"api_key": "sk-live-secret"}},
        argv=["/x/skillopt_ray/__main__.py", "+experiment=alfworld", "llm.api_key=sk-live-secret"],
    )
    assert rec["entry_point"] == "python -m skillopt_ray"
    assert rec["command_line"] == "python -m skillopt_ray +experiment=alfworld 'llm.api_key=***'"
    assert rec["overrides"] == ["+experiment=alfworld", "+tracking.tags.hf_token=***"]
    assert rec["config"] == {"experiment": "alfworld", "llm": {"api_key": "***"}}
    assert "secret" not in json.dumps(rec)
    assert rec["version"] == identity.tool_version() and len(rec["code_hash"]) == 16
    root = Path(provenance.__file__).resolve().parents[2]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0:  # run from a checkout: its commit and whether it had uncommitted changes
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
        ).stdout.strip()
        assert rec["git"]["commit"] == head.stdout.strip() and rec["git"]["dirty"] == bool(dirty)
    assert provenance.git_state(Path("/")) is None  # not a checkout: no commit claimed


def test_run_dir_keeps_every_command(tmp_path):
    rd = RunDir(tmp_path)
    assert rd.read_provenance() is None
    rd.write_provenance({"command_line": "first"})
    rd.write_provenance({"command_line": "resume"})
    assert rd.read_provenance()["command_line"] == "first" and rd.read_provenance(-1)["command_line"] == "resume"


def test_code_hash_covers_code_and_prompts(tmp_path, monkeypatch):
    (tmp_path / "pkg" / "prompts").mkdir(parents=True)
    (tmp_path / "pkg" / "mod.py").write_text("x = 1\n")
    (tmp_path / "pkg" / "prompts" / "reflect.md").write_text("Say what failed.\n")
    monkeypatch.setattr(provenance, "code_roots", lambda: [tmp_path / "pkg"])
    hashes = []
    for edit in (None, ("prompts/reflect.md", "Say what went wrong.\n"), ("mod.py", "x = 2\n")):
        if edit:
            (tmp_path / "pkg" / edit[0]).write_text(edit[1])
        provenance.code_hash.cache_clear()
        hashes.append(provenance.code_hash())
    provenance.code_hash.cache_clear()
    assert len(set(hashes)) == 3


def _data(tmp_path: Path, run_name: str | None = None, *extra: str) -> dict:
    from skillopt_ray.cli import load

    over = ["+experiment=searchqa", f"output_dir={tmp_path / 'out'}"] + ([f"run_name={run_name}"] if run_name else [])
    return load([*over, *extra])


def test_changed_code_makes_a_new_run_and_a_named_one_resumes_saying_so(tmp_path, monkeypatch, capsys):
    from skillopt_ray.cli.launch import run_dir_for

    monkeypatch.setattr(provenance, "code_hash", lambda: "aaaa")
    data = _data(tmp_path)
    before = run_dir_for(data)
    named = _data(tmp_path, "mine")
    rd = run_dir_for(named)
    rd.mkdir(parents=True)
    identity.check_or_record(rd, identity.identity_record(named), resuming=True)
    monkeypatch.setattr(provenance, "code_hash", lambda: "bbbb")
    assert run_dir_for(data) != before  # a derived run directory: a new run
    identity.check_or_record(rd, identity.identity_record(named), resuming=True)  # a named one: asked for, resumed
    said = capsys.readouterr().err
    assert f"resuming {rd}, made by other code (the code or prompts changed (code hash aaaa -> bbbb))" in said
    (tmp_path / "skill.md").write_text("# mine\n")  # anything else that changed still refuses
    with pytest.raises(UsageError) as e:
        identity.check_or_record(
            rd,
            identity.identity_record(_data(tmp_path, "mine", "skill_init=" + str(tmp_path / "skill.md"))),
            resuming=True,
        )
    assert "cannot resume" in str(e.value) and "\n" not in str(e.value)


def test_a_new_run_after_a_code_edit_names_the_run_made_before_it_and_how_to_resume_it(tmp_path, monkeypatch, capsys):
    """An edited comment between a kill and the rerun started a new run, paying again (71 requests for a 56-call
    run), without a word."""
    from skillopt_ray.cli.launch import prepare_run_dir, run_dir_for

    monkeypatch.setattr(provenance, "code_hash", lambda: "aaaa")
    data = _data(tmp_path)
    old = run_dir_for(data)
    prepare_run_dir(old, data, identity.identity_record(data))
    (old / "state.json").write_text("{}")  # killed after its first stage
    monkeypatch.setattr(provenance, "code_hash", lambda: "bbbb")
    record = identity.identity_record(data)
    new = run_dir_for(data, record)
    capsys.readouterr()
    prepare_run_dir(new, data, record)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"note: {old} holds a run of this configuration made by other code")
    assert f"starts a new one in {new}" in line and f"run_name={old.name}" in line
    named = _data(tmp_path, old.name)  # as the note says: that run, resumed
    assert run_dir_for(named) == old
    prepare_run_dir(old, named, identity.identity_record(named))
    assert f"resuming {old}, made by other code" in capsys.readouterr().err
