# -*- coding: utf-8 -*-
"""Unit tests of gpufleet.sglang.release_venv, run in-process against a temp root.

The host interpreter is a fake: ``python -m venv DIR`` creates ``DIR/bin/python`` (a copy
of the fake), and ``DIR/bin/python -m pip install ...`` records what it installed. Every
call is appended to ``calls.jsonl``; ``state.json`` makes pip fail on demand.
"""

import hashlib
import json
import os
import stat
import sys

import pytest

from ansible.module_utils import basic

from ansible_collections.gpufleet.sglang.plugins.modules import release_venv
from ansible_collections.gpufleet.sglang.tests.doubles import lstat_tree

FAKE = r'''#!{python}
import json, os, shutil, sys
LOG = {log!r}
STATE = {state!r}
args = sys.argv[1:]
with open(LOG, "a") as f:
    f.write(json.dumps({{"exe": os.path.abspath(__file__), "args": args}}) + "\n")
with open(STATE) as f:
    state = json.load(f)
if args[:2] == ["-m", "venv"]:
    if state.get("venv_rc"):
        sys.stderr.write("Error: ensurepip is not available\n")
        sys.exit(state["venv_rc"])
    bindir = os.path.join(args[2], "bin")
    os.makedirs(bindir, exist_ok=True)
    shutil.copy(os.path.abspath(__file__), os.path.join(bindir, "python"))
    sys.exit(0)
if args[:3] == ["-m", "pip", "install"]:
    if state.get("pip_rc"):
        sys.stdout.write("Collecting sglang==0.5.9\n")
        sys.stderr.write("noise\n" * 50)
        sys.stderr.write("ERROR: No matching distribution found for sglang==0.5.9\n")
        sys.exit(state["pip_rc"])
    site = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "site.txt")
    with open(site, "a") as f:
        f.write(" ".join(args[3:]) + "\n")
    sys.exit(0)
sys.stderr.write("unexpected args %r\n" % (args,))
sys.exit(3)
'''


