# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection.
"""The inputs of a deployment, checked all at once.

:func:`check` looks at every input the deploy path needs and returns every problem it
finds, each naming the variable, what it means, the value it got and an example, so that
one run tells a user everything that is missing or malformed. Nothing here reaches a host.

The GPU count and memory (``sglang_gpu_count``, ``sglang_gpu_memory_mib``) are optional:
unset, the host's own GPUs decide (``gpufleet.sglang.server_preflight``), so the controller
checks the strategy's grammar and divisibility only; set, they are checked for format here
and the strategy's GPU count against them, and the host checks them against its GPUs.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import difflib
import fnmatch
import json
import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.common._weights import ModelError, model_path
from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
    PD_FORM,
    StrategyError,
    gpus_needed,
    is_pd,
    parse_pd,
    parse_strategy,
    pd_gpus,
    pd_name,
    resolve,
    strategy_name,
)

#: The value of an input that is not set at all.
MISSING = object()

#: The newest SGLang release the collection is tested against: the roles' default release
#: (server_release, venv_release, benchmark_release; tests/unit keeps them in lockstep).
NEWEST_TESTED_RELEASE = "0.5.23"

_RELEASE = re.compile(r"^[0-9][0-9A-Za-z.+-]*$")
_INT = re.compile(r"^[1-9][0-9]*$")
_NUMBER = re.compile(r"^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$")
_BATCH = re.compile(r"^([1-9][0-9]*|([1-9][0-9]?|100)%)$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SUBSCRIPT = re.compile(r"^(?P<base>[^\[\]]+)\[(?P<start>-?[0-9]+)(?:(?P<colon>:)(?P<end>-?[0-9]*))?\]$")

#: What each required input means, with an example value. The GPU count and memory are
#: not required: unset, they come from the host's GPUs. Nor is the release: unset, the
#: roles install the newest release the collection is tested against (NEWEST_TESTED_RELEASE).
REQUIRED = (
    ("strategy", "strategy", "the parallelism strategy (-e sglang_strategy=... or -e strategy=...)", "pp8"),
    # the model path follows from the repo (gpufleet.sglang.model_dir); either one will do
    ("sglang_model_path", "sglang_model_repo",
     "the model: a Hugging Face repo id the model step places on every host, or "
     "sglang_model_path, a directory on each host that already holds it", "moonshotai/Kimi-K2.5"),
)


def shown(value, limit=80):
    """A value as messages show it: JSON, cut at ``limit`` characters."""
    if isinstance(value, str):
        text = json.dumps(value[:limit] + ("..." if len(value) > limit else ""))
    else:
        try:
            text = json.dumps(value, sort_keys=True, default=str)
        except (TypeError, ValueError):
            text = repr(value)
        if len(text) > limit:
            text = text[:limit] + "..."
    return text


def kind(value):
    """The plain name of a value's type (Ansible hands in its own str and dict subclasses)."""
    for base, name in ((bool, "boolean"), (str, "string"), (dict, "mapping"), ((list, tuple), "list"),
                       (int, "integer"), (float, "number")):
        if isinstance(value, base):
            return name
    return type(value).__name__


def _plain(value):
    return value if isinstance(value, str) else json.dumps(value, default=str)


def is_positive_int(value):
    return not isinstance(value, bool) and _INT.match(str(value).strip()) is not None


def is_unset(value):
    """Whether an optional input is not set: missing, null or an empty string."""
    return value is MISSING or value is None or (isinstance(value, str) and not value.strip())


def count_problem(name, value, example):
    """The problem with a count input that is set but not a positive integer, else None."""
    if is_unset(value) or is_positive_int(value):
        return None
    return "%s must be a positive integer (got %s), e.g. %s" % (name, shown(value), example)


def _missing(values):
    problems = []
    for key, name, meaning, example in REQUIRED:
        # a repo id that is set counts even when it is malformed (_model_repo names it)
        if is_unset(values.get(key, MISSING)) and is_unset(values.get(name, MISSING)):
            problems.append("%s is not set: %s (e.g. %s)" % (name, meaning, example))
    return problems


def _counts(values):
    problems = []
    for name, example in (("sglang_gpu_count", "8"), ("sglang_gpu_memory_mib", "97887"),
                          ("sglang_nnodes", "2")):
        problem = count_problem(name, values.get(name, MISSING), example)
        if problem:
            problems.append(problem)
    return problems


