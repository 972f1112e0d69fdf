# -*- coding: utf-8 -*-
"""Unit tests of the pure venv logic (module_utils/prepare/_venv.py)."""

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._venv import (
    TRANSFER_ENGINES,
    WHEEL_ARGS,
    engine_distributions,
    needs_install,
    pip_argv,
    requirements_text,
    split_args,
    tail,
    transfer_packages,
    valid_release,
    venv_argv,
)

WHEEL = {"path": "/opt/sglang/wheelhouse/sglang-0.5.9-py3-none-any.whl", "sha256": "ab" * 32}


def _body(text):
    """The lines of a record that are not comments."""
    return [ln for ln in text.splitlines() if not ln.startswith("#")]


@pytest.mark.parametrize("release", ["0.5.9", "0.4.6.post5", "0.5.0rc1", "1.0+local", "0.5.9-dev"])
def test_valid_release(release):
    assert valid_release(release)


@pytest.mark.parametrize("release", ["", "v0.5.9", "0.5.9 $(id)", "0.5.9;touch /tmp/x", "../0.5.9",
                                     "0.5/9", ".5", "0.5.9\n", None, 5])
def test_invalid_release(release):
    assert not valid_release(release)


def test_requirements_text_lists_packages_wheels_and_args():
    text = requirements_text("0.5.9", ["sglang[all]==0.5.9", "flashinfer-python==0.2.5"], [WHEEL],
                             "--index-url https://mirror.example/simple --no-cache-dir")
    lines = text.splitlines()
    assert lines[0].startswith("# SGLang 0.5.9:")
    assert _body(text) == ["sglang[all]==0.5.9", "flashinfer-python==0.2.5"]
    assert "# wheel %s sha256 %s" % (WHEEL["path"], "ab" * 32) in lines
    assert lines[-1] == "# pip arguments: --index-url https://mirror.example/simple --no-cache-dir"
    assert text.endswith("\n")
    # packages before wheels before arguments
    assert lines.index("sglang[all]==0.5.9") < lines.index("# wheel %s sha256 %s" % (WHEEL["path"], "ab" * 32))


def test_requirements_text_is_deterministic_and_tracks_every_input():
    base = requirements_text("0.5.9", ["sglang==0.5.9"], [WHEEL], "--no-index")
    assert base == requirements_text("0.5.9", ["sglang==0.5.9"], [dict(WHEEL)], "--no-index")
    variants = [
        requirements_text("0.5.10", ["sglang==0.5.9"], [WHEEL], "--no-index"),
        requirements_text("0.5.9", ["sglang==0.5.10"], [WHEEL], "--no-index"),
        requirements_text("0.5.9", ["sglang==0.5.9"], [dict(WHEEL, sha256="cd" * 32)], "--no-index"),
        requirements_text("0.5.9", ["sglang==0.5.9"], [dict(WHEEL, path="/elsewhere/x.whl")], "--no-index"),
        requirements_text("0.5.9", ["sglang==0.5.9"], [], "--no-index"),
        requirements_text("0.5.9", ["sglang==0.5.9"], [WHEEL], ""),
        requirements_text("0.5.9", ["sglang==0.5.9"], [WHEEL], "--no-index --pre"),
    ]
    for variant in variants:
        assert variant != base
    assert len(set(variants)) == len(variants)


def test_requirements_text_without_args_has_no_args_line():
    text = requirements_text("0.5.9", ["sglang==0.5.9"], [], "")
    assert "pip arguments" not in text
    assert _body(text) == ["sglang==0.5.9"]


def test_requirements_text_records_args_canonically_and_on_one_line():
    text = requirements_text("0.5.9", ["sglang==0.5.9"], [], "--extra-index-url 'https://x/a b'\n--pre")
    assert text.splitlines()[-1] == "# pip arguments: --extra-index-url 'https://x/a b' --pre"
    assert _body(text) == ["sglang==0.5.9"]
    # the same argv spelled differently is the same record
    assert text == requirements_text("0.5.9", ["sglang==0.5.9"], [], '--extra-index-url "https://x/a b" --pre')


def test_requirements_text_unhashed_wheel():
    text = requirements_text("0.5.9", [], [{"path": "/w/x.whl", "sha256": None}], "")
    assert "# wheel /w/x.whl sha256 unknown (not on the host)" in text.splitlines()


