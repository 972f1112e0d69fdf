#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: release_venv
short_description: One Python virtualenv per SGLang release, installed once
version_added: 0.1.0
author: gpufleet developers (@gpufleet)
description:
  - Keeps C(<root>/<name>) (O(name) defaults to O(release)) a virtualenv that holds
    O(packages) and O(wheels), and optionally points C(<root>/current) at it.
  - Before it creates a venv that installs the release itself (C(sglang==<release>) in
    O(packages)), it checks that O(root) has room for the release's measured venv size and
    refuses, naming both numbers, when it has not (O(disk_check)).
  - The venv records what was installed into it in C(gpufleet-installed.txt), namely the
    packages, the sha256 of every wheel and pip's extra arguments. When that record equals what is
    wanted and the venv's interpreter exists, nothing runs on the host (no pip, no Python)
    and nothing is written.
  - Otherwise creates the venv with C(<python> -m venv) when its interpreter is missing, runs
    pip for O(packages) (with O(pip_extra_args)), then for O(wheels) (with
    C(--no-deps --no-index --force-reinstall)), and writes C(gpufleet-requirements.txt) and,
    last, C(gpufleet-installed.txt). The old record is removed before pip runs, so a failed
    or interrupted install is retried on the next run.
  - All host commands run through the collection's command runner, each bounded by O(timeout).
requirements:
  - The interpreter O(python) on the host, with the C(venv) module (Debian C(python3-venv)).
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Runs nothing and writes nothing; reports whether it would install (RV(would_install)) and move the link.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A second run with the same arguments finds the record equal and runs nothing.
options:
  root:
    description: Directory that holds one venv per release and the C(current) link.
    type: path
    default: /opt/sglang
  release:
    description:
      - SGLang release the venv holds, e.g. C(0.5.9). The venv is C(<root>/<release>)
        unless O(name) is given.
      - Must match C(^[0-9][0-9A-Za-z.+-]*$).
    type: str
    required: true
  name:
    description:
      - Directory of the venv under O(root); defaults to O(release).
      - Two builds of one release on a host (the real package beside a test double) need
        two names. Must match C(^[0-9A-Za-z][0-9A-Za-z._+-]*$) and not be C(current) or
        C(wheelhouse).
    type: str
  disk_check:
    description:
      - Refuse to create a venv of a release whose measured size (the collection's table,
        C(plugins/module_utils/prepare/_venv.py) C(VENV_MIB)) is more than O(root) has free. Only
        checked when O(packages) pin C(sglang==<release>) and the venv does not exist yet.
    type: bool
    default: true
  packages:
    description: Requirements pip installs into the venv (pinned), e.g. C(sglang==0.5.9).
    type: list
    elements: str
    default: []
  wheels:
    description:
      - Wheel files B(on the host) (already copied there) installed without dependencies,
        after O(packages). Their sha256 is part of the record, so new bytes reinstall.
    type: list
    elements: path
    default: []
  pip_extra_args:
    description:
      - Extra arguments for the pip run of O(packages), split shell-like (e.g. C(--no-index),
        an index URL, a constraints file). Not used for O(wheels).
    type: str
    default: ""
  python:
    description: Interpreter on the host that creates the venv.
    type: str
    default: python3
  link_current:
    description:
      - Point C(<root>/current) at C(<root>/<release>) (a symlink, replaced atomically).
    type: bool
    default: false
  timeout:
    description: Seconds each host command (venv creation, each pip run) may take; 0 for no bound.
    type: int
    default: 3600
  system_packages:
    description:
      - Distribution packages the venv needs on the host (Debian names, e.g. C(python3-venv)).
      - Checked with C(dpkg-query), never installed here. When one is missing, nothing is
        installed and RV(missing_packages) names it; the role installs it and calls the
        module again. Without C(dpkg-query) every one counts as missing.
    type: list
    elements: str
    default: []
  wheel_checksums:
    description:
      - SHA-1 of each wheel on the controller, by file name.
      - A wheel of O(wheels) that is missing on the host or differs from it is named in
        RV(missing_wheels) and nothing is installed; the role copies it and calls again.
    type: dict
    default: {}
