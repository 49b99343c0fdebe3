"""DocVQA data at load and episode time: a tuple literal in an answer cell stays one answer (the reference splits list
literals only), a page image that does not decode is a data error (counted, unscored, never sent), and broken data
folders (symlink loops, unreadable or invalid files) are one line naming the path."""

from __future__ import annotations

import asyncio
import csv
import os
import shutil
from pathlib import Path

import pytest
from skillopt_envs.base import DataError, EpisodeContext
from skillopt_envs.chat import ChatRequest, ChatResult
from skillopt_envs.docvqa import data as dv
from skillopt_envs.docvqa import samples
from skillopt_envs.docvqa.benchmark import DocVQABenchmark
from skillopt_envs.docvqa.scoring import extract_answer, score_answer


class FakeLLM:
    def __init__(self, reply: str):
        self.reply, self.requests = reply, []

    async def chat(self, req: ChatRequest) -> ChatResult:
        self.requests.append(req)
        return ChatResult(self.reply)


def _ctx() -> EpisodeContext:
    return EpisodeContext("rollout/e1s1", True, 1, 0)


def _write_csv(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=sorted({k for r in rows for k in r}))
        w.writeheader()
        w.writerows(rows)


@pytest.fixture(scope="module")
def sample_root(tmp_path_factory) -> Path:
    return samples.ensure_samples(str(tmp_path_factory.mktemp("docvqa") / "samples"))


def _data(root: Path, page: Path, answer: str = "['a']") -> Path:
    """A data folder of three one-question CSVs whose question 1 shows `page`."""
    (root / "img").mkdir(parents=True)
    shutil.copy(page, root / "img" / "q1.png")
    for s in dv.SPLITS:
        _write_csv(
            root / s / "x.csv", [{"questionId": "1", "question": "Q?", "answer": answer, "image_path": "img/q1.png"}]
        )
    return root


def _page(sample_root: Path) -> Path:
    return sorted((sample_root / "images").glob("*.png"))[0]


# --- tuple literals stay one answer ---------------------------------------------------------------------------------


def test_a_tuple_literal_is_one_answer_and_only_a_list_literal_is_split():
    # the reference's rule: a list literal -> its stripped non-empty elements; any other literal -> [str(value)]
    assert dv.parse_answers("('a', 'b')") == ["('a', 'b')"]
    assert dv.parse_answers("( 'x' ,)") == ["('x',)"]  # str() of the parsed tuple, not the cell's own spelling
    assert dv.parse_answers("(1, 2)") == ["(1, 2)"]
    assert dv.parse_answers("['a', ' b ', '']") == ["a", "b"]
    assert dv.parse_answers("'quoted'") == ["quoted"]


def test_a_tuple_answer_is_scored_as_one_gold(sample_root, tmp_path):
    root = _data(tmp_path / "d", _page(sample_root), answer="('12', 'twelve')")
    b = DocVQABenchmark({"data_dir": str(root), "options": {"target_provider": "openai"}})
    task = b.load_split("train")[0]
    assert task.payload["answers"] == ["('12', 'twelve')"]
    right = asyncio.run(b.run_episode(task, "", FakeLLM("<answer>('12', 'twelve')</answer>"), _ctx()))
    assert right.hard == 1.0
    # "12" against the one gold "('12', 'twelve')": distance 14 of 16 >= 0.5, so ANLS 0 (a split list would give 1)
    wrong = asyncio.run(b.run_episode(task, "", FakeLLM("<answer>12</answer>"), _ctx()))
    assert wrong.hard == 0.0 and wrong.soft == 0.0
    assert score_answer(extract_answer("<answer>12</answer>"), ["12", "twelve"]).hard == 1  # what a list gives


# --- corrupt page images ----------------------------------------------------------------------------------------


def _corruptions(good: bytes) -> dict[str, bytes]:
    half = len(good) // 2
    return {
        "not an image": b"these are not the bytes of any image format" * 20,
        "cut in half": good[:half],
        "bytes flipped": good[:half] + bytes(x ^ 0xFF for x in good[half : half + 64]) + good[half + 64 :],
        "signature only": good[:8],
        "empty": b"",
    }


def test_check_page_image_passes_real_pages_and_names_each_corruption(sample_root, tmp_path):
    good = _page(sample_root)
    dv.check_page_image(str(good))
    for name, data in _corruptions(good.read_bytes()).items():
        bad = tmp_path / f"{name}.png"
        bad.write_bytes(data)
        with pytest.raises(dv.PageImageError, match="not a readable image"):
            dv.check_page_image(str(bad))
    with pytest.raises(FileNotFoundError):  # missing is not a decoding problem
        dv.check_page_image(str(tmp_path / "gone.png"))


def test_a_corrupt_page_is_a_data_error_and_never_sent(sample_root, tmp_path):
    root = _data(tmp_path / "d", _page(sample_root))
    page = root / "img" / "q1.png"
    b = DocVQABenchmark({"data_dir": str(root), "options": {"target_provider": "openai"}})
    task = b.load_split("test")[0]
    for name, data in _corruptions(_page(sample_root).read_bytes()).items():
        page.write_bytes(data)
        llm = FakeLLM("<answer>a</answer>")
        r = asyncio.run(b.run_episode(task, "", llm, _ctx()))
        assert r.fail_reason == "data_error" and r.data_error and not r.scored, name
        assert r.error.startswith(f"cannot read the page image {page}: not a readable image (") and "\n" not in r.error
        assert "materialize" in r.error and llm.requests == []
    shutil.copy(_page(sample_root), page)
    r = asyncio.run(b.run_episode(task, "", FakeLLM("<answer>a</answer>"), _ctx()))
    assert r.scored and r.fail_reason != "data_error"


