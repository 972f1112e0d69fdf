# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The router in PD (prefill/decode disaggregation) mode: its command line and the worker
API payloads of a server with a role.

What smg 1.13.0 does (its ``smg launch --help``, ``tests/fixtures/router-help/``, and the
real router tried on loopback against fake workers; ``roles/router/README.md``, "PD mode"):

* ``--pd-disaggregation --prefill URL [BOOTSTRAP_PORT|none] ... --decode URL ...``;
  ``--prefill-policy`` and ``--decode-policy`` (each falls back to ``--policy``). In PD
  mode the launcher drops ``--worker-urls`` (``smg/router.py``: ``worker_urls = []``).
* It refuses to start with ``power_of_two`` for a role that has fewer than two URLs of
  that role on its command line ("Power-of-two policy for decode requires at least 2
  decode workers"); the rule is checked at start only (one decode left after a removal
  still routes).
* ``POST /workers {"url", "worker_type": "prefill"|"decode", "bootstrap_port"}`` adds a
  worker with its role at run time (202, then listed with ``worker_type`` and
  ``bootstrap_port``); ``DELETE /workers/{id}`` drains and removes it like any worker. A
  body with the URL alone adds a ``regular`` worker even when the server reports
  ``disaggregation_mode: prefill``, and a PD router routes nothing to a regular worker
  (503 "No prefill workers available" once the last prefill is gone); ``PUT
  /workers/{id}`` with the role's body re-registers a listed worker under its role (same
  id). sglang-router 0.3.2 accepts the same body.
* The mode is fixed at start: a router started without ``--pd-disaggregation`` lists role
  workers added over the API but never routes to them (404 "No worker available" once its
  regular workers are gone). A change of mode is a restart.
* Prefill admission (``--prefill-max-inflight-requests-per-worker``,
  ``--prefill-queue-size``, ``--prefill-queue-timeout-secs``) is smg's, not sglang-router
  0.3.2's.

Plain Python, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.router._router import (
    RouterError,
    api_for,
    is_leaving,
    normalize_url,
)

ROLES = ("prefill", "decode")
# SGLang's --disaggregation-bootstrap-port default; the bootstrap server lives on the
# prefill server
DEFAULT_BOOTSTRAP_PORT = 8998
AUTO = "auto"
# smg's docs: cache_aware for prefill, power_of_two for decode
# (docs/concepts/routing/pd-disaggregation.md)
PREFERRED = {"prefill": "cache_aware", "decode": "power_of_two"}
# what "auto" takes for a role with too few URLs on the command line for its preferred one
FALLBACK = "round_robin"
# policies smg refuses at start with fewer URLs of the role on its command line
MIN_URLS = {"power_of_two": 2}
MODE_FLAGS = ("--pd-disaggregation", "--prefill", "--decode", "--prefill-policy",
              "--decode-policy")
ADMISSION_FLAGS = (
    ("--prefill-max-inflight-requests-per-worker", "router_prefill_max_inflight"),
    ("--prefill-queue-size", "router_prefill_queue_size"),
    ("--prefill-queue-timeout-secs", "router_prefill_queue_timeout"),
)


def _role(value, host):
    role = str(value).strip().lower() if value is not None else ""
    if role not in ROLES:
        raise RouterError("%s: sglang_pd_role is %r; expected prefill or decode"
                          % (host, value))
    return role


