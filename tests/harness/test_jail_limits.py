"""The agent jail's limits hold against hostile commands: a fork loop stops at the process limit, a 1 GB write to
/tmp and a large write to the workspace stop at the disk and file-size limits, 100k small files stop at the file
limit, /tmp counts against the memory limit; each ends as an error the model sees (or a named error), and nothing
is left on the host afterwards (no process of the jail's uid, no file outside the run's own folders)."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
from conftest import need_bwrap, need_harness
from harness_helpers import HostileModel, _hostile_run, _jail, _run

from skillopt_ray.harness.jail import Jail, JailLimits, unpack_export
from skillopt_ray.harness.runner import AgentSettings, HarnessError, run_agent
from skillopt_ray.harness.skill_md import render_skill_md
from skillopt_ray.harness.workspace import WorkspaceSpec, prepare_workspace


def _cmdlines() -> list[bytes]:
    found = []
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                found.append(Path(f"/proc/{e}/cmdline").read_bytes())
            except OSError:
                pass
    return found


FORK_LOOP = (
    'python -c "import os,time\n'
    "kids=[]\n"
    "try:\n"
    "    for i in range(400):\n"
    "        p=os.fork()\n"
    "        if p==0:\n"
    "            time.sleep(20); os._exit(0)\n"
    "        kids.append(p)\n"
    "except OSError as e:\n"
    "    print('FORK-STOPPED', len(kids), e)\n"
    "for k in kids: os.kill(k, 9)\n"
    "print('FORKED', len(kids))\""
)


@pytest.mark.parametrize("harness", ["codex", "claude_code"])
def test_a_fork_loop_stops_at_the_process_limit_and_the_cli_still_answers(tmp_path, monkeypatch, harness):
    out, run, _ = _hostile_run(tmp_path, monkeypatch, FORK_LOOP, JailLimits(processes=128), harness=harness)
    assert "FORK-STOPPED" in out and "Resource temporarily unavailable" in out, out
    forked = int(re.search(r"FORKED (\d+)", out).group(1))  # type: ignore[union-attr]
    assert 0 < forked < 128  # the CLI, the forwarder and their threads hold the rest of the 128
    assert run.final_message == "<answer>done</answer>"


def test_a_1gb_write_to_tmp_stops_at_the_disk_limit(tmp_path, monkeypatch):
    out, run, wd = _hostile_run(
        tmp_path, monkeypatch, "head -c 1G /dev/zero > /tmp/big; echo RC=$?; ls -l /tmp/big", JailLimits(tmp_mb=128)
    )
    assert "No space left on device" in out and "RC=1" in out, out
    size = int(re.search(r"(\d{6,}) \w+ +\d+ [\d:]+ /tmp/big", out).group(1))  # type: ignore[union-attr]
    assert size <= 128 * 1024 * 1024
    assert run.final_message == "<answer>done</answer>"
    assert not (wd / "big").exists()  # /tmp is the jail's own, never sent back


def test_a_large_workspace_write_stops_at_the_file_size_limit(tmp_path, monkeypatch):
    out, run, wd = _hostile_run(
        tmp_path, monkeypatch, "head -c 300M /dev/zero > big.bin; echo RC=$?", JailLimits(file_mb=32, disk_mb=512)
    )
    assert "File size limit exceeded" in out or "File too large" in out, out
    assert "RC=0" not in out
    assert run.final_message == "<answer>done</answer>"
    assert (wd / "big.bin").stat().st_size <= 32 * 1024 * 1024  # what came back to the run folder is capped too


def test_100k_small_files_stop_at_the_file_count_limit(tmp_path, monkeypatch):
    script = (
        'mkdir many && python -c "import os\n'
        "n=0\n"
        "try:\n"
        "    for i in range(100000):\n"
        "        open('many/f%d' % i, 'w').close(); n+=1\n"
        "except OSError as e:\n"
        "    print('FILES-STOPPED', n, e)\""
    )
    out, run, wd = _hostile_run(tmp_path, monkeypatch, script, JailLimits(disk_files=3000))
    assert "FILES-STOPPED" in out and "No space left on device" in out, out
    made = int(re.search(r"FILES-STOPPED (\d+)", out).group(1))  # type: ignore[union-attr]
    assert 0 < made < 3000
    assert run.final_message == "<answer>done</answer>"
    assert len(os.listdir(wd / "many")) == made  # the files came back, no more


def test_a_workspace_larger_than_the_disk_limit_is_a_named_error(tmp_path):
    need_bwrap()
    need_harness("codex")
    wd = tmp_path / "ws"
    prepare_workspace(wd, render_skill_md("", "D"), WorkspaceSpec(task="t"))
    (wd / "input.bin").write_bytes(os.urandom(6 * 1024 * 1024))
    settings = AgentSettings("codex", "m", 30.0, limits=JailLimits(disk_mb=4))
    with pytest.raises(HarnessError) as err:
        asyncio.run(run_agent(HostileModel("true"), settings, wd, "go", "k"))
    assert "disk limit" in str(err.value) and "llm.target.agent.disk_mb" in str(err.value)
    assert err.value.kind == "sandbox_start"


def test_tmp_counts_against_the_memory_limit(tmp_path):
    """A tmpfs is memory: 300 MB in /tmp passes no process's resident size, yet ends a jail limited to 250 MB."""
    jail, ws = _jail(tmp_path, JailLimits(tmp_mb=400, file_mb=400))
    t0 = time.monotonic()
    r = _run(jail, ws, "head -c 300M /dev/zero > /tmp/fill; sleep 60", memory_mb=250)
    assert r.out_of_memory and time.monotonic() - t0 < 30
    assert r.peak_disk_mb > 100  # most of what went past 250 MB was the tmpfs, not a process


