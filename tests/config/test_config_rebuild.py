"""from_container rebuilds the typed Config an actor gets directly from its dict: the same Config as OmegaConf's
merge gives, for every shipped experiment, and OmegaConf's own errors for a dict that does not fit the schema."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from skillopt_ray.cli.compose import compose, experiments, plain
from skillopt_ray.config import Config, from_container

TASKS = "env.data_dir=examples/python-functions/tasks.jsonl"
NEEDS = {"custom": [TASKS], "sleep": [TASKS], "plugin": None}


def _slow(data):
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(Config), data))


@pytest.mark.parametrize("name", [e for e in experiments() if NEEDS.get(e, []) is not None])
def test_the_direct_rebuild_equals_omegaconfs_merge(name, monkeypatch):
    data = plain(compose([f"+experiment={name}", *NEEDS.get(name, [])]))
    with monkeypatch.context() as m:
        m.setattr(OmegaConf, "merge", lambda *a, **k: pytest.fail("the direct rebuild fell back to OmegaConf"))
        fast = from_container(data)
    assert fast == _slow(data)
    assert isinstance(fast, Config) and type(fast.llm.target).__name__ == "LLMRoleConfig"
    prices = data["llm"].get("prices") or {}
    for model in prices:  # a dict of dataclasses is rebuilt as dataclasses too
        assert type(fast.llm.prices[model]).__name__ == "PriceConfig"


def test_a_dict_that_does_not_fit_gets_omegaconfs_error():
    data = plain(compose(["+experiment=alfworld"]))
    bad = dict(data, optimizer=dict(data["optimizer"], learning_rate="many"))
    with pytest.raises(OmegaConfBaseException, match="learning_rate"):
        from_container(bad)
    with pytest.raises(OmegaConfBaseException, match="no_such_key"):
        from_container(dict(data, no_such_key=1))


def test_ints_given_for_floats_are_floats():
    data = plain(compose(["+experiment=alfworld"]))
    data["llm"]["target"]["temperature"] = 1  # an int where the schema says float
    assert isinstance(from_container(data).llm.target.temperature, float)
