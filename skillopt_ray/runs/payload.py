"""The optimizer's replies as the stages pass them on and write them (reflect.json, aggregate.json, select.json,
the step record's lr_decision): the model's own JSON objects, so TypedDicts that keep its keys, in its order, on
disk.

The payload key names a patch's item list by update mode: `edits` (patch), `revise_suggestions`
(rewrite_from_suggestions), `skill_candidates` (full_rewrite_minibatch).
"""

from __future__ import annotations

from typing import Literal, TypedDict, Union

from skillopt_envs.jsontypes import JSONValue

PayloadKey = Literal["edits", "revise_suggestions", "skill_candidates"]


class Item(TypedDict, total=False):
    """One update item: an edit, a revise suggestion or a skill candidate, with the stamps the stages add."""

    op: str  # edits: append | insert_after | replace | delete
    target: str
    content: str
    type: str  # revise suggestions
    title: str
    motivation: str
    instruction: str
    priority_hint: str
    change_summary: Union[list[str], str]  # skill candidates
    new_skill: str
    source_type: str  # stamped by reflect: failure | success
    support_count: int  # stamped by reflect: the analyst's minibatch size
    merge_level: int  # stamped by aggregate: the merge level that produced the item


class RankingReply(TypedDict, total=False):
    """The ranking call's reply, kept in the selected patch as `ranking_details`."""

    reasoning: str
    selected_indices: list[JSONValue]  # as the model wrote them; select keeps the usable ones


class Patch(TypedDict, total=False):
    """A patch: the reasoning and the item list under the mode's payload key (a ranked selection also keeps the
    ranking's reply)."""

    reasoning: str
    edits: list[Item]
    revise_suggestions: list[Item]
    skill_candidates: list[Item]
    ranking_details: RankingReply


def items_of(patch: Patch, key: PayloadKey) -> list[Item]:
    """The patch's items under `key` ([] when it has none)."""
    return list(patch.get(key) or [])


class LrChoice(TypedDict, total=False):
    """lr_control_mode=autonomous: the optimizer's count of items to apply, as select.json and lr_history.jsonl
    keep it (`error` only when the reply was unusable)."""

    learning_rate: int  # the count applied: the reply's, clamped to the items available; 0 on an unusable reply
    raw_learning_rate: JSONValue  # what the model wrote
    available_update_items: int
    clamped: bool
    fallback: bool
    reasoning: str
    confidence: str
    risk_notes: JSONValue
    raw_response: str
    error: str
