from skillopt_ray.skill.document import APPENDIX, SLOW_UPDATE, begin_marker, region_content, replace_body, set_region
from skillopt_ray.skill.edits import (APPLIED, SKIPPED_INVALID, SKIPPED_PROTECTED_REGION, SKIPPED_TARGET_MISSING, Edit,
                                      apply_edits)

BASE = "# Skill\n\n## Rules\n- go first\n- then act\n"


def protected_doc() -> str:
    doc = set_region(BASE, SLOW_UPDATE, "slow guidance: go first")
    return set_region(doc, APPENDIX, "- note: then act")


def test_each_op_applies_in_order():
    edits = [
        Edit("append", "- finally check"),
        Edit("insert_after", "- check twice", target="- go first"),
        Edit("replace", "- then act carefully", target="- then act"),
        Edit("delete", target="- finally check\n"),
    ]
    res = apply_edits(BASE, edits)
    assert [r.status for r in res.reports] == [APPLIED] * 4
    assert res.text == "# Skill\n\n## Rules\n- go first\n- check twice\n- then act carefully\n\n"


def test_missing_target_and_invalid_edits_are_reported_not_applied():
    res = apply_edits(BASE, [Edit("replace", "x", target="not there"), Edit("explode", "x"), Edit("append", "  ")])
    assert [r.status for r in res.reports] == [SKIPPED_TARGET_MISSING, SKIPPED_INVALID, SKIPPED_INVALID]
    assert res.text == BASE


def test_protected_regions_are_never_changed_by_step_edits():
    doc = protected_doc()
    edits = [
        Edit("replace", "HACKED", target="slow guidance"),  # only inside the slow-update block
        Edit("delete", target="- note: then act"),  # only inside the appendix
        Edit("append", "sneaky " + begin_marker(APPENDIX)),
        Edit("replace", "- go first, always", target="- go first"),  # body occurrence comes first: allowed
    ]
    res = apply_edits(doc, edits)
    assert [r.status for r in res.reports] == [SKIPPED_PROTECTED_REGION, SKIPPED_PROTECTED_REGION, SKIPPED_PROTECTED_REGION, APPLIED]
    assert region_content(res.text, SLOW_UPDATE) == "slow guidance: go first"
    assert region_content(res.text, APPENDIX) == "- note: then act"


def test_append_goes_before_the_first_protected_region():
    doc = protected_doc()
    res = apply_edits(doc, [Edit("append", "- new rule")])
    assert res.text.index("- new rule") < res.text.index(begin_marker(SLOW_UPDATE))


def test_rewrite_keeps_protected_regions_verbatim():
    doc = protected_doc()
    rewritten = "# New skill\n<!-- SKILLOPT:SLOW_UPDATE:BEGIN -->\nforged\n<!-- SKILLOPT:SLOW_UPDATE:END -->\n"
    out = replace_body(doc, rewritten)
    assert out.startswith("# New skill")
    assert region_content(out, SLOW_UPDATE) == "slow guidance: go first"
    assert region_content(out, APPENDIX) == "- note: then act"
    assert "forged" not in out
