"""The optimizer's system prompts (skillopt_ray/prompts/system/): present, complete, and asking for the
exact JSON fields the reference's replies carry (analysts, merges, ranking, rewrites, epoch boundary,
appendix). Pure file checks; no Ray, no LLM."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import skillopt_ray

SYSTEM = Path(skillopt_ray.__file__).parent / "prompts" / "system"

SLOW_START = "<!-- SLOW_UPDATE_START -->"
SLOW_END = "<!-- SLOW_UPDATE_END -->"

OPS = ("append", "insert_after", "replace", "delete")
SUGGESTION_TYPES = ("add_rule", "remove_rule", "merge_rules", "reorganize", "compress", "clarify")
PRIORITIES = ("high", "medium", "low")

FAILURE_HEAD = {"batch_size", "failure_summary", "failure_type", "count", "description", "patch", "reasoning"}
SUCCESS_HEAD = {"batch_size", "success_patterns", "patch", "reasoning"}
EDIT = {"edits", "op", "target", "content"}
SUGGESTION = {"revise_suggestions", "type", "title", "motivation", "instruction", "priority_hint"}
CANDIDATE = {"skill_candidates", "title", "change_summary", "new_skill"}
STAMPS = {"support_count", "source_type"}

# file -> (exact set of JSON keys in its closing schema skeleton, enum values it must name)
SPEC: dict[str, tuple[set[str], tuple[str, ...]]] = {
    "analyst_error.md": (FAILURE_HEAD | EDIT, OPS),
    "analyst_success.md": (SUCCESS_HEAD | EDIT, OPS),
    "alfworld/analyst_error.md": (FAILURE_HEAD | EDIT, OPS),
    "alfworld/analyst_success.md": (SUCCESS_HEAD | EDIT, OPS),
    "searchqa/analyst_error.md": (FAILURE_HEAD | EDIT, OPS),
    "searchqa/analyst_success.md": (SUCCESS_HEAD | EDIT, OPS),
    "spreadsheetbench/analyst_error.md": (FAILURE_HEAD | EDIT, OPS),
    "spreadsheetbench/analyst_success.md": (SUCCESS_HEAD | EDIT, OPS),
    "docvqa/analyst_error.md": (FAILURE_HEAD | EDIT, OPS),
    "docvqa/analyst_success.md": (SUCCESS_HEAD | EDIT, OPS),
    "livemathematicianbench/analyst_error.md": (FAILURE_HEAD | EDIT, OPS),
    "livemathematicianbench/analyst_success.md": (SUCCESS_HEAD | EDIT, OPS),
    "analyst_error_rewrite.md": (FAILURE_HEAD | SUGGESTION, SUGGESTION_TYPES + PRIORITIES),
    "analyst_success_rewrite.md": (SUCCESS_HEAD | SUGGESTION, SUGGESTION_TYPES + PRIORITIES),
    "analyst_error_full_rewrite.md": (FAILURE_HEAD | CANDIDATE, ()),
    "analyst_success_full_rewrite.md": (SUCCESS_HEAD | CANDIDATE, ()),
    "merge_failure.md": ({"reasoning"} | EDIT | STAMPS, OPS + ("failure",)),
    "merge_success.md": ({"reasoning"} | EDIT | STAMPS, OPS + ("success",)),
    "merge_final.md": ({"reasoning"} | EDIT | STAMPS, OPS + ("failure", "success")),
    "merge_failure_rewrite.md": ({"reasoning"} | SUGGESTION | STAMPS, SUGGESTION_TYPES + PRIORITIES + ("failure",)),
    "merge_success_rewrite.md": ({"reasoning"} | SUGGESTION | STAMPS, SUGGESTION_TYPES + PRIORITIES + ("success",)),
    "merge_final_rewrite.md": (
        {"reasoning"} | SUGGESTION | STAMPS,
        SUGGESTION_TYPES + PRIORITIES + ("failure", "success"),
    ),
    "merge_failure_full_rewrite.md": ({"reasoning"} | CANDIDATE | STAMPS, ("failure",)),
    "merge_success_full_rewrite.md": ({"reasoning"} | CANDIDATE | STAMPS, ("success",)),
    "merge_final_full_rewrite.md": ({"reasoning"} | CANDIDATE | STAMPS, ("failure", "success", "mixed")),
    "ranking.md": ({"reasoning", "selected_indices"}, ()),
    "ranking_rewrite.md": ({"reasoning", "selected_indices"}, ()),
    "lr_autonomous.md": ({"learning_rate", "reasoning", "confidence", "risk_notes"}, PRIORITIES),
    "rewrite_skill.md": ({"reasoning", "change_summary", "new_skill"}, ()),
    "slow_update.md": ({"reasoning", "slow_update_content"}, ()),
    "meta_skill.md": ({"reasoning", "meta_skill_content"}, ()),
    "skill_aware_failure_suffix.md": ({"patch", "appendix_notes"}, ("SKILL_DEFECT", "EXECUTION_LAPSE")),
    "skill_aware_success_suffix.md": (
        {"patch", "reasoning", "edits", "op", "target", "content", "reflection_type", "appendix_notes"},
        ("DISCOVERY", "OPTIMIZATION"),
    ),
    "appendix_consolidate.md": ({"appendix_notes"}, ()),
}

# Files whose reference prompt carries the slow-update protected-section warning / keep-the-block rule (the
# generic analysts, merges and the rewrite prompt). The env overrides omit it (quirk: env-analysts-no-block-warning),
# as do the success rewrite analyst and the rewrite-mode merges.
PROTECTED = {
    "analyst_error.md",
    "analyst_success.md",
    "analyst_error_rewrite.md",
    "analyst_error_full_rewrite.md",
    "analyst_success_full_rewrite.md",
    "merge_failure.md",
    "merge_success.md",
    "merge_final.md",
    "merge_failure_full_rewrite.md",
    "merge_success_full_rewrite.md",
    "merge_final_full_rewrite.md",
    "rewrite_skill.md",
}
ENV_OVERRIDES = [name for name in SPEC if "/" in name]

ALFWORLD_TASK_TYPES = (
    "pick_and_place",
    "pick_two_obj_and_place",
    "look_at_obj_in_light",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_clean_then_place_in_recep",
)
ALFWORLD_FAILURE_TYPES = (
    "navigation_loop",
    "missed_object",
    "wrong_sequence",
    "premature_stop",
    "action_loop",
    "appliance_error",
    "rule_missing",
    "rule_wrong",
    "rule_ignored",
    "other",
)
SEARCHQA_FAILURE_TYPES = ("rule_missing", "rule_wrong", "rule_ignored", "answer_format", "other")
SPREADSHEET_FAILURE_TYPES = ("rule_missing", "rule_wrong", "rule_ignored", "data_exploration", "code_error", "other")


def _text(name: str) -> str:
    return (SYSTEM / name).read_text(encoding="utf-8")


def _closing_schema(text: str) -> tuple[str, str]:
    """(text before the last ```json block, that block's body); the block must end the file."""
    m = re.search(r"```json\n(.*?)\n```\s*\Z", text, re.S)
    assert m, "the prompt must end with a ```json schema skeleton"
    return text[: m.start()], m.group(1)


def _section(text: str, heading: str) -> str:
    m = re.search(rf"^# {heading}\n(.*?)(?=^# |\Z)", text, re.S | re.M)
    assert m, f"no '# {heading}' section"
    return m.group(1)


def _has_word(text: str, word: str) -> bool:
    return re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", text) is not None


def test_every_expected_file_and_nothing_else():
    present = {p.relative_to(SYSTEM).as_posix() for p in SYSTEM.rglob("*.md")} - {"README.md"}
    assert present == set(SPEC)


@pytest.mark.parametrize("name", sorted(SPEC))
def test_prompt_is_substantial_and_demands_only_json(name):
    text = _text(name)
    assert len(text) > 800 and text.lstrip().startswith("# "), name
    before, _ = _closing_schema(text)
    last_paragraph = before.strip().split("\n\n")[-1]
    assert "only a valid JSON object" in last_paragraph, name


@pytest.mark.parametrize("name", sorted(SPEC))
def test_schema_has_exactly_the_spec_fields(name):
    keys, enums = SPEC[name]
    _, schema = _closing_schema(_text(name))
    assert set(re.findall(r'"([A-Za-z_]+)"\s*:', schema)) == keys, name
    text = _text(name)
    for value in enums:
        assert _has_word(text, value), f"{name} does not name {value!r}"


@pytest.mark.parametrize("name", sorted(SPEC))
def test_protected_marker_exactly_where_the_spec_has_the_warning(name):
    text = _text(name)
    if name in PROTECTED:
        assert SLOW_START in text and SLOW_END in text, name
    else:
        assert "SLOW_UPDATE" not in text, name


def test_env_overrides_never_carry_the_protected_warning():
    assert len(ENV_OVERRIDES) == 10  # two per benchmark that has its own analysts
    for name in ENV_OVERRIDES:
        assert "SLOW_UPDATE" not in _text(name) and "protected" not in _text(name).lower(), name


def test_alfworld_analyst_taxonomy_and_task_types():
    text = _text("alfworld/analyst_error.md")
    for t in ALFWORLD_TASK_TYPES:
        assert re.search(rf"^- `{t}` — \S", text, re.M), t  # one line each, with its goal
    taxonomy = _section(text, "Failure taxonomy")
    for t in ALFWORLD_FAILURE_TYPES:
        assert re.search(rf"^- `{t}` — \S", taxonomy, re.M), t  # each with a gloss
    assert len(re.findall(r"^- `", taxonomy, re.M)) == 10
    assert len(re.findall(r"^\d+\. ", _section(text, "Process"), re.M)) == 6


def test_searchqa_and_spreadsheet_taxonomies_and_process_lengths():
    sq = _text("searchqa/analyst_error.md")
    for t in SEARCHQA_FAILURE_TYPES:
        assert re.search(rf"^- `{t}` — \S", _section(sq, "Failure taxonomy"), re.M), t
    assert len(re.findall(r"^\d+\. ", _section(sq, "Process"), re.M)) == 7
    assert "gold" in _section(sq, "Process")
    ss = _text("spreadsheetbench/analyst_error.md")
    for t in SPREADSHEET_FAILURE_TYPES:
        assert re.search(rf"^- `{t}` — \S", _section(ss, "Failure taxonomy"), re.M), t
    process = _section(ss, "Process")
    assert len(re.findall(r"^\d+\. ", process, re.M)) == 7
    assert "cell addresses" in process and "explore" in process


def test_generic_analysts_have_no_fixed_taxonomy_and_a_budget():
    err = _text("analyst_error.md")
    assert len(re.findall(r"^\d+\. ", _section(err, "Process"), re.M)) == 6
    assert not any(t in err for t in ("navigation_loop", "answer_format", "data_exploration"))
    for name in (
        "analyst_error.md",
        "analyst_success.md",
        "analyst_error_rewrite.md",
        "analyst_success_rewrite.md",
        *ENV_OVERRIDES,
    ):
        assert "`L`" in _section(_text(name), "Budget"), name
    hints = {"alfworld": "appliance", "searchqa": "disambiguat", "spreadsheetbench": "explor"}
    for env, hint in hints.items():
        assert hint in _text(f"{env}/analyst_success.md"), env


def test_full_rewrite_prompts_ask_for_exactly_one_candidate():
    for name in SPEC:
        if name.endswith("full_rewrite.md"):
            assert "exactly one candidate" in _text(name), name


def test_ranking_criteria_order_and_budget():
    text = _text("ranking.md")
    positions = [text.index(c) for c in ("Systematic impact", "Complementarity", "Generality", "Actionability")]
    assert positions == sorted(positions)
    assert "0-based" in text and "budget" in text and "priority order" in text
    assert "0-based" in _text("ranking_rewrite.md") and "budget" in _text("ranking_rewrite.md")


def test_slow_update_keeps_the_hardcoded_twenty_and_the_priorities():
    text = _text("slow_update.md")
    assert "the same 20 training tasks" in text  # quirk: twenty-tasks-heading
    order = [text.index(p) for p in ("prevent regressions", "fix persistent failures", "reinforce")]
    assert order == sorted(order)


def test_no_leftover_template_artefacts():
    for name in SPEC:
        assert "%%" not in _text(name), name
