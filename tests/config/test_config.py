"""Every config composes and validates; bad input gets one line and exit code 2."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import skillopt_envs

from skillopt_ray import cli
from skillopt_ray.config import redact, run_identity

CONF = cli.CONF_DIR
# custom and plugin run the user's own tasks or class (env.data_dir, env.benchmark): tests/test_custom*.py and
# tests/test_plugin*.py compose them; local_coder is the local-model experiment on custom tasks (its own test below);
# sleep is a night of `python -m skillopt_ray.sleep run` on a harvested folder (tests/sleep/test_sleep_night.py)
NOT_PAPER = ("custom", "plugin", "local_coder", "local_house_style", "sleep")
EXPERIMENTS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml") if p.stem not in NOT_PAPER)
LLMS = sorted(p.stem for p in (CONF / "llm").glob("*.yaml"))
RAYS = sorted(p.stem for p in (CONF / "ray").glob("*.yaml"))


# the benchmarks the reference runs inside its exec targets (SpreadsheetBench in single mode, OfficeQA offline with
# local tools); ALFWorld has none
HARNESS_BENCHMARKS = {"searchqa", "spreadsheetbench", "docvqa", "livemathematicianbench", "officeqa", "custom"}


def test_the_benchmarks_with_an_agent_harness_are_the_references():
    assert set(skillopt_envs.with_agent_harness()) == HARNESS_BENCHMARKS
    assert "alfworld" in EXPERIMENTS and "alfworld" not in HARNESS_BENCHMARKS


@pytest.mark.parametrize("exp,llm,ray", list(itertools.product(EXPERIMENTS, LLMS, RAYS)))
def test_every_config_composes_and_validates(exp, llm, ray):
    overrides = [f"+experiment={exp}", f"llm={llm}", f"ray={ray}"]
    if llm in ("codex", "claude_code") and exp not in HARNESS_BENCHMARKS:
        with pytest.raises(Exception, match=f"llm.target.harness={llm} is not supported by the {exp} benchmark"):
            cli.compose(overrides)  # an agent harness target on a benchmark without one: refused in one line
        return
    obj = cli.compose(overrides)
    data = cli.plain(obj)
    assert obj.experiment == exp == data["env"]["name"]
    o = obj.optimizer  # the paper protocol
    assert (
        o.epochs,
        o.batch_size,
        o.minibatch_size,
        o.merge_batch_size,
        o.learning_rate,
        o.min_learning_rate,
        o.lr_schedule,
        o.gate_metric,
        o.slow_update,
        o.meta_skill,
        obj.seed,
    ) == (4, 40, 8, 8, 4, 2, "cosine", "hard", True, True, 42)


def test_the_local_model_experiment_composes_on_the_worked_example():
    """+experiment=local_coder: the worked example's tasks through the custom benchmark, scored by its check script,
    one epoch of two steps with the paired soft gate (sized for 2 cores)."""
    obj = cli.compose(["+experiment=local_coder", "llm=local"])
    data = cli.plain(obj)
    assert (obj.experiment, data["env"]["name"]) == ("local_coder", "custom")
    assert data["env"]["options"]["scorer"] == "script"
    assert Path(data["env"]["options"]["check"]).name == "check.py" and Path(data["env"]["data_dir"]).is_file()
    o = obj.optimizer
    assert (o.epochs, o.batch_size, o.gate_metric, o.gate_test, o.slow_update, o.meta_skill) == (
        1,
        3,
        "soft",
        "paired_bootstrap",
        False,
        False,
    )


def test_smoke_overlay_and_overrides():
    obj = cli.compose(["+experiment=alfworld", "+smoke=tiny", "optimizer.learning_rate=6", "seed=3"])
    assert obj.optimizer.batch_size == 1 and obj.optimizer.learning_rate == 6 and obj.seed == 3  # conf/smoke/tiny.yaml


# Appended where a regression would otherwise start a whole run: it then fails in seconds on the unreachable address.
FAST_FAIL = ["llm=compatible", "llm.base_url=http://127.0.0.1:9/v1", "ray.address=127.0.0.1:9"]


def _main(capsys, *args, env=None, monkeypatch=None):
    code = cli.main(list(args))
    err = capsys.readouterr().err.strip()
    return code, err


@pytest.mark.parametrize(
    "args,needle",
    [
        ([], "no experiment chosen"),
        (["+experiment=nope"], "unknown experiment"),
        (["+experiment=alfworld", "optimizer.bogus=1"], "unknown key optimizer.bogus"),
        (["+experiment=alfworld", "optimizer.epochs=abc"], "could not be converted to Integer"),
        (["+experiment=alfworld", "optimizer.batch_size=-1"], "optimizer.batch_size=-1 is invalid"),
        (["+experiment=alfworld", "optimizer.merge_batch_size=1"], "merge_batch_size=1 is invalid; it must be >= 2"),
        (["+experiment=alfworld", "optimizer.gate_metric=median"], "allowed: hard, soft, mixed"),
        (["+experiment=alfworld", "optimizer.lr_schedule=step"], "allowed: constant, linear, cosine, autonomous"),
        (["+experiment=alfworld", "mode=eval"], "eval.skill_path"),
        (
            ["+experiment=alfworld", "optimizer.min_learning_rate=6", *FAST_FAIL],
            "optimizer.min_learning_rate=6 is larger than optimizer.learning_rate=4",
        ),
        (
            ["+experiment=alfworld", "env=searchqa", *FAST_FAIL],
            "+experiment=alfworld runs env=alfworld, but env=searchqa was given",
        ),
        (["+experiment=alfworld", "llm.target.http_client=curl", *FAST_FAIL], "llm.target.http_client"),
        (
            ["+experiment=spreadsheetbench", "env.options.env_allow=[LANG,OPENAI_API_KEY,HF_TOKEN]", *FAST_FAIL],
            "env.options.env_allow names OPENAI_API_KEY, HF_TOKEN, which look like credentials",
        ),
    ],
)
def test_bad_input_one_line_exit_2(capsys, args, needle):
    code, err = _main(capsys, *args)
    assert code == 2
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err
    assert needle in err


def test_missing_api_key(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, err = _main(capsys, "+experiment=alfworld", "llm=openai", f"output_dir={tmp_path}")
    assert code == 2 and "set the environment variable OPENAI_API_KEY" in err


def test_output_dir_not_writable(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    code, err = _main(capsys, "+experiment=alfworld", f"output_dir={blocker}/sub")
    assert code == 2 and "is not writable" in err


def test_unreachable_ray_address(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPATIBLE_API_KEY", "x")
    code, err = _main(
        capsys,
        "+experiment=alfworld",
        "llm=compatible",
        "llm.base_url=http://127.0.0.1:9/v1",
        "ray.address=127.0.0.1:9",
        f"output_dir={tmp_path}",
    )
    assert code == 2 and "cannot reach Ray" in err


def test_cfg_job_prints_resolved_config_with_secrets_redacted(capsys):
    code = cli.main(
        [
            "+experiment=alfworld",
            "--cfg",
            "job",
            "+tracking.tags.hf_token=hf-live-secret-123",
            "+tracking.tags.owner=ana",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "experiment: alfworld" in out and "learning_rate: 4\n" in out
    assert "hf-live-secret-123" not in out and "hf_token: '***'" in out and "owner: ana" in out
    assert "api_key_env:" in out  # names of variables are not secrets and stay readable


def _binary_skill(tmp_path: Path) -> Path:
    p = tmp_path / "best_skill.md"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    return p


@pytest.mark.parametrize("key", ["eval.skill_path", "skill_init"])
def test_binary_skill_file_is_named_before_ray_starts(capsys, tmp_path, monkeypatch, key):
    from skillopt_ray.cli import launch

    monkeypatch.setattr(launch, "start_ray", lambda data: pytest.fail("Ray started before the skill file was checked"))
    extra = ["mode=eval"] if key == "eval.skill_path" else []
    code, err = _main(
        capsys, "+experiment=alfworld", *extra, f"{key}={_binary_skill(tmp_path)}", f"output_dir={tmp_path / 'out'}"
    )
    assert code == 2 and err.startswith(f"error: {key}=") and "\n" not in err
    assert "is not UTF-8 text" in err and "best_skill.md" in err and "UnicodeDecodeError" not in err
    assert not (tmp_path / "out" / "runs").exists()


def test_redaction_and_run_identity():
    data = {"llm": {"target": {"api_key": "sk-123", "api_key_env": "OPENAI_API_KEY", "max_tokens": 5}}, "token": "t"}
    r = redact(data)
    assert r["llm"]["target"]["api_key"] == "***" and r["token"] == "***"
    assert r["llm"]["target"]["api_key_env"] == "OPENAI_API_KEY" and r["llm"]["target"]["max_tokens"] == 5
    a = {"experiment": "x", "seed": 1, "ray": {"env_actors": 1}, "debug": {"interrupt_after": None}, "llm": {}}
    b = {**a, "ray": {"env_actors": 8}, "debug": {"interrupt_after": "e1s1:reflect"}}
    assert run_identity(a) == run_identity(b) != run_identity({**a, "seed": 2})


def test_unimplemented_benchmark_is_a_clear_data_error():

    with pytest.raises(skillopt_envs.DataError, match="unknown environment"):
        skillopt_envs.make("chess", {})


def test_min_learning_rate_above_learning_rate_is_named():
    with pytest.raises(cli.UsageError, match="optimizer.min_learning_rate=3 is larger than optimizer.learning_rate=2"):
        cli.compose(["+experiment=alfworld", "optimizer.learning_rate=2", "optimizer.min_learning_rate=3"])
