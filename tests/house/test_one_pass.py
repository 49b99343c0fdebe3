"""One composition, one validation, one run of each check and one read of the skill file per job, whatever the entry:
a plain command, a command with a Hydra flag, each job of `-m` (Hydra's compositions counted too), each sweep trial,
a night, a transfer cell, a launch from the dashboard.

Counted in this process, where nothing can go round the counters:
- compositions: every call of Hydra's `ConfigLoaderImpl.load_configuration`, which Hydra's `compose_config` (the
  application's and ours) and its launcher's `load_sweep_config` both go through, with the overrides it composed;
- validations and checks: the function objects themselves (`config.validate` and each check that `cli.preflight`
  runs) count their calls, so a caller holding them under another name (imported by name, kept in a default
  argument or a table) is counted as well;
- skill-file reads: every opening of the skill file, seen by an audit hook (`open` events: Path.read_bytes, open(),
  os.open alike).
The run itself stops where Ray would start (`launch._drive` records what the driver would get), so no test needs a
cluster. `test_a_second_pass_planted_anywhere_is_caught` shows that the counts fail when a second pass is planted."""

from __future__ import annotations

import collections
import dataclasses
import inspect
import io
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import qa_fixture
from sleep_fixtures import task_folder

from skillopt_ray import cli
from skillopt_ray.cli import checks, launch
from skillopt_ray.config import Config
from skillopt_ray.config.validation import validate as VALIDATE_AT_IMPORT  # a reference taken before any counter

CHECKS = (
    "check_skill_files",
    "check_harness",
    "check_embedded_model",
    "check_reviewed_tasks",
    "check_benchmark_data",
    "check_output_dir",
    "check_endpoints",
)
LLM = ["llm=compatible", "llm.base_url=http://127.0.0.1:9/v1", "tracking=none", "debug.progress=off"]
SKILL_TEXT = "# Skill\n\nAnswer inside <answer> tags.\n"

_OPEN_WATCHERS: list[Callable[[str], None]] = []  # the audit hook below calls these (a hook cannot be removed)


def _audit(event: str, args: tuple) -> None:
    if event == "open" and _OPEN_WATCHERS and isinstance(args[0], (str, bytes, os.PathLike)):
        for watch in list(_OPEN_WATCHERS):
            watch(os.fsdecode(args[0]))


sys.addaudithook(_audit)


@dataclasses.dataclass
class Counted:
    seen: collections.Counter[str]
    composed: list[dict[str, Any]]  # each composition's arguments (config_name, overrides, run_mode)
    drives: list[Any]  # what the driver would have been given, per run
    skill: Path


def _count_calls(monkeypatch, func: Any, on_call: Callable[[inspect.BoundArguments], None]) -> None:
    """Make the function object itself report each call (its code is swapped, so every reference to it counts)."""
    assert func.__closure__ is None, func
    twin = types.FunctionType(func.__code__, func.__globals__, func.__name__, func.__defaults__, None)
    twin.__kwdefaults__ = func.__kwdefaults__
    signature = inspect.signature(twin)
    hook = f"__one_pass_{func.__name__}"
    scope: dict[str, Any] = {}
    exec(f"def {func.__name__}(*args, **kwargs):\n    return {hook}(args, kwargs)\n", scope)

    def dispatch(args: tuple, kwargs: dict) -> Any:
        on_call(signature.bind(*args, **kwargs))
        return twin(*args, **kwargs)

    monkeypatch.setitem(func.__globals__, hook, dispatch)
    monkeypatch.setattr(func, "__code__", scope[func.__name__].__code__)