notes:
  - Packages removed from O(packages) are not uninstalled; use a new release directory or remove the venv.
  - At least one of O(packages) and O(wheels) must name something to install.
seealso:
  - ref: gpufleet.sglang.venv <ansible_collections.gpufleet.sglang.venv_role>
    description: The role gpufleet.sglang.venv, which copies the wheels to the host and calls this module.
  - module: ansible.builtin.pip
"""

EXAMPLES = r"""
- name: Install SGLang 0.5.9 from the package index
  gpufleet.sglang.release_venv:
    release: 0.5.9
    packages:
      - sglang[all]==0.5.9
  register: sglang_venv

- name: Install a local wheel offline and point current at it
  gpufleet.sglang.release_venv:
    root: /opt/sglang
    release: 0.5.9
    wheels:
      - /opt/sglang/wheelhouse/sglang-0.5.9-py3-none-any.whl
    pip_extra_args: --no-index
    link_current: true

- name: Use the venv's interpreter
  ansible.builtin.debug:
    msg: "{{ sglang_venv.python }}"
"""

RETURN = r"""
python:
  description: Interpreter of the venv.
  returned: always
  type: str
  sample: /opt/sglang/0.5.9/bin/python
venv:
  description: Directory of the venv.
  returned: always
  type: str
  sample: /opt/sglang/0.5.9
installed:
  description: Whether pip ran in this run (always false in check mode).
  returned: always
  type: bool
would_install:
  description: Whether the venv was (or, in check mode, would be) created or installed into.
  returned: always
  type: bool
requirements:
  description: The record of what the venv must hold (the text of C(gpufleet-installed.txt)).
  returned: always
  type: str
  sample: |
    # SGLang 0.5.9: what this venv must hold. A change here reinstalls it.
    # Written by gpufleet.sglang.release_venv; gpufleet-installed.txt is this text once pip succeeded.
    sglang==0.5.9
link:
  description:
    - Target of C(<root>/current) after the run (in check mode, what it would be); null when
      it is not a symlink.
  returned: always
  type: str
  sample: /opt/sglang/0.5.9
missing_packages:
  description: Packages of O(system_packages) that are not installed; nothing was installed when any is.
  returned: always
  type: list
  elements: str
package_manager:
  description:
    - C(apt) when the host has dpkg and apt-get (the tested family), else null.
    - Only set when RV(missing_packages) or RV(missing_wheels) is not empty.
  returned: always
  type: str
missing_wheels:
  description: Wheels of O(wheels) missing on the host or not matching O(wheel_checksums).
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _command, _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._venv import (
    disk_refusal,
    needs_install,
    pip_argv,
    required_mib,
    requirements_text,
    tail,
    valid_name,
    valid_release,
    venv_argv,
)

REQUIREMENTS_FILE = "gpufleet-requirements.txt"
INSTALLED_FILE = "gpufleet-installed.txt"


def _read(path):
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return handle.read()
    except (IOError, OSError, UnicodeDecodeError):
        return None


def _write(module, path, text):
    """Write ``text`` to ``path`` atomically (temp file + rename), mode 0644."""
    try:
        _files.write_atomic(path, text, mode=0o644)
    except (IOError, OSError) as exc:
        module.fail_json(msg="could not write %s: %s" % (path, exc))


def _current_target(link):
    return os.readlink(link) if os.path.islink(link) else None


def _move_link(module, link, target):
    """Point ``link`` at ``target``: a symlink under a temp name, renamed over ``link``."""
    if os.path.lexists(link) and not os.path.islink(link):
        module.fail_json(msg="%s exists and is not a symlink; refusing to replace it" % link)
    tmp = os.path.join(os.path.dirname(link), ".%s.%d.tmp" % (os.path.basename(link), os.getpid()))
    try:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)
    except (IOError, OSError) as exc:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        module.fail_json(msg="could not point %s at %s: %s" % (link, target, exc))


