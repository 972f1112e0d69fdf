# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The inputs of ``playbooks/tune.yml``, checked all at once before anything is loaded
(``tune_plan mode: check``), the knob values against the release's own argparse
(``tune_plan mode: values``), and the outcome: a tune in which nothing could be measured
is a failure (``tune_plan mode: outcome``)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import difflib
import json
import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _inputs
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_argv import normalize_flag
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as _metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import search as _search
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import space as _space

#: The load shape of every trial when tune_load leaves a key out.
DEFAULT_LOAD = {"tool": "bench_serving", "input_len": 1024, "output_len": 256,
                "concurrencies": [1, 8, 32], "num_prompts": 32}
LOAD_KEYS = ("tool", "input_len", "output_len", "concurrencies", "num_prompts", "dataset")
TOOLS = ("bench_serving", "aiperf")
KEEP = ("best", "original")
DEFAULT_HOSTS = "sglang_servers"

_INT = re.compile(r"^[1-9][0-9]*$")


class RequestError(ValueError):
    """The tune's inputs are not valid; ``problems`` lists every problem."""

    def __init__(self, problems):
        super(RequestError, self).__init__(report(problems))
        self.problems = list(problems)


def report(problems):
    """One message, one problem a line."""
    if len(problems) == 1:
        return "the tune's inputs: %s" % problems[0]
    return "%d problems with the tune's inputs:\n%s" % (len(problems), "\n".join("- " + p for p in problems))


def _shown(value):
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def _positive_int(value):
    return not isinstance(value, bool) and isinstance(value, (int, str)) and _INT.match(str(value).strip()) is not None


def _unknown_keys(where, given, known):
    problems = []
    for key in sorted(set(given) - set(known), key=str):
        near = difflib.get_close_matches(str(key), known, n=1)
        problems.append("%s: unknown key %s%s (known: %s)" % (
            where, _shown(key), "; did you mean %s?" % near[0] if near else "", ", ".join(known)))
    return problems


def check_load(load):
    """``(shape, problems)``: ``tune_load`` over :data:`DEFAULT_LOAD`."""
    if load is None:
        load = {}
    if not isinstance(load, dict):
        return dict(DEFAULT_LOAD), ["tune_load must be a mapping of %s, got %s" % (", ".join(LOAD_KEYS), _shown(load))]
    problems = _unknown_keys("tune_load", load, LOAD_KEYS)
    shape = dict(DEFAULT_LOAD)
    shape.update((k, v) for k, v in load.items() if k in LOAD_KEYS)
    if shape["tool"] not in TOOLS:
        problems.append("tune_load.tool must be %s, got %s" % (" or ".join(TOOLS), _shown(shape["tool"])))
    conc = shape["concurrencies"]
    if (not isinstance(conc, (list, tuple)) or not conc
            or not all(_positive_int(c) for c in conc)):
        problems.append("tune_load.concurrencies must be a non-empty list of positive integers, got %s"
                        % _shown(conc))
    else:
        shape["concurrencies"] = [int(str(c).strip()) for c in conc]
        dupes = sorted(set(c for c in shape["concurrencies"] if shape["concurrencies"].count(c) > 1))
        if dupes:
            problems.append("tune_load.concurrencies lists %s twice, got %s" % (
                ", ".join(str(d) for d in dupes), _shown(conc)))
    for key in ("input_len", "output_len", "num_prompts"):
        if _positive_int(shape[key]):
            shape[key] = int(str(shape[key]).strip())
        else:
            problems.append("tune_load.%s must be a positive integer, got %s" % (key, _shown(shape[key])))
    dataset = shape.get("dataset")
    if dataset is not None and not isinstance(dataset, str):
        problems.append("tune_load.dataset must be a string (or unset), got %s" % _shown(dataset))
    return shape, problems


def check_scalars(keep, budget, method):
    """``(values, problems)`` of keep, tune_budget and tune_method (None means unset)."""
    problems = []
    keep = "best" if keep is None else keep
    if keep not in KEEP:
        problems.append("keep must be best or original, got %s" % _shown(keep))
    if budget is None:
        budget = 0
    text = str(budget).strip() if isinstance(budget, (int, str)) and not isinstance(budget, bool) else None
    if text is None or not text.isdigit():
        problems.append("tune_budget must be a number of trials (0 for no limit), got %s" % _shown(budget))
    else:
        budget = int(text)
    method = "auto" if method is None else method
    if method not in _search.METHODS:
        problems.append("tune_method must be one of %s, got %s" % (", ".join(_search.METHODS), _shown(method)))
    return {"keep": keep, "budget": budget, "method": method}, problems


def select_hosts(pattern, hosts, groups):
    """``(selected, problems)`` of ``tune_hosts`` over the inventory (``_inputs.select_hosts``)."""
    return _inputs.select_hosts(pattern, hosts, groups, "tune_hosts")


def check(request, hosts, groups):
    """Every input of the tune at once. ``request`` holds ``tune_space``, ``tune_load``,
    ``tune_slo``, ``keep``, ``tune_budget``, ``tune_method`` and ``tune_hosts`` (None: unset);
    ``hosts`` and ``groups`` are the inventory's. Returns the checked values (``load`` with
    the defaults, ``slo``, ``keep``, ``budget``, ``method``, ``hosts``); raises
    :class:`RequestError` listing every problem, each naming the variable and its value."""
    request = request or {}
    problems = []
    space = request.get("tune_space")
    if space is None:
        problems.append("tune_space is not set: give the strategies and knobs to try, e.g. "
                        "-e '{\"tune_space\": {\"strategies\": [\"tp8\", \"ep8\"], \"knobs\": {}}}'")
    else:
        problems.extend(_space.shape_problems(space))
    load, load_problems = check_load(request.get("tune_load"))
    problems.extend(load_problems)
    slo = {}
    try:
        slo = _metrics.check_slo(request.get("tune_slo"))
    except _metrics.SloError as exc:
        problems.extend(p for p in str(exc).split("; ") if p)
    values, scalar_problems = check_scalars(request.get("keep"), request.get("tune_budget"),
                                            request.get("tune_method"))
    problems.extend(scalar_problems)
    pattern = request.get("tune_hosts")
    selected, host_problems = select_hosts(DEFAULT_HOSTS if pattern is None else pattern, hosts, groups)
    problems.extend(host_problems)
    if problems:
        raise RequestError(problems)
    return dict(values, load=load, slo=slo, hosts=selected,
                pattern=DEFAULT_HOSTS if pattern is None else pattern)