def test_the_time_limit_sends_the_files_back_and_ends_every_process(tmp_path):
    jail, ws = _jail(tmp_path)
    t0 = time.monotonic()
    r = _run(jail, ws, "echo partial > p.txt; (sleep 300 &) ; sleep 300", timeout_s=2.0)
    assert r.timed_out and r.exported and time.monotonic() - t0 < 15
    assert (ws / "p.txt").read_text() == "partial\n"


def test_only_regular_files_and_folders_come_back(tmp_path):
    jail, ws = _jail(tmp_path)
    (ws / "seed.txt").write_text("seed")
    r = _run(jail, ws, "mkdir -p d/e && echo x > d/e/f.txt && ln -s /etc/passwd link && mkfifo pipe && cat seed.txt")
    assert r.returncode == 0 and r.stdout == "seed" and r.exported and r.skipped == 2
    assert (ws / "d" / "e" / "f.txt").read_text() == "x\n"
    assert not (ws / "link").exists() and not (ws / "link").is_symlink() and not (ws / "pipe").exists()


def test_read_only_paths_stay_readable_and_read_only_under_tmp_and_elsewhere(tmp_path):
    """A page image under /tmp (which the launcher covers with its tmpfs) and a file elsewhere on the host (its
    parent folders made readable for the jail's uid) are both readable and neither writable."""
    need_bwrap()
    page = tmp_path / "pages" / "p1.png"
    page.parent.mkdir()
    page.write_bytes(b"PAGE")
    elsewhere = str(Path(__file__).resolve().parents[2] / "pyproject.toml")
    ws = tmp_path / "ws"
    ws.mkdir()
    (tmp_path / "prefix").mkdir()
    jail = Jail(tmp_path / "j", tmp_path / "prefix", read_only=(str(page), elsewhere))
    r = _run(jail, ws, f"cat {page}; echo; head -c 9 {elsewhere}; echo; echo x > {page} || echo PAGE-RO; ls /tmp")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("PAGE\n[build-sy\nPAGE-RO\n"), r.stdout
    assert page.read_bytes() == b"PAGE"


