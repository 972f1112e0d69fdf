# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Every router of the group, the hold marker, and what router membership should be.

* :func:`routers`: the routers of ``sglang_routers`` from the inventory (each one is
  asked on its own host, at 127.0.0.1 on its ``router_port``, with its ``router_api_key``).
* :func:`switch_plan`: whether a server that will restart leaves the routers and comes
  back (a held server is out already and stays out).
* :func:`hold_marker` / :func:`check_reason` / :func:`is_held`: the hold marker
  (``_paths.ROUTER_HOLD_PATH``; JSON ``{"reason", "since", "by"}``) and the inventory's
  ``sglang_router_hold``.
* :func:`membership`: what one router must add and remove so that it lists every serving,
  healthy, not held server and no other server of the inventory.
* :func:`batch_urls`: the worker URLs of a batch's hosts that a flag selects.
* :func:`unlisted`, :func:`restore_hosts`, :func:`restore_inputs`, :func:`restore`,
  :func:`put_back_unlisted`: before any batch of a rollout leaves, every ready server
  that a router does not list is put back (a controller killed between a server's
  removal and its re-add leaves it out of every router; the next run must not take the
  others out while it is).

Plain Python, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router
from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.router._router import is_leaving

DEFAULT_ROUTER_PORT = 30000
REASON = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class FleetError(Exception):
    """A refusal that names the variable and the value."""


def _norm(url):
    return str(url).strip().rstrip("/")


def routers(router_hosts, hostvars):
    """``[{"host", "url", "unit_path"}]`` for the hosts of the router group, in inventory
    order. The URL is the one the router answers on its own host; ``unit_path`` is its
    systemd unit (the router role's), absent before the router is installed. The router's
    ``router_api_key`` is not in it: the tasks loop over these entries, and Ansible prints a
    failed loop item whole, so each task reads the key from the host's vars."""
    out = []
    bad = []
    for host in router_hosts or []:
        hv = hostvars.get(host) or {}
        port = hv.get("router_port") or DEFAULT_ROUTER_PORT
        try:
            port = int(port)
        except (TypeError, ValueError):
            bad.append("%s: router_port is %r; expected an integer" % (host, port))
            continue
        out.append({"host": host, "url": "http://127.0.0.1:%d" % port,
                    "unit_path": "/etc/systemd/system/%s.service"
                                 % (hv.get("router_service_name") or "sglang-router")})
    if bad:
        raise FleetError("; ".join(bad))
    return out


def check_reason(reason):
    if not isinstance(reason, str) or not REASON.match(reason):
        raise FleetError("server_router_hold_reason is %r; expected one word (letters, digits, "
                         "'_', '.', '-'; e.g. 'tune')" % (reason,))
    return reason


def hold_marker(reason, by, since):
    """The marker's document. ``since`` is an ISO 8601 time."""
    return {"reason": check_reason(reason), "since": str(since), "by": str(by or "")}


def is_held(marker, inventory_hold=False):
    """Held by the marker on the host (any JSON object there) or by the inventory."""
    if _truthy(inventory_hold):
        return True
    return isinstance(marker, dict)


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def switch_plan(restart, has_last_good, held):
    """What a restarting server does with the routers.

    * ``leave``: it is (or may still be) in a router and will restart: it is taken out of
      every router first. A held server is taken out too (a no-op when it is out already,
      as a hold leaves it), so that no request is cut when an operator's hold was not
      applied yet.
    * ``drain``: a server that is not held drains after leaving; a held one drains only
      when a router still listed it (the caller checks what the removal removed).
    * ``readd``: put back into every router after the restart: never when held.
    """
    leave = _truthy(restart) and _truthy(has_last_good)
    held = _truthy(held)
    return {"leave": leave, "held": held, "readd": leave and not held}


def batch_urls(hosts, hostvars, flag, url_var):
    """The ``url_var`` of each of ``hosts`` whose ``flag`` is true (unset = false), in
    order, each once; hosts with an empty URL (a multi-node server's rank >= 1) are
    skipped."""
    out = []
    for host in hosts or []:
        hv = hostvars.get(host) or {}
        if not _truthy(hv.get(flag, False)):
            continue
        url = _norm(hv.get(url_var) or "")
        if url and url not in out:
            out.append(url)
    return out


def _pd_plan(rows, candidates, payloads, skip=()):
    """With ``payloads`` (a router in PD mode, see ``_router.put_back``): refuse a
    candidate without a body (``_router.RouterError`` naming it), and return the URLs the
    router lists with another role than their body's, less ``skip``; None without
    payloads."""
    if not payloads:
        return None
    bodies = _router_pd.check_payloads(payloads)
    _router_pd.refuse_roleless(bodies, candidates)
    return [m["url"] for m in _router.misregistered(rows, bodies) if m["url"] not in skip]