@pytest.mark.parametrize("packages, wheels, args", [
    (["sglang==0.5.9\n--index-url http://evil"], [], ""),
    ([""], [], ""),
    ([], [{"path": "/w/x.whl\nsglang", "sha256": "a"}], ""),
    (["sglang"], [], "--index-url 'unclosed"),
])
def test_requirements_text_rejects_ambiguous_input(packages, wheels, args):
    with pytest.raises(ValueError):
        requirements_text("0.5.9", packages, wheels, args)


def test_needs_install():
    text = requirements_text("0.5.9", ["sglang==0.5.9"], [], "")
    assert needs_install(text, text, True) is False
    assert needs_install(text, text, False) is True
    assert needs_install(text, None, True) is True
    assert needs_install(text, "", True) is True
    assert needs_install(text, text.replace("0.5.9", "0.5.8"), True) is True
    assert needs_install(text, text.rstrip("\n"), True) is True


def test_pip_argv_packages_then_wheels():
    cmds = pip_argv("/opt/sglang/0.5.9/bin/python", ["sglang==0.5.9", "torch==2.8.0"],
                    ["/w/a.whl", "/w/b.whl"], "--index-url 'https://mirror/x y' --no-cache-dir")
    assert len(cmds) == 2
    packages, wheels = cmds
    assert packages[:4] == ["/opt/sglang/0.5.9/bin/python", "-m", "pip", "install"]
    assert packages[-5:] == ["--index-url", "https://mirror/x y", "--no-cache-dir",
                             "sglang==0.5.9", "torch==2.8.0"]
    assert wheels[:4] == ["/opt/sglang/0.5.9/bin/python", "-m", "pip", "install"]
    assert wheels[-5:] == ["--no-deps", "--no-index", "--force-reinstall", "/w/a.whl", "/w/b.whl"]
    # pip's extra args belong to the package run only
    assert "--no-cache-dir" not in wheels
    for argv in cmds:
        assert all(isinstance(a, str) for a in argv)


def test_pip_argv_accepts_wheel_dicts_and_skips_empty_lists():
    assert pip_argv("py", [], [], "--pre") == []
    only_wheels = pip_argv("py", [], [WHEEL], "--pre")
    assert len(only_wheels) == 1
    assert only_wheels[0][-1] == WHEEL["path"]
    assert list(WHEEL_ARGS) == only_wheels[0][-4:-1]
    only_packages = pip_argv("py", ["sglang"], [], "")
    assert only_packages == [["py", "-m", "pip", "install", "--disable-pip-version-check", "sglang"]]


def test_pip_argv_never_uses_a_shell():
    (argv,) = pip_argv("py", ["sglang==0.5.9; rm -rf /"], [], "--pre $(id)")
    assert "sglang==0.5.9; rm -rf /" in argv
    assert argv[-3:-1] == ["--pre", "$(id)"]


def test_split_args_and_venv_argv():
    assert split_args("") == []
    assert split_args(None) == []
    assert split_args("-c '/etc/a b.txt'") == ["-c", "/etc/a b.txt"]
    assert venv_argv("python3", "/opt/sglang/0.5.9") == ["python3", "-m", "venv", "/opt/sglang/0.5.9"]


def test_tail():
    text = "\n".join("line %d" % i for i in range(100)) + "\n\n"
    assert tail(text, lines=3) == "line 97\nline 98\nline 99"
    assert tail("", lines=3) == ""
    assert len(tail("x" * 10000, chars=50)) == 50


# --- issue 27 ------------------------------------------------------------------------------

def test_venv_names():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._venv import valid_name
    assert valid_name("0.5.23") and valid_name("0.5.23-emulator")
    for bad in ("current", "wheelhouse", "", "-x", "a/b", "..", "x\n", None):
        assert not valid_name(bad), bad


def test_required_room_is_the_measured_size_of_the_release_itself():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _venv
    size = _venv.VENV_MIB["0.5.23"]
    assert isinstance(size, int) and size > 1000  # several GB, measured by scripts/test real
    assert _venv.required_mib("0.5.23", ["sglang==0.5.23"]) == size
    assert _venv.required_mib("0.5.23", ["sglang[all] == 0.5.23"]) == size
    assert _venv.required_mib("0.5.23", []) is None  # wheels only: a test double
    assert _venv.required_mib("0.5.23", ["sglang==0.5.9"]) is None
    assert _venv.required_mib("0.4.6.post5", ["sglang==0.4.6.post5"]) is None  # not measured