# --- the knob values against the release's argparse -----------------------------------------

def _render(flag, value):
    if value is None or value is False:
        return []
    if value is True:
        return [flag]
    if isinstance(value, dict):
        return [flag, json.dumps(value, sort_keys=True, separators=(",", ":"))]
    if isinstance(value, (list, tuple)):
        return [flag] + [str(v) for v in value]
    if isinstance(value, float):
        return [flag, repr(value)]
    return [flag, str(value)]


def value_probes(space):
    """One argv per knob (every value of it, the flag repeated) and one for the fixed flags:
    the release's argparse converts each occurrence, so ``<python> -m sglang.launch_server
    <argv> --help`` exits 2 naming the first value it refuses, and 0 (the help) otherwise.
    Each probe: ``{"where", "flag", "values", "argv"}``; probes without a value are left out."""
    probes = []
    space = space if isinstance(space, dict) else {}
    knobs = space.get("knobs") if isinstance(space.get("knobs"), dict) else {}
    for name, vals in knobs.items():
        flag = normalize_flag(name)
        vals = vals if isinstance(vals, list) else []
        argv = []
        for val in vals:
            argv.extend(_render(flag, val))
        if argv:
            probes.append({"where": "tune_space.knobs", "flag": name, "values": vals, "argv": argv})
    fixed = space.get("fixed") if isinstance(space.get("fixed"), dict) else {}
    argv, shown = [], {}
    for name, val in fixed.items():
        rendered = _render(normalize_flag(name), val)
        if rendered:
            argv.extend(rendered)
            shown[name] = val
    if argv:
        probes.append({"where": "tune_space.fixed", "flag": ", ".join(shown), "values": [shown], "argv": argv})
    return probes


_REFUSED_VALUE = re.compile(r"argument (?P<flag>[^:]+): (?P<why>invalid .*?(?:value|choice): '(?P<value>.*?)'.*)$")


def argparse_problems(results, release):
    """The problems of a registered loop of the probes' ``--help`` runs (each result with its
    probe as ``item``, ``rc`` and ``stderr``): one per refused probe, naming the knob, the
    value and the release."""
    release = release or "(unknown release)"
    problems = []
    for res in results or []:
        probe = res.get("item") or {}
        if res.get("rc") == 0:
            continue
        lines = [ln.strip() for ln in str(res.get("stderr") or res.get("msg") or "").splitlines() if ln.strip()]
        errors = [ln for ln in lines if ": error: " in ln]
        line = errors[-1] if errors else (lines[-1] if lines else "rc %s" % res.get("rc"))
        found = _REFUSED_VALUE.search(line)
        if found:
            value = found.group("value")
            problems.append("%s %s: sglang %s refuses the value %s (%s)" % (
                probe.get("where", "tune_space.knobs"), probe.get("flag"), release, _shown(value),
                line.split(": error: ", 1)[-1]))
        else:
            problems.append("%s %s: sglang %s refuses the values %s (%s)" % (
                probe.get("where", "tune_space.knobs"), probe.get("flag"), release,
                _shown(probe.get("values")), line.split(": error: ", 1)[-1]))
    return problems


# --- the outcome ---------------------------------------------------------------------------

def nothing_admissible(candidates, release=None):
    """The message when no candidate of the space may be loaded (every one refused or
    rewritten before any load), else None."""
    candidates = list(candidates or [])
    if not candidates or any(c.get("verdict") == "ok" for c in candidates):
        return None
    lines = ["%s (%s): %s" % (c.get("id"), c.get("verdict"), c.get("reason")) for c in candidates]
    return ("every candidate of tune_space is refused before any load (sglang %s), nothing is "
            "loaded or measured:\n%s" % (release or "(unknown release)", "\n".join("- " + ln for ln in lines)))


def nothing_measured(plan, trials):
    """The message when no candidate of this tune has a successful trial in the journal
    (``plan``: the last ``tune_plan mode: next`` result; ``trials``: fingerprint to journal
    line), else None. A re-run whose trials are all journaled already is a success."""
    plan = plan or {}
    candidates = plan.get("candidates") or []
    ok, failed = [], []
    for cand in candidates:
        line = (trials or {}).get(cand.get("fingerprint") or "")
        if line is None:
            continue
        (ok if line.get("status") == "ok" else failed).append((cand, line))
    if ok:
        return None
    if failed:
        return ("no candidate could be measured: every trial failed (%d):\n%s" % (
            len(failed), "\n".join("- %s on %s: %s" % (c.get("id"), l.get("host"), l.get("reason") or "failed")
                                   for c, l in failed)))
    refused = [c for c in candidates if c.get("verdict") not in (None, "ok")]
    if candidates and len(refused) == len(candidates):
        return nothing_admissible(candidates, None)
    return ("no candidate could be measured: no trial ran (%d candidate(s), %d refused, %d left "
            "out)" % (len(candidates), len(refused), len(plan.get("left_out") or [])))
