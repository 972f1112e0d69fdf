# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection.
"""Ask the installed SGLang release what it is and what it accepts, and remember the answers.

Three questions, each cached on the host by what its answer depends on:

* the release: version, dist-info name, sha256 of RECORD and the Python version, read from
  the package metadata (nothing is imported); their hash is the release's *fingerprint*;
* its flags: ``launch_server --help`` parsed (cached per fingerprint, columns and parser);
* its verdict on an exact argv: the release's own argparse run over ``argv + ['--help']``,
  which parses every flag and value, then prints the help and exits 0 without starting
  anything, or exits 2 naming the first bad value (cached per fingerprint and argv).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._command import run
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import (
    PARSER_VERSION,
    HelpParseError,
    parse_help,
)

# One small query: release, dist-info name, sha256 of RECORD, Python version.
PROBE_CODE = (
    "import hashlib, json, sys\n"
    "from importlib import metadata\n"
    "d = metadata.distribution('sglang')\n"
    "p = getattr(d, '_path', None)\n"
    "r = d.read_text('RECORD') or ''\n"
    "print(json.dumps({'version': d.version,"
    " 'dist_info': getattr(p, 'name', None),"
    " 'record_sha256': hashlib.sha256(r.encode('utf-8')).hexdigest(),"
    " 'python': '%d.%d.%d' % sys.version_info[:3]}))\n"
)


class ProbeError(Exception):
    """A question the release could not answer; carries the command result when one ran."""

    def __init__(self, msg, result=None):
        super(ProbeError, self).__init__(msg)
        self.result = result


def help_env(columns):
    """The environment --help runs in: a fixed width and no colours."""
    return {"COLUMNS": str(columns), "PYTHONHASHSEED": "0", "NO_COLOR": "1", "PYTHON_COLORS": "0"}


def check_interpreter(python):
    """Raise ProbeError unless ``python`` exists and is executable."""
    if not os.path.exists(python):
        raise ProbeError("Python interpreter %s does not exist" % python)
    if not os.access(python, os.X_OK):
        raise ProbeError("Python interpreter %s is not executable" % python)


def fingerprint(info):
    """sha256 over what identifies an installed release."""
    seed = "|".join(str(info.get(k)) for k in ("version", "dist_info", "record_sha256", "python"))
    return _files.digest_bytes(seed)


def parse_release_query(out):
    """The release query's answer, with its fingerprint; ValueError on anything else."""
    try:
        info = json.loads(out.strip().splitlines()[-1])
        info["version"] = str(info["version"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise ValueError("unexpected output of the SGLang release query: %s" % exc)
    info["fingerprint"] = fingerprint(info)
    return info


def query_release(module, python, columns, timeout):
    """Version, dist-info, RECORD hash, Python version and fingerprint of the installed release."""
    result = run(module, [python, "-c", PROBE_CODE], timeout=timeout, env=help_env(columns))
    if result.rc != 0:
        raise ProbeError("could not read the installed SGLang release with %s (rc=%s)"
                         % (python, result.rc), result)
    try:
        return parse_release_query(result.stdout)
    except ValueError as exc:
        raise ProbeError(str(exc), result)


def _safe(text):
    return "".join(c if c.isalnum() or c in ".-+_" else "_" for c in text)


def help_cache_path(cache_dir, version, fp, columns):
    return os.path.join(cache_dir, "sglang-help-%s-%s-c%d.json" % (_safe(version), fp[:16], columns))


def verdict_cache_path(cache_dir, fp, argv):
    """The marker of an argparse verdict: per release fingerprint and exact argv."""
    digest = _files.digest_bytes(fp + "\n" + json.dumps(argv), "sha1")
    return os.path.join(cache_dir, "argparse-ok-%s.json" % digest)


read_json = _files.read_json


def write_json(path, data):
    """Write ``data`` atomically (creating the cache directory); return an error text or
    None."""
    try:
        _files.write_json(path, data, makedirs=True)
    except (IOError, OSError) as exc:
        return "could not write the cache file %s: %s" % (path, exc)
    return None


def cached_help(data, info, columns):
    """The cached help entry when it belongs to this release, width and parser, else None."""
    if not isinstance(data, dict):
        return None
    if (data.get("fingerprint") != info["fingerprint"] or data.get("version") != info["version"]
            or data.get("columns") != columns or data.get("parser_version") != PARSER_VERSION
            or not isinstance(data.get("flags"), dict)):
        return None
    return data


def run_help(module, python, columns, timeout, version):
    """Run and parse ``launch_server --help``; the cache entry to keep."""
    result = run(module, [python, "-m", "sglang.launch_server", "--help"], timeout=timeout,
                 env=help_env(columns))
    if result.rc != 0:
        if result.timed_out:
            msg = "sglang %s: '--help' timed out after %ss" % (version, timeout)
        else:
            msg = "sglang %s: '%s -m sglang.launch_server --help' failed (rc=%s)" % (
                version, python, result.rc)
        raise ProbeError(msg, result)
    try:
        parsed = parse_help(result.stdout)
    except HelpParseError as exc:
        raise ProbeError("sglang %s: could not parse the '--help' output: %s" % (version, exc), result)
    return {"prog": parsed["prog"], "flags": parsed["flags"], "help_seconds": result.elapsed,
            "parser_version": PARSER_VERSION, "columns": columns}


def flags(module, python, info, cache_dir, columns, timeout, use_cache=True):
    """The release's parsed flags: ``(data, cached)``; writes the cache unless in check mode."""
    path = help_cache_path(cache_dir, info["version"], info["fingerprint"], columns)
    data = cached_help(read_json(path), info, columns) if use_cache else None
    if data is not None:
        return data, True, path
    data = run_help(module, python, columns, timeout, info["version"])
    data.update(version=info["version"], fingerprint=info["fingerprint"],
                dist_info=info.get("dist_info"), python_version=info.get("python"))
    if use_cache and not module.check_mode:
        error = write_json(path, data)
        if error:
            module.warn(error)
    return data, False, path


def argparse_error(stderr, rc):
    """The line of argparse's refusal (``prog: error: ...``), or the last line."""
    lines = [ln.strip() for ln in (stderr or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if ": error: " in ln]
    if errors:
        return errors[-1]
    return lines[-1] if lines else "rc %s" % rc


def argparse_verdict(module, python, info, argv, cache_dir, timeout):
    """Run the release's own argparse over ``argv`` unless an earlier verdict is cached.

    Returns ``(ok, cached, error)``. Only an acceptance is cached: a refusal is re-checked
    on the next run (the user fixes the input and comes back).
    """
    path = verdict_cache_path(cache_dir, info["fingerprint"], argv)
    cached = read_json(path)
    if isinstance(cached, dict) and cached.get("argv") == argv:
        return True, True, None
    result = run(module, [python, "-m", "sglang.launch_server"] + list(argv) + ["--help"],
                 timeout=timeout, env=help_env(200))
    if result.rc != 0:
        if result.timed_out:
            return False, False, "the argument check timed out after %ss" % timeout
        return False, False, argparse_error(result.stderr, result.rc)
    if not module.check_mode:
        error = write_json(path, {"argv": argv, "version": info["version"]})
        if error:
            module.warn(error)
    return True, False, None
