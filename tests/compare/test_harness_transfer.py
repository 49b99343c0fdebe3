"""The transfer command: 2 skills x 3 targets (chat, codex, claude_code) x SearchQA from the scripted server in one
command; the table's rows are skills, its columns target x benchmark, each cell the hard score with n and a 95%
interval; logged to MLflow."""

from __future__ import annotations

import json

import pytest
from conftest import need_bwrap, need_harness, qa_fixture
from harness_helpers import AgentPolicy
from scripted_server import ScriptedServer

from skillopt_ray.compare.transfer import main, wilson


def test_wilson_interval():
    lo, hi = wilson(2, 2)
    assert (round(lo, 4), hi) == (0.3424, 1.0)  # k = n = 2: z^2 = 3.8416, lower bound n / (n + z^2)
    assert wilson(0, 0) == (0.0, 0.0)
    lo, hi = wilson(5, 10)
    assert round(lo, 4) == 0.2366 and round(hi, 4) == 0.7634


@pytest.mark.slow
def test_transfer_table_two_skills_three_targets(ray_cluster, tmp_path, capsys):
    need_bwrap()
    need_harness("codex")
    need_harness("claude")
    answers = qa_fixture(tmp_path / "qa")
    good, plain = tmp_path / "ruled.md", tmp_path / "plain.md"
    good.write_text("# Skill\n\nRULE-qa: answer with the name only\n")
    plain.write_text("# Skill\n\nBe careful.\n")
    policy = AgentPolicy(answers)
    with ScriptedServer(policy=policy) as srv:
        code = main(
            ["--skills", f"{good},{plain}", "--targets", "chat,codex,claude_code", "--benchmarks", "searchqa",
             "--out", str(tmp_path / "out"), "--",
             "llm=compatible", f"llm.base_url={srv.base_url}", f"env.data_dir={tmp_path / 'qa'}",
             "env.options.split_source=folders", "env.limit_test=2", "debug.progress=off", "ray.env_actors=1"]
        )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    table = (tmp_path / "out" / "transfer.md").read_text().splitlines()
    assert table[0] == "| skill | chat / searchqa | codex / searchqa | claude_code / searchqa |"
    assert table[2] == "| ruled | " + " | ".join(["1.000 (n=2, 0.34-1.00)"] * 3) + " |"
    assert table[3] == "| plain | " + " | ".join(["0.000 (n=2, 0.00-0.66)"] * 3) + " |"
    assert table[2] in out
    cells = json.loads((tmp_path / "out" / "transfer.json").read_text())
    assert len(cells) == 6 and all(c["infra_errors"] == 0 for c in cells)
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}")
    exp = client.get_experiment_by_name("transfer")
    runs = client.search_runs([exp.experiment_id], "tags.mlflow.runName = 'transfer'")
    assert runs and runs[0].data.metrics["transfer/hard.ruled.codex.searchqa"] == 1.0
    assert runs[0].data.metrics["transfer/hard.plain.claude_code.searchqa.n"] == 2.0


def test_transfer_help_and_an_override_without_the_separator(capsys):
    """The help says what the tool does and where overrides go; an override given before `--` is named with the
    fix (it was answered "unrecognized arguments: llm=compatible")."""
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "logged to MLflow" in out and "-- key=value" in out and "go after `--`" in out
    with pytest.raises(SystemExit) as e:
        main(["--skills", "a.md", "llm=compatible", "seed=3"])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2
    assert err.endswith("llm=compatible seed=3: Hydra overrides go after `--` (... -- llm=compatible seed=3)"), err
    with pytest.raises(SystemExit) as e:
        main(["--skills", "a.md", "--bogus"])
    assert e.value.code == 2 and "unrecognized arguments: --bogus" in capsys.readouterr().err
