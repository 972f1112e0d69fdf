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