def _versions(values):
    problems = []
    for name in ("sglang_release", "venv_release"):
        value = values.get(name, MISSING)
        if value is MISSING or value is None or value == "":
            continue
        if not isinstance(value, str) or not _RELEASE.match(value):
            problems.append("%s must be a version such as 0.5.9 (got %s)" % (name, shown(value)))
    return problems


def _model_repo(values):
    """sglang_model_repo, when set, is a Hugging Face repo id ``<org>/<name>`` (the rule of
    the model directory, ``_weights.model_path``)."""
    value = values.get("sglang_model_repo", MISSING)
    if is_unset(value):
        return []
    try:
        if not isinstance(value, str):
            raise ValueError(value)
        model_path("/", value, None)
    except (ModelError, ValueError):
        return ["sglang_model_repo must be a Hugging Face repo id <org>/<name> (got %s), "
                "e.g. moonshotai/Kimi-K2.5" % shown(value)]
    return []


def wheel_problems(wheels, release, readable):
    """The wheels of ``venv_wheels`` that ``readable(path)`` says the controller cannot
    read: one problem each, naming the path and the release (the venv step hashes each
    wheel on the controller before it copies it)."""
    if is_unset(wheels):
        return []
    if not isinstance(wheels, (list, tuple)) or not all(isinstance(w, str) for w in wheels):
        return ["venv_wheels must be a list of wheel paths on the controller (got %s)"
                % shown(wheels)]
    shown_release = "the default release" if is_unset(release) else "sglang_release %s" % release
    return ["venv_wheels: %s is not a readable file on the controller; is there a wheel of %s?"
            % (wheel, shown_release) for wheel in wheels if not readable(wheel)]


def _batches(values):
    value = values.get("sglang_rollout_batch", MISSING)
    if value is MISSING or value is None:
        return []
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if not items or any(isinstance(i, bool) or not _BATCH.match(str(i)) for i in items):
        return ["sglang_rollout_batch must be a positive number of hosts, a percentage 1%%-100%% "
                "or a list of those (got %s), e.g. 1 or 25%%" % _plain(value)]
    return []


def _planner(values):
    value = values.get("capacity_mem_fraction_static", MISSING)
    if value is MISSING or value is None:
        return []
    if isinstance(value, bool) or not _NUMBER.match(str(value).strip()):
        return ["capacity_mem_fraction_static must be a number (0 plans with SGLang's default) "
                "(got %s)" % shown(value)]
    if not 0 <= float(value) < 1:
        return ["capacity_mem_fraction_static (%s) must be in [0, 1); 0 plans with SGLang's "
                "default" % _plain(value)]
    return []


def flag_entries(extra_args, flag):
    """The ``(key, value)`` entries of ``server_extra_args`` that set ``flag``, in key order.

    A key names the flag with any number of leading dashes and ``_`` or ``-`` between its
    words (``--mem-fraction-static``, ``mem_fraction_static``); ``flag`` is given without
    dashes (``mem-fraction-static``).
    """
    if not isinstance(extra_args, dict):
        return []
    return [(k, v) for k, v in sorted(extra_args.items(), key=lambda kv: str(kv[0]))
            if isinstance(k, str) and k.lstrip("-").replace("_", "-") == flag]


def mem_fraction_flags(extra_args):
    """The entries of ``server_extra_args`` that set the static memory fraction."""
    return flag_entries(extra_args, "mem-fraction-static")


def _extra_args(values):
    value = values.get("server_extra_args", MISSING)
    if value is MISSING or value is None:
        return []
    if not isinstance(value, dict):
        return ['server_extra_args must be a mapping of flag to value, e.g. {"--trust-remote-code": true} '
                "(got %s %s)" % (kind(value), shown(value))]
    problems = []
    for key, item in mem_fraction_flags(value):
        ok = (not isinstance(item, bool) and _NUMBER.match(str(item).strip()) is not None
              and 0 < float(item) <= 1)
        if not ok:
            problems.append("server_extra_args %s must be a number in (0, 1], the fraction of GPU "
                            "memory for weights and KV cache (got %s)" % (key, _plain(item)))
    return problems


