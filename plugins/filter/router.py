# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters of the router control plane: the router's worker URLs, every router of the
group, the hosts of a batch that leave the routers, and what membership is asked for."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# The module_utils are imported where a filter runs, not when this file loads: Ansible
# resolves any gpufleet.sglang filter name by loading every filter file of the collection,
# once in each task's worker process that templates one (about 40-60 ms of controller CPU
# when these files imported their module_utils, compiled from source each time).


def _fleet():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_fleet
    return _router_fleet


def _worker_urls(servers, groups, hostvars, default_port):
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router
    try:
        return _router.worker_urls(servers, groups, hostvars, default_port)
    except _router.RouterError as exc:
        raise AnsibleFilterError(str(exc))


def router_worker_urls(servers, groups, hostvars, default_port=30000):
    """One worker URL per server of ``servers`` (a multi-node server's rank 0)."""
    return _worker_urls(list(servers), groups, hostvars, default_port)


def router_endpoints(router_hosts, hostvars):
    """Every router of the group: ``[{host, url, unit_path}]`` (no key: see _router_fleet.routers)."""
    fleet = _fleet()
    try:
        return fleet.routers(list(router_hosts or []), hostvars)
    except fleet.FleetError as exc:
        raise AnsibleFilterError(str(exc))


def _host_url(host, groups, hostvars, default_port):
    urls = _worker_urls([host], groups, hostvars, default_port)
    return urls[0] if urls else ""


def _plan_of(hv):
    unit = hv.get("__server_unit_plan") or {}
    hold = hv.get("__server_router_hold") or {}
    return _fleet().switch_plan(unit.get("restart", False), unit.get("has_last_good", False),
                                hold.get("held", False))


def router_switch_plan(host, hostvars):
    """The switch plan of one host from its registered check-mode unit plan and hold read
    (``{leave, held, readd}``)."""
    return _plan_of(hostvars.get(host) or {})


def router_leaving_urls(batch, groups, hostvars, default_port=30000):
    """The worker URLs of the batch's hosts that leave the routers (in order)."""
    out = []
    for host in batch or []:
        if _plan_of(hostvars.get(host) or {})["leave"]:
            url = _host_url(host, groups, hostvars, default_port)
            if url and url not in out:
                out.append(url)
    return out


def router_membership_inputs(hosts, groups, hostvars, default_port=30000,
                             hold_var="__server_router_hold"):
    """What membership convergence asks of every router for ``hosts``: ``{urls, held,
    unknown}``. A host held by ``sglang_router_hold`` or by its marker (the registered
    ``__server_router_hold``) is in ``held``; a host whose hold was not read this run
    (and is not held by the inventory) is ``unknown`` and left out of ``urls`` (nothing is
    changed for it); ``by_host`` maps each host to its worker URL."""
    fleet = _fleet()
    urls, held, unknown, by_host = [], [], [], {}
    for host in hosts or []:
        hv = hostvars.get(host) or {}
        url = _host_url(host, groups, hostvars, default_port)
        if not url:
            continue
        by_host[host] = url
        read = hv.get(hold_var)
        inventory = hv.get("sglang_router_hold", False)
        if not isinstance(read, dict) or "held" not in read:
            if fleet.is_held(None, inventory):
                urls.append(url)
                held.append(url)
            else:
                unknown.append(host)
            continue
        urls.append(url)
        if read["held"] or fleet.is_held(None, inventory):
            held.append(url)
    return {"urls": urls, "held": held, "unknown": unknown, "by_host": by_host}


def router_worker_keys(hosts, groups, hostvars, default_port=30000):
    """``{worker URL: server_api_key}`` for those of ``hosts`` that set a server key."""
    out = {}
    for host in hosts or []:
        key = (hostvars.get(host) or {}).get("server_api_key") or ""
        if key:
            url = _host_url(host, groups, hostvars, default_port)
            if url:
                out[url] = key
    return out


def _servers(hosts, groups, hostvars, default_port):
    """``[{host, url, members, hv}]``, one per server of ``hosts`` (its rank 0's host; a
    multi-node server's members from its registered ``__server_request``)."""
    out = []
    for host in hosts or []:
        hv = hostvars.get(host) or {}
        url = _host_url(host, groups, hostvars, default_port)
        if not url:
            continue
        topology = (hv.get("__server_request") or {}).get("topology") or {}
        out.append({"host": host, "url": url, "members": list(topology.get("members") or [host]),
                    "hv": hv})
    return out


def router_restore_hosts(hosts, results, groups, hostvars, default_port=30000):
    """The hosts to read before the put-back that precedes the first batch: every host of
    each server that some router would put back, from a looped ``router_worker``
    (``state: restored``, check mode) result's ``added``."""
    would = []
    for res in (results or {}).get("results", []) if isinstance(results, dict) else []:
        would.extend(res.get("added") or [])
    servers = [dict((k, v) for k, v in s.items() if k != "hv")
               for s in _servers(hosts, groups, hostvars, default_port)]
    return _fleet().restore_hosts(servers, would)


def router_restore_inputs(hosts, groups, hostvars, default_port=30000,
                          hold_var="__server_router_restore_hold",
                          plan_var="__server_router_restore_unit"):
    """What every router is asked to put back before the first batch: ``{urls, held,
    not_at_target, unknown}`` (``_router_fleet.restore_inputs``) from each host's registered
    hold read (``hold_var``) and check-mode unit plan (``plan_var``, every host of the
    server)."""
    servers = []
    for s in _servers(hosts, groups, hostvars, default_port):
        hv = s["hv"]
        servers.append({
            "host": s["host"], "url": s["url"], "hold": hv.get(hold_var),
            "inventory_hold": hv.get("sglang_router_hold", False),
            "plans": dict((m, (hostvars.get(m) or {}).get(plan_var)) for m in s["members"])})
    return _fleet().restore_inputs(servers)


def router_removed(results, url):
    """Whether any router's removal (a looped router_worker result) removed ``url``."""
    url = str(url).strip().rstrip("/")
    for res in (results or {}).get("results", []) if isinstance(results, dict) else []:
        if url in [str(u).rstrip("/") for u in res.get("removed") or []]:
            return True
    return False


class FilterModule(object):
    def filters(self):
        return {
            "router_worker_urls": router_worker_urls,
            "router_endpoints": router_endpoints,
            "router_switch_plan": router_switch_plan,
            "router_leaving_urls": router_leaving_urls,
            "router_membership_inputs": router_membership_inputs,
            "router_removed": router_removed,
            "router_worker_keys": router_worker_keys,
            "router_restore_hosts": router_restore_hosts,
            "router_restore_inputs": router_restore_inputs,
        }
