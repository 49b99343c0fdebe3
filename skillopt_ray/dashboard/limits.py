"""What a launch form sent over HTTP may ask for: plain values and paths under known folders, nothing more.

The command line keeps Hydra's full power (interpolations, `hydra.*` settings, `_target_` objects, any path),
because its user already owns the shell. A form arrives from a browser, so here an override may not read the
environment (`${oc.env:...}`, `$VAR`), reconfigure Hydra (which can call any Python function), name a `_target_`,
pass command-line flags, turn a sandbox off or choose which environment variable holds a key, and every path the
resolved config names must lie under the dashboard's working folder, its output folder or a folder the dashboard
was started with `--allow-path`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from skillopt_ray.cli.errors import UsageError
from skillopt_ray.config.plain import PlainConfig

# Keys naming the environment variable whose value is sent somewhere (a key, a token) or handed to model code.
SECRET_NAME_KEYS = ("api_key_env", "azure_ad_token_env", "search_auth_env", "env_allow")
# Settings whose `none` value runs model-written code without the jail.
SANDBOX_KEYS = ("env.options.sandbox", "llm.target.agent.jail", "llm.optimizer.agent.jail")
# Path-valued options of the benchmarks (env.options.<name>); other string options that look like paths are
# checked as well (see `_option_paths`).
OPTION_PATHS = ("sample_dir", "image_root", "page_cache", "compile_cache", "docs_dirs")
SKILL_PATH_KEYS = ("skill_init", "eval.skill_path")
SKILL_SUFFIXES = (".md", ".markdown", ".txt")
CHOICE_VALUE = re.compile(r"^[A-Za-z0-9_.-]+$")


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~").strip()


def group_options(conf_dir: Optional[Path] = None) -> dict[str, list[str]]:
    """The config groups of the config tree the dashboard runs with (the project's `conf/`, or the user's own
    through SKILLOPT_CONF_DIR) and the options each ships, by group name."""
    from skillopt_ray.cli.compose import CONF_DIR

    conf = Path(conf_dir or CONF_DIR)
    return {d.name: sorted(p.stem for p in d.glob("*.yaml")) for d in sorted(conf.iterdir()) if d.is_dir()}


def refuse_group_path(override: str, groups: dict[str, list[str]]) -> None:
    """A config-group value names one of the options the config tree ships, never a file elsewhere: Hydra would
    load any YAML file a relative path reaches, interpolations (and so the environment) included."""
    key = _key(override)
    if "/" in key:
        raise UsageError(
            f"{override!r}: nested config groups are not accepted from the page (the command line accepts it)"
        )
    if key not in groups or "=" not in override or override.startswith("~"):
        return
    value = override.split("=", 1)[1].strip()
    if value not in groups[key]:
        raise UsageError(f"{key}={value!r}: not a {key} preset; pick one of {', '.join(groups[key])}")


def refuse_run_name_path(value: str) -> None:
    """A run name names a folder under output_dir/runs/: a name, never a path."""
    if not CHOICE_VALUE.match(value) or value in (".", ".."):
        raise UsageError(
            f"run_name={value!r}: a run name is a name (letters, digits, _ . -), not a path; "
            "set output_dir to choose where runs go"
        )


def refuse_unsafe_override(override: str, groups: Optional[dict[str, list[str]]] = None) -> None:
    """Raise UsageError (one line, with the fix) for an override the page must not pass on."""
    key = _key(override)
    cli = "the command line accepts it"
    if override.startswith("-"):
        raise UsageError(f"{override!r} is a command-line flag; the page takes key=value overrides only ({cli})")
    if "$" in override:
        raise UsageError(
            f"{override!r}: interpolation and environment variables ($...) are not accepted from the page; "
            f"write the value itself ({cli})"
        )
    if "_target_" in override:
        raise UsageError(f"{override!r}: _target_ (an object to instantiate) is not accepted from the page ({cli})")
    if key == "hydra" or key.startswith(("hydra.", "hydra/")) or "@" in key:
        raise UsageError(f"{override!r}: Hydra's own settings are not accepted from the page ({cli})")
    if any(name in override for name in SECRET_NAME_KEYS):
        raise UsageError(
            f"{override!r}: which environment variable holds a key is set by the llm preset or the command line, "
            "not the page"
        )
    if key == "run_name" and "=" in override:
        refuse_run_name_path(override.split("=", 1)[1].strip())
    refuse_group_path(override, group_options() if groups is None else groups)


def refuse_unsafe_overrides(overrides: list[str]) -> None:
    groups = group_options()
    for one in overrides:
        refuse_unsafe_override(one, groups)


def check_choice(name: str, value: str) -> None:
    """A choice field names a preset file: a plain name, never a path."""
    if not CHOICE_VALUE.match(value):
        raise UsageError(f"{name}={value!r}: pick one of the listed presets")


@dataclass(frozen=True)
class PathPolicy:
    """The folders a form's paths may point into (resolved, symlinks followed)."""

    cwd: Path
    roots: tuple[Path, ...]

    @classmethod
    def make(cls, cwd: Path, outputs: Path, allowed: tuple[Path, ...] = ()) -> PathPolicy:
        roots = tuple(dict.fromkeys(Path(p).expanduser().resolve() for p in (cwd, outputs, *allowed)))
        return cls(Path(cwd).resolve(), roots)

    def root_of(self, path: Path) -> Optional[Path]:
        """The allowed folder `path` lies in (the deepest one), or None."""
        found = [r for r in self.roots if path == r or r in path.parents]
        return max(found, key=lambda r: len(r.parts)) if found else None

    def check(self, key: str, raw: Any, base: Optional[Path] = None) -> None:
        resolved = ((base or self.cwd) / Path(str(raw)).expanduser()).resolve()
        root = self.root_of(resolved)
        if root is None:
            raise UsageError(
                f"{key}={raw}: the page may only use paths under {', '.join(map(str, self.roots))}; "
                "start the dashboard with --allow-path DIR to allow another folder"
            )
        # inside an allowed folder, hidden entries (.git, .env, .ssh, .venv) are not the page's to read or write
        if any(part.startswith(".") for part in resolved.relative_to(root).parts):
            raise UsageError(
                f"{key}={raw}: hidden files and folders are not accepted from the page; "
                "name the folder itself with --allow-path DIR"
            )
        if key in SKILL_PATH_KEYS and resolved.suffix.lower() not in SKILL_SUFFIXES:
            raise UsageError(f"{key}={raw}: a skill file from the page must be Markdown or text (.md, .markdown, .txt)")