def _server(values):
    problems = []
    port = values.get("server_port", MISSING)
    if port is not MISSING and (not is_positive_int(port) or int(str(port)) > 65535):
        problems.append("server_port must be 1-65535 (got %s)" % _plain(port))
    timeout = values.get("server_health_timeout", MISSING)
    if timeout is not MISSING and not is_positive_int(timeout):
        problems.append("server_health_timeout must be positive (got %s), in seconds, e.g. 1800"
                        % _plain(timeout))
    path = values.get("server_model_path", MISSING)
    if path is not MISSING and path is not None and (not isinstance(path, str) or _CONTROL.search(path)):
        problems.append("server_model_path must be a path or a model id without control characters "
                        "(got %s)" % shown(path))
    return problems


def _names_and_secrets(values):
    problems = []
    name = values.get("server_served_model_name", MISSING)
    if name is not MISSING and name is not None:
        if not isinstance(name, str) or len(name) > 256 or _CONTROL.search(name):
            length = len(name) if isinstance(name, str) else len(_plain(name))
            problems.append("server_served_model_name must be a string of at most 256 characters "
                            "without control characters (got %d characters: %s)"
                            % (length, shown(_plain(name), 60)))
    for secret, env_name in (("server_api_key", "SGLANG_API_KEY"), ("server_hf_token", "HF_TOKEN")):
        value = values.get(secret, MISSING)
        if value is MISSING or value is None:
            continue
        if not isinstance(value, str) or _CONTROL.search(value):
            # the value is a secret: it is never shown
            problems.append("%s must not contain newlines or other control characters "
                            "(it goes into the server's environment file as %s)" % (secret, env_name))
    return problems


def router_key_problems(server_key, routers):
    """The routers in front of a server whose keys it would refuse. smg 1.x forwards a
    client's ``Authorization`` header to the worker unchanged and sends the worker's own
    key (given when it was added) only on requests that carry none. Behind a router with a
    ``router_api_key``, every client sends that key, so a server with another key refuses
    every routed request (401). ``routers`` is ``[(host, router_api_key)]``; keys are never
    shown."""
    if not isinstance(server_key, str) or not server_key:
        return []
    keyed = [host for host, key in routers if isinstance(key, str) and key and key != server_key]
    if not keyed:
        return []
    return ["server_api_key differs from router_api_key of %s: smg forwards its clients' "
            "Authorization header (router_api_key) to the server unchanged and sends a "
            "server's own key only on requests without one, so this server would refuse every "
            "request routed to it (401). Behind a router with a key, give the servers the "
            "router's key or none; servers with keys of their own need routers without one "
            "(the router then calls each with its key)" % ", ".join(keyed)]


def release_of(values):
    """The release the deploy installs: ``sglang_release``, or the newest tested one when
    it is unset (a malformed one is reported by :func:`check_fields`)."""
    value = values.get("sglang_release", MISSING)
    if is_unset(value) or not isinstance(value, str) or not _RELEASE.match(value):
        return NEWEST_TESTED_RELEASE
    return value


def is_pd_strategy(values):
    """Whether the strategy is written as a prefill/decode layout (``_strategy.is_pd``)."""
    strategy = values.get("strategy", MISSING)
    return isinstance(strategy, str) and is_pd(strategy)


def _pd_inputs(values):
    """The PD inputs (``_pd``): PD flags in ``server_extra_args`` (refused outside a PD layout,
    and inside one where the layout sets them); with a PD layout, the release's PD flags and
    transfer backends (known releases; others are left to prepare, which reads the
    release's help), ``sglang_pd_transfer_backend``, ``sglang_pd_bootstrap_port`` and
    ``sglang_pd_ib_device``. A PD layout that does not parse is :func:`layout`'s to report."""
    strategy = values.get("strategy", MISSING)
    pd = is_pd_strategy(values)
    label = "(not set)" if strategy is MISSING else shown(strategy)
    problems = _pd.extra_args_problems(values.get("server_extra_args"), label, pd)
    if not pd:
        return problems
    try:
        parse_pd(strategy)
    except StrategyError:
        return problems
    release = release_of(values)
    backend = values.get("sglang_pd_transfer_backend", MISSING)
    backend = None if is_unset(backend) else backend
    problems.extend(_pd.release_problems(label, release, _pd.release_facts(release), backend))
    bootstrap = values.get("sglang_pd_bootstrap_port", MISSING)
    port = values.get("server_port", MISSING)
    problems.extend(_pd.port_problems(None if bootstrap is MISSING else bootstrap,
                                      None if port is MISSING else port))
    ib_device = values.get("sglang_pd_ib_device", MISSING)
    problems.extend(_pd.ib_device_problems(None if ib_device is MISSING else ib_device))
    return problems


