"""What a run's identity covers beyond its config, and the check that a resumed run still matches it.

The config only names files; a run's results also depend on what is in them and on the code. So the
identity also covers: the content of the skill files the run reads (`skill_init`, `eval.skill_path`),
a fingerprint of the benchmark data (every file's path, size and modification time under the data and
manifest folders: cheap, and any edit or replacement changes it), the tool's version and a content hash of the
code and prompts (cli.provenance.code_hash: an edited prompt or module makes a new run). A derived run
directory name changes with any of them; a run directory named by hand (`run_name`, `hydra.run.dir`)
records them in `identity.json` and refuses to resume when they changed, naming what changed.
"""

from __future__ import annotations

import errno
import hashlib
import os
import sys
from pathlib import Path
from typing import Optional

import skillopt_envs

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.cli.provenance import tool_version
from skillopt_ray.config.plain import PlainConfig
from skillopt_ray.config.skill_files import SkillTexts
from skillopt_ray.runs.records import Identity, RunInputs

# where each benchmark reads its data when env.data_dir is not set
_MAX_FILES = 200_000


def file_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _loop_error(path: str, e: OSError) -> UsageError:
    return UsageError(
        f"{path}: {e.strerror or e} (a symbolic link loop in the data folder); remove or fix that link, or point "
        "env.data_dir elsewhere"
    )


def _entry_kind(e: os.DirEntry) -> str:
    """'dir', 'file' or '' (anything else, a dangling link), following links; a link loop is a UsageError."""
    try:
        if e.is_dir(follow_symlinks=True):
            return "dir"
        return "file" if e.is_file(follow_symlinks=True) else ""
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise _loop_error(e.path, err) from None
        return ""  # vanished or unreadable while we looked: not part of the data


