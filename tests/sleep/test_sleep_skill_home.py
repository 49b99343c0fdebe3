"""A night's pieces without a run (issue 43): where its skill would live (each CLI's own skills folder, the front
matter kept from a hand-written skill or made for a learned one), the report's notes, the minutes cap."""

from __future__ import annotations

import pytest

from skillopt_ray.sleep.proposal import skill_home


@pytest.mark.parametrize(
    ("target", "to", "want"),
    [
        ("codex", "project", "P/.agents/skills/tidy/SKILL.md"),
        ("claude_code", "project", "P/.claude/skills/tidy/SKILL.md"),
        ("codex", "user", "CH/skills/tidy/SKILL.md"),
        ("claude_code", "user", "HOME/.claude/skills/tidy/SKILL.md"),
        ("chat", "project", "P/.agents/skills/tidy/SKILL.md"),
    ],
)
def test_each_cli_loads_the_skill_from_its_own_folder(tmp_path, monkeypatch, target, to, want):
    monkeypatch.setenv("HOME", str(tmp_path / "HOME"))
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "CH"))
    monkeypatch.delenv("CLAUDE_CONFIG_DIR", raising=False)
    got = skill_home.live_path(tmp_path / "P", target, to, "tidy")
    assert got == tmp_path / want


@pytest.mark.parametrize(
    ("target", "env", "want"),
    [
        ("claude_code", {"CLAUDE_CONFIG_DIR": "CC"}, "CC/skills/tidy/SKILL.md"),
        ("claude_code", {"CODEX_HOME": "CH"}, "HOME/.claude/skills/tidy/SKILL.md"),
        ("codex", {"CLAUDE_CONFIG_DIR": "CC"}, "HOME/.codex/skills/tidy/SKILL.md"),
        ("codex", {}, "HOME/.codex/skills/tidy/SKILL.md"),
    ],
)
def test_user_skills_follow_each_clis_own_config_dir_variable(tmp_path, monkeypatch, target, env, want):
    """Claude Code reads user skills under $CLAUDE_CONFIG_DIR, Codex under $CODEX_HOME; neither reads the other's."""
    monkeypatch.setenv("HOME", str(tmp_path / "HOME"))
    for var in ("CODEX_HOME", "CLAUDE_CONFIG_DIR"):
        monkeypatch.delenv(var, raising=False)
    for var, rel in env.items():
        monkeypatch.setenv(var, str(tmp_path / rel))
    assert skill_home.live_path(tmp_path / "P", target, "user", "tidy") == tmp_path / want


def test_a_hand_written_skill_keeps_its_front_matter_and_is_the_one_replaced(tmp_path):
    own = tmp_path / "SKILL.md"
    own.write_text("---\nname: tidy\ndescription: Tidy notes.\nlicense: MIT\n---\n\nKeep lines short.\n")
    doc = skill_home.parse(own.read_text())
    assert (doc.name, doc.description, doc.body.strip()) == ("tidy", "Tidy notes.", "Keep lines short.")
    assert doc.text("Keep lines short.\n- HELPFUL") == (
        "---\nname: tidy\ndescription: Tidy notes.\nlicense: MIT\n---\n\nKeep lines short.\n- HELPFUL\n"
    )
    assert skill_home.live_path(tmp_path, "codex", "project", "x", own) == own


def test_a_learned_skill_gets_a_name_and_description(tmp_path):
    doc = skill_home.parse("", "tidy")
    text = doc.text("- a rule")
    assert text.startswith("---\nname: tidy\ndescription: ") and text.endswith("---\n\n- a rule\n")
    with pytest.raises(ValueError, match="not usable as a folder"):
        skill_home.check_name("../evil")


def test_the_report_says_unverified_and_recommends_fresh_validation_tasks_after_n_looks(tmp_path):
    from skillopt_ray.sleep.night.report import GateLine, NightReport

    rep = NightReport("night-x", str(tmp_path), {"train": 3, "val": 0, "test": 0}, val_looks=5, val_looks_max=5)
    rep.gates = [GateLine("e01_s001", "accept_new_best", "", 0.2, 0.05, 0.35, 40)]
    rep.verdict = "unverified"
    notes = rep.notes()
    assert any(n.startswith("unverified") for n in notes)
    assert any("decided 5 nights" in n and "fresh validation tasks" in n for n in notes)
    assert "paired difference +0.200 [+0.050, +0.350]" in rep.summary()
    rep.val_looks = 4
    assert not any("fresh" in n for n in rep.notes())


def test_the_minutes_cap_stops_calls_and_the_night_names_its_flag(monkeypatch):
    """llm.budget.max_minutes (a night's --max-minutes): the ledger refuses the next call once the wall clock since
    its start reaches the cap, and the night says which of its flags stopped it."""
    import time

    from skillopt_ray.config import BudgetConfig
    from skillopt_ray.llm.ledger import Ledger
    from skillopt_ray.llm.types import BudgetExceeded
    from skillopt_ray.sleep.night.runner import stopped_by

    t0 = time.monotonic()
    led = Ledger({}, BudgetConfig(max_minutes=2.0))
    led.check_budget()  # under the cap: no refusal
    monkeypatch.setattr(time, "monotonic", lambda: t0 + 121)
    with pytest.raises(BudgetExceeded) as e:
        led.check_budget()
    assert "llm.budget.max_minutes=2" in e.value.message
    assert stopped_by(e.value.message) == "--max-minutes"
    assert stopped_by("budget cap hit: 310 tokens >= llm.budget.max_tokens=300; raise it") == "--max-tokens"


def test_a_night_composes_for_a_project_path_with_spaces_commas_and_quotes(tmp_path):
    from skillopt_ray import cli
    from skillopt_ray.sleep.night.runner import NightOptions, overrides_for

    project = tmp_path / "my proj, v=2 'x' [a]"
    tasks = project / ".skillopt" / "tasks"
    splits = {"train": ["a"], "val": ["b"], "test": ["c"]}
    ov = overrides_for(NightOptions(project=project), "night-1", tasks, splits, None)
    data = cli.plain(cli.compose(ov))
    assert data["env"]["data_dir"] == str(tasks)
    assert data["output_dir"] == str(project / ".skillopt" / "nights")
    assert data["tracking"]["experiment_name"] == f"sleep-{project.name}"


def test_the_seed_placeholder_never_reaches_a_proposed_skill():
    """A night that starts from no skill trains from the custom benchmark's seed; its placeholder line is not
    guidance, so it is cut from the proposal (and a body without it is left exactly as it is)."""
    from skillopt_envs.custom.benchmark import SEED_SKILL

    assert skill_home.SEED_SKILL == SEED_SKILL  # the two must not drift apart
    assert (
        skill_home.without_seed(SEED_SKILL + "\n- HELPFUL: finish with DONE-OK.\n")
        == "- HELPFUL: finish with DONE-OK.\n"
    )
    assert skill_home.without_seed(SEED_SKILL) == ""
    own = "# Skill\n\n\n\n- keep my spacing\n"
    assert skill_home.without_seed(own) == own
