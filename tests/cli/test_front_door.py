"""The front door's one pass: a command line is composed with Hydra once, and a key given twice is refused before
anything is composed or started."""

from __future__ import annotations

import pytest

from skillopt_ray import cli

# appended where a regression would otherwise start a whole run: it then fails in seconds on the unreachable address
FAST_FAIL = ["llm=compatible", "llm.base_url=http://127.0.0.1:9/v1", "ray.address=127.0.0.1:9"]


@pytest.fixture
def compositions(monkeypatch):
    """How many times Hydra composed a configuration (every composition, the application's own included, goes
    through its config loader)."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    count = [0]
    real = ConfigLoaderImpl.load_configuration

    def counted(self, *a, **k):
        count[0] += 1
        return real(self, *a, **k)

    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    return count


@pytest.mark.parametrize(
    "twice",
    [
        ["seed=1", "seed=2"],
        ["seed=1", "+seed=2"],
        ["llm=compatible", "llm=openai"],
        ["llm.prices.gpt-x.input_per_mtok=1", "llm.prices.gpt-x.input_per_mtok=2"],
    ],
)
def test_a_key_given_twice_is_refused_in_one_line_before_anything_is_composed(capsys, tmp_path, compositions, twice):
    code = cli.main(["+experiment=alfworld", *twice, f"output_dir={tmp_path}", *FAST_FAIL])
    err = capsys.readouterr().err.strip()
    key = twice[0].split("=", 1)[0]
    assert code == 2 and "\n" not in err
    assert err == f"error: {key} is given twice ({twice[0]} and {twice[1]}); give each key once"
    assert compositions[0] == 0 and not (tmp_path / "runs").exists()


def test_a_sweep_of_one_key_is_not_a_key_given_twice(capsys, tmp_path):
    code = cli.main(["+experiment=alfworld", "-m", "seed=1,2", "--cfg", "job"])
    out = capsys.readouterr().out
    assert code == 0 and "# job 2 of 2: seed=2" in out


@pytest.mark.parametrize(
    "extra",
    [
        [],
        ["hydra.run.dir={out}/mine"],
    ],
    ids=["plain", "hydra.run.dir"],
)
def test_a_run_is_composed_once(capsys, tmp_path, compositions, extra):
    args = ["+experiment=alfworld", f"output_dir={tmp_path}", *[e.format(out=tmp_path) for e in extra], *FAST_FAIL]
    code = cli.main(args)
    err = capsys.readouterr().err.strip()
    assert code == 2 and "cannot reach Ray at 127.0.0.1:9" in err  # got as far as Ray: every step before it ran
    assert compositions[0] == 1
    if extra:  # the named run directory is the run's, as Hydra's application made it
        assert (tmp_path / "mine" / "identity.json").is_file() and not (tmp_path / "runs").exists()


def test_showing_the_config_composes_once(capsys, compositions):
    assert cli.main(["+experiment=alfworld", "seed=3", "--cfg", "job"]) == 0
    assert "seed: 3" in capsys.readouterr().out and compositions[0] == 1