def _bootstrap_port(value, host):
    """An int port, or None for ``none`` (no bootstrap port)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
        return None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if isinstance(value, bool) or not 0 < port < 65536:
        raise RouterError("%s: the prefill server's bootstrap port is %r; expected a port "
                          "(1-65535) or none" % (host, value))
    return port


def normalize_workers(entries):
    """The router's PD workers, checked: ``entries`` is a list of ``{"url", "role",
    "bootstrap_port", "host"}`` (``role`` prefill or decode; ``bootstrap_port`` a port,
    ``none`` or unset, only read on a prefill server, unset giving
    :data:`DEFAULT_BOOTSTRAP_PORT`; ``host`` for the messages).

    Returns ``[{"host", "url", "role", "bootstrap_port"}]`` in the given order, prefill and
    decode alike (``bootstrap_port`` None on a decode server, or on a prefill server given
    ``none``); ``[]`` for no entry. Refuses, every problem at once, a role that is neither,
    a bad port, a URL given twice, and a list without a prefill or without a decode server.
    """
    out, problems, seen = [], [], {}
    for i, entry in enumerate(entries or []):
        if not isinstance(entry, dict) or not entry.get("url"):
            problems.append("PD worker #%d is %r; expected a mapping with url and role"
                            % (i + 1, entry))
            continue
        url = normalize_url(entry["url"])
        host = entry.get("host") or url
        try:
            role = _role(entry.get("role"), host)
            port = None
            if role == "prefill":
                port = entry.get("bootstrap_port")
                port = _bootstrap_port(DEFAULT_BOOTSTRAP_PORT if port in (None, "") else port,
                                       host)
        except RouterError as exc:
            problems.append(str(exc))
            continue
        if url in seen:
            problems.append("%s and %s name the same worker URL %s" % (seen[url], host, url))
            continue
        seen[url] = host
        out.append({"host": host, "url": url, "role": role, "bootstrap_port": port})
    if out and not problems:
        for role in ROLES:
            if not any(w["role"] == role for w in out):
                problems.append(
                    "the PD servers behind the router have no %s server (%s); a PD router "
                    "needs at least one prefill and one decode server" % (
                        role, ", ".join("%s: %s" % (w["host"], w["role"]) for w in out)))
    if problems:
        raise RouterError("; ".join(problems))
    return out


def workers_from_roles(servers, urls, roles):
    """The router's PD workers from the servers' roles.

    ``servers`` lists the server hosts in inventory order; ``urls`` maps a host to its
    worker URL (only a server's rank 0 has one: the host that serves HTTP); ``roles`` maps
    a host to ``{"role": prefill|decode|None, "bootstrap_port": port|"none"|None}``.

    Returns ``[]`` when no server has a role (the router stays in its regular mode), else
    :func:`normalize_workers`'s list. Refuses a group where only some servers have a role:
    a PD router routes nothing to a regular worker (tried on smg 1.13.0).
    """
    rows = []
    for host in servers or []:
        if urls.get(host):
            info = roles.get(host) or {}
            rows.append({"host": host, "url": urls[host], "role": info.get("role"),
                         "bootstrap_port": info.get("bootstrap_port")})
    if not any(r["role"] not in (None, "") for r in rows):
        return []
    without = [r["host"] for r in rows if r["role"] in (None, "")]
    if without:
        raise RouterError(
            "a router in PD mode routes only to prefill and decode servers, and %s %s no "
            "PD role while the other servers of the group have one; give every server of "
            "the router's group a role, or none" % (
                ", ".join(without), "has" if len(without) == 1 else "have"))
    return normalize_workers(rows)


def policy_choices(help_text, flag):
    """The choices the release's ``--help`` lists for ``flag`` (``{a,b,...}`` after it),
    or None when it lists none."""
    m = re.search(re.escape(flag) + r"\s+\{([^}]*)\}", help_text or "")
    if not m:
        return None
    return [c.strip() for c in m.group(1).split(",") if c.strip()]


def _policy(role, asked, count, help_text):
    var = "router_%s_policy" % role
    asked = str(asked or AUTO).strip()
    if asked == AUTO:
        policy = PREFERRED[role]
        if count < MIN_URLS.get(policy, 0):
            policy = FALLBACK
    else:
        policy = asked
        need = MIN_URLS.get(policy, 0)
        if count < need:
            raise RouterError(
                "%s is %s, which the router refuses at start with fewer than %d %s URLs on "
                "its command line (it has %d); use %s, or auto" % (
                    var, policy, need, role, count, FALLBACK))
    choices = policy_choices(help_text, "--%s-policy" % role)
    if choices is not None and policy not in choices:
        raise RouterError("%s is %s; this release's --%s-policy takes %s"
                          % (var, policy, role, ", ".join(choices)))
    return policy


def launch_args(package, version, workers, flags, help_text, settings):
    """The PD part of the router's command line: ``--pd-disaggregation``, one ``--prefill
    URL PORT|none`` per prefill server, one ``--decode URL`` per decode server, a policy
    per role, and the prefill admission limits when ``prefill_max_inflight`` > 0.

    ``workers`` is :func:`normalize_workers`'s list; ``flags`` the option strings and
    ``help_text`` the text of the installed release's ``--help``; ``settings`` holds
    ``prefill_policy``, ``decode_policy`` (a policy or ``auto``),
    ``prefill_max_inflight``, ``prefill_queue_size``, ``prefill_queue_timeout`` and
    ``own_key_urls``. Refuses, naming what is wrong, a release without PD mode or without
    the /workers API, a server with a key of its own, an unknown policy, and admission
    limits the release has no flag for.
    """
    if not workers:
        return []
    if api_for(package, version) != "workers":
        raise RouterError(
            "%s %s cannot front PD servers here: its worker API (/add_worker) cannot add a "
            "server with its role, so a drained prefill or decode server could not be put "
            "back; use smg (router_package: smg) or sglang-router 0.3.x" % (package, version))
    missing = [f for f in MODE_FLAGS if f not in flags]
    if missing:
        raise RouterError("%s %s cannot route in PD mode: its --help has no %s"
                          % (package, version, ", ".join(missing)))
    own_key = set(normalize_url(u) for u in settings.get("own_key_urls") or [])
    keyed = [w["host"] for w in workers if w["url"] in own_key]
    if keyed:
        raise RouterError(
            "%s %s a server_api_key: a server with a key is added to the router after its "
            "start, and the collection does not yet add a prefill or decode server with its "
            "role that way (it would be added as a regular worker, to which a PD router "
            "routes nothing); PD servers behind the router run without server_api_key for now"
            % (", ".join(keyed), "has" if len(keyed) == 1 else "have"))
    prefill = [w for w in workers if w["role"] == "prefill"]
    decode = [w for w in workers if w["role"] == "decode"]
    argv = ["--pd-disaggregation"]
    for w in prefill:
        argv += ["--prefill", w["url"],
                 "none" if w["bootstrap_port"] is None else str(w["bootstrap_port"])]
    for w in decode:
        argv += ["--decode", w["url"]]
    argv += ["--prefill-policy", _policy("prefill", settings.get("prefill_policy"),
                                         len(prefill), help_text)]
    argv += ["--decode-policy", _policy("decode", settings.get("decode_policy"),
                                        len(decode), help_text)]
    limit = int(settings.get("prefill_max_inflight") or 0)
    if limit > 0:
        values = (limit, int(settings.get("prefill_queue_size")),
                  int(settings.get("prefill_queue_timeout")))
        lacking = [var for flag, var in ADMISSION_FLAGS if flag not in flags]
        if lacking:
            raise RouterError("%s %s has no prefill admission flags (%s); set "
                              "router_prefill_max_inflight: 0" % (package, version,
                                                                  ", ".join(lacking)))
        bad = [var for (flag, var), value in zip(ADMISSION_FLAGS, values) if value < 0]
        if bad:
            raise RouterError("%s must be >= 0" % ", ".join(bad))
        for (flag, var), value in zip(ADMISSION_FLAGS, values):
            argv += [flag, str(value)]
    return argv


# ---- the worker API ----

def worker_payload(worker, api_key=None):
    """The body of ``POST /workers`` (or ``PUT /workers/{id}``) that adds ``worker`` (a
    row of :func:`normalize_workers`) with its role; ``api_key`` is the worker's own key. Without
    ``worker_type`` the router would add it as a regular worker and route nothing to it."""
    body = {"url": normalize_url(worker["url"]), "worker_type": worker["role"]}
    if worker["role"] == "prefill" and worker.get("bootstrap_port") is not None:
        body["bootstrap_port"] = int(worker["bootstrap_port"])
    if api_key:
        body["api_key"] = api_key
    return body


def payloads(workers, keys=None):
    """``{url: body}`` for every PD worker (``keys``: worker URL to its own key)."""
    keys = dict((normalize_url(k), v) for k, v in (keys or {}).items())
    return dict((w["url"], worker_payload(w, keys.get(w["url"]))) for w in workers)


def misregistered(listed, workers):
    """The listed workers whose role or bootstrap port is not the inventory's.

    ``listed`` is the router's ``GET /workers`` answer (its ``workers`` rows carry
    ``worker_type`` and, for a prefill, ``bootstrap_port``); ``workers`` is
    :func:`normalize_workers`'s list. Returns ``[{"id", "url", "listed", "payload"}]``: each is
    put right with ``PUT /workers/{id}`` and ``payload`` (tried on smg 1.13.0: the worker
    keeps its id and takes the new role)."""
    want = dict((w["url"], w) for w in workers)
    out = []
    for row in (listed or {}).get("workers") or []:
        url = normalize_url(row.get("url", ""))
        w = want.get(url)
        if w is None:
            continue
        kind = row.get("worker_type") or "regular"
        port = row.get("bootstrap_port")
        expected_port = w["bootstrap_port"] if w["role"] == "prefill" else None
        if kind != w["role"] or port != expected_port:
            out.append({"id": row.get("id"), "url": url,
                        "listed": {"worker_type": kind, "bootstrap_port": port},
                        "payload": worker_payload(w)})
    return out


def check_payloads(given):
    """The bodies of ``given`` (``{url: body}``, :func:`payloads`' answer and the filter
    ``router_pd_payloads``'), checked: keyed by the normalized URL, each a copy whose
    ``url`` is that URL, whose ``worker_type`` is prefill or decode and whose
    ``bootstrap_port``, when given (a prefill server's only), is a port (an int). Other keys
    of a body (``api_key``, smg's ``labels``...) pass unchanged. Refuses, every problem at
    once, a body that is not a mapping, another role, a body whose ``url`` is another
    worker's, a bad port and a port on a decode worker (a row without one never matches
    it, so the worker would be put right at every call)."""
    out, problems = {}, []
    for key, body in (given or {}).items():
        url = normalize_url(key)
        if not isinstance(body, dict):
            problems.append("the PD payload of %s is %r; expected a mapping with worker_type"
                            % (url, body))
            continue
        if body.get("url") not in (None, "") and normalize_url(body["url"]) != url:
            problems.append("the PD payload of %s names another url, %s" % (url, body["url"]))
            continue
        role = str(body.get("worker_type") or "").strip().lower()
        if role not in ROLES:
            problems.append("the PD payload of %s has worker_type %r; expected prefill or decode "
                            "(a router in PD mode routes nothing to a regular worker)"
                            % (url, body.get("worker_type")))
            continue
        checked = dict(body, url=url, worker_type=role)
        port = body.get("bootstrap_port")
        if port is not None:
            if role != "prefill":
                problems.append("the PD payload of %s gives a bootstrap_port to a decode worker; "
                                "only a prefill server has one" % url)
                continue
            try:
                checked["bootstrap_port"] = _bootstrap_port(port, url)
            except RouterError as exc:
                problems.append(str(exc))
                continue
            if checked["bootstrap_port"] is None:
                del checked["bootstrap_port"]
        if url in out:
            problems.append("the PD payloads name %s twice" % url)
            continue
        out[url] = checked
    if problems:
        raise RouterError("; ".join(problems))
    return out


def refuse_roleless(bodies, adding, router=""):
    """A router in PD mode never gets a worker without a role: refuse the URLs of
    ``adding`` (those a call may add) that ``bodies`` (:func:`check_payloads`'s answer)
    has no body for, naming them (and ``router``, the router's URL, when given)."""
    roleless = []
    for url in (normalize_url(u) for u in adding or []):
        if url not in bodies and url not in roleless:
            roleless.append(url)
    if roleless:
        raise RouterError(
            "%sgiven PD payloads but none for %s: a router in PD mode routes nothing to a "
            "worker added without its role (prefill or decode), so %s not added; render the "
            "payloads for every server behind it (filter gpufleet.sglang.router_pd_payloads)"
            % ("the router %s is " % router if router else "", ", ".join(roleless),
               "it is" if len(roleless) == 1 else "they are"))


def misregistered_rows(rows, bodies):
    """:func:`misregistered` over the router's rows (``_router.worker_table``'s, which keep
    smg's ``worker_type`` and ``bootstrap_port``; a row on its way out is left out: it
    routes nothing and goes by itself) against ``bodies`` (:func:`check_payloads`'s
    answer). Returns its list, each ``payload`` being the URL's whole body (``api_key``
    and other keys with it: ``PUT /workers/{id}`` replaces the whole registration)."""
    workers = [{"url": url, "role": body["worker_type"],
                "bootstrap_port": body.get("bootstrap_port")}
               for url, body in bodies.items()]
    found = misregistered({"workers": [r for r in rows or [] if not is_leaving(r)]}, workers)
    for m in found:
        m["payload"] = dict(bodies[m["url"]])
    return found
