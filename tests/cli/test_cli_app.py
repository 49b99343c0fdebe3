"""The front door as a Hydra application: typos named with the schema's nearest keys, prices for any model,
every -m job checked before the first starts, Hydra's own commands, run and sweep directories, and a run
identity that follows the skill files, the data and the tool's version."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import qa_fixture
from helpers import checked
from scripted_server import Policies, ScriptedServer

from skillopt_ray import cli
from skillopt_ray.cli import identity, launch

REPO = Path(__file__).resolve().parents[2]
# appended where a regression would otherwise start a whole run: it then fails in seconds on the unreachable address
FAST_FAIL = ["llm=compatible", "llm.base_url=http://127.0.0.1:9/v1", "ray.address=127.0.0.1:9"]


def _main(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err.strip()


@pytest.mark.parametrize(
    "typo", ["optimizer.learning_rat=3", "+optimizer.learning_rat=3", "++optimizer.learning_rat=3"]
)
def test_a_typo_is_named_with_the_nearest_key_never_turned_into_a_new_one(capsys, tmp_path, typo):
    code, _, err = _main(capsys, "+experiment=alfworld", typo, f"output_dir={tmp_path}", *FAST_FAIL)
    assert code == 2 and "\n" not in err
    assert (
        err
        == "error: unknown key optimizer.learning_rat; did you mean optimizer.learning_rate or optimizer.min_learning_rate?"
    )
    assert not (tmp_path / "runs").exists()


def test_a_missing_section_and_a_free_map_get_the_right_advice(capsys):
    code, _, err = _main(capsys, "+experiment=alfworld", "learning_rate=3")
    assert code == 2 and "did you mean optimizer.learning_rate?" in err
    code, _, err = _main(capsys, "+experiment=alfworld", "tracking.tags.owner=ana")
    assert code == 2 and "add one with +tracking.tags.owner=" in err


def test_prices_for_any_model_name(capsys):
    cfg = cli.compose(
        [
            "+experiment=searchqa",
            "llm=paper",
            "llm.prices.gpt-5.4-mini.input_per_mtok=0.75",
            "llm.prices.gpt-5.4-mini.output_per_mtok=4.5",
            "llm.prices.Qwen/Qwen2.5-7B-Instruct.input_per_mtok=0.1",
            "+llm.prices.my_model.output_per_mtok=2",
        ]
    )
    obj = cfg
    data = cli.plain(obj)
    assert (
        obj.llm.prices["gpt-5.4-mini"].input_per_mtok == 0.75 and obj.llm.prices["gpt-5.4-mini"].output_per_mtok == 4.5
    )
    assert data["llm"]["prices"]["Qwen/Qwen2.5-7B-Instruct"] == {
        "input_per_mtok": 0.1,
        "output_per_mtok": 0.0,
        "cached_input_per_mtok": None,  # None: cached prompt tokens cost the input price
    }
    assert data["llm"]["prices"]["my_model"]["output_per_mtok"] == 2.0
    obj = cli.compose(["+experiment=alfworld", "llm=openai", "llm.prices.gpt-4o.input_per_mtok=3"])
    assert (obj.llm.prices["gpt-4o"].input_per_mtok, obj.llm.prices["gpt-4o"].output_per_mtok) == (
        3.0,
        10.0,
    )  # the preset's other price kept
    code, _, err = _main(capsys, "+experiment=alfworld", "llm.prices.gpt-5.4-mini.input_per_mtk=1", *FAST_FAIL)
    assert (
        code == 2
        and err
        == "error: unknown key llm.prices.gpt-5.4-mini.input_per_mtk; did you mean llm.prices.gpt-5.4-mini.input_per_mtok?"
    )
    code, _, err = _main(capsys, "+experiment=alfworld", "llm.prices.m.input_per_mtok=cheap", *FAST_FAIL)
    assert code == 2 and "llm.prices.m.input_per_mtok='cheap' is invalid" in err


def test_every_multirun_job_is_checked_before_any_starts(capsys, tmp_path):
    # range(1,5) makes learning rates 1..4; the job with 1 is below min_learning_rate=2
    code, _, err = _main(
        capsys,
        "+experiment=alfworld",
        "-m",
        "optimizer.learning_rate=range(1,5)",
        "optimizer.min_learning_rate=2",
        f"output_dir={tmp_path}",
        *FAST_FAIL,
    )
    assert code == 2 and "\n" not in err
    assert (
        "optimizer.min_learning_rate=2 is larger than optimizer.learning_rate=1" in err
        and "in the job optimizer.learning_rate=1" in err
    )
    assert not (tmp_path / "runs").exists() and not (tmp_path / "multirun").exists()
    code, _, err = _main(capsys, "+experiment=alfworld", "-m", "optimizer.learning_rate=interval(1,5)", *FAST_FAIL)
    assert code == 2 and "interval() needs a sweeper that samples" in err and "Traceback" not in err
    code, _, err = _main(capsys, "+experiment=alfworld", "seed=1,2", *FAST_FAIL)  # a sweep without -m
    assert code == 2 and err == (  # one line, without Hydra's numbered advice and escaped quotes
        "error: seed=1,2 lists several values: add -m to run every combination (a multirun), or write seed=[1,2] "
        "for a list value, or seed='\"1,2\"' for a string"
    ), err


def _complete(install: str, line: str) -> list[str]:
    """What bash offers at the end of `line` once `install` (the printed completion script) is evaluated."""
    import shutil

    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = (
        f"{install}\n"
        "words=($COMP_LINE); COMP_CWORD=$((${#words[@]}-1)); COMP_POINT=${#COMP_LINE}\n"
        '_skillopt_ray_completion; printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = dict(os.environ, COMP_LINE=line, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_shell_completion_for_what_users_type():
    """`eval "$(python -m skillopt_ray -sc install=bash)"` completes `python -m skillopt_ray ...` (with any
    interpreter path) and the installed `skillopt-ray` command: config groups, presets and keys."""
    exe = Path(sys.executable).parent / "skillopt-ray"
    assert exe.is_file(), "the package installs the skillopt-ray command"
    install = subprocess.run(
        [sys.executable, "-m", "skillopt_ray", "-sc", "install=bash"], capture_output=True, text=True, timeout=120
    ).stdout
    assert "complete -o nospace -o default -F _skillopt_ray_completion python python3 skillopt-ray" in install
    assert _complete(install, "python -m skillopt_ray +experiment=al") == ["+experiment=alfworld"]
    assert "optimizer.learning_rate=" in _complete(install, f"{sys.executable} -m skillopt_ray optimizer.learn")
    assert _complete(install, "skillopt-ray +experiment=alfworld llm=op") == ["llm=openai"]
    assert _complete(install, "python other_script.py --fl") == []  # other python commands are left alone
    # the installed command prints the same script; Hydra's query answers it directly too
    assert (
        subprocess.run([str(exe), "-sc", "install=bash"], capture_output=True, text=True, timeout=120).stdout == install
    )
    env = dict(os.environ, COMP_LINE="skillopt-ray +experiment=al", COMP_POINT="27")
    out = subprocess.run([str(exe), "-sc", "query=bash"], env=env, capture_output=True, text=True, timeout=120)
    assert "+experiment=alfworld" in out.stdout.split()


def test_hydra_commands(capsys, tmp_path):
    code, out, _ = _main(capsys, "--info", "searchpath")
    assert code == 0 and "Config search path" in out and "conf" in out
    code, out, _ = _main(capsys, "-sc", "install=bash")
    assert code == 0 and "_skillopt_ray_completion" in out and "complete " in out
    code, out, _ = _main(capsys, "--help")
    presets = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "conf" / "experiment").glob("*.yaml"))
    assert code == 0 and f"experiment: {', '.join(presets)}" in out and "searchqa" in presets
    # --config-dir adds presets, -cn picks a primary config from it
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /env: searchqa\nexperiment: searchqa\nseed: 7\n"
    )
    (tmp_path / "lab.yaml").write_text("defaults:\n  - config\n  - _self_\nseed: 11\noptimizer:\n  learning_rate: 6\n")
    code, out, _ = _main(capsys, "--config-dir", str(tmp_path), "+experiment=mine", "--cfg", "job")
    assert code == 0 and "seed: 7\n" in out and "name: searchqa" in out
    code, out, _ = _main(
        capsys, "--config-dir", str(tmp_path), "-cn", "lab", "+experiment=alfworld", "--cfg", "job", "-p", "optimizer"
    )
    assert code == 0 and "learning_rate: 6\n" in out


def _qa_args(url: str, data: Path, out: Path) -> list[str]:
    return [
        "+experiment=searchqa",
        "mode=eval",
        "eval.split=test",
        "llm=compatible",
        f"llm.base_url={url}",
        f"env.data_dir={data}",
        "env.options.split_source=folders",
        "env.limit_test=2",
        "ray.env_actors=1",
        f"output_dir={out}",
        "debug.progress=off",
        "tracking=none",
    ]


def test_hydra_run_dir_and_a_multirun_through_the_launcher(ray_cluster, tmp_path, capsys):
    answers = qa_fixture(tmp_path / "qa")
    skill = tmp_path / "skill.md"
    skill.write_text("# answer briefly\n")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        args = _qa_args(srv.base_url, tmp_path / "qa", tmp_path / "out") + [f"eval.skill_path={skill}"]
        code, out, err = _main(capsys, *args, f"hydra.run.dir={tmp_path / 'here'}")
        assert code == 0, err
        assert (tmp_path / "here" / "summary.json").is_file() and f"run directory: {tmp_path / 'here'}" in out
        assert not (tmp_path / "out" / "runs").exists()
        # -m through Hydra's launcher, in a fresh process; hydra.sweep.dir holds one run per job
        env = dict(os.environ, PYTHONPATH=str(REPO))
        p = subprocess.run(
            [sys.executable, "-m", "skillopt_ray", *args, "-m", "seed=1,2", f"hydra.sweep.dir={tmp_path / 'sweep'}"],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr[-2000:]
    assert "Launching 2 jobs locally" in p.stdout + p.stderr
    assert (tmp_path / "sweep" / "multirun.yaml").is_file()
    for job in ("0", "1"):
        assert json.loads((tmp_path / "sweep" / job / "summary.json").read_text())["eval"]["n"] == 2


def test_a_multirun_prints_hydras_lines_but_no_library_info_lines(tmp_path):
    """Under -m Hydra configured its own logging (root at INFO on stdout): every model call printed an httpx
    "HTTP Request: POST ..." line, which a single run never prints. Hydra's own lines stay."""
    answers = qa_fixture(tmp_path / "qa")
    skill = tmp_path / "skill.md"
    skill.write_text("# answer briefly\n")
    with ScriptedServer(Policies(target="rule_gated", answers=answers)) as srv:
        args = _qa_args(srv.base_url, tmp_path / "qa", tmp_path / "out") + [f"eval.skill_path={skill}"]
        p = subprocess.run(
            [sys.executable, "-m", "skillopt_ray", *args, "ray.mode=local", "-m", "seed=1"],
            cwd=tmp_path,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert p.returncode == 0, p.stderr[-2000:]
        assert srv.state.attempts >= 2  # the job made its model calls
    assert "Launching 1 jobs locally" in p.stdout and "#0 : " in p.stdout
    assert "HTTP Request" not in p.stdout + p.stderr, (p.stdout + p.stderr)[-2000:]


def test_run_identity_follows_skill_content_data_and_version(tmp_path, monkeypatch):
    data_dir = tmp_path / "qa"
    qa_fixture(data_dir)
    skill = tmp_path / "skill.md"
    skill.write_text("v1\n")
    base = ["+experiment=searchqa", f"env.data_dir={data_dir}", f"skill_init={skill}", f"output_dir={tmp_path / 'out'}"]
    first = launch.run_dir_for(cli.load(base))
    assert launch.run_dir_for(cli.load(base)) == first  # stable
    # keys that change how calls are made, not their answers, keep the identity (and the resume)
    same = cli.load(
        [
            *base,
            "llm.target.timeout_s=200",
            "llm.retry_window_s=900",
            "llm.optimizer.max_concurrency=1",
            "llm.prices.smollm2-135m.input_per_mtok=1",
        ]
    )
    assert launch.run_dir_for(same) == first
    skill.write_text("v2\n")
    after_skill = launch.run_dir_for(cli.load(base))
    assert after_skill != first
    items = data_dir / "test" / "items.json"
    items.write_text(items.read_text())  # same bytes, but replaced: a new modification time
    os.utime(items, ns=(time.time_ns(), time.time_ns() + 10**9))
    after_data = launch.run_dir_for(cli.load(base))
    assert after_data not in (first, after_skill)
    monkeypatch.setattr(identity, "tool_version", lambda: "99.0")
    assert launch.run_dir_for(cli.load(base)) not in (first, after_skill, after_data)


def test_a_named_run_whose_inputs_changed_refuses_to_resume(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("COMPATIBLE_API_KEY", "x")
    skill = tmp_path / "skill.md"
    skill.write_text("v1\n")
    args = ["+experiment=alfworld", f"skill_init={skill}", "run_name=mine", f"output_dir={tmp_path}", *FAST_FAIL]
    code, _, err = _main(capsys, *args)
    assert code == 2 and "cannot reach Ray" in err  # got as far as Ray: the run directory and its identity exist
    assert json.loads((tmp_path / "runs" / "mine" / "identity.json").read_text())["inputs"]["skills"]["skill_init"]
    skill.write_text("v2\n")
    code, _, err = _main(capsys, *args)
    assert code == 2 and "\n" not in err
    assert err.startswith(f"error: cannot resume {tmp_path / 'runs' / 'mine'}: the content of skill_init changed")
    assert "resume=false" in err
    code, _, err = _main(capsys, *args, "resume=false")  # the old run moved aside, a fresh one begins
    assert code == 2 and "cannot reach Ray" in err


def test_the_embedded_preset_retries_a_timed_out_call(capsys):
    obj = cli.compose(["+experiment=searchqa"])  # the zero-config default
    for r in (obj.llm.target, obj.llm.optimizer):
        assert r.silence_probe_s == 0 and 2 * r.timeout_s <= obj.llm.retry_window_s  # a second attempt fits the window
    code, _, err = _main(capsys, "+experiment=searchqa", "llm.optimizer.timeout_s=800", *FAST_FAIL[:0], "--cfg", "job")
    assert code == 2 and err == (
        "error: llm.optimizer.timeout_s=800 is not below llm.retry_window_s=700: with "
        "llm.optimizer.silence_probe_s=0 a timed-out call would never be retried; raise "
        "llm.retry_window_s above 1600 (two attempts) or lower the timeout"
    )


def test_the_advice_when_retries_stop_names_what_stopped_them():
    import asyncio

    from skillopt_ray.config import LLMRoleConfig
    from skillopt_ray.llm.client import RetryPolicy, RoleEndpoint, TransportFault

    async def advice(timeout_s: float, window_s: float, fault: TransportFault, attempt: int) -> str:
        ep = RoleEndpoint(
            "optimizer",
            LLMRoleConfig(base_url="http://127.0.0.1:9/v1", timeout_s=timeout_s),
            RetryPolicy(6, 1, 20, window_s),
        )
        try:
            return ep._advice(fault, attempt)
        finally:
            await ep.close()

    run = asyncio.run
    said = run(advice(180, 50, TransportFault("read_timeout", "no answer"), 0))
    assert (
        "raise llm.optimizer.timeout_s" in said
        and "llm.retry_window_s (now 50, so a timed-out call is never retried)" in said
    )
    assert "retry_window_s" not in run(advice(60, 700, TransportFault("read_timeout", "no answer"), 1))
    assert run(advice(60, 50, TransportFault("http", "HTTP 503"), 6)).endswith("raise llm.max_retries (now 6)")
    assert run(advice(60, 50, TransportFault("http", "HTTP 503"), 2)).endswith("raise llm.retry_window_s (now 50)")


def test_a_reply_ceiling_caps_what_a_benchmark_asks_for():
    import asyncio

    from skillopt_envs.chat import ChatRequest

    from skillopt_ray.config import LLMRoleConfig
    from skillopt_ray.llm.client import RetryPolicy, RoleEndpoint

    obj = cli.compose(["+experiment=spreadsheetbench"])  # zero config: the embedded model
    assert obj.llm.target.max_reply_tokens == 160 and obj.env.options.get("max_completion_tokens", 16384) == 16384

    async def sent(role: LLMRoleConfig, asked: int, budget=None) -> int:
        ep = RoleEndpoint("target", role, RetryPolicy(0, 1, 1, 10))
        try:
            req = ChatRequest("target", "rollout", [{"role": "user", "content": "x"}], "k", None, asked, None)
            return ep.request_kwargs(req, budget)["max_tokens"]
        finally:
            await ep.close()

    capped = LLMRoleConfig(base_url="http://127.0.0.1:9/v1", max_tokens=96, max_reply_tokens=256)
    assert asyncio.run(sent(capped, 16384)) == 256 and asyncio.run(sent(capped, 16384, budget=512)) == 256
    assert asyncio.run(sent(LLMRoleConfig(base_url="http://127.0.0.1:9/v1"), 16384)) == 16384  # no ceiling: as asked


def test_execute_leaves_the_callers_config_as_it_was(tmp_path, monkeypatch):
    """The embedded server's URL reaches the driver in execute()'s own copy (the caller's dict is reused by sweeps)."""
    import copy

    import skillopt_ray.engine.driver as driver_module

    data = cli.load(
        [
            "+experiment=searchqa",
            "llm.embedded.server_url=http://127.0.0.1:9/v1",
            f"output_dir={tmp_path}",
            "debug.progress=off",
            "ray.mode=cluster",
        ]
    )
    before = copy.deepcopy(data)
    seen = {}

    class FakeDriver:
        @staticmethod
        def options(**_kw):
            return FakeDriver

        @staticmethod
        def remote(cfg, run_dir, owner, **_kw):
            seen["cfg"] = cfg
            raise cli.UsageError("stopped by the test")

    monkeypatch.setattr(launch, "start_ray", lambda d: None)
    monkeypatch.setattr(driver_module, "DriverActor", FakeDriver)
    monkeypatch.setattr(driver_module, "driver_options", lambda cfg: {})
    run = checked(data)
    with pytest.raises(cli.UsageError, match="stopped by the test"):
        launch.execute(run)
    assert data == before and run.data == before
    assert seen["cfg"].llm.target.base_url == seen["cfg"].llm.optimizer.base_url == "http://127.0.0.1:9/v1"


def test_a_prompt_longer_than_the_context_gets_advice_about_the_context():
    import asyncio

    import httpx
    import openai

    from skillopt_ray.config import LLMRoleConfig
    from skillopt_ray.llm.client import RetryPolicy, RoleEndpoint

    said = "request (9756 tokens) exceeds the available context size (4096 tokens), try increasing it"
    exc = openai.BadRequestError(
        said,
        response=httpx.Response(400, request=httpx.Request("POST", "http://127.0.0.1:9/v1")),
        body={"error": {"message": said}},
    )

    async def advice(provider: str) -> str:
        ep = RoleEndpoint(
            "optimizer", LLMRoleConfig(provider=provider, base_url="http://127.0.0.1:9/v1"), RetryPolicy(0, 1, 1, 10)
        )
        try:
            return ep._rejected(exc).message
        finally:
            await ep.close()

    embedded, remote = asyncio.run(advice("embedded")), asyncio.run(advice("openai"))
    assert "llm.optimizer.context_tokens" in embedded and "check the model supports these parameters" not in embedded
    assert "longer context" in remote and "ctx_size" not in remote
