# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""What a unit runs, read from its files: the restart decision's input (issue 23).

A systemd unit file and its environment file are parsed (:func:`parse_unit`,
:func:`parse_env`) and every directive is put in one of three classes
(:func:`directive_class`):

* ``run``: it changes what the process runs (its argv, environment, account, device
  access, limits, working directory). These make the *run spec* (:func:`run_spec`), whose
  digest (:func:`digest`) the deployment record keeps. A change restarts the server.
* ``reload``: systemd's manager reads it from the loaded unit when it acts (the
  description and documentation it lists, the ordering it starts in, when and how often
  it restarts a failed process, how it stops it), so the ``daemon-reload`` that installs
  it puts it in effect at once: no restart, nothing pending (the next start, failure or
  stop already uses the new value). ``[Install]`` is read by ``systemctl enable`` only
  (:func:`reload_effect`).
* ``pending``: sandboxing and hardening, applied by systemd only when it spawns the
  process; it alters nothing the server does, so it waits for the next restart (or an
  explicit ``sglang_apply_pending``).

Any directive not named here counts as ``run``: an unknown change restarts rather than be
missed. Comments, blank lines and the order of directives are not part of anything.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files

# The run spec's own format; part of the digest, so a future format never compares equal
# by accident (a record of another version is not used, the files are read instead).
SPEC_VERSION = 1

RUN = "run"
RELOAD = "reload"
PENDING = "pending"

# (section, directive) -> class, for every directive the collection renders and a few it
# may render; docs/hardening.md lists the same.
_CLASSES = {
    # what runs
    ("Service", "Type"): RUN,
    ("Service", "ExecStart"): RUN,
    ("Service", "Environment"): RUN,
    ("Service", "EnvironmentFile"): RUN,
    ("Service", "User"): RUN,
    ("Service", "Group"): RUN,
    ("Service", "SupplementaryGroups"): RUN,
    ("Service", "DeviceAllow"): RUN,
    ("Service", "DevicePolicy"): RUN,
    ("Service", "WorkingDirectory"): RUN,
    # read by the manager from the loaded unit: daemon-reload is enough
    ("Unit", "Description"): RELOAD,
    ("Unit", "Documentation"): RELOAD,
    ("Unit", "After"): RELOAD,
    ("Unit", "Wants"): RELOAD,
    ("Unit", "StartLimitIntervalSec"): RELOAD,
    ("Unit", "StartLimitBurst"): RELOAD,
    ("Service", "Restart"): RELOAD,
    ("Service", "RestartSec"): RELOAD,
    ("Service", "TimeoutStopSec"): RELOAD,
    ("Service", "KillMode"): RELOAD,
    ("Install", "WantedBy"): RELOAD,
    # sandboxing: applied at the next spawn, alters nothing the server does
    ("Service", "NoNewPrivileges"): PENDING,
    ("Service", "CapabilityBoundingSet"): PENDING,
    ("Service", "AmbientCapabilities"): PENDING,
    ("Service", "PrivateTmp"): PENDING,
    ("Service", "PrivateMounts"): PENDING,
    ("Service", "ProtectSystem"): PENDING,
    ("Service", "ReadWritePaths"): PENDING,
    ("Service", "ProtectHome"): PENDING,
    ("Service", "ProtectProc"): PENDING,
    ("Service", "ProtectKernelTunables"): PENDING,
    ("Service", "ProtectKernelModules"): PENDING,
    ("Service", "ProtectKernelLogs"): PENDING,
    ("Service", "ProtectControlGroups"): PENDING,
    ("Service", "ProtectClock"): PENDING,
    ("Service", "ProtectHostname"): PENDING,
    ("Service", "RestrictAddressFamilies"): PENDING,
    ("Service", "RestrictNamespaces"): PENDING,
    ("Service", "RestrictSUIDSGID"): PENDING,
    ("Service", "RestrictRealtime"): PENDING,
    ("Service", "LockPersonality"): PENDING,
    ("Service", "SystemCallArchitectures"): PENDING,
    ("Service", "SystemCallFilter"): PENDING,
    ("Service", "SystemCallErrorNumber"): PENDING,
    ("Service", "RemoveIPC"): PENDING,
    ("Service", "KeyringMode"): PENDING,
    ("Service", "UMask"): PENDING,
}

