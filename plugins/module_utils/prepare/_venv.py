# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""What one SGLang release's virtualenv must hold, and the pip commands that install it.

The venv of a release records what was installed into it in ``gpufleet-installed.txt``
(written only after pip succeeded). The record is the text :func:`requirements_text`
renders from the inputs: the pinned packages, the wheels with their sha256, and pip's
extra arguments. When the record equals the wanted text and the venv's interpreter exists,
nothing needs to run (:func:`needs_install`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
import shlex

RELEASE_RE = re.compile(r"[0-9][0-9A-Za-z.+-]*")  # whole string (fullmatch): no trailing newline
NAME_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]*")
#: Names under the venv root that are not venvs.
RESERVED_NAMES = ("current", "wheelhouse")

#: Measured size (MiB, ``du -sm`` of the venv) of each release's venv when pip installs
#: ``sglang==<release>`` with its dependencies from the package index, on Debian 12 x86_64
#: with Python 3.11 (the real-release stage, ``scripts/test real``, measures it again and
#: fails when it grew by more than :data:`VENV_MIB_SLACK`). The venv role refuses a new
#: venv of such a release when the venv root has less room than this. The one place the
#: number lives.
VENV_MIB = {
    "0.5.23": 10486,  # measured 2026-12-01: torch 2.14.1 (CUDA 13), 207 wheels
}
#: How much the measured size may grow before the real-release stage asks for a new number.
VENV_MIB_SLACK = 0.10

# pip options for local wheels: the wheel replaces whatever the packages pulled in, and
# pip neither resolves nor downloads anything for it.
WHEEL_ARGS = ("--no-deps", "--no-index", "--force-reinstall")

_PIP = ("-m", "pip", "install", "--disable-pip-version-check")


def valid_release(release):
    """Whether ``release`` is a version such as 0.5.9 (safe as a directory name)."""
    return isinstance(release, str) and bool(RELEASE_RE.fullmatch(release))


def valid_name(name):
    """Whether ``name`` may name a venv directory under the root (not ``current``)."""
    return (isinstance(name, str) and bool(NAME_RE.fullmatch(name))
            and name not in RESERVED_NAMES)


def required_mib(release, packages):
    """The room (MiB) a new venv of ``release`` needs, or None when it is not known.

    Known only when ``packages`` install the release itself (``sglang==<release>``, extras
    allowed) and its venv was measured (:data:`VENV_MIB`); wheels alone (a test double)
    are not checked.
    """
    size = VENV_MIB.get(release)
    if not size:
        return None
    wanted = re.compile(r"sglang(\[[^\]]*\])?==%s$" % re.escape(release))
    if not any(wanted.match(str(p).replace(" ", "")) for p in packages or ()):
        return None
    return size


def disk_refusal(release, venv, need_mib, free_mib, where):
    """The refusal when ``free_mib`` at ``where`` is less than ``need_mib``, else None."""
    if need_mib is None or free_mib >= need_mib:
        return None
    return ("SGLang %s: the venv %s needs %d MiB (the measured size of the release's venv) and "
            "%s has %d MiB free; nothing was installed (free %d MiB more, or set "
            "venv_disk_check to false)" % (release, venv, need_mib, where, free_mib,
                                           need_mib - free_mib))


def split_args(extra_args):
    """pip's extra arguments split shell-like (``ValueError`` on unbalanced quotes)."""
    if not extra_args:
        return []
    return shlex.split(extra_args)


def _single_line(kind, value):
    if not isinstance(value, str) or not value.strip():
        raise ValueError("%s must be a non-empty string (got %r)" % (kind, value))
    if "\n" in value or "\r" in value:
        raise ValueError("%s must be one line (got %r)" % (kind, value))
    return value.strip()


def _wheel_path(wheel):
    return wheel["path"] if isinstance(wheel, dict) else wheel