def _get(data: PlainConfig, dotted: str) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _tracking_path(uri: Optional[str]) -> Optional[str]:
    """The local file a tracking URI writes to (a plain `sqlite:///PATH`, `file:...` or a bare path); None for an
    http(s) server. Any other scheme (`sqlite+pysqlite://`, `postgresql://`, a driver's own options) is refused from
    the page: what it opens or where it writes is not a path this check can see."""
    if not uri:
        return None
    low = uri.strip().lower()
    if low.startswith(("http://", "https://")):
        return None
    if uri.startswith("sqlite:///"):
        return uri[len("sqlite:///") :].split("?", 1)[0] or "."
    for scheme in ("file://", "file:"):
        if uri.startswith(scheme):
            return uri[len(scheme) :] or "."
    if ":" in uri.split("/", 1)[0]:
        raise UsageError(
            f"tracking.tracking_uri={uri[:200]}: the page takes an http(s) server, a plain sqlite:///PATH or a "
            "folder (the command line accepts other stores)"
        )
    return uri


def _option_paths(options: dict[str, Any]) -> list[tuple[str, Any]]:
    """The benchmark options that name files or folders: the known ones, and any string that looks like a path."""
    out: list[tuple[str, Any]] = []
    for name, value in options.items():
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if not isinstance(v, str) or not v or "://" in v:
                continue
            looks_like_path = "/" in v or v.startswith(("~", "."))
            known = name in OPTION_PATHS and not (name == "compile_cache" and v in ("auto", "off"))
            if known or looks_like_path:
                out.append((f"env.options.{name}", v))
    return out


def refuse_no_sandbox(data: PlainConfig) -> None:
    """Model-written code runs jailed when the launch comes from the page."""
    for key in SANDBOX_KEYS:
        if str(_get(data, key) or "").lower() == "none":
            raise UsageError(f"{key}=none: the page cannot turn the sandbox off (the command line accepts it)")


def refuse_outside_paths(data: PlainConfig, policy: PathPolicy) -> None:
    """Every path of a resolved config (and the run directory a run_name makes) must be under the policy's folders."""
    for key in ("output_dir", "skill_init", "env.data_dir", "env.manifest_dir", "eval.skill_path"):
        value = _get(data, key)
        if value:
            policy.check(key, value)
    for key in ("llm.embedded.model_path", "llm.target.agent.prefix", "llm.optimizer.agent.prefix"):
        value = _get(data, key)
        if value:
            policy.check(key, value)
    tracking = _tracking_path(_get(data, "tracking.tracking_uri"))
    if tracking:
        policy.check("tracking.tracking_uri", tracking)
    data_dir = _get(data, "env.data_dir")
    for key, value in _option_paths(_get(data, "env.options") or {}):
        policy.check(key, value, Path(data_dir) if data_dir and key.endswith("docs_dirs") else None)
    if data.get("run_name"):
        refuse_run_name_path(str(data["run_name"]))
        policy.check("run_name", Path(data["output_dir"]) / "runs" / str(data["run_name"]))


def refuse_from_page(data: PlainConfig, policy: PathPolicy) -> None:
    """The checks a resolved config from the page must pass before any file it names is read."""
    refuse_no_sandbox(data)
    if _get(data, "env.benchmark"):
        raise UsageError(
            f"env.benchmark={_get(data, 'env.benchmark')}: a benchmark class is code the run imports; the page "
            "takes the listed benchmarks only (the command line accepts it)"
        )
    refuse_outside_paths(data, policy)