def _install(module, release, venv, python, params, wheel_paths):
    """Create the venv when needed and run pip; fail with the runner's payload."""
    timeout = params["timeout"]
    if not os.path.exists(python):
        creator = params["python"]
        if os.sep not in creator:
            found = module.get_bin_path(creator)
            if not found:
                module.fail_json(msg="SGLang %s: interpreter %s (python) not found on the host"
                                 % (release, creator))
            creator = found
        elif not os.access(creator, os.X_OK):
            module.fail_json(msg="SGLang %s: interpreter %s (python) is not an executable on the host"
                             % (release, creator))
        result = _command.run(module, venv_argv(creator, venv), timeout=timeout)
        if not result.ok:
            _command.fail(module, "SGLang %s: could not create the venv %s (rc=%s): %s"
                          % (release, venv, result.rc, tail(result.stderr, lines=5)),
                          result, release=release, venv=venv)
        if not os.path.exists(python):
            module.fail_json(msg="SGLang %s: '%s -m venv %s' left no %s"
                             % (release, creator, venv, python), release=release, venv=venv)
    for argv in pip_argv(python, params["packages"], wheel_paths, params["pip_extra_args"]):
        result = _command.run(module, argv, timeout=timeout)
        if not result.ok:
            if result.timed_out:
                why = "timed out after %ss" % timeout
            else:
                why = "rc=%s" % result.rc
            _command.fail(module, "SGLang %s: pip install failed (%s): %s"
                          % (release, why, tail(result.stderr) or tail(result.stdout)),
                          result, argv=argv, release=release, venv=venv,
                          stderr_tail=tail(result.stderr))


def free_mib(path):
    """(MiB free for an unprivileged user at ``path`` or its nearest existing parent, that path)."""
    where = os.path.abspath(path)
    while not os.path.exists(where) and os.path.dirname(where) != where:
        where = os.path.dirname(where)
    stat = os.statvfs(where)
    return stat.f_bavail * stat.f_frsize // (1024 * 1024), where


def missing_system_packages(module, names):
    """The Debian packages of ``names`` that dpkg does not list as installed.

    Without dpkg-query (another family) every name counts as missing: the role's package
    task, which knows the family, then decides.
    """
    if not names:
        return []
    dpkg_query = module.get_bin_path("dpkg-query")
    if not dpkg_query:
        return list(names)
    result = _command.run(module, [dpkg_query, "-W", "-f", "${Package} ${db:Status-Abbrev}\\n"]
                          + list(names), timeout=60)
    return installed_filter(names, result.stdout)


def package_manager(module):
    """C(apt) where dpkg and apt-get are there (the tested family), else None."""
    if module.get_bin_path("dpkg-query") and module.get_bin_path("apt-get"):
        return "apt"
    return None


def installed_filter(names, dpkg_output):
    """The names that ``dpkg-query -W -f '${Package} ${db:Status-Abbrev}'`` does not show as ii."""
    installed = set()
    for line in dpkg_output.splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[1].startswith("ii"):
            installed.add(fields[0].split(":")[0])
    return [n for n in names if n not in installed]