# Directives whose values add up when given twice (systemd's list settings); for any other
# the last one given wins.
_LISTS = frozenset(["Documentation", "After", "Wants", "WantedBy", "CapabilityBoundingSet",
                    "AmbientCapabilities", "ReadWritePaths", "RestrictAddressFamilies",
                    "SystemCallArchitectures", "SystemCallFilter", "DeviceAllow", "Environment",
                    "EnvironmentFile", "SupplementaryGroups"])

# The fields of the run spec, in the order a report names them.
RUN_FIELDS = ("argv", "model_path", "venv", "release", "environment", "environment_files",
              "user", "group", "supplementary_groups", "device_access", "limits",
              "working_directory", "type", "other")


def directive_class(section, key):
    """``run``, ``reload`` or ``pending`` for a directive (unknown ones: ``run``)."""
    if key.startswith("Limit") and section == "Service":
        return RUN
    return _CLASSES.get((section, key), RUN)


DAEMON_RELOAD = "daemon-reload"
ENABLE = "enable"


def reload_effect(name):
    """When a changed reload-only directive ``Section.Key`` takes effect: ``daemon-reload``
    (the manager reads it from the unit it loaded, so the deploy's ``systemctl
    daemon-reload`` puts it in effect), or ``enable`` for ``[Install]``, which only
    ``systemctl enable`` reads."""
    return ENABLE if name.split(".", 1)[0] == "Install" else DAEMON_RELOAD


def _text(data):
    if data is None:
        return None
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data


def parse_unit(text):
    """A unit file's directives, ``[(section, key, value)]`` in file order.

    Comments (``#``, ``;``) and blank lines are dropped; a line ending in a backslash
    continues on the next one (systemd joins them with a space); keys and values are
    stripped. ``None`` parses as [].
    """
    text = _text(text) or ""
    out = []
    section = None
    pending = None
    for raw in text.splitlines():
        line = raw.strip()
        if pending is None:
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
                continue
        else:
            if line and line[0] in "#;":
                continue  # systemd skips comment lines inside a continuation
            line = pending + " " + line
            pending = None
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        if "=" not in line:
            continue
        key, value = line.split("=", 1)
        out.append((section, key.strip(), value.strip()))
    if pending is not None and "=" in pending:
        key, value = pending.split("=", 1)
        out.append((section, key.strip(), value.strip()))
    return out


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "\r", "s": " "}


def split_words(value):
    """systemd's word split of a command line or list: whitespace, quotes, C escapes.

    ``%%`` (a literal ``%``) is unescaped; ``$`` references are kept as written, so a
    reference and a literal (``$$``) never read alike.
    """
    words = []
    current = []
    quote = None
    in_word = False
    index = 0
    value = value or ""
    while index < len(value):
        char = value[index]
        if char == "\\" and index + 1 < len(value):
            nxt = value[index + 1]
            current.append(_ESCAPES.get(nxt, nxt))
            in_word = True
            index += 2
            continue
        if quote:
            if char == quote:
                quote = None
            else:
                current.append(char)
        elif char in "\"'":
            quote = char
            in_word = True
        elif char.isspace():
            if in_word:
                words.append("".join(current))
                current = []
                in_word = False
        else:
            current.append(char)
            in_word = True
        index += 1
    if in_word:
        words.append("".join(current))
    return [word.replace("%%", "%") for word in words]


def _unquote_env(value):
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        if value[0] == "'":
            return inner
        out = []
        index = 0
        while index < len(inner):
            if inner[index] == "\\" and index + 1 < len(inner):
                out.append(inner[index + 1])
                index += 2
            else:
                out.append(inner[index])
                index += 1
        return "".join(out)
    return value


def parse_env(text):
    """An environment file as a dict (``KEY=VALUE`` lines; comments and blanks skipped)."""
    env = {}
    for raw in (_text(text) or "").splitlines():
        line = raw.strip()
        if not line or line[0] in "#;" or "=" not in line:
            continue
        if line.startswith("export "):
            line = line[len("export "):]
        key, value = line.split("=", 1)
        env[key.strip()] = _unquote_env(value)
    return env