def test_a_corrupt_page_is_a_data_error_for_an_agent_target_too(sample_root, tmp_path):
    root = _data(tmp_path / "d", _page(sample_root))
    (root / "img" / "q1.png").write_bytes(b"GIF89a broken")
    b = DocVQABenchmark({"data_dir": str(root), "options": {"target_provider": "openai"}})
    task = b.load_split("val")[0]
    r = asyncio.run(b._agent_episode(task, "", FakeLLM(""), _ctx(), {}))
    assert r.data_error and "not a readable image" in r.error


def test_the_text_layer_needs_no_decodable_image(sample_root, tmp_path):
    root = _data(tmp_path / "d", _page(sample_root))
    (root / "img" / "q1.png").write_bytes(b"broken")
    (root / "img" / "q1.txt").write_text("total 12")
    b = DocVQABenchmark({"data_dir": str(root), "options": {"target_provider": "openai", "page_input": "text"}})
    r = asyncio.run(b.run_episode(b.load_split("train")[0], "", FakeLLM("<answer>a</answer>"), _ctx()))
    assert r.scored and r.hard == 1.0  # the page goes as its text: the image bytes are never read


# --- broken data folders ----------------------------------------------------------------------------------------


def _make(root: Path, options=None) -> DocVQABenchmark:
    return DocVQABenchmark({"data_dir": str(root), "options": {"target_provider": "openai", **(options or {})}})


def test_symlink_loops_are_one_line_naming_the_path(sample_root, tmp_path):
    root = _data(tmp_path / "d", _page(sample_root))
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(DataError, match=f"^{tmp_path / 'a'} is a symlink loop; point it at"):
        _make(tmp_path / "a")
    with pytest.raises(DataError, match=f"^{tmp_path / 'a'} is a symlink loop"):
        _make(root, {"image_root": str(tmp_path / "a")})
    loop = root / "train" / "a.csv"  # sorts before x.csv: the reference would open it and fail
    os.symlink(loop, loop)
    with pytest.raises(DataError, match=f"^{loop} is a symlink loop"):
        _make(root).load_split("train")
    loop.unlink()
    page = root / "img" / "q1.png"
    page.unlink()
    os.symlink(page, page)
    with pytest.raises(DataError, match=f"^{page} is a symlink loop") as e:
        _make(root).load_split("val")
    assert "\n" not in str(e.value)
    page.unlink()
    os.symlink(tmp_path / "nowhere.png", page)
    with pytest.raises(DataError, match="is a symlink to nothing"):
        _make(root).load_split("val")


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc")
def test_unreadable_and_invalid_files_are_one_line_naming_them(sample_root, tmp_path):
    root = _data(tmp_path / "d", _page(sample_root))
    bad = root / "test" / "x.csv"
    bad.unlink()
    bad.symlink_to("/proc/self/mem")  # unreadable even for root (mode 000 is not)
    with pytest.raises(DataError, match=f"^{bad} cannot be read \\(") as e:
        _make(root).load_split("test")
    assert "\n" not in str(e.value)
    pub = tmp_path / "pub"
    pub.mkdir()
    (pub / "val_v1.0.json").write_text('{"data": [{"questionId": 1, ')  # cut short
    with pytest.raises(DataError, match="val_v1.0.json is not a readable DocVQA JSON file"):
        _make(pub).load_split("train")
    (pub / "val_v1.0.json").unlink()
    (pub / "val_v1.0.json").symlink_to("/proc/self/mem")
    with pytest.raises(DataError, match="val_v1.0.json cannot be read"):
        _make(pub)
    (pub / "val_v1.0.json").unlink()
    (pub / "validation-00000-of-00001.parquet").write_bytes(b"PAR1 not really parquet")
    with pytest.raises(DataError, match="is not a readable parquet file") as e:
        _make(pub).load_split("train")
    assert "\n" not in str(e.value)


def test_cli_with_a_csv_symlink_loop_stops_before_ray_with_exit_2(sample_root, tmp_path, capsys, monkeypatch):
    import ray

    from skillopt_ray.cli.app import main

    root = _data(tmp_path / "d", _page(sample_root))
    loop = root / "val" / "a.csv"
    os.symlink(loop, loop)
    # other tests may leave Ray up in this process: the run must neither start it nor reach it
    ray_was_up, ray_inits = ray.is_initialized(), []
    monkeypatch.setattr(ray, "init", lambda *a, **k: ray_inits.append(a) or pytest.fail("ray.init called"))
    code = main(["+experiment=docvqa", f"env.data_dir={root}", f"output_dir={tmp_path / 'out'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and ray.is_initialized() == ray_was_up and not ray_inits and not (tmp_path / "out").exists()
    assert err == f"error: {loop} is a symlink loop; point it at the file or folder it should name, or remove it"


def test_materialize_names_a_bad_source_in_one_line(tmp_path, capsys):
    from skillopt_envs.docvqa import materialize

    (tmp_path / "l1").symlink_to(tmp_path / "l2")
    (tmp_path / "l2").symlink_to(tmp_path / "l1")
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really parquet")
    (tmp_path / "page.png").write_bytes(b"x")
    expected = {
        "l1": f"{tmp_path / 'l1'} is a symlink loop",
        "bad.parquet": f"{tmp_path / 'bad.parquet'} is not a readable parquet file (",
        "gone.json": f"--source {tmp_path / 'gone.json'} does not exist",
        "page.png": f"--source {tmp_path / 'page.png'} is neither a .parquet nor a .json file",
    }
    for name, start in expected.items():
        assert materialize.main(["--source", str(tmp_path / name), "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {start}") and "\n" not in err, err
