# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filter of playbooks/status.yml: the fleet table from every host's row and every
router's worker list (the logic is in module_utils/status/_status_fleet.py)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The module_utils are imported where a filter runs, not when this file loads: Ansible
# resolves any gpufleet.sglang filter by loading every filter file of the collection, in
# each task's worker process (see plugins/filter/router.py).


def status_fleet(hosts, hostvars, routers=None, by_host=None, status_var="__status",
                 hold_var="__status_hold", groups=None, servers_group=None):
    """``{lines, rows, missing, failures, ok}`` for ``hosts``. ``routers``: the registered
    loop of router_worker (state=converged, check mode) over the routers (skipped or absent:
    no router); ``by_host``: host -> worker URL. ``groups`` (the inventory's) and
    ``servers_group`` (the servers' group, when the play's target is one): the fleet whose
    prefill/decode servers pair with each other, for each PD server's peers."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.status import _status_fleet

    hosts = list(hosts or [])
    rows, header = {}, None
    for h in hosts:
        res = (hostvars.get(h) or {}).get(status_var)
        if isinstance(res, dict) and isinstance(res.get("row"), dict):
            rows[h] = res["row"]
            header = header or res.get("header")
    held = [h for h in hosts
            if ((hostvars.get(h) or {}).get(hold_var) or {}).get("held")]
    results, unreachable = [], []
    for res in (routers or {}).get("results", []) if isinstance(routers, dict) else []:
        if res.get("skipped"):
            continue
        name = (res.get("item") or {}).get("host") or str(res.get("item"))
        if res.get("failed") or res.get("unreachable") or "membership" not in res:
            unreachable.append(name)
            continue
        results.append({"router": name, "membership": res["membership"]})
    ctx = _status_fleet.context(results, by_host or {}, held)
    ctx["routers"] = ctx["routers"] + unreachable if unreachable else ctx["routers"]
    groups = groups or {}
    fleet_hosts = list(groups.get(servers_group) or []) if servers_group else []
    others = [h for h in hosts if h not in rows] + [h for h in fleet_hosts if h not in hosts]
    inventory = _status_fleet.inventory_pd(others, hostvars, groups)
    return _status_fleet.fleet(hosts, rows, header, ctx, unreachable, inventory,
                               fleet_hosts or None)


class FilterModule(object):
    def filters(self):
        return {"status_fleet": status_fleet}