def check_fields(values):
    """Every problem with the single inputs, in a stable order."""
    problems = []
    for rule in (_missing, _counts, _versions, _model_repo, _batches, _planner, _extra_args, _server,
                 _names_and_secrets, _pd_inputs):
        problems.extend(rule(values))
    return problems


def layout(values, nnodes):
    """The layout of the strategy for this server, or ``(None, problem)``.

    With ``sglang_gpu_count`` set, the full plan of :func:`_strategy.resolve` (checked
    against that count x ``nnodes``). Without it, the strategy's grammar and divisibility
    only (:func:`unchecked_layout`): the host resolves it with its own GPUs. ``(None, None)``
    when the strategy is missing or the count is malformed (both reported by
    :func:`check_fields`).
    """
    strategy = values.get("strategy", MISSING)
    gpus = values.get("sglang_gpu_count", MISSING)
    if is_unset(strategy) or not (is_unset(gpus) or is_positive_int(gpus)):
        return None, None
    if is_pd_strategy(values):
        return pd_layout(strategy)
    try:
        if is_unset(gpus):
            return unchecked_layout(strategy, nnodes), None
        return resolve(strategy, int(str(gpus)), nnodes), None
    except StrategyError as exc:
        text = str(exc)
        if text.startswith("unknown strategy"):
            text += "; or a prefill/decode layout %s" % PD_FORM
        return None, text


def pd_layout(strategy):
    """``(layout, problem)`` of a PD layout: ``{"name", "pd": roles, "gpus"}`` (``roles``:
    ``_strategy.parse_pd``'s; ``gpus``: every server of both roles). Which hosts serve which
    role, and whether the GPUs fit, is the fleet's question (``_pd_roles.fleet_plan``)."""
    try:
        roles = parse_pd(strategy)
    except StrategyError as exc:
        return None, str(exc)
    return {"name": pd_name(roles), "pd": roles, "gpus": pd_gpus(roles)}, None


def layout_or_host(values, nnodes):
    """``(layout, problem, deferred)``: :func:`layout`, except that a strategy whose grammar
    holds but that does not fit a set ``sglang_gpu_count`` is left to the host
    (``deferred`` is the controller's reason): the controller cannot tell whether the count
    or the strategy is wrong, and the host compares the count with the GPUs it has first
    ("sglang_gpu_count is 16, but gpu-1 has 8 GPUs (...)"), then fits the strategy to them
    with the same words as here."""
    found, problem = layout(values, nnodes)
    gpus = values.get("sglang_gpu_count", MISSING)
    if problem is None or is_unset(gpus) or is_pd_strategy(values):
        return found, problem, None
    try:
        return unchecked_layout(values.get("strategy"), nnodes), None, problem
    except StrategyError:
        return None, problem, None


def unchecked_layout(strategy, nnodes):
    """The plan of a strategy whose GPU count is not known yet: ``resolve``'s shape, unchecked.

    ``parse_strategy`` checks the grammar and the sizes (ep divides tp); whether tp*pp*dp
    equals the GPUs of the server's hosts is left to the host, which knows its GPUs.
    """
    plan = parse_strategy(strategy)
    plan["name"] = strategy_name(plan)
    plan["nnodes"] = nnodes
    plan["gpus"] = gpus_needed(plan)
    return plan


def nnodes_of(values):
    value = values.get("sglang_nnodes", MISSING)
    if value in (MISSING, None, "") or not is_positive_int(value):
        return 1
    return int(str(value))


def report(problems, host):
    """One message for all problems."""
    if len(problems) == 1:
        return "%s: %s" % (host, problems[0])
    return "%s: %d problems with the deploy inputs:\n%s" % (
        host, len(problems), "\n".join("- " + p for p in problems))