def membership(candidates, held, healthy, rows, payloads=None):
    """What one router must change.

    ``candidates``: the worker URLs of the inventory's servers in this run; ``held``: those
    held out; ``healthy``: ``{url: True | False | None}`` (None: could not tell, left as it
    is); ``rows``: the router's list (``_router.worker_table``).
    Returns ``{"add": [...], "remove": [...], "keep": [...]}``: a server that is healthy and
    not held must be listed; one that is down or held must not; URLs the inventory does
    not name are left alone. A row the router is draining (smg keeps a removed worker so
    for about 5 s) counts as not listed: it routes nothing and goes by itself.

    ``payloads`` (``{url: body}``; None or empty: the regular mode, the answer above): a
    router in PD mode. A candidate without a body is refused (``_router.RouterError``),
    and the answer has ``repair`` too: the URLs the router lists with another role than
    their body's and that stay (``_router.converge`` puts them right).
    """
    held = set(_norm(u) for u in held or [])
    listed = set(r["url"] for r in rows if not is_leaving(r))
    add, remove, keep = [], [], []
    for url in [_norm(u) for u in candidates or []]:
        state = healthy.get(url)
        if url in held or state is False:
            (remove if url in listed else keep).append(url)
        elif state is True:
            (keep if url in listed else add).append(url)
        else:
            keep.append(url)
    plan = {"add": add, "remove": remove, "keep": keep}
    repair = _pd_plan(rows, candidates, payloads, set(remove))
    if repair is not None:
        plan["repair"] = repair
    return plan


def membership_report(router, rows, candidates, held, healthy):
    """One row per candidate for the status table of one router: ``{url, listed,
    healthy_in_router, serving, held, problem}``; ``problem`` is '' or the reason."""
    held = set(_norm(u) for u in held or [])
    by_url = {}
    for r in rows:
        by_url.setdefault(r["url"], r)
    out = []
    for url in [_norm(u) for u in candidates or []]:
        row = by_url.get(url)
        serving = healthy.get(url)
        problem = ""
        if url in held:
            if row is not None:
                problem = "held but listed by the router %s" % router
        elif serving is True and row is None:
            problem = "serves but the router %s does not list it" % router
        elif serving is False and row is not None and row.get("healthy") is not False:
            problem = "does not serve but the router %s routes to it" % router
        out.append({"router": router, "url": url, "listed": row is not None,
                    "healthy_in_router": None if row is None else row.get("healthy"),
                    "serving": serving, "held": url in held, "problem": problem})
    return out


# ---- before any batch leaves: put back the ready servers a router does not list ----
#
# A rolling switch takes a batch out of every router, drains it, restarts it, waits until
# it is ready and puts it back. A controller killed after the removal and before the re-add
# leaves that server out of every router; the next run finds nothing to restart on it (it
# serves the target already), so no batch puts it back, and the final membership
# convergence comes only after every batch has left and come back. So, once, before the
# first batch leaves, every router puts back each server that is *ready*:
#
# * it serves the target: the check-mode unit plan of every host of the server
#   (``_server_unit.plan``, the deploy's one restart decision) says no restart; a server
#   still running what this run replaces (a kill before its unit was installed, or a
#   restart owed since one was) is left to its batch, which puts it back after its restart;
# * it is not held (the hold marker, read this run, or the inventory's hold);
# * it is healthy: its ``/health`` answers 200 from the router's host (``router_worker``'s
#   probe, the one membership convergence uses, and the route the router's own health
#   check asks by default); the add then waits until the router routes to it
#   (``_router.put_back``).


def unlisted(urls, rows):
    """Those of ``urls`` the router does not list (a row it keeps draining counts as not
    listed, as in :func:`membership`), in order, each once."""
    listed = set(r["url"] for r in rows if not is_leaving(r))
    out = []
    for url in [_norm(u) for u in urls or []]:
        if url not in listed and url not in out:
            out.append(url)
    return out


def restore(candidates, held, healthy, rows, payloads=None):
    """What one router puts back before any batch leaves; it never removes.

    ``candidates``: the worker URLs of the servers that serve the target (see
    :func:`restore_inputs`); ``held``: those held out; ``healthy``: ``{url: True | False |
    None}`` for the unlisted ones (None, or absent: not asked); ``rows``: the router's list.
    Returns ``{"add": [...], "unlisted": [...], "not_ready": [{"url", "reason"}]}``: a
    candidate the router lists is left alone, and so is one that is held or not healthy.
    With ``payloads`` (a router in PD mode, as :func:`membership` takes them) a candidate
    without a body is refused, and the answer has ``repair``: the listed URLs whose row
    has another role than their body's.
    """
    held = set(_norm(u) for u in held or [])
    missing = unlisted(candidates, rows)
    add, not_ready = [], []
    for url in missing:
        state = healthy.get(url)
        if url in held:
            not_ready.append({"url": url, "reason": "held"})
        elif state is True:
            add.append(url)
        elif state is False:
            not_ready.append({"url": url, "reason": "/health does not answer 200"})
        else:
            not_ready.append({"url": url, "reason": "health not asked"})
    plan = {"add": add, "unlisted": missing, "not_ready": not_ready}
    repair = _pd_plan(rows, candidates, payloads)
    if repair is not None:
        plan["repair"] = repair
    return plan