@pytest.fixture()
def counted(monkeypatch, tmp_path):
    """Counters of compositions, validations, checks and skill-file reads; the driver's arguments per run."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    import skillopt_ray.config.validation as validation

    seen: collections.Counter[str] = collections.Counter()
    composed: list[dict[str, Any]] = []

    def tally(key: str) -> Callable[[inspect.BoundArguments], None]:
        return lambda _bound: seen.update([key])

    def composition(bound: inspect.BoundArguments) -> None:
        seen["composed"] += 1
        composed.append({k: bound.arguments.get(k) for k in ("config_name", "overrides", "run_mode")})

    _count_calls(monkeypatch, ConfigLoaderImpl.load_configuration, composition)
    _count_calls(monkeypatch, validation.validate, tally("validated"))
    for name in CHECKS:
        _count_calls(monkeypatch, getattr(checks, name), tally(name))
    skill = tmp_path / "skill.md"
    skill.write_text(SKILL_TEXT)

    def opened(path: str) -> None:
        if Path(path).name == skill.name and Path(path).resolve() == skill.resolve():
            seen["skill_read"] += 1

    _OPEN_WATCHERS.append(opened)
    drives: list[Any] = []

    def drive(checked: Any, run_dir: Path, embedded: Any, progress: Any, clock: Any, engine: Any = None) -> dict:
        drives.append(checked)
        return {"status": "error", "exit": cli.EXIT_STOPPED, "message": "stopped where Ray would start", "notes": []}

    monkeypatch.setattr(launch, "_drive", drive)
    yield Counted(seen, composed, drives, skill)
    _OPEN_WATCHERS.remove(opened)


def _counts(c: Counted, jobs: int, data_reads: int = 1, skill_reads: int | None = None, composed: int | None = None):
    """`jobs` validations and runs of each check (data read once per distinct data), one skill read per job;
    compositions: one per job unless the entry composes its own config besides (`composed`)."""
    seen = c.seen
    want = (jobs if composed is None else composed, jobs, jobs if skill_reads is None else skill_reads)
    assert (seen["composed"], seen["validated"], seen["skill_read"]) == want, (seen, c.composed)
    for name in CHECKS:
        assert seen[name] == (data_reads if name == "check_benchmark_data" else jobs), (name, seen)


def _driver_gets_the_typed_config(c: Counted) -> None:
    for checked in c.drives:
        assert isinstance(checked, cli.Checked) and isinstance(checked.config, Config)
        assert dataclasses.asdict(checked.config) == checked.data  # the same values, made once
        assert checked.skills[next(iter(checked.skills))] == SKILL_TEXT


def _qa(tmp_path: Path) -> list[str]:
    qa_fixture(tmp_path / "qa")
    return ["+experiment=searchqa", f"env.data_dir={tmp_path / 'qa'}", "env.options.split_source=folders"]


def _plain(c: Counted, tmp_path: Path) -> list[str]:
    return [*_qa(tmp_path), *LLM, f"skill_init={c.skill}", f"output_dir={tmp_path / 'out'}"]


def test_a_plain_command_composes_validates_checks_and_reads_its_skill_once(counted, tmp_path):
    code = cli.main(_plain(counted, tmp_path))
    assert code == cli.EXIT_STOPPED and len(counted.drives) == 1
    _counts(counted, jobs=1)
    _driver_gets_the_typed_config(counted)


def test_a_command_with_a_hydra_setting_is_composed_once_and_run_by_hydras_run_job(counted, tmp_path):
    """A Hydra setting of its own (`hydra.output_subdir`) is Hydra's run: its one composition is the checked one,
    and Hydra still writes its record of the job."""
    code = cli.main([*_plain(counted, tmp_path), f"hydra.run.dir={tmp_path / 'here'}", "hydra.output_subdir=.hydra"])
    assert code == cli.EXIT_STOPPED and len(counted.drives) == 1
    _counts(counted, jobs=1)
    _driver_gets_the_typed_config(counted)
    assert (tmp_path / "here" / ".hydra" / "overrides.yaml").is_file()


def test_each_job_of_a_multirun_is_composed_once_hydras_compositions_counted(counted, tmp_path):
    sweep_dir = tmp_path / "multirun"
    code = cli.main([*_plain(counted, tmp_path), "-m", "seed=1,2", f"hydra.sweep.dir={sweep_dir}"])
    assert code == cli.EXIT_STOPPED and len(counted.drives) == 2
    # each job composed once (the one composition checked, then run by Hydra's run_job), validated, checked and its
    # skill read once; jobs reading the same data read it once. Besides the jobs: the multirun's own config (what
    # Hydra keeps as multirun.yaml, its folder), composed once for the command
    by_seed = collections.Counter(
        next(o for o in one["overrides"] if o.startswith("seed=")) for one in counted.composed
    )
    assert by_seed == {"seed=1,2": 1, "seed=1": 1, "seed=2": 1}, counted.composed
    _counts(counted, jobs=2, composed=2 + 1)
    _driver_gets_the_typed_config(counted)
    assert (sweep_dir / "multirun.yaml").is_file()
    assert sorted(p.name for p in sweep_dir.iterdir()) == ["0", "1", "multirun.yaml"]
    assert all((sweep_dir / job / "identity.json").is_file() for job in "01")  # hydra.sweep.dir given: the runs' own


def test_each_sweep_trial_is_composed_once_and_reads_its_skill_once(counted, tmp_path, monkeypatch):
    from skillopt_ray.sweep import command, tune

    def run_tune(spec, trials, overrides, name, sdir, parent, previous):  # Tune's part: each trial's execute()
        ctx = {"name": name, "parent_run_id": None, "server_url": None}
        for plan in tune._trial_plans(spec, trials, overrides, ctx).values():  # type: ignore[arg-type]
            launch.execute(plan["checked"], Path(plan["run_dir"]), plan.get("origin"))
        return []

    monkeypatch.setattr(command, "_run_tune", run_tune)
    command.main([*_plain(counted, tmp_path), "sweep.seeds=2"])
    assert len(counted.drives) == 2
    # each trial composed once (the first with the config's own seed, which the others count from); besides them
    # the sweep command's own options (sweep_config), once. Its skill file is read once, when the sweep is planned
    # (its run directory's name hashes it); the check takes that text
    names = collections.Counter(one["config_name"] for one in counted.composed)
    assert names == {"sweep_config": 1, "config": 2}, counted.composed
    _counts(counted, jobs=2, composed=2 + 1)
    _driver_gets_the_typed_config(counted)
    assert sorted(d.data["seed"] for d in counted.drives) == [42, 43]


def test_a_night_is_composed_validated_and_checked_once_its_review_gate_included(counted, tmp_path):
    from skillopt_ray.sleep import cli as sleep_cli

    project = tmp_path / "proj"
    project.mkdir()
    task_folder(project, n_val=2)
    code = sleep_cli.main(["run", "--project", str(project), "--tasks", str(project / ".skillopt" / "tasks"), *LLM])
    assert code == cli.EXIT_STOPPED and len(counted.drives) == 1
    _counts(counted, jobs=1, skill_reads=0)  # the first night starts from the empty seed: no skill file
    assert isinstance(counted.drives[0].config, Config)


def test_each_transfer_cell_is_composed_validated_and_checked_once(counted, tmp_path):
    from skillopt_ray.compare import transfer

    qa = _qa(tmp_path)
    transfer.main(
        ["--skills", str(counted.skill), "--targets", "chat", "--benchmarks", "searchqa", "--out", str(tmp_path / "t"),
         "--", *qa[1:], *LLM]
    )  # fmt: skip
    assert len(counted.drives) == 1
    _counts(counted, jobs=1)
    _driver_gets_the_typed_config(counted)


class _Process:
    """The launched process, as far as the launcher uses it: what it was handed on its standard input."""

    def __init__(self, argv: list[str], **_kw: Any):
        self.argv, self.stdin, self.stdout, self.returncode = argv, io.StringIO(), iter(()), 0
        self.stdin.close = lambda: None  # type: ignore[method-assign]  # keep what was written

    def poll(self) -> int:
        return 0

    def wait(self, timeout: float | None = None) -> int:
        return 0


def test_a_launch_from_the_dashboard_is_composed_validated_and_checked_once(counted, tmp_path, monkeypatch):
    """The page's form is composed and checked once in the dashboard (the same cli.compose and cli.preflight); the
    process it starts takes that checked run (cli.handoff) without composing or checking it again."""
    from skillopt_ray.cli import handoff
    from skillopt_ray.dashboard.launcher import Launcher
    from skillopt_ray.dashboard.limits import PathPolicy

    started: list[_Process] = []
    monkeypatch.setattr(
        Launcher, "_popen", staticmethod(lambda argv, **kw: started.append(_Process(argv)) or started[-1])
    )
    monkeypatch.setenv("COMPATIBLE_BASE_URL", "http://127.0.0.1:9/v1")  # the preset's own URL: no key redirect
    qa_fixture(tmp_path / "qa")
    launcher = Launcher(tmp_path, policy=PathPolicy.make(tmp_path, tmp_path / "out"))
    form = {"experiment": "searchqa", "llm": "compatible", "extra": " ".join([
        f"env.data_dir={tmp_path / 'qa'}", "env.options.split_source=folders", "tracking=none",
        f"skill_init={counted.skill}", f"output_dir={tmp_path / 'out'}"])}  # fmt: skip
    launched = launcher.launch(form)
    assert [p.argv[1:] for p in started] == [["-m", "skillopt_ray.cli.handoff"]]
    code = handoff.main(io.BytesIO(started[0].stdin.getvalue().encode()))  # what the process runs
    assert code == cli.EXIT_STOPPED and len(counted.drives) == 1
    _counts(counted, jobs=1)
    _driver_gets_the_typed_config(counted)
    assert counted.drives[0].data["debug"]["progress"] == "plain"  # the page follows its output line by line
    assert launched.run_dir.startswith(str(tmp_path / "out" / "runs"))
    from skillopt_ray.runs.rundir import RunDir

    recorded = RunDir(Path(launched.run_dir)).read_provenance()  # the command that reruns it, not the hand-off's
    assert recorded["command_line"] == f"{launched.command} debug.progress=plain", recorded["command_line"]


def _plant(kind: str, c: Counted, tmp_path: Path) -> Callable[..., None]:
    """A second pass of one kind, made by code the counters were not pointed at."""
    early_check = checks.check_endpoints  # taken before the run: a reference of its own

    def planted(checked: Any, validate: Any = VALIDATE_AT_IMPORT, check: Any = early_check) -> None:
        if kind == "compose":
            cli.compose(["+experiment=searchqa", *LLM, f"output_dir={tmp_path}"], config_name="config")
        elif kind == "validate":
            validate(checked.config)  # the function object held since import, under another name
        elif kind == "check":
            check(checked.data)
        elif kind == "skill":
            fd = os.open(c.skill, os.O_RDONLY)  # below Path and open()
            os.close(fd)

    return planted


@pytest.mark.parametrize("kind", ["compose", "validate", "check", "skill"])
def test_a_second_pass_planted_anywhere_is_caught(counted, tmp_path, monkeypatch, kind):
    """The counters are not fooled: a second composition, validation, check or skill read, made where nothing
    counts by name, fails the same assertion the entries pass."""
    planted = _plant(kind, counted, tmp_path)
    real_open = launch._open_run

    def open_run(checked: Any, *a: Any) -> Path:
        planted(checked)
        return real_open(checked, *a)

    monkeypatch.setattr(launch, "_open_run", open_run)
    assert cli.main(_plain(counted, tmp_path)) == cli.EXIT_STOPPED and len(counted.drives) == 1
    key = {"compose": "composed", "validate": "validated", "check": "check_endpoints", "skill": "skill_read"}[kind]
    assert counted.seen[key] == 2, counted.seen
    with pytest.raises(AssertionError):
        _counts(counted, jobs=1)


def test_the_driver_takes_the_typed_config_without_validating_it_again(tmp_path, monkeypatch):
    import skillopt_ray.config as config_pkg
    import skillopt_ray.config.validation as validation
    from skillopt_ray.engine.driver import Run

    config = cli.compose(["+experiment=searchqa", *LLM, f"output_dir={tmp_path}"])
    for owner in (config_pkg, validation):
        monkeypatch.setattr(owner, "validate", lambda _c: pytest.fail("validated again"))
    run = Run(config, str(tmp_path / "run"), skills={"skill_init": "# given"})
    assert run.cfg is config and run._skill_text("skill_init", "/nowhere.md") == "# given"


# what builds or checks a config: none of it runs on the engine's side of a run
_BUILDERS = {"from_container", "to_container", "compose", "compose_node", "typed", "preflight", "validate"}


def test_the_engine_side_takes_the_typed_config_and_builds_none():
    """The driver, the gateway and its sender shards get the typed config (or its frozen `llm` section), never a dict
    they rebuild: no module of the engine, the LLM layer or the training loop calls a config builder or a validation,
    or imports Hydra or OmegaConf (jsonschema's `validate` of a model's reply and `Stage.validate`, a progress
    stage's name, are not a config's)."""
    import ast

    import skillopt_ray

    root = Path(skillopt_ray.__file__).resolve().parent
    found = []
    for folder in ("engine", "llm", "loop", "epoch", "stages"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                where = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
                if isinstance(node, ast.Call):
                    f = node.func
                    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                    owner = getattr(f.value, "id", "") if isinstance(f, ast.Attribute) else ""
                    if name in _BUILDERS and owner not in ("jsonschema", "Stage"):  # a reply's schema; a stage's name
                        found.append(f"{where}: {name}()")
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                    if any(m.split(".")[0] in ("hydra", "omegaconf") for m in modules):
                        found.append(f"{where}: imports {modules}")
    assert found == []


def test_the_gateway_of_a_run_gets_its_typed_llm_section(tmp_path, monkeypatch):
    from skillopt_ray.config.schema import LLMConfig
    from skillopt_ray.engine import local
    from skillopt_ray.engine.executor import LocalExecutor
    from skillopt_ray.llm.gateway import GatewayHost

    config = cli.compose(["+experiment=searchqa", *LLM, f"output_dir={tmp_path}"])
    given: list[tuple] = []
    monkeypatch.setattr(LocalExecutor, "start", lambda self, cls, options, *args, **kw: given.append((cls, args)))
    local.start_gateway(LocalExecutor(), config, tmp_path / "run")
    [(cls, args)] = given
    assert cls is GatewayHost and isinstance(args[0], LLMConfig) and args[0] is config.llm