class Host:
    """A temp root, a fake base interpreter and the calls it saw."""

    def __init__(self, tmp_path):
        self.tmp = tmp_path
        self.root = tmp_path / "opt" / "sglang"
        self.log = tmp_path / "calls.jsonl"
        self.state_file = tmp_path / "state.json"
        self.state = {}
        self.save()
        self.python = tmp_path / "bin" / "python3"
        self.python.parent.mkdir()
        self.python.write_text(FAKE.format(python=sys.executable, log=str(self.log),
                                           state=str(self.state_file)))
        self.python.chmod(self.python.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.wheelhouse = self.root / "wheelhouse"

    def save(self):
        self.state_file.write_text(json.dumps(self.state))

    def set(self, **kwargs):
        self.state.update(kwargs)
        self.save()

    def wheel(self, name="sglang-0.5.9-py3-none-any.whl", data=b"wheel v1"):
        self.wheelhouse.mkdir(parents=True, exist_ok=True)
        path = self.wheelhouse / name
        path.write_bytes(data)
        return str(path)

    @property
    def calls(self):
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def venv(self, release="0.5.9"):
        return self.root / release

    def args(self, **kwargs):
        args = {"root": str(self.root), "release": "0.5.9", "python": str(self.python),
                "packages": ["sglang==0.5.9"]}
        args.update(kwargs)
        return args

    def tree(self):
        """Every path under the temp dir with its mtime (ns) and, for links, the target."""
        seen = {}
        for path, st in lstat_tree(self.tmp):
            seen[path] = (st.st_mtime_ns, os.readlink(path) if os.path.islink(path) else None)
        return seen


@pytest.fixture
def host(tmp_path):
    return Host(tmp_path)


@pytest.fixture
def commands(monkeypatch):
    """Every argv the module hands to run_command (the real one still runs)."""
    seen = []
    real = basic.AnsibleModule.run_command

    def counting(self, args, *a, **kw):
        seen.append(list(args))
        return real(self, args, *a, **kw)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", counting)
    return seen


def _strip_timeout(argv):
    if os.path.basename(argv[0]) == "timeout":
        assert argv[1] == "--kill-after=10"
        return argv[3:]
    return argv


def test_first_install_then_noop(host, commands, run_module):
    result, failed = run_module(release_venv, host.args())
    assert not failed, result
    venv = host.venv()
    assert result["changed"] is True
    assert result["installed"] is True
    assert result["would_install"] is True
    assert result["venv"] == str(venv)
    assert result["python"] == str(venv / "bin" / "python")
    assert result["link"] is None

    calls = host.calls
    assert [c["args"][:2] for c in calls] == [["-m", "venv"], ["-m", "pip"]]
    assert calls[0]["exe"] == str(host.python)
    assert calls[0]["args"] == ["-m", "venv", str(venv)]
    assert calls[1]["exe"] == str(venv / "bin" / "python")
    assert calls[1]["args"][-1] == "sglang==0.5.9"
    # each command runs under the runner's timeout
    assert all(str(3600) in argv for argv in commands)
    assert [_strip_timeout(argv)[1:3] for argv in commands] == [["-m", "venv"], ["-m", "pip"]]

    record = (venv / "gpufleet-installed.txt").read_text()
    assert record == result["requirements"]
    assert (venv / "gpufleet-requirements.txt").read_text() == record
    assert "sglang==0.5.9" in record.splitlines()
    assert stat.S_IMODE((venv / "gpufleet-installed.txt").stat().st_mode) == 0o644

    before = host.tree()
    del commands[:]
    result2, failed = run_module(release_venv, host.args())
    assert not failed, result2
    assert result2["changed"] is False
    assert result2["installed"] is False
    assert result2["would_install"] is False
    assert result2["requirements"] == record
    assert commands == []  # zero subprocesses on a no-op
    assert len(host.calls) == 2
    assert host.tree() == before  # nothing written, no mtime moved


def test_changed_package_list_reinstalls_without_recreating(host, commands, run_module):
    result, failed = run_module(release_venv, host.args())
    assert not failed, result
    result, failed = run_module(release_venv, host.args(packages=["sglang==0.5.9", "flashinfer-python"]))
    assert not failed, result
    assert result["changed"] is True and result["installed"] is True
    calls = host.calls
    assert [c["args"][:2] for c in calls] == [["-m", "venv"], ["-m", "pip"], ["-m", "pip"]]
    assert calls[2]["args"][-2:] == ["sglang==0.5.9", "flashinfer-python"]
    assert "flashinfer-python" in (host.venv() / "gpufleet-installed.txt").read_text()


def test_pip_extra_args_are_split_and_recorded(host, run_module):
    args = host.args(pip_extra_args="--index-url 'https://mirror.example/a b' --no-cache-dir")
    result, failed = run_module(release_venv, args)
    assert not failed, result
    pip = host.calls[1]["args"]
    assert pip[-4:] == ["--index-url", "https://mirror.example/a b", "--no-cache-dir", "sglang==0.5.9"]
    assert "# pip arguments: --index-url 'https://mirror.example/a b' --no-cache-dir" in result["requirements"]
    # other args: a reinstall
    result, failed = run_module(release_venv, host.args())
    assert not failed, result
    assert result["installed"] is True


def test_wheels_install_after_packages_and_new_bytes_reinstall(host, run_module):
    wheel = host.wheel(data=b"wheel v1")
    args = host.args(wheels=[wheel])
    result, failed = run_module(release_venv, args)
    assert not failed, result
    calls = host.calls
    assert len(calls) == 3
    assert calls[1]["args"][-1] == "sglang==0.5.9"
    assert calls[2]["args"][-4:] == ["--no-deps", "--no-index", "--force-reinstall", wheel]
    assert ("# wheel %s sha256 %s" % (wheel, hashlib.sha256(b"wheel v1").hexdigest())
            in result["requirements"].splitlines())

    result, failed = run_module(release_venv, args)
    assert not failed and result["changed"] is False
    assert len(host.calls) == 3

    host.wheel(data=b"wheel v2, rebuilt")
    result, failed = run_module(release_venv, args)
    assert not failed, result
    assert result["changed"] is True and result["installed"] is True
    calls = host.calls
    assert len(calls) == 5  # no new venv, packages then wheel again
    assert [c["args"][:2] for c in calls[3:]] == [["-m", "pip"], ["-m", "pip"]]
    assert hashlib.sha256(b"wheel v2, rebuilt").hexdigest() in result["requirements"]


def test_wheels_only(host, run_module):
    wheel = host.wheel()
    result, failed = run_module(release_venv, host.args(packages=[], wheels=[wheel]))
    assert not failed, result
    assert [c["args"][:2] for c in host.calls] == [["-m", "venv"], ["-m", "pip"]]
    assert host.calls[1]["args"][-1] == wheel


def test_missing_wheel_is_reported_before_anything_runs(host, commands, run_module):
    missing = str(host.tmp / "nope.whl")
    result, failed = run_module(release_venv, host.args(wheels=[missing]))
    assert not failed, result
    assert result["missing_wheels"] == [missing]
    assert result["changed"] is False and result["installed"] is False
    assert commands == []
    assert not host.venv().exists()


def test_a_wheel_that_differs_from_the_controllers_is_reported(host, commands, run_module):
    wheel = host.wheel()
    result, failed = run_module(release_venv, host.args(wheels=[wheel], wheel_checksums={
        os.path.basename(wheel): "0" * 40}))
    assert not failed and result["missing_wheels"] == [wheel]
    assert commands == []
    import hashlib
    good = hashlib.sha1(open(wheel, "rb").read()).hexdigest()
    result, failed = run_module(release_venv, host.args(wheels=[wheel], wheel_checksums={
        os.path.basename(wheel): good}))
    assert not failed and result["missing_wheels"] == [] and result["installed"] is True


def test_a_missing_system_package_is_reported_and_nothing_installed(host, run_module):
    result, failed = run_module(release_venv, host.args(
        system_packages=["gpufleet-surely-not-a-package"]))
    assert not failed, result
    assert result["missing_packages"] == ["gpufleet-surely-not-a-package"]
    assert result["installed"] is False and not host.venv().exists()


def test_dpkg_status_is_read_per_package():
    out = "python3-venv ii \npython3-requests un \nlibfoo:amd64 ii \n"
    assert release_venv.installed_filter(["python3-venv", "python3-requests", "libfoo", "curl"], out) == [
        "python3-requests", "curl"]


def test_failed_pip_leaves_no_record_and_reports(host, run_module):
    result, failed = run_module(release_venv, host.args())
    assert not failed, result
    record = host.venv() / "gpufleet-installed.txt"
    assert record.exists()

    host.set(pip_rc=1)
    result, failed = run_module(release_venv, host.args(packages=["sglang==0.5.10"]))
    assert failed
    assert result["msg"].startswith("SGLang 0.5.9: pip install failed (rc=1)")
    assert "No matching distribution found for sglang==0.5.9" in result["msg"]
    assert "noise\nnoise" in result["msg"]  # a tail of stderr, not all of it
    assert result["msg"].count("noise") < 50
    assert result["rc"] == 1
    assert result["cmd"][-1] == "sglang==0.5.10"
    assert result["argv"][:4] == [str(host.venv() / "bin" / "python"), "-m", "pip", "install"]
    assert "ERROR: No matching distribution" in result["stderr"]
    assert result["stdout"] == "Collecting sglang==0.5.9\n"
    assert result["timed_out"] is False
    # the old record went away, so a rollback to the old list reinstalls, too
    assert not record.exists()

    result, failed = run_module(release_venv, host.args())
    assert failed  # pip still broken: tried again, not skipped
    host.set(pip_rc=0)
    result, failed = run_module(release_venv, host.args())
    assert not failed and result["installed"] is True
    assert record.exists()


def test_failed_first_pip_writes_nothing(host, run_module):
    host.set(pip_rc=2)
    result, failed = run_module(release_venv, host.args())
    assert failed
    assert "pip install failed" in result["msg"]
    assert not (host.venv() / "gpufleet-installed.txt").exists()
    assert not (host.venv() / "gpufleet-requirements.txt").exists()


def test_failed_venv_creation(host, run_module):
    host.set(venv_rc=1)
    result, failed = run_module(release_venv, host.args())
    assert failed
    assert result["msg"].startswith("SGLang 0.5.9: could not create the venv")
    assert "ensurepip is not available" in result["msg"]
    assert result["cmd"][-3:] == ["-m", "venv", str(host.venv())]
    assert [c["args"][:2] for c in host.calls] == [["-m", "venv"]]


def test_python_not_found(host, commands, run_module):
    result, failed = run_module(release_venv, host.args(python="no-such-python-gpufleet"))
    assert failed
    assert "no-such-python-gpufleet" in result["msg"] and "not found" in result["msg"]
    assert commands == []


def test_python_path_not_executable(host, commands, run_module):
    result, failed = run_module(release_venv, host.args(python=str(host.tmp / "bin" / "python9")))
    assert failed
    assert "python9" in result["msg"] and "not an executable" in result["msg"]
    assert commands == []


def test_check_mode_writes_nothing(host, commands, run_module):
    wheel = host.wheel()
    before = host.tree()
    result, failed = run_module(release_venv, host.args(wheels=[wheel, str(host.tmp / "not-yet.whl")],
                                                        link_current=True, _ansible_check_mode=True))
    assert not failed, result
    assert result["would_install"] is True
    assert result["installed"] is False
    assert result["missing_wheels"] == [str(host.tmp / "not-yet.whl")]
    result, failed = run_module(release_venv, host.args(wheels=[wheel], link_current=True,
                                                        _ansible_check_mode=True))
    assert not failed, result
    assert result["changed"] is True and result["would_install"] is True
    assert result["link"] == str(host.venv())
    assert commands == []
    assert host.calls == []
    assert host.tree() == before
    assert not host.venv().exists()


def test_check_mode_after_install_reports_no_change(host, commands, run_module):
    result, failed = run_module(release_venv, host.args(link_current=True))
    assert not failed, result
    del commands[:]
    result, failed = run_module(release_venv, host.args(link_current=True, _ansible_check_mode=True))
    assert not failed, result
    assert result["changed"] is False and result["would_install"] is False
    assert commands == []
    result, failed = run_module(release_venv, host.args(packages=["sglang==0.5.10"], _ansible_check_mode=True))
    assert result["changed"] is True and result["would_install"] is True
    assert commands == []
    assert "sglang==0.5.10" not in (host.venv() / "gpufleet-installed.txt").read_text()


def test_link_current_moves_the_link(host, run_module):
    current = host.root / "current"
    result, failed = run_module(release_venv, host.args(link_current=True))
    assert not failed, result
    assert result["changed"] is True
    assert os.readlink(str(current)) == str(host.venv())
    assert result["link"] == str(host.venv())

    result, failed = run_module(release_venv, host.args(link_current=True))
    assert not failed and result["changed"] is False
    assert result["link"] == str(host.venv())

    # a second release without the link: the link stays
    args = host.args(release="0.5.10", packages=["sglang==0.5.10"])
    result, failed = run_module(release_venv, args)
    assert not failed and result["changed"] is True
    assert os.readlink(str(current)) == str(host.venv())
    assert result["link"] == str(host.venv())

    # installed already, only the link moves: changed, no subprocess
    calls = len(host.calls)
    result, failed = run_module(release_venv, dict(args, link_current=True))
    assert not failed, result
    assert result["changed"] is True and result["installed"] is False
    assert len(host.calls) == calls
    assert os.readlink(str(current)) == str(host.venv("0.5.10"))
    assert result["link"] == str(host.venv("0.5.10"))
    assert sorted(p.name for p in host.root.iterdir()) == ["0.5.10", "0.5.9", "current"]


def test_link_current_refuses_to_replace_a_directory(host, run_module):
    (host.root / "current").mkdir(parents=True)
    result, failed = run_module(release_venv, host.args(link_current=True))
    assert failed
    assert "is not a symlink" in result["msg"]
    assert (host.root / "current").is_dir()


@pytest.mark.parametrize("release", ["0.5.9 $(id)", "../etc", "latest", "0.5.9\n"])
def test_bad_release(host, commands, run_module, release):
    result, failed = run_module(release_venv, host.args(release=release))
    assert failed
    assert result["msg"] == "venv_release must be a version such as 0.5.9 (got %s)" % release
    assert commands == []
    assert not host.root.exists()


def test_nothing_to_install(host, run_module):
    result, failed = run_module(release_venv, host.args(packages=[], wheels=[]))
    assert failed
    assert result["msg"] == "venv_packages or venv_wheels must name something to install"


def test_multiline_package_is_refused(host, commands, run_module):
    result, failed = run_module(release_venv, host.args(packages=["sglang\n--index-url http://x"]))
    assert failed
    assert "one line" in result["msg"]
    assert commands == []


def test_removed_interpreter_recreates_the_venv(host, run_module):
    result, failed = run_module(release_venv, host.args())
    assert not failed, result
    os.unlink(str(host.venv() / "bin" / "python"))
    result, failed = run_module(release_venv, host.args())
    assert not failed, result
    assert result["installed"] is True
    assert [c["args"][:2] for c in host.calls] == [["-m", "venv"], ["-m", "pip"]] * 2


def test_docs_match_argument_spec():
    import yaml
    doc = yaml.safe_load(release_venv.DOCUMENTATION)
    source = open(release_venv.__file__).read()
    for name, option in doc["options"].items():
        assert "%s=dict(type=\"%s\"" % (name, option["type"]) in source, name
    assert set(doc["options"]) == {"root", "release", "packages", "wheels", "pip_extra_args",
                                   "python", "link_current", "timeout", "system_packages",
                                   "wheel_checksums", "name", "disk_check"}
    ret = yaml.safe_load(release_venv.RETURN)
    assert set(ret) == {"python", "venv", "installed", "would_install", "requirements", "link",
                        "missing_packages", "missing_wheels", "package_manager"}


# --- issue 27: a venv name of its own, and the disk check against the measured size -------


def test_a_named_venv_lives_beside_the_release(host, run_module):
    result, failed = run_module(release_venv, host.args(release="0.5.23", name="0.5.23-emulator",
                                                        packages=["sglang==0.5.23"], disk_check=False))
    assert not failed, result
    assert result["venv"] == str(host.root / "0.5.23-emulator")
    assert (host.root / "0.5.23-emulator" / "gpufleet-installed.txt").is_file()
    assert not (host.root / "0.5.23").exists()


@pytest.mark.parametrize("name", ["current", "wheelhouse", "../x", "a/b", ""])
def test_a_name_that_is_no_venv_directory_is_refused(host, commands, run_module, name):
    result, failed = run_module(release_venv, host.args(name=name))
    assert failed
    assert "venv_name" in result["msg"] and "0.5.9" in result["msg"]
    assert host.calls == []


def _measured(monkeypatch, mib):
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _venv
    monkeypatch.setitem(_venv.VENV_MIB, "0.5.9", mib)


def test_too_little_room_refuses_with_both_numbers_and_installs_nothing(host, monkeypatch, run_module):
    _measured(monkeypatch, 10 ** 9)  # about a petabyte: more than any test disk has
    result, failed = run_module(release_venv, host.args())
    assert failed
    assert "needs 1000000000 MiB" in result["msg"]
    assert "MiB free" in result["msg"] and "0.5.9" in result["msg"]
    assert result["required_mib"] == 10 ** 9
    assert 0 <= result["free_mib"] < 10 ** 9
    assert "%d MiB free" % result["free_mib"] in result["msg"]
    assert host.calls == []  # no venv, no pip
    assert not host.venv().exists()


def test_enough_room_installs_and_the_check_can_be_turned_off(host, monkeypatch, run_module):
    _measured(monkeypatch, 1)
    result, failed = run_module(release_venv, host.args())
    assert not failed, result
    assert result["installed"] is True
    _measured(monkeypatch, 10 ** 9)
    result, failed = run_module(release_venv, host.args(root=str(host.tmp / "other"), disk_check=False))
    assert not failed, result
    assert result["installed"] is True


def test_the_disk_check_is_only_for_the_release_itself_on_a_new_venv(host, monkeypatch, run_module):
    _measured(monkeypatch, 10 ** 9)
    # wheels alone (a test double) are not the release's measured venv
    wheel = host.wheel()
    result, failed = run_module(release_venv, host.args(packages=[], wheels=[wheel]))
    assert not failed, result
    # an existing venv (a reinstall in place) is not refused either
    result, failed = run_module(release_venv, host.args(packages=["sglang==0.5.9", "extra==1"],
                                                        wheels=[wheel]))
    assert not failed, result