def requirements_text(release, packages, wheels, pip_extra_args):
    """The record of what the venv of ``release`` must hold.

    ``packages``: requirement strings (one line each); ``wheels``: dicts ``{path, sha256}``
    (``sha256`` None when the file is not there to hash); ``pip_extra_args``: a string,
    recorded in its canonical shell-quoted form. Raises ``ValueError`` on a multi-line or
    empty entry and on unbalanced quotes in ``pip_extra_args``.
    """
    lines = ["# SGLang %s: what this venv must hold. A change here reinstalls it." % release,
             "# Written by gpufleet.sglang.release_venv; gpufleet-installed.txt is this text"
             " once pip succeeded."]
    for package in packages or []:
        lines.append(_single_line("a package", package))
    for wheel in wheels or []:
        path = _single_line("a wheel path", _wheel_path(wheel))
        digest = wheel.get("sha256") if isinstance(wheel, dict) else None
        lines.append("# wheel %s sha256 %s" % (path, digest or "unknown (not on the host)"))
    extra = split_args(pip_extra_args)
    if extra:
        lines.append("# pip arguments: %s" % " ".join(shlex.quote(arg) for arg in extra))
    return "\n".join(lines) + "\n"


def needs_install(wanted_text, installed_text, python_exists):
    """Whether pip must run: no interpreter, no record, or a record of something else."""
    if not python_exists:
        return True
    if installed_text is None:
        return True
    return installed_text != wanted_text


def venv_argv(python, directory):
    """The command that creates the venv."""
    return [python, "-m", "venv", directory]


def pip_argv(python, packages, wheels, extra_args):
    """The pip commands to run with the venv's ``python``, packages first, then wheels.

    Packages get ``extra_args`` (split shell-like); wheels (paths or ``{path}`` dicts) get
    :data:`WHEEL_ARGS` only. An empty list of either yields no command for it.
    """
    commands = []
    if packages:
        commands.append([python] + list(_PIP) + split_args(extra_args) + list(packages))
    if wheels:
        commands.append([python] + list(_PIP) + list(WHEEL_ARGS) + [_wheel_path(w) for w in wheels])
    return commands


def tail(text, lines=20, chars=4000):
    """The last ``lines`` non-empty lines of ``text``, at most ``chars`` characters."""
    kept = [ln.rstrip() for ln in (text or "").splitlines() if ln.strip()][-lines:]
    out = "\n".join(kept)
    return out[-chars:]


# --- the KV transfer engine of a PD layout ---------------------------------------------

#: The KV transfer engines a PD layout installs into the release's venv, per family: the
#: module SGLang imports, the pinned build per CUDA major (``non-cuda``: no CUDA at all, the
#: test bed's), the Debian packages the host needs beside them. Checked on PyPI
#: (pypi.org/pypi/<name>/json) on 2026-12-07: mooncake-transfer-engine 0.3.13.post1 (its
#: newest; cp310-cp313 manylinux_2_28 x86_64 and aarch64 wheels), -cuda13 0.3.14 (newest;
#: cp310-cp314), -non-cuda 0.3.13.post1 (newest; cp310-cp313); nixl-cu12 and nixl-cu13 1.5.1
#: (their newest; cp310-cp314). The meta package nixl 1.5.2 requires nixl-cu12==1.5.2 and
#: nixl-cu13==1.5.2 (both, unconditionally), which PyPI did not have that day: the builds are
#: pinned by their own names. Host packages: the engine.so of mooncake-transfer-engine-non-cuda
#: 0.3.13.post1 (cp311 x86_64 wheel, ``readelf -d``) needs libibverbs.so.1, libnuma.so.1 and
#: libcurl.so.4, which the wheel does not bundle; without libibverbs ``import mooncake.engine``
#: fails with "ImportError: libibverbs.so.1: cannot open shared object file". libcurl's
#: package is named per release (Debian 12 libcurl4, 13 libcurl4t64) and is left to the host.
TRANSFER_ENGINES = {
    "mooncake": {
        "module": "mooncake.engine",
        "builds": {
            "cuda12": "mooncake-transfer-engine==0.3.13.post1",
            "cuda13": "mooncake-transfer-engine-cuda13==0.3.14",
            "non-cuda": "mooncake-transfer-engine-non-cuda==0.3.13.post1",
        },
        "host_packages": ["libibverbs1", "libnuma1"],
    },
    "nixl": {
        "module": "nixl._api",
        "builds": {
            "cuda12": "nixl-cu12==1.5.1",
            "cuda13": "nixl-cu13==1.5.1",
        },
        "host_packages": [],
    },
}