def _tar(members: list[tuple[tarfile.TarInfo, bytes]], path: Path, status: bool = True) -> Path:
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
        if status:
            note = json.dumps({"timed_out": False, "skipped": 0}).encode()
            info = tarfile.TarInfo(".status.json")
            info.size = len(note)
            tar.addfile(info, io.BytesIO(note))
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def test_unpack_refuses_members_that_would_land_outside_or_through_a_link(tmp_path):
    """The archive comes from the jail and is not trusted: absolute names, `..`, links and a folder the host
    holds as a symlink (a linked corpus) are all skipped; ordinary members land where they should."""
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (ws / "corpus").symlink_to(outside, target_is_directory=True)
    members = [
        (_member("workspace/ok.txt"), b"fine"),
        (_member("workspace/../escape.txt"), b"no"),
        (_member("/abs.txt"), b"no"),
        (_member("workspace/corpus/planted.txt"), b"no"),
        (_member("workspace/corpus"), b"no"),
        (_member("workspace/hard", tarfile.LNKTYPE, "workspace/ok.txt"), b""),  # a second name: kept
        (_member("workspace/hard2", tarfile.LNKTYPE, "/etc/passwd"), b""),  # a file not sent first: refused
        (_member("workspace/hard3", tarfile.LNKTYPE, "workspace/corpus/x"), b""),
        (_member("workspace/sym", tarfile.SYMTYPE, "/etc/passwd"), b""),
        (_member("other/x.txt"), b"no"),
    ]
    got = unpack_export(_tar(members, tmp_path / "e.tar"), {"workspace": ws})
    assert got.whole and got.note["skipped"] == 0
    assert (ws / "ok.txt").read_bytes() == b"fine" and (ws / "hard").read_bytes() == b"fine"
    assert sorted(os.listdir(ws)) == ["corpus", "hard", "ok.txt"] and os.listdir(outside) == []
    assert not (tmp_path / "escape.txt").exists()


def test_unpack_of_a_cut_archive_keeps_what_came_whole(tmp_path):
    path = _tar([(_member("workspace/a.txt"), b"a" * 5000)], tmp_path / "e.tar", status=False)
    ws = tmp_path / "ws"
    ws.mkdir()
    assert not unpack_export(path, {"workspace": ws}).whole and (ws / "a.txt").read_bytes() == b"a" * 5000
    path.write_bytes(path.read_bytes()[:700])  # cut inside the file's data
    (ws / "a.txt").unlink()
    assert not unpack_export(path, {"workspace": ws}).whole


def test_the_limits_are_config_keys_validated_and_handed_to_the_jail():
    from skillopt_ray import cli
    from skillopt_ray.llm.wire import agent_settings

    base = ["+experiment=searchqa", "llm=codex"]
    with pytest.raises(cli.UsageError, match=r"llm.target.agent.processes=8 is invalid; it must be >= 64"):
        cli.compose([*base, "llm.target.agent.processes=8"])
    with pytest.raises(cli.UsageError, match=r"llm.target.agent.disk_mb=0 is invalid"):
        cli.compose([*base, "llm.target.agent.disk_mb=0"])
    obj = cli.compose(
        [*base, "llm.target.agent.processes=300", "llm.target.agent.disk_files=999", "llm.target.agent.tmp_mb=64"]
    )
    settings = AgentSettings.from_gateway(agent_settings(obj.llm.target), 60.0)
    assert settings.limits == JailLimits(processes=300, disk_mb=1024, disk_files=999, file_mb=256, tmp_mb=64)
    assert AgentSettings.from_gateway({"harness": "codex", "model": "m"}, 60.0).limits == JailLimits()