def test_the_refusal_names_both_numbers():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._venv import disk_refusal
    assert disk_refusal("0.5.23", "/opt/sglang/0.5.23", 100, 100, "/opt") is None
    assert disk_refusal("0.5.23", "/opt/sglang/0.5.23", None, 0, "/opt") is None
    msg = disk_refusal("0.5.23", "/opt/sglang/0.5.23", 9000, 1234, "/opt")
    assert "9000 MiB" in msg and "1234 MiB free" in msg and "0.5.23" in msg and "/opt" in msg


# --- the KV transfer engine of a PD layout ----------------------------------------------

MOONCAKE_HOST = ["libibverbs1", "libnuma1"]


@pytest.mark.parametrize("family, build, torch_cuda, packages, host", [
    ("mooncake", "auto", "12.8", ["mooncake-transfer-engine==0.3.13.post1"], MOONCAKE_HOST),
    ("mooncake", "auto", "13.0", ["mooncake-transfer-engine-cuda13==0.3.14"], MOONCAKE_HOST),
    ("mooncake", "auto", 12, ["mooncake-transfer-engine==0.3.13.post1"], MOONCAKE_HOST),
    # mooncake_tcp is Mooncake forced to TCP: the same engine
    ("mooncake_tcp", "auto", "12.9", ["mooncake-transfer-engine==0.3.13.post1"], MOONCAKE_HOST),
    ("mooncake_tcp", "non-cuda", None, ["mooncake-transfer-engine-non-cuda==0.3.13.post1"], MOONCAKE_HOST),
    # an explicit build wins over torch's CUDA
    ("mooncake", "cuda13", "12.8", ["mooncake-transfer-engine-cuda13==0.3.14"], MOONCAKE_HOST),
    ("mooncake", "cuda12", None, ["mooncake-transfer-engine==0.3.13.post1"], MOONCAKE_HOST),
    ("nixl", "auto", "12.8", ["nixl-cu12==1.5.1"], []),
    ("nixl", "auto", "13.0", ["nixl-cu13==1.5.1"], []),
    ("nixl", "cuda13", "12.8", ["nixl-cu13==1.5.1"], []),
    # no PD layout: nothing to install
    (None, "auto", None, [], []),
    ("", "auto", "12.8", [], []),
])
def test_transfer_packages(family, build, torch_cuda, packages, host):
    assert transfer_packages(family, build, torch_cuda) == {"packages": packages, "host_packages": host}


@pytest.mark.parametrize("family, build, torch_cuda, message", [
    ("mooncake", "auto", None, "the mooncake transfer engine's build is auto, which follows torch's CUDA "
                               "major, and the venv's torch has no CUDA build (torch_cuda None): set the "
                               "build to cuda12 or cuda13 or non-cuda"),
    ("nixl", "auto", None, "set the build to cuda12 or cuda13"),
    ("mooncake", "auto", "11.8", "torch in the venv is built for CUDA 11.8, and the mooncake transfer engine "
                                 "has builds for cuda12, cuda13, non-cuda only"),
    ("nixl", "non-cuda", None, "the nixl transfer engine has no non-cuda build on PyPI: it has "
                               "nixl-cu12==1.5.1, nixl-cu13==1.5.1"),
    ("mooncake", "cu12", "12.8", "the transfer engine's build must be auto, cuda12, cuda13, non-cuda (got 'cu12')"),
    ("mooncake", None, "12.8", "must be auto"),
    ("mori", "auto", "12.8", "the KV transfer engine is chosen by the transfer backend: mooncake, "
                             "mooncake_tcp, nixl (got 'mori')"),
    (["mooncake"], "auto", "12.8", "chosen by the transfer backend"),
])
def test_transfer_packages_refusals(family, build, torch_cuda, message):
    with pytest.raises(ValueError) as err:
        transfer_packages(family, build, torch_cuda)
    assert message in str(err.value)


def test_every_engine_build_is_pinned_and_known_by_its_distribution():
    dists = engine_distributions()
    assert dists == {
        "mooncake-transfer-engine": ("mooncake", "cuda12"),
        "mooncake-transfer-engine-cuda13": ("mooncake", "cuda13"),
        "mooncake-transfer-engine-non-cuda": ("mooncake", "non-cuda"),
        "nixl-cu12": ("nixl", "cuda12"),
        "nixl-cu13": ("nixl", "cuda13"),
    }
    for engine in TRANSFER_ENGINES.values():
        assert all(req.count("==") == 1 and split_args(req) == [req] for req in engine["builds"].values())
