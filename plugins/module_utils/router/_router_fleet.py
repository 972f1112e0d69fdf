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

Plain Python, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

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


def membership(candidates, held, healthy, rows):
    """What one router must change.

    ``candidates``: the worker URLs of the inventory's servers in this run; ``held``: those
    held out; ``healthy``: ``{url: True | False | None}`` (None: could not tell, left as it
    is); ``rows``: the router's list (``_router.worker_table``).
    Returns ``{"add": [...], "remove": [...], "keep": [...]}``: a server that is healthy and
    not held must be listed; one that is down or held must not; URLs the inventory does
    not name are left alone. A row the router is draining (smg keeps a removed worker so
    for about 5 s) counts as not listed: it routes nothing and goes by itself.
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
    return {"add": add, "remove": remove, "keep": keep}


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
