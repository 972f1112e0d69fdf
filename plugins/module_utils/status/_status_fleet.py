# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The fleet table of playbooks/status.yml from every host's row (module server_status)
and, where routers front the servers, what each router lists.

:func:`fleet` returns the lines to print, the rows, the hosts that gave no status and
every failure. Columns after the row's own line come from :data:`EXTRA_COLUMNS`
(``(title, cell(row, context))``): a new column is one entry there.

**Prefill/decode (PD).** Each row carries its server's role (``_status.pd_of``: what the
process runs, else the record). :func:`pd_peers` gives each PD server its peers, the servers
of the other role it pairs with (a decode server's prefill servers, whose bootstrap port it
reaches, and a prefill server's decode servers; smg pairs any prefill with any decode). The
peers are the fleet's servers: the play's rows, and the inventory's servers the play did
not report (:func:`inventory_pd`: their cached record, else their pin, ``sglang_pd_role``
or the groups ``sglang_prefill``/``sglang_decode``); a multi-node server counts once, by its
rank 0. When a server of the fleet has a role, :func:`fleet` prints the table with the PD
columns (``_status.PD_COLUMNS``: PD, PEERS) and fails a PD server without a peer, when it
knows every server of the fleet (the play covers the inventory's server group).

Plain Python, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.sglang.plugins.module_utils.check._pd import DEFAULT_BOOTSTRAP_PORT
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._pd_roles import (
    PIN_GROUPS,
    PIN_VAR,
    pins,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import PD_ROLES
from ansible_collections.gpufleet.sglang.plugins.module_utils.status._status import (
    pd_from_record,
    table_header,
    table_line,
)

#: The host variable of a prefill server's bootstrap port (the router's, ``filter/router_pd.py``).
PORT_VAR = "sglang_pd_bootstrap_port"


def _router_name(report_router, names):
    return names.get(report_router, report_router)


def router_cell(row, ctx):
    """Per router: ``<router>:ok`` (listed, healthy there), ``:unhealthy`` (listed, the
    router sees it down), ``:absent``; ``held`` first when the server is held."""
    host = row.get("host")
    if not ctx.get("routers"):
        return "-"
    parts = ["held"] if host in ctx.get("held_hosts", ()) else []
    for router in ctx["routers"]:
        entry = ctx["membership"].get((router, host))
        if entry is None:
            parts.append("%s:?" % router)
        elif not entry["listed"]:
            parts.append("%s:absent" % router)
        else:
            parts.append("%s:%s" % (router, "ok" if entry["healthy_in_router"] is not False
                                    else "unhealthy"))
    return " ".join(parts)


EXTRA_COLUMNS = (("ROUTERS", router_cell),)


def router_problems(row, ctx):
    """What is wrong between this host and the routers: a serving, not held server a router
    does not list; a router that routes to a server that does not serve; a held server a
    router lists."""
    host = row.get("host")
    held = host in ctx.get("held_hosts", ())
    out = []
    for router in ctx.get("routers", ()):
        entry = ctx["membership"].get((router, host))
        if entry is None:
            continue
        routed = entry["listed"] and entry["healthy_in_router"] is not False
        if held and entry["listed"]:
            out.append("held but the router %s lists it" % router)
        elif not held and row.get("ready") and not entry["listed"]:
            out.append("serves but the router %s does not list it" % router)
        elif not row.get("ready") and routed:
            out.append("does not serve but the router %s routes to it" % router)
    return out


def context(router_results, by_host, held_hosts):
    """``router_results``: ``[{"router": name, "membership": [rows of
    router_worker state=converged]}]``; ``by_host``: host -> worker URL."""
    url_host = dict((u, h) for h, u in (by_host or {}).items())
    membership = {}
    routers = []
    for res in router_results or []:
        name = res["router"]
        routers.append(name)
        for entry in res.get("membership") or []:
            host = url_host.get(entry["url"])
            if host is not None:
                membership[(name, host)] = entry
    return {"routers": routers, "membership": membership, "held_hosts": set(held_hosts or [])}


def _int(value, default):
    try:
        return int(value) if value not in (None, "") and not isinstance(value, bool) else default
    except (TypeError, ValueError):
        return default


def inventory_pd(hosts, hostvars, groups=None):
    """host -> ``{"role", "bootstrap_port", "node_rank", "source"}`` of the ``hosts`` whose
    role the controller can tell without them: their record in ``hostvars``
    (``ansible_local.sglang``, when facts are cached; ``source`` ``record``, a co-located
    record gives role None), else their pin (``sglang_pd_role``, or the groups
    ``sglang_prefill``/``sglang_decode`` of ``groups``; ``source`` ``inventory``, the port
    ``sglang_pd_bootstrap_port``, else 8998). A host with neither is left out: unknown."""
    hostvars = hostvars or {}
    hosts = [h for h in hosts or [] if h in hostvars]
    pin_groups = dict((g, list((groups or {}).get(g) or [])) for g in PIN_GROUPS.values())
    pinned, dummy = pins(hosts, dict((h, (hostvars.get(h) or {}).get(PIN_VAR)) for h in hosts),
                         pin_groups)
    out = {}
    for host in hosts:
        hv = hostvars.get(host) or {}
        local = hv.get("ansible_local")
        facts = pd_from_record(local.get("sglang") if isinstance(local, dict) else None)
        if facts is not None:
            out[host] = {"role": facts["role"], "bootstrap_port": facts["bootstrap_port"],
                         "node_rank": facts["node_rank"], "source": "record"}
            continue
        roles = [r for r in PD_ROLES if r in (pinned.get(host) or {})]
        if roles:
            out[host] = {"role": "+".join(roles),
                         "bootstrap_port": _int(hv.get(PORT_VAR), DEFAULT_BOOTSTRAP_PORT)
                         if "prefill" in roles else None,
                         "node_rank": _int(hv.get("sglang_node_rank"), 0),
                         "source": "inventory"}
    return out


def _roles(role):
    return [r for r in (role or "").split("+") if r]


def pd_peers(rows, inventory=None, fleet_hosts=None):
    """Each PD row's peers, set in place as ``row["pd_peers"]``: ``[{"host", "role",
    "bootstrap_port", "source"}]`` of the servers of the other role (rank 0 of a multi-node
    server), in order: the rows', then the inventory's (:func:`inventory_pd`) hosts that
    have no row. ``fleet_hosts``: every server host of the fleet (the inventory's server
    group), or None when unknown; a host of it with neither a row nor an inventory role is
    unknown, and a PD row that finds no peer then gets None (``?``), not ``[]``.

    Returns host -> the row's PD problems (a server whose role has no peer in a fleet
    known in full)."""
    inventory = inventory or {}
    servers = []
    seen = set()
    for row in rows:
        host = row.get("host")
        seen.add(host)
        servers.append({"host": host, "role": row.get("pd_role"),
                        "bootstrap_port": row.get("pd_bootstrap_port"),
                        "node_rank": row.get("pd_node_rank") or 0,
                        "source": row.get("pd_source") or "record"})
    for host, facts in inventory.items():
        if host not in seen:
            seen.add(host)
            servers.append(dict(facts, host=host))
    unknown = [h for h in (fleet_hosts or []) if h not in seen]
    complete = fleet_hosts is not None and len(fleet_hosts) > 0 and not unknown
    out = {}
    for row in rows:
        mine = _roles(row.get("pd_role"))
        if not mine:
            continue
        wanted = [r for r in PD_ROLES if r not in mine] or list(PD_ROLES)
        peers = []
        for server in servers:
            theirs = _roles(server["role"])
            if server["host"] == row.get("host") or server["node_rank"] or not theirs:
                continue
            if any(r in theirs for r in wanted):
                peers.append({"host": server["host"], "role": server["role"],
                              "bootstrap_port": server.get("bootstrap_port")
                              if "prefill" in theirs else None,
                              "source": server.get("source")})
        if peers or complete:
            row["pd_peers"] = peers
        else:
            row["pd_peers"] = None
        if not peers and complete and not row.get("pd_node_rank"):
            out[row.get("host")] = [
                "serves %s, but no server of the fleet serves %s: no request completes through it"
                % (row["pd_role"], " or ".join(wanted))]
    return out


def fleet(hosts, rows, header, ctx=None, unreachable_routers=None, inventory=None,
          fleet_hosts=None):
    """``hosts``: the play's hosts; ``rows``: host -> the module's row (absent: no status);
    ``header``: the module's header line; ``inventory``, ``fleet_hosts``: what
    :func:`pd_peers` takes besides the rows. Returns ``{"lines", "rows", "missing",
    "failures", "ok"}``."""
    ctx = ctx or {"routers": [], "membership": {}, "held_hosts": set()}
    reported = [dict(rows[h]) for h in hosts if isinstance(rows.get(h), dict) and rows[h]]
    missing = [h for h in hosts if not (isinstance(rows.get(h), dict) and rows[h])]
    pd_problems = pd_peers(reported, inventory, fleet_hosts)
    pd = any(row.get("pd_role") for row in reported) or any(
        (facts or {}).get("role") for facts in (inventory or {}).values())
    extra = EXTRA_COLUMNS if ctx.get("routers") else ()
    lines = ["  ".join([table_header(pd=True) if pd else header or "HOST"]
                       + [title for title, _cell in extra])]
    failures = []
    for row in reported:
        cells = [cell(row, ctx) for _title, cell in extra]
        own = table_line(row, pd=True) if pd else row.get("line") or row.get("host", "")
        lines.append("  ".join([own] + cells))
        row["routers"] = dict((r, ctx["membership"].get((r, row.get("host"))))
                              for r in ctx.get("routers", ()))
        row["held"] = row.get("host") in ctx.get("held_hosts", ())
        row["router_problems"] = router_problems(row, ctx)
        row["pd_problems"] = pd_problems.get(row.get("host"), [])
        problems = list(row.get("problems") or []) + row["router_problems"] + row["pd_problems"]
        if problems:
            failures.append("%s: %s" % (row.get("host"), "; ".join(problems)))
    lines.extend("%s  (no status)" % h for h in missing)
    failures.extend("%s: no status (host unreachable or the module failed)" % h for h in missing)
    failures.extend("router %s: no worker list (unreachable or failed)" % r
                    for r in unreachable_routers or [])
    if failures:
        lines.extend([""] + failures)
    return {"lines": lines, "rows": reported, "missing": missing, "failures": failures,
            "ok": not failures}
