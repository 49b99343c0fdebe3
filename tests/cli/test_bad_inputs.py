"""Bad inputs that used to escape: each is one line naming the file or key and the fix, exit code 2, before Ray
starts, with nothing made on disk (no output folder, no run directory, no MLflow store)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import ALFWORLD_SHARED, SHARED, need_shared_data, qa_fixture

from skillopt_ray import cli

# an unreachable endpoint and cluster: a check that let the input through fails on Ray instead, and makes a run folder
FAST_FAIL = ["llm=compatible", "llm.base_url=http://127.0.0.1:9/v1", "ray.address=127.0.0.1:9"]

TRUNCATED = b'[{"id": "train:0000", "gamefile": "json_2.1.1/tr'
STRINGS = b'["a","b"]'
NOT_UTF8 = b'[{"id": "caf\xe9"}]'


def _main(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err.strip()


def _assert_refused(code: int, err: str, out_dir: Path, *words: str) -> None:
    assert code == 2, err
    assert err.startswith("error: ") and "\n" not in err, err
    for w in words:
        assert w in err, err
    assert not out_dir.exists(), "a refused input must leave nothing on disk"


def _alfworld(tmp_path: Path) -> list[str]:
    need_shared_data(ALFWORLD_SHARED / "json_2.1.1", "ALFWorld")
    man = tmp_path / "m"
    shutil.copytree(ALFWORLD_SHARED / "skillopt_alfworld_path_split", man)
    return [
        "+experiment=alfworld",
        f"env.data_dir={ALFWORLD_SHARED}",
        f"env.manifest_dir={man}",
        "env.options.skip_missing_games=true",
    ]


def _searchqa(tmp_path: Path) -> list[str]:
    qa_fixture(tmp_path / "d")
    man = tmp_path / "m"
    for split in ("train", "val", "test"):
        ids = [{"id": it["id"]} for it in json.loads((tmp_path / "d" / split / "items.json").read_text())]
        (man / split).mkdir(parents=True)
        (man / split / "items.json").write_text(json.dumps(ids))
    return ["+experiment=searchqa", f"env.data_dir={tmp_path / 'd'}", f"env.manifest_dir={man}"]


def _spreadsheetbench(tmp_path: Path) -> list[str]:
    data = need_shared_data(SHARED / "spreadsheetbench" / "dataset.json", "SpreadsheetBench").parent
    ids = [str(r["id"]) for r in json.loads((data / "dataset.json").read_text())]
    man = tmp_path / "m"
    for split, part in (("train", ids[:4]), ("val", ids[4:6]), ("test", ids[6:10])):
        (man / split).mkdir(parents=True)
        (man / split / "items.json").write_text(json.dumps([{"id": i} for i in part]))
    # no sandbox is started by the check; `none` keeps the test independent of bubblewrap
    return [
        "+experiment=spreadsheetbench",
        f"env.data_dir={data}",
        f"env.manifest_dir={man}",
        "env.options.sandbox=none",
    ]


BENCHMARKS = {"alfworld": _alfworld, "searchqa": _searchqa, "spreadsheetbench": _spreadsheetbench}


@pytest.mark.parametrize("bench", sorted(BENCHMARKS))
@pytest.mark.parametrize(
    "content,words",
    [
        (TRUNCATED, ["ends before its JSON is complete", "line 1"]),
        (STRINGS, ["entry 0", "is a JSON string", "is not an object"]),
        (NOT_UTF8, ["is not UTF-8"]),
    ],
    ids=["truncated", "strings", "not-utf8"],
)
def test_a_broken_manifest_is_one_line_naming_the_file(capsys, tmp_path, bench, content, words):
    args = BENCHMARKS[bench](tmp_path)
    bad = tmp_path / "m" / "train" / "items.json"
    bad.write_bytes(content)
    out = tmp_path / "out"
    code, _, err = _main(capsys, *args, f"output_dir={out}", *FAST_FAIL)
    _assert_refused(code, err, out, str(bad), "a JSON list of", *words)


@pytest.mark.parametrize("bench", sorted(BENCHMARKS))
def test_a_manifest_that_repeats_an_id_is_refused(capsys, tmp_path, bench):
    args = BENCHMARKS[bench](tmp_path)
    path = tmp_path / "m" / "val" / "items.json"
    items = json.loads(path.read_text())
    path.write_text(json.dumps(items + [items[0]]))
    out = tmp_path / "out"
    code, _, err = _main(capsys, *args, f"output_dir={out}", *FAST_FAIL)
    _assert_refused(code, err, out, str(path), "is listed twice", f"entries 0 and {len(items)}", "remove")


def test_searchqa_folders_with_a_repeated_id_is_refused(capsys, tmp_path):
    qa_fixture(tmp_path / "d")
    path = tmp_path / "d" / "test" / "items.json"
    items = json.loads(path.read_text())
    path.write_text(json.dumps(items + [items[1]]))
    out = tmp_path / "out"
    code, _, err = _main(
        capsys,
        "+experiment=searchqa",
        f"env.data_dir={tmp_path / 'd'}",
        "env.options.split_source=folders",
        f"output_dir={out}",
        *FAST_FAIL,
    )
    _assert_refused(code, err, out, str(path), f"id {items[1]['id']!r} is listed twice")


def test_an_alfworld_manifest_without_ids_repeating_a_game_is_refused(tmp_path):
    from skillopt_envs.alfworld.data import manifest_split
    from skillopt_envs.base import DataError

    need_shared_data(ALFWORLD_SHARED / "json_2.1.1", "ALFWorld")
    game = next((ALFWORLD_SHARED / "json_2.1.1" / "train").glob("*/*/game.tw-pddl"))
    rel = str(game.relative_to(ALFWORLD_SHARED))
    (tmp_path / "train").mkdir()
    (tmp_path / "train" / "items.json").write_text(json.dumps([{"gamefile": rel}, {"gamefile": rel}]))
    with pytest.raises(DataError, match="is listed twice"):
        manifest_split(ALFWORLD_SHARED, tmp_path, "train", skip_missing=False)


@pytest.mark.parametrize(
    "content,words",
    [
        (b"optimizer:\n  learning_rate: [1, 2\nseed: 3\n", ["line 3", "does not parse as YAML"]),
        (b"# fine\nseed: 1\nrun_name: caf\xe9\n", ["line 3", "is not UTF-8"]),
    ],
    ids=["yaml", "not-utf8"],
)
def test_a_bad_yaml_file_under_config_dir_is_named_with_its_line(capsys, tmp_path, content, words):
    conf = tmp_path / "conf" / "experiment"
    conf.mkdir(parents=True)
    bad = conf / "mine.yaml"
    bad.write_bytes(content)
    out = tmp_path / "out"
    for extra in (["--cfg", "job"], FAST_FAIL):
        code, _, err = _main(
            capsys, "--config-dir", str(tmp_path / "conf"), "+experiment=alfworld", f"output_dir={out}", *extra
        )
        _assert_refused(code, err, out, str(bad), *words)


@pytest.mark.parametrize("cap", ["max_cost_usd=-1", "max_calls=-5", "max_tokens=-1"])
def test_a_negative_budget_is_refused(capsys, tmp_path, cap):
    out = tmp_path / "out"
    code, _, err = _main(capsys, "+experiment=searchqa", f"llm.budget.{cap}", f"output_dir={out}", *FAST_FAIL)
    _assert_refused(code, err, out, f"llm.budget.{cap.split('=')[0]}=", "give a cap >= 0")


def test_an_unknown_benchmark_option_is_refused_by_cfg_job_and_before_ray(capsys, tmp_path):
    out = tmp_path / "out"
    for extra in (["--cfg", "job"], FAST_FAIL):
        code, _, err = _main(capsys, "+experiment=alfworld", "+env.options.foo=1", f"output_dir={out}", *extra)
        _assert_refused(code, err, out, "env.options", "foo", "allowed: ")
    code, _, err = _main(capsys, "+experiment=searchqa", "env.options.split_source=both", "--cfg", "job")
    assert code == 2 and "env.options.split_source='both': use paper or folders" in err


@pytest.mark.parametrize(
    "override,key",
    [
        ("llm.base_url=not-a-url", "llm.base_url"),
        ("llm.target.base_url=ftp://host/v1", "llm.target.base_url"),
        ("llm.base_url=http://host:port/v1", "llm.base_url"),
    ],
)
def test_an_endpoint_that_is_not_an_http_url_is_refused(capsys, tmp_path, override, key):
    out = tmp_path / "out"
    code, _, err = _main(
        capsys, "+experiment=searchqa", "llm=compatible", override, f"output_dir={out}", "ray.address=127.0.0.1:9"
    )
    _assert_refused(code, err, out, f"{key}=", "is not an http(s) URL", "http://127.0.0.1:8000/v1")


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_an_empty_skill_file_is_a_warning_at_start_up(capsys, tmp_path, mode):
    empty = tmp_path / "empty.md"
    empty.write_text("  \n\n")
    key = "skill_init" if mode == "train" else "eval.skill_path"
    extra = [f"skill_init={empty}"] if mode == "train" else ["mode=eval", f"eval.skill_path={empty}"]
    code, _, err = _main(capsys, "+experiment=searchqa", *extra, f"output_dir={tmp_path / 'out'}", *FAST_FAIL)
    assert code == 2  # the unreachable cluster, after the warning
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == [line for line in warnings if f"{key}='{empty}' is empty" in line] and len(warnings) == 1


def test_cfg_job_under_multirun_shows_each_job(capsys):
    code, out, err = _main(capsys, "+experiment=searchqa", "-m", "seed=1,2", "--cfg", "job")
    assert code == 0, err
    assert "add -m" not in err
    heads = [line for line in out.splitlines() if line.startswith("# job")]
    assert heads == ["# job 1 of 2: seed=1", "# job 2 of 2: seed=2"]
    assert [line for line in out.splitlines() if line.startswith("seed:")] == ["seed: 1", "seed: 2"]


def test_an_uninstalled_hydra_launcher_names_the_installed_ones(capsys, tmp_path):
    out = tmp_path / "out"
    code, _, err = _main(capsys, "+experiment=searchqa", "hydra/launcher=joblib", f"output_dir={out}", *FAST_FAIL)
    _assert_refused(code, err, out, "hydra/launcher: joblib", "installed: basic", "pip install hydra-joblib-launcher")
    assert "available: none" not in err


@pytest.mark.parametrize(
    "content,words",
    [
        (TRUNCATED, ["ends before its JSON is complete"]),
        (b'{"questionId": 1}', ["must hold a JSON list, found a JSON object"]),
        (NOT_UTF8, ["is not UTF-8"]),
        (b'[{"questionId": 7}, {"id": "8"}, {"questionId": " 7"}]', ["id '7' is listed twice (entries 0 and 2)"]),
    ],
    ids=["truncated", "object", "not-utf8", "repeated"],
)
def test_a_broken_docvqa_id_manifest_names_the_file(tmp_path, content, words):
    from skillopt_envs.base import DataError
    from skillopt_envs.docvqa.upstream import read_id_manifest

    (tmp_path / "val").mkdir()
    (tmp_path / "val" / "items.json").write_bytes(content)
    with pytest.raises(DataError) as e:
        read_id_manifest(tmp_path, "val")
    assert str(tmp_path / "val" / "items.json") in str(e.value)
    for w in words:
        assert w in str(e.value)


@pytest.mark.parametrize("name", ["../../mydata", "..", "a/b", "/abs/path", "tab\there"])
def test_a_run_name_is_a_name_not_a_path(capsys, tmp_path, name):
    """`run_name=../../mydata` wrote the run's files into a user folder (its config.yaml replaced): refused."""
    out = tmp_path / "work" / "out"
    user = tmp_path / "work" / "mydata"
    user.mkdir(parents=True)
    (user / "config.yaml").write_text("mine\n")
    code, _, err = _main(capsys, *_searchqa(tmp_path), f"output_dir={out}", f"run_name={name}", *FAST_FAIL)
    _assert_refused(code, err, out, f"run_name={name!r}", "not a plain name")
    assert sorted(p.name for p in user.iterdir()) == ["config.yaml"] and (user / "config.yaml").read_text() == "mine\n"
    assert code == 2 and "Ray" not in err
    obj = cli.compose(["+experiment=searchqa", "run_name=my run_2.v1"])
    assert obj.run_name == "my run_2.v1"  # a name may hold what a folder name may
