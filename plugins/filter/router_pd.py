# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters of the router in PD (prefill/decode) mode: its prefill and decode workers from
the inventory, and the worker API bodies that add them with their role."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# The module_utils are imported where a filter runs, not when this file loads (see
# filter/router.py).

PIN_VAR = "sglang_pd_role"
PORT_VAR = "sglang_pd_bootstrap_port"
PIN_GROUPS = {"prefill": "sglang_prefill", "decode": "sglang_decode"}


def _pd():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_pd
    return _router_pd


def _role_of(host, hv, groups):
    """A server host's PD role: its ``sglang_pd_role``, or the pin group it is in."""
    value = hv.get(PIN_VAR)
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise AnsibleFilterError(
                "%s: %s is %s; a host serving both roles (on separate GPUs) has two workers "
                "with ports of their own, which the router's PD workers do not derive yet: "
                "set router_pd_workers" % (host, PIN_VAR, list(value)))
        value = value[0]
    if value not in (None, ""):
        return value
    found = [role for role, group in sorted(PIN_GROUPS.items())
             if host in (groups.get(group) or [])]
    if len(found) > 1:
        raise AnsibleFilterError("%s is in both %s and %s" % (
            host, PIN_GROUPS["prefill"], PIN_GROUPS["decode"]))
    return found[0] if found else None


def router_pd_workers(servers, groups, hostvars, default_port=30000):
    """The router's prefill and decode workers: ``[{host, url, role, bootstrap_port}]``, one
    per server of ``servers`` (a multi-node server's rank 0), or ``[]`` when no server has a
    PD role (the router's regular mode)."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router
    pd = _pd()
    servers = list(servers or [])
    try:
        urls = {}
        for host in servers:
            found = _router.worker_urls([host], groups, hostvars, default_port)
            if found:
                urls[host] = found[0]
        roles = {}
        for host in servers:
            hv = hostvars.get(host) or {}
            roles[host] = {"role": _role_of(host, hv, groups),
                           "bootstrap_port": hv.get(PORT_VAR)}
        return pd.workers_from_roles(servers, urls, roles)
    except _router.RouterError as exc:
        raise AnsibleFilterError(str(exc))


def router_pd_payloads(workers, keys=None):
    """``{url: body}``: the ``POST /workers`` body of each PD worker (its role and, on a
    prefill server, its bootstrap port; ``keys``: a worker's own API key by URL)."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router
    pd = _pd()
    try:
        return pd.payloads(pd.normalize_workers(workers), keys)
    except _router.RouterError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {
            "router_pd_workers": router_pd_workers,
            "router_pd_payloads": router_pd_payloads,
        }