#: The engine family of each transfer backend the collection deploys (``mooncake_tcp`` is
#: Mooncake with ``MC_FORCE_TCP=1``).
BACKEND_FAMILY = {"mooncake": "mooncake", "mooncake_tcp": "mooncake", "nixl": "nixl"}

#: The builds :func:`transfer_packages` takes besides ``auto``.
ENGINE_BUILDS = ("cuda12", "cuda13", "non-cuda")


def engine_distributions():
    """``{distribution name: (family, build)}`` of every pinned engine build (the names
    ``importlib.metadata`` knows them by)."""
    out = {}
    for family, engine in TRANSFER_ENGINES.items():
        for build, requirement in engine["builds"].items():
            out[requirement.split("==", 1)[0]] = (family, build)
    return out


def cuda_build(torch_cuda):
    """``cuda12``/``cuda13`` for torch's CUDA version (``"12.9"``, ``13``), or None when
    there is none (a CPU torch, no torch) or it is no version."""
    if torch_cuda is None or isinstance(torch_cuda, bool):
        return None
    major = str(torch_cuda).strip().split(".", 1)[0]
    return "cuda%s" % major if major.isdigit() else None


def transfer_packages(family, build, torch_cuda):
    """The packages of the KV transfer engine of ``family`` (a backend: ``mooncake``,
    ``mooncake_tcp``, ``nixl``; None or "" when the deploy has no PD layout: nothing) in
    ``build`` (``auto``: torch's CUDA major, ``torch_cuda`` as ``_gpu_env.torch_cuda`` reads
    it; or ``cuda12``, ``cuda13``, ``non-cuda``): ``{"packages": [pip requirements],
    "host_packages": [Debian packages]}`` from :data:`TRANSFER_ENGINES`. Raises ValueError
    saying what to set instead."""
    if family is None or family == "":
        return {"packages": [], "host_packages": []}
    name = BACKEND_FAMILY.get(family) if isinstance(family, str) else None
    if name is None:
        raise ValueError("the KV transfer engine is chosen by the transfer backend: %s (got %r)"
                         % (", ".join(sorted(BACKEND_FAMILY)), family))
    engine = TRANSFER_ENGINES[name]
    if build == "auto":
        chosen = cuda_build(torch_cuda)
        if chosen is None:
            raise ValueError(
                "the %s transfer engine's build is auto, which follows torch's CUDA major, and "
                "the venv's torch has no CUDA build (torch_cuda %r): set the build to %s"
                % (name, torch_cuda, " or ".join(sorted(engine["builds"]))))
        if chosen not in engine["builds"]:
            raise ValueError(
                "torch in the venv is built for CUDA %s, and the %s transfer engine has builds "
                "for %s only (%s)" % (torch_cuda, name, ", ".join(sorted(engine["builds"])),
                                      ", ".join(engine["builds"][b] for b in sorted(engine["builds"]))))
        build = chosen
    elif build not in ENGINE_BUILDS:
        raise ValueError("the transfer engine's build must be auto, %s (got %r)"
                         % (", ".join(ENGINE_BUILDS), build))
    elif build not in engine["builds"]:
        raise ValueError("the %s transfer engine has no %s build on PyPI: it has %s"
                         % (name, build, ", ".join(engine["builds"][b] for b in sorted(engine["builds"]))))
    return {"packages": [engine["builds"][build]], "host_packages": list(engine["host_packages"])}
