"""The skills you already use (issue 47, item 5): tasks route to the installed skill their session used (Codex: a
SKILL.md it read; Claude Code: a Skill call or SKILL.md read), each such skill trains on its own tasks with its own
gate, and the night is staged once (one manifest listing each skill), adopted per skill or all at once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from scripted_server import ScriptedServer
from sleep_fixtures import PlantedRule

from skillopt_ray.sleep import cli as sleep_cli
from skillopt_ray.sleep.harvest.task_folder import write_tasks
from skillopt_ray.sleep.harvest.tasks import MinedTask
from skillopt_ray.sleep.night.skill_routes import routes_of

LIVE = {n: f"---\nname: {n}\ndescription: how we {n}\n---\n\nWork carefully.\n" for n in ("tidy", "sort")}


def install(project: Path, name: str, where: str = ".agents") -> Path:
    path = project / where / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(LIVE.get(name, f"---\nname: {name}\n---\n\nx\n"))
    return path


def folder(project: Path, per_skill: dict[str, int]) -> Path:
    """Chat tasks whose check wants DONE-OK; per hint: 2 train, n val, 1 test."""
    tasks, splits = [], {}
    for hint, n_val in per_skill.items():
        for i in range(n_val + 3):
            t = MinedTask(
                f"Please {hint or 'do'} the notes file, part {i}.", "chat", [{"op": "contains", "arg": "DONE-OK"}]
            )
            t.skill_hint = hint
            tasks.append(t)
            splits[t.id] = "train" if i < 2 else "test" if i == n_val + 2 else "val"
    out = project / ".skillopt" / "tasks"
    write_tasks(out, tasks, splits, project, {"project": str(project)})
    return out


def test_tasks_route_to_the_installed_skill_their_session_used(tmp_path, monkeypatch):
    project = tmp_path / "proj"
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex"))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "claude"))
    tidy = install(project, "tidy")
    sort = install(project, "sort", ".claude")  # a skill Claude Code loads, used from a chat night all the same
    install(project, "skillopt-sleep")  # this tool's own skill is never trained
    mine = tmp_path / "codex" / "skills" / "mine" / "SKILL.md"  # a user-level skill
    mine.parent.mkdir(parents=True)
    mine.write_text("---\nname: mine\n---\n\nx\n")
    f = folder(project, {"tidy": 1, "sort": 1, "mine": 1, "skillopt-sleep": 1, "gone": 1, "": 1})
    got = {r.name: (r.live, len(r.tasks)) for r in routes_of(project, "chat", f, "learned")}
    assert got == {"mine": (mine, 4), "sort": (sort, 4), "tidy": (tidy, 4), "learned": (None, 12)}
    assert list(got)[-1] == "learned"
    nothing_used = tmp_path / "other"
    assert routes_of(nothing_used, "chat", folder(nothing_used, {"gone": 1, "": 1}), "learned") == []


@pytest.mark.slow
def test_two_used_skills_each_get_their_own_gate_and_one_manifest(ray_cluster, tmp_path, capsys):
    project = tmp_path / "proj"
    for name in LIVE:
        install(project, name)
    before = {n: (project / ".agents" / "skills" / n / "SKILL.md").read_bytes() for n in LIVE}
    tasks = folder(project, {"tidy": 10, "sort": 10})
    with ScriptedServer(PlantedRule("HELPFUL")) as srv:
        code = sleep_cli.main(["run", "--project", str(project), "--tasks", str(tasks), "llm=compatible",
                               f"llm.base_url={srv.base_url}", "tracking=none"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "2 skills, each on its own tasks and gate" in out.err
    runs = sorted((project / ".skillopt" / "nights" / "runs").glob("night-*"))
    assert [r.name.rsplit("-", 1)[1] for r in runs] == ["sort", "tidy"]
    for r in runs:  # each skill's own run and gate, on its own 10 validation tasks, from its live skill
        rep = json.loads((r / "night" / "report.json").read_text())
        assert rep["tasks"] == {"train": 2, "val": 10, "test": 1} and rep["gates"], rep
        assert rep["live_path"] == str(project / ".agents" / "skills" / r.name.rsplit("-", 1)[1] / "SKILL.md")
    (staged,) = (project / ".skillopt" / "staging").iterdir()
    m = json.loads((staged / "manifest.json").read_text())
    verdicts = {e["skill_name"]: e["verdict"] for e in m["skills"]}
    assert verdicts == {"sort": "accepted", "tidy": "accepted"}, verdicts
    assert sleep_cli.main(["adopt", "--project", str(project), "--skill", "tidy"]) == 0
    tidy = (project / ".agents" / "skills" / "tidy" / "SKILL.md").read_text()
    assert "HELPFUL" in tidy and tidy.startswith("---\nname: tidy\ndescription: how we tidy\n---")
    assert (project / ".agents" / "skills" / "sort" / "SKILL.md").read_bytes() == before["sort"]
    assert sleep_cli.main(["adopt", "--project", str(project)]) == 0
    assert "HELPFUL" in (project / ".agents" / "skills" / "sort" / "SKILL.md").read_text()
    assert sleep_cli.main(["adopt", "--project", str(project), "--undo"]) == 0
    assert {n: (project / ".agents" / "skills" / n / "SKILL.md").read_bytes() for n in LIVE} == before


def test_each_skills_run_gets_what_the_earlier_runs_left_of_the_nights_caps(tmp_path):
    from skillopt_ray.sleep.night.runner import NightOptions
    from skillopt_ray.sleep.night.skill_routes import Route
    from skillopt_ray.sleep.night.skills_night import options_for

    opts = NightOptions(project=tmp_path, max_tokens=10_000, max_cost=2.0, name="learned", memory=True)
    used = Route("tidy", tmp_path / "tidy" / "SKILL.md", ["a"])
    o = options_for(opts, used, tmp_path / "sub", {"tokens": 7_500, "cost_usd": 0.5}, t0=0.0)
    assert (o.max_tokens, o.max_cost, o.max_minutes) == (2_500, 1.5, 0.0)
    assert (o.skill, o.name, o.tasks, o.memory) == (used.live, "tidy", tmp_path / "sub", False)
    spent = options_for(opts, Route("learned", None, ["b"]), tmp_path / "s2", {"tokens": 12_000, "cost_usd": 0}, 0.0)
    assert spent.max_tokens == 1 and spent.skill is None and spent.name == "learned"  # a cap spent stops at once
    assert (
        options_for(NightOptions(project=tmp_path), used, tmp_path, {"tokens": 9e9, "cost_usd": 9e9}, 0.0).max_tokens
        == 0
    )


def test_the_real_cli_sessions_that_read_a_skill_route_to_it(tmp_path):
    """Codex CLI 0.171 and Claude Code 2.1.197 (the committed logs) each read .agents/skills/demo/SKILL.md in one
    session: with that skill installed, those two tasks train it and the other two the learned skill."""
    from sleep_fixtures import real_fixtures

    from skillopt_ray.sleep.harvest import pipeline
    from skillopt_ray.sleep.harvest.stores import Stores

    project = tmp_path / "proj"
    project.mkdir()
    real_fixtures(project, tmp_path / "codex", tmp_path / "claude")
    opts = pipeline.HarvestOptions(project, Stores("all", tmp_path / "codex", tmp_path / "claude"), lookback=None,
                                   lookback_given=True)  # fmt: skip
    out = Path(pipeline.run(opts)["output"])
    demo = install(project, "demo")
    (used, rest) = routes_of(project, "codex", out, "learned")
    assert (used.name, used.live, len(used.tasks)) == ("demo", demo, 2) and (rest.live, len(rest.tasks)) == (None, 2)
    sources = {
        json.loads((out / t / "task.json").read_text())["metadata"]["source_sessions"][0]["id"] for t in used.tasks
    }
    assert len(sources) == 2  # one Codex session and one Claude Code session


def test_skill_names_an_installed_skill_to_train_alone(tmp_path, capsys, monkeypatch):
    from sleep_fixtures import task_folder

    project = tmp_path / "proj"
    project.mkdir()
    tidy = install(project, "tidy")
    folder = task_folder(project, n_val=3)
    monkeypatch.setenv("COMPATIBLE_API_KEY", "k")
    argv = ["dry-run", "--project", str(project), "--tasks", str(folder), "llm=compatible",
            "llm.base_url=https://api.example.com/v1", "ray.address=127.0.0.1:9"]  # fmt: skip
    assert sleep_cli.main([*argv, "--skill", "tidy"]) == 2  # the review gate stops it before any call
    assert "review.json" in capsys.readouterr().err
    (start,) = (project / ".skillopt" / "nights").glob("night-*.start.md")
    assert start.read_text() == tidy.read_text().split("---\n", 2)[2]  # it started from the installed skill
    assert sleep_cli.main([*argv, "--skill", "nosuch"]) == 2
    assert "is not a file or an installed skill's name" in capsys.readouterr().err
