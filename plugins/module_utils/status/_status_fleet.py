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

Plain Python, no Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


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


def fleet(hosts, rows, header, ctx=None, unreachable_routers=None):
    """``hosts``: the play's hosts; ``rows``: host -> the module's row (absent: no status);
    ``header``: the module's header line. Returns ``{"lines", "rows", "missing",
    "failures", "ok"}``."""
    ctx = ctx or {"routers": [], "membership": {}, "held_hosts": set()}
    reported = [dict(rows[h]) for h in hosts if isinstance(rows.get(h), dict) and rows[h]]
    missing = [h for h in hosts if not (isinstance(rows.get(h), dict) and rows[h])]
    extra = EXTRA_COLUMNS if ctx.get("routers") else ()
    lines = ["  ".join([header or "HOST"] + [title for title, _cell in extra])]
    failures = []
    for row in reported:
        cells = [cell(row, ctx) for _title, cell in extra]
        lines.append("  ".join([row.get("line") or row.get("host", "")] + cells))
        row["routers"] = dict((r, ctx["membership"].get((r, row.get("host"))))
                              for r in ctx.get("routers", ()))
        row["held"] = row.get("host") in ctx.get("held_hosts", ())
        problems = list(row.get("problems") or []) + router_problems(row, ctx)
        row["router_problems"] = problems[len(row.get("problems") or []):]
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