def split_pattern(pattern):
    """The terms of a host pattern: split on ``,``, then on ``:`` outside ``[...]``."""
    terms = []
    for piece in str(pattern).split(","):
        depth, term = 0, ""
        for char in piece:
            if char == "[":
                depth += 1
            elif char == "]":
                depth = max(depth - 1, 0)
            if char == ":" and depth == 0:
                terms.append(term)
                term = ""
                continue
            term += char
        terms.append(term)
    return [t.strip() for t in terms if t.strip()]


def _match(name, hosts, groups):
    """The hosts one term names (a list in inventory order), or None when it names nothing."""
    if name.startswith("~"):
        try:
            regex = re.compile(name[1:])
        except re.error:
            return None
        names = [n for n in list(groups) + hosts if regex.match(n)]
    elif any(c in name for c in "*?[") and not _SUBSCRIPT.match(name):
        names = [n for n in list(groups) + hosts if fnmatch.fnmatchcase(n, name)]
    else:
        sub = _SUBSCRIPT.match(name)
        if sub and sub.group("base") in groups:
            members = list(groups[sub.group("base")])
            start = int(sub.group("start"))
            if sub.group("colon"):
                end = sub.group("end")
                return members[start:(int(end) + 1 if end not in ("", None) else None)] or None
            return members[start:start + 1 or None] if -len(members) <= start < len(members) else None
        names = [name] if name in groups or name in hosts else []
    if not names:
        return None
    out = []
    for n in names:
        for h in (groups[n] if n in groups else [n]):
            if h not in out:
                out.append(h)
    return out


def select_hosts(pattern, hosts, groups, variable="target"):
    """``(selected, problems)`` of an Ansible host pattern (the input ``variable``) over the
    inventory: every term
    (``:`` or ``,`` between them, ``!`` excludes, ``&`` intersects, globs, ``~regex`` and
    ``group[i]``/``group[i:j]``) must name a host or a group; regular terms first, then the
    intersections, then the exclusions (``all`` when there is no regular term), as
    ansible-core orders them."""
    hosts = [h for h in (hosts or []) if isinstance(h, str)]
    groups = dict((g, list(m or [])) for g, m in (groups or {}).items())
    groups.setdefault("all", list(hosts))
    if not isinstance(pattern, str) or not pattern.strip():
        return [], ["%s must be a host pattern of the inventory, got %s" % (variable, shown(pattern))]
    problems = []
    regular, inter, exclude = [], [], []
    for term in split_pattern(pattern):
        kind, name = ("&", term[1:]) if term.startswith("&") else ("!", term[1:]) if term.startswith("!") else ("", term)
        name = name.strip()
        matched = _match(name, hosts, groups) if name else None
        if matched is None:
            near = difflib.get_close_matches(name, list(groups) + hosts, n=1)
            problems.append("%s %s: %s is neither a host nor a group of the inventory%s"
                            % (variable, shown(pattern), shown(name), " (did you mean %s?)" % near[0] if near else ""))
            continue
        {"": regular, "&": inter, "!": exclude}[kind].append(matched)
    if problems:
        return [], problems
    selected = []
    for matched in regular or [groups["all"]]:
        selected.extend(h for h in matched if h not in selected)
    for matched in inter:
        selected = [h for h in selected if h in matched]
    for matched in exclude:
        selected = [h for h in selected if h not in matched]
    if not selected:
        problems.append("%s %s selects no host of the inventory" % (variable, shown(pattern)))
    return selected, problems


def fleet_problem(pattern, hosts, groups, sources=None, default_group="sglang_servers"):
    """The refusal of a deploy whose ``target`` (default: the server group) selects no host
    of the inventory, else None: without it, every play of the deploy is skipped and the
    run ends with rc 0 having deployed nothing."""
    given = pattern not in (None, "")
    pattern = pattern if given else default_group
    selected, problems = select_hosts(pattern, hosts, groups, "target" if given else "the server group")
    if selected:
        return None
    inventory = ", ".join(str(s) for s in (sources or [])) or "(no inventory given)"
    if not given and pattern in (groups or {}):
        why = "group %s of the inventory %s has no host" % (pattern, inventory)
    elif not given:
        why = "the inventory %s has no group %s" % (inventory, pattern)
    else:
        why = "%s (inventory %s)" % ("; ".join(problems), inventory)
    return ("nothing to deploy: %s; add the servers to group %s, or pass -e target=<hosts of the "
            "inventory>" % (why, default_group))