def tree_fingerprint(root: Path) -> str:
    """Hash of (relative path, size, mtime) of every file below root; 'missing' when there is none. Linked folders
    are followed once each (a link back to an ancestor is not walked again); a link loop is a UsageError."""
    if not root.exists():
        return "missing"
    if root.is_file():
        st = root.stat()
        return hashlib.sha256(f"{root.name}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:16]
    h = hashlib.sha256()
    count = 0
    stack = [root]
    seen: set[tuple[int, int]] = set()
    while stack and count < _MAX_FILES:
        d = stack.pop()
        try:
            st = d.stat()
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue
        seen.add((st.st_dev, st.st_ino))
        for e in entries:
            kind = _entry_kind(e)
            if kind == "dir":
                stack.append(Path(e.path))
            elif kind == "file":
                try:
                    st = e.stat()
                except OSError:
                    continue
                h.update(f"{os.path.relpath(e.path, root)}|{st.st_size}|{st.st_mtime_ns}\n".encode())
                count += 1
    return h.hexdigest()[:16]


def _resolved(raw: str, key: str) -> str:
    try:
        return str(Path(os.path.expandvars(raw)).expanduser().resolve())
    except (OSError, RuntimeError) as e:  # Path.resolve raises RuntimeError on a link loop (Python < 3.13)
        raise UsageError(f"{key}={raw}: {e} (a symbolic link loop); remove or fix that link") from None


def data_roots(data: PlainConfig) -> dict[str, str]:
    env = data["env"]
    roots = {}
    var = skillopt_envs.data_env_var(env["name"])
    raw = env.get("data_dir") or (os.environ.get(var, "") if var else "")
    if raw:
        roots["data"] = _resolved(raw, "env.data_dir" if env.get("data_dir") else str(var))
    if manifests := env.get("manifest_dir"):
        roots["manifests"] = manifests
    return roots


def run_inputs(data: PlainConfig, texts: Optional[SkillTexts] = None) -> RunInputs:
    """What the run reads besides its config: skill contents (`texts`: as the preflight read them; else read
    here), data fingerprints, the tool's version."""
    from skillopt_ray.cli.checks import skill_files

    skills = {}
    for key, path in skill_files(data):
        if texts is not None and key in texts:
            skills[key] = hashlib.sha256(texts[key].encode("utf-8")).hexdigest()[:16]  # the file's own bytes
            continue
        try:
            skills[key] = file_digest(path)
        except OSError:
            skills[key] = "unreadable"
    from skillopt_ray.cli.provenance import code_hash

    data_fp = {name: tree_fingerprint(Path(root)) for name, root in data_roots(data).items()}
    check = (data["env"].get("options") or {}).get("check")
    if check:  # a check script scores the episodes: an edited one must not resume with the old scores
        try:
            data_fp["check"] = file_digest(_resolved(str(check), "env.options.check"))
        except OSError:
            data_fp["check"] = "unreadable"
    inputs = RunInputs(skills=skills, data=data_fp or "built-in samples", version=tool_version(), code=code_hash())
    if benchmark := data["env"].get(
        "benchmark"
    ):  # a plugin's class scores the episodes: an edited one must not resume stale
        inputs["benchmark_code"] = plugin_code_hash(data["env"]["name"], benchmark)
    return inputs


def plugin_code_hash(name: str, spec: str) -> str:
    """Content hash of a benchmark plugin's code: the module that defines its class, or, for a module inside a
    package, every .py file of that top-level package (the class may lean on its siblings)."""
    cls = skillopt_envs.benchmark_class(name, spec)
    module = sys.modules.get(cls.__module__)
    where = getattr(module, "__file__", None)
    if not where:
        return "unknown"
    top = cls.__module__.split(".")[0]
    path = Path(where).resolve()
    root = path.parents[len(cls.__module__.split(".")) - 2] if "." in cls.__module__ else None
    files = sorted(root.rglob("*.py")) if root is not None and root.name == top else [path]
    h = hashlib.sha256()
    for f in files:
        try:
            h.update(f"{f.relative_to(files[0].parent if root is None else root)}\n".encode() + f.read_bytes())
        except OSError:
            h.update(f"{f}|unreadable".encode())
    return h.hexdigest()[:16]


def describe_change(old: Identity, new: Identity) -> list[str]:
    said = []
    if old.get("config") != new.get("config"):
        said.append("the configuration changed")
    o, n = old.get("inputs", {}), new.get("inputs", {})
    for key in sorted(set(o.get("skills", {})) | set(n.get("skills", {}))):
        if o.get("skills", {}).get(key) != n.get("skills", {}).get(key):
            said.append(f"the content of {key} changed")
    if o.get("data") != n.get("data"):
        said.append("the benchmark data (or its split manifests) changed")
    if o.get("version") != n.get("version"):
        said.append(f"it was made by skillopt-ray {o.get('version')} and this is {n.get('version')}")
    if o.get("benchmark_code") != n.get("benchmark_code"):
        said.append("the benchmark plugin's code changed")
    if o.get("code") != n.get("code"):
        said.append(f"the code or prompts changed (code hash {o.get('code') or 'not recorded'} -> {n.get('code')})")
    return said


def only_code_changed(old: Identity, new: Identity) -> bool:
    """Whether the package's code hash is all that differs (not the config, skills, data, version or plugin)."""
    o, n = dict(old.get("inputs", {})), dict(new.get("inputs", {}))
    return old.get("config") == new.get("config") and o.pop("code", None) != n.pop("code", None) and o == n


def runs_before_a_change(run_dir: Path, record: Identity) -> list[str]:
    """One note for each run beside a new derived `run_dir` made from this configuration by other code: an edit
    (a comment) between a kill and its rerun otherwise starts anew, paying again, without a word."""
    from skillopt_ray.runs.rundir import RunDir

    notes = []
    for other in sorted(run_dir.parent.glob(run_dir.name.rsplit("-", 1)[0] + "-*")):
        old = RunDir(other).read_identity() if other != run_dir and other.is_dir() else None
        if old is None or not only_code_changed(old, record) or not RunDir(other).has_state():
            continue
        notes.append(
            f"note: {other} holds a run of this configuration made by other code ({'; '.join(describe_change(old, record))}); "
            f"this command starts a new one in {run_dir}. To resume that one instead, stop now (Ctrl-C) and rerun "
            f"with run_name={other.name}"
        )
    return notes


def check_or_record(run_dir: Path, record: Identity, resuming: bool) -> None:
    """On resume, refuse a run directory made from other inputs; otherwise record the inputs' identity."""
    from skillopt_ray.runs.rundir import RunDir

    rd = RunDir(run_dir)
    old = rd.read_identity()
    if resuming and old is not None and old.get("identity") != record["identity"]:
        what = "; ".join(describe_change(old, record)) or "its identity differs"
        if only_code_changed(old, record):  # a run named by hand, after an edit of the package (a comment...)
            print(
                f"resuming {run_dir}, made by other code ({what}): the stages it finished keep their results",
                file=sys.stderr,
            )
            rd.write_identity(record)
            return
        raise UsageError(
            f"cannot resume {run_dir}: {what}. Its results would not be this run's: rerun with resume=false "
            "(the old run is moved aside) or choose another run_name"
        )
    if old != record:
        rd.write_identity(record)


def identity_record(data: PlainConfig, texts: Optional[SkillTexts] = None) -> Identity:
    from skillopt_ray.config import run_identity

    inputs = run_inputs(data, texts)
    return Identity(identity=run_identity(data, inputs), config=run_identity(data), inputs=inputs)