def stale_wheels(paths, checksums):
    """Host wheel paths that are missing or differ (sha1) from the controller's copy."""
    stale = []
    for path in paths:
        want = checksums.get(os.path.basename(path))
        if not os.path.isfile(path):
            stale.append(path)
        elif want and _files.digest(path, "sha1") != want:
            stale.append(path)
    return stale


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", default="/opt/sglang"),
            release=dict(type="str", required=True),
            name=dict(type="str"),
            disk_check=dict(type="bool", default=True),
            packages=dict(type="list", elements="str", default=[]),
            wheels=dict(type="list", elements="path", default=[]),
            pip_extra_args=dict(type="str", default=""),
            python=dict(type="str", default="python3"),
            link_current=dict(type="bool", default=False),
            timeout=dict(type="int", default=3600),
            system_packages=dict(type="list", elements="str", default=[]),
            wheel_checksums=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    params = module.params
    release = params["release"]
    if not valid_release(release):
        module.fail_json(msg="venv_release must be a version such as 0.5.9 (got %s)" % release[:80])
    if not params["packages"] and not params["wheels"]:
        module.fail_json(msg="venv_packages or venv_wheels must name something to install")
    if params["timeout"] < 0:
        module.fail_json(msg="timeout must be 0 (no bound) or positive (got %d)" % params["timeout"])

    name = params["name"] if params["name"] is not None else release
    if params["name"] is not None and not valid_name(name):
        module.fail_json(msg="venv_name must be a directory name such as 0.5.9 or 0.5.9-emulator, "
                             "not current or wheelhouse (got %s, release %s)" % (name[:80], release))
    root = params["root"]
    venv = os.path.join(root, name)
    python = os.path.join(venv, "bin", "python")
    wheel_paths = [os.path.abspath(path) for path in params["wheels"]]

    # What must be on the host before the venv can be built: reported, never installed here
    # (the role installs the packages and copies the wheels, then calls the module again).
    missing_packages = missing_system_packages(module, params["system_packages"])
    missing_wheels = stale_wheels(wheel_paths, params["wheel_checksums"])
    if missing_packages or missing_wheels:
        module.exit_json(changed=False, python=python, venv=venv, installed=False,
                         would_install=True, requirements=None, link=_current_target(
                             os.path.join(root, "current")),
                         missing_packages=missing_packages, missing_wheels=missing_wheels,
                         package_manager=package_manager(module))

    wheels = []
    for path in wheel_paths:
        if os.path.isfile(path):
            try:
                digest = _files.digest(path)
            except (IOError, OSError) as exc:
                module.fail_json(msg="SGLang %s: could not read the wheel %s: %s" % (release, path, exc))
        elif module.check_mode:
            digest = None  # not copied yet in check mode: it would be installed
        else:
            module.fail_json(msg="SGLang %s: wheel %s does not exist on the host" % (release, path))
        wheels.append(dict(path=path, sha256=digest))
    try:
        wanted = requirements_text(release, params["packages"], wheels, params["pip_extra_args"])
    except ValueError as exc:
        module.fail_json(msg="SGLang %s: %s (packages, wheels or pip_extra_args)" % (release, exc))

    python_exists = os.path.exists(python)
    installed_text = _read(os.path.join(venv, INSTALLED_FILE)) if python_exists else None
    would_install = needs_install(wanted, installed_text, python_exists)

    link = os.path.join(root, "current")
    link_before = _current_target(link)
    link_moves = bool(params["link_current"]) and link_before != venv

    result = dict(changed=would_install or link_moves, python=python, venv=venv, installed=False,
                  would_install=would_install, requirements=wanted,
                  link=venv if link_moves else link_before,
                  missing_packages=[], missing_wheels=[], package_manager=None)
    need = required_mib(release, params["packages"]) if params["disk_check"] else None
    if would_install and need is not None and not python_exists:
        free, where = free_mib(root)
        refusal = disk_refusal(release, venv, need, free, where)
        if refusal:
            module.fail_json(msg=refusal, required_mib=need, free_mib=free, **result)

    if module.check_mode:
        module.exit_json(**result)

    if would_install:
        if not os.path.isdir(root):
            try:
                os.makedirs(root, 0o755)
            except OSError as exc:
                module.fail_json(msg="could not create %s: %s" % (root, exc))
        record = os.path.join(venv, INSTALLED_FILE)
        if os.path.lexists(record):
            os.unlink(record)  # a failed install must not look finished on the next run
        _install(module, release, venv, python, params, wheel_paths)
        _write(module, os.path.join(venv, REQUIREMENTS_FILE), wanted)
        _write(module, record, wanted)
        result["installed"] = True

    if link_moves:
        _move_link(module, link, venv)
        result["link"] = _current_target(link)

    module.exit_json(**result)


if __name__ == "__main__":
    main()