def _flag_value(argv, flag):
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def _venv_of(python):
    """``/opt/sglang/0.5.9/bin/python`` -> ``/opt/sglang/0.5.9``."""
    if not python:
        return None
    head = os.path.dirname(python)
    return os.path.dirname(head) if os.path.basename(head) == "bin" else head


def classify(unit_text):
    """The unit's directives by class: ``{"run": [...], "reload": {...}, "pending": {...}}``.

    ``reload`` and ``pending`` map ``"Section.Key"`` to the list of its values in file
    order (a list setting given twice keeps both, any other keeps the last); ``run`` is the
    list of ``(section, key, value)``.
    """
    out = {RUN: [], RELOAD: {}, PENDING: {}}
    for section, key, value in parse_unit(unit_text):
        kind = directive_class(section, key)
        if kind == RUN:
            out[RUN].append((section, key, value))
        elif key in _LISTS:
            out[kind].setdefault("%s.%s" % (section, key), []).append(value)
        else:
            out[kind]["%s.%s" % (section, key)] = [value]
    return out


def run_spec(unit_text, env_files, release):
    """The canonical description of what the unit's process runs.

    ``env_files`` maps an environment file's path to its text (None when missing); only
    the files the unit names count. ``release`` is the SGLang release (the record's).
    """
    env_files = env_files or {}
    spec = {
        "version": SPEC_VERSION,
        "argv": [],
        "environment": {},
        "environment_files": [],
        "user": None,
        "group": None,
        "supplementary_groups": [],
        "device_access": {"policy": None, "allow": []},
        "limits": {},
        "working_directory": None,
        "type": None,
        "other": [],
        "release": None if release is None else "%s" % (release,),
    }
    inline_env = {}
    for section, key, value in classify(unit_text)[RUN]:
        if section != "Service":
            spec["other"].append([section, key, value])
        elif key == "ExecStart":
            spec["argv"] = split_words(value) if value else []
        elif key == "Environment":
            for word in split_words(value):
                if "=" in word:
                    name, val = word.split("=", 1)
                    inline_env[name] = val
        elif key == "EnvironmentFile":
            spec["environment_files"].append(value)
        elif key in ("User", "Group", "WorkingDirectory", "Type"):
            spec[{"User": "user", "Group": "group", "WorkingDirectory": "working_directory",
                  "Type": "type"}[key]] = value
        elif key == "SupplementaryGroups":
            spec["supplementary_groups"] = sorted(set(spec["supplementary_groups"]) | set(value.split()))
        elif key == "DevicePolicy":
            spec["device_access"]["policy"] = value
        elif key == "DeviceAllow":
            spec["device_access"]["allow"].append(value)
        elif key.startswith("Limit"):
            spec["limits"][key] = value
        else:
            spec["other"].append([section, key, value])
    environment = dict(inline_env)
    for path in spec["environment_files"]:
        # "-/path" is optional: a missing file adds nothing
        environment.update(parse_env(env_files.get(path.lstrip("-"))))
    spec["environment"] = environment
    spec["other"].sort()
    spec["device_access"]["allow"].sort()
    argv = spec["argv"]
    spec["venv"] = _venv_of(argv[0]) if argv else None
    spec["model_path"] = _flag_value(argv, "--model-path")
    return spec


def digest(spec):
    """sha256 of the run spec's canonical JSON (sorted keys)."""
    return _files.digest_bytes(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode("utf-8"))


def run_changes(old, new):
    """The run spec fields that differ, in :data:`RUN_FIELDS` order (``version`` too)."""
    old = old or {}
    fields = [name for name in RUN_FIELDS if old.get(name) != new.get(name)]
    if old.get("version") != new.get("version"):
        fields.insert(0, "version")
    return fields


def _changed_keys(old, new):
    keys = set(old) | set(new)
    return sorted(key for key in keys if old.get(key) != new.get(key))


def side_changes(old_unit_text, new_unit_text):
    """``{"reload": [...], "pending": [...]}``: the reload-only and pending directives that
    differ between two units (names ``Section.Key``), comments and order ignored."""
    old = classify(old_unit_text)
    new = classify(new_unit_text)
    return {RELOAD: _changed_keys(old[RELOAD], new[RELOAD]),
            PENDING: _changed_keys(old[PENDING], new[PENDING])}