def put_back_unlisted(router, candidates, held, probe, timeout, interval, keys=None,
                      check=False, payloads=None, **clock):
    """One router's put-back before any batch leaves (``router_worker``'s
    ``state: restored``): read its list, ask ``probe(url)`` (True when the server's
    ``/health`` answers 200) for the candidates it does not list and that are not held
    (none when it lists every one), and put back the healthy ones with
    ``_router.put_back``, which waits until the router routes to each. With ``check``
    nothing is added. Returns ``{"before", "after", "added", "unlisted", "not_ready",
    "elapsed_s"}``.

    With ``payloads`` (a router in PD mode, see ``_router.put_back``): a candidate without
    a body is refused before anything changes (and before any probe), each add carries
    its body, the listed rows with another role than their body's are put right (with
    ``check``: named only), and the answer has ``repaired``."""
    if payloads:
        # refused before the list: the same refusal _router.put_back makes
        _router.pd_bodies(router, payloads, candidates)
    rows = router.workers()
    held = [_norm(u) for u in held or []]
    healthy = dict((u, bool(probe(u))) for u in unlisted(candidates, rows) if u not in held)
    plan = restore(candidates, held, healthy, rows, payloads)
    out = {"before": rows, "after": rows, "added": plan["add"], "unlisted": plan["unlisted"],
           "not_ready": plan["not_ready"], "elapsed_s": 0.0}
    if "repair" in plan:
        out["repaired"] = plan["repair"]
    if check or not (plan["add"] or plan.get("repair")):
        return out
    res = _router.put_back(router, plan["add"], timeout, interval, keys, payloads=payloads,
                           **clock)
    out.update(after=res["after"], added=res["added"], elapsed_s=res["elapsed_s"])
    if "repaired" in res:
        out["repaired"] = res["repaired"]
    return out


def restore_hosts(servers, urls):
    """The hosts to read (hold, check-mode unit plan) before a put-back: every host of each
    server whose worker URL is in ``urls`` (what a router would put back). ``servers``:
    ``[{"host", "url", "members"}]``, ``url`` empty on a multi-node server's rank >= 1,
    ``members`` the hosts of the server (``[host]`` for a one-host server)."""
    wanted = set(_norm(u) for u in urls or [])
    out = []
    for server in servers or []:
        if not server.get("url") or _norm(server["url"]) not in wanted:
            continue
        for host in server.get("members") or [server["host"]]:
            if host not in out:
                out.append(host)
    return out


def _plan_verdict(plan):
    """``(at_target, why)`` from one host's registered check-mode unit plan: None when the
    plan was not made this run (skipped, failed, absent)."""
    if not isinstance(plan, dict) or "restart" not in plan or plan.get("skipped") \
            or plan.get("failed"):
        return None, "its unit plan was not read in this run"
    if _truthy(plan["restart"]):
        return False, "it will restart (%s)" % (plan.get("summary") or plan.get("action")
                                                or "its unit changed")
    return True, ""


def restore_inputs(servers):
    """Which servers a router may put back before any batch leaves.

    ``servers``: ``[{"host", "url", "hold", "inventory_hold", "plans"}]``, one per server
    (its rank 0): ``hold`` the registered hold read (``router_hold``) of this run or None,
    ``plans`` ``{host: registered check-mode unit plan or None}`` for every host of the
    server. Returns ``{"urls", "held", "not_at_target", "unknown"}``: ``urls`` the servers
    that serve the target (no host of the server will restart) and are not held; ``held``
    the held ones; ``not_at_target`` ``{host: why}``; ``unknown`` the hosts whose hold or
    plan was not read this run (nothing is done for them)."""
    urls, held, not_at_target, unknown = [], [], {}, []
    for server in servers or []:
        url = _norm(server.get("url") or "")
        if not url:
            continue
        host = server["host"]
        read = server.get("hold")
        if is_held(None, server.get("inventory_hold", False)) or (
                isinstance(read, dict) and _truthy(read.get("held", False))):
            held.append(url)
            continue
        if not isinstance(read, dict) or "held" not in read or read.get("skipped"):
            unknown.append(host)
            continue
        verdicts = [(member, _plan_verdict(plan))
                    for member, plan in sorted((server.get("plans") or {host: None}).items())]
        missing = [m for m, (at, _why) in verdicts if at is None]
        behind = ["%s: %s" % (m, why) for m, (at, why) in verdicts if at is False]
        if behind:
            not_at_target[host] = "; ".join(behind)
        elif missing:
            unknown.append(host)
        else:
            urls.append(url)
    return {"urls": urls, "held": held, "not_at_target": not_at_target, "unknown": unknown}