NOBODY_DRIVER = r"""
import asyncio, importlib.util, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
spec = importlib.util.spec_from_file_location("jail", sys.argv[2])
jail_mod = importlib.util.module_from_spec(spec)
sys.modules["jail"] = jail_mod
spec.loader.exec_module(jail_mod)
root = Path(sys.argv[3])
jail = jail_mod.Jail(root / "j", root / "prefix", limits=jail_mod.JailLimits(processes=40, disk_mb=16, disk_files=300, tmp_mb=16))
env = jail_mod.jail_env(jail.home_path(), jail.prefix_path(), {})
r = asyncio.run(jail.run(root / "ws", env, ["sh", "-c", sys.argv[4]], 20, 4096))
print(json.dumps({"rc": r.returncode, "out": r.stdout, "err": r.stderr, "exported": r.exported}))
"""

NOBODY_SCRIPT = (
    "id -u; python3 -c \"import pty, os; m, s = pty.openpty(); print('PTY', os.ttyname(s))\"; "
    + FORK_LOOP.replace("python -c", "python3 -c")
    + "; python3 -c \"\nn=0\ntry:\n    for i in range(2000): open('f%d' % i, 'w').close(); n+=1\n"
    "except OSError as e: print('FILES-STOPPED', n, e)\"; rm -f f*; head -c 40M /dev/zero > /tmp/big; echo RC=$?; "
    "rm /tmp/big; echo kept > kept.txt; (python3 -c 'import time; time.sleep(300)' left-behind-marker &)"
)


def test_the_limits_hold_for_an_unprivileged_caller_too(tmp_path):
    """Most users are not root: bubblewrap then runs in a user namespace, where the kernel counts the jail's
    processes apart from the user's others. Run the same jail as uid 65534 (root here drops to it with setpriv;
    the system Python runs the driver, since the project's may sit in root's home)."""
    import subprocess

    need_bwrap()
    if os.geteuid() != 0 or not shutil.which("setpriv") or not os.path.exists("/usr/bin/python3"):
        pytest.skip("needs root (to become an unprivileged user), setpriv and /usr/bin/python3")
    repo = Path(__file__).resolve().parents[2]
    top = Path(tempfile.mkdtemp(prefix="jl-nobody-"))
    try:
        (top / "pkgs" / "skillopt_envs").mkdir(parents=True)
        (top / "pkgs" / "skillopt_envs" / "__init__.py").write_text("")
        shutil.copy(repo / "envs" / "sandbox.py", top / "pkgs" / "skillopt_envs" / "sandbox.py")
        (top / "pkgs" / "skillopt_ray" / "harness").mkdir(parents=True)  # the jail's own modules, nothing else
        for init in ("skillopt_ray", "skillopt_ray/harness"):
            (top / "pkgs" / init / "__init__.py").write_text("")
        for mod in (repo / "skillopt_ray" / "harness").glob("jail_*.py"):
            shutil.copy(mod, top / "pkgs" / "skillopt_ray" / "harness" / mod.name)
        (top / "driver.py").write_text(NOBODY_DRIVER)
        for d in ("ws", "prefix"):
            (top / d).mkdir()
        for p in [top, *top.rglob("*")]:
            os.chown(p, 65534, 65534)
        top.chmod(0o755)
        argv = [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            str(top / "driver.py"),
        ]
        argv += [str(top / "pkgs"), str(repo / "skillopt_ray" / "harness" / "jail.py"), str(top), NOBODY_SCRIPT]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd="/")
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        out = r["out"]
        assert out.startswith("65534\n") and "PTY /dev/pts/" in out, r
        assert "FORK-STOPPED" in out and 0 < int(re.search(r"FORKED (\d+)", out).group(1)) < 40  # type: ignore[union-attr]
        assert 0 < int(re.search(r"FILES-STOPPED (\d+)", out).group(1)) < 300  # type: ignore[union-attr]
        assert "No space left on device" in r["err"] and "RC=1" in out
        assert r["exported"] and (top / "ws" / "kept.txt").read_text() == "kept\n"
        assert not (top / "ws" / "big").exists()
        assert not [c for c in _cmdlines() if b"left-behind-marker" in c]  # the jail's leftovers were ended
    finally:
        shutil.rmtree(top, ignore_errors=True)
