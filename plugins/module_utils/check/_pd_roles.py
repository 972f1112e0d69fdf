# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Which hosts serve which role of a prefill/decode (PD) layout: deterministic, and stable
across re-runs.

:func:`assign` places the servers of ``_strategy.parse_pd``'s roles on the deploy's server
hosts. Its inputs are the hosts in inventory order, the multi-node groups
(``sglang_server_group``: the hosts of one group form one server, as today), the GPUs of a
host (``sglang_gpu_count``, or None), the pins and the previous assignment:

* **units.** A host that is in no multi-node group is a unit of its own; the hosts of one
  group form one unit (:func:`units`), in the group's order;
* **shape of a role's server.** With the GPUs per host known (G): a layout of N GPUs takes
  N / G whole hosts when G divides N (one host, or a multi-node group of that many hosts),
  or N GPUs of one host when N divides G (``--base-gpu-id``: a host of 8 GPUs holds two tp4
  servers, of one role or of both). Without G, no host is shared: the controller takes the
  largest G for which every role's server spans a whole unit of the inventory (single
  hosts, or a declared group), and the host checks its real GPUs in prepare; a host is
  split only when ``sglang_gpu_count`` says it can be;
* **pins.** ``sglang_pd_role: prefill|decode`` (a host variable; a list of both lets a
  host hold a server of each role on separate GPUs) or membership of the inventory groups
  ``sglang_prefill``/``sglang_decode`` (:func:`pins`): a pinned host serves only its
  pinned roles; the hosts of one multi-node server must agree;
* **order of placement**, each step in inventory order: (1) pinned units take their
  roles; (2) a unit keeps the role it had in ``previous`` (the deployment record) while the
  new layout still has a server of that role for it, on the same GPUs where the shape
  allows; (3) the remaining servers go to the first free units, prefill first. So a re-run
  changes nothing, and a change of the ratio moves the fewest hosts: 1P2D to 2P1D on three
  hosts turns one decode host into a prefill host and keeps the other two.

Refused (every problem at once): more units pinned to a role than the role has servers; a
unit pinned to both roles when their servers cannot share its GPUs (two roles on the same
GPUs), or to a role whose server does not take a unit of its size;
servers left without a unit (not enough hosts or GPUs); a unit left without a server (it
would keep serving whatever it served before, outside the PD layout). :func:`gpu_overlaps`
refuses two servers on the same GPUs of a host in any placement (the result's own invariant,
and prepare's check of what a host is asked to run).

Each placement carries ``slot`` (the server's rank among the servers of its host, by GPU):
a host holding two servers needs two units, two HTTP ports and two bootstrap ports; the
rollout derives them from the slot (:func:`slot_ports`, :func:`slot_names`).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _paths
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
    PD_ROLES,
    pd_name,
)

#: The inventory groups that pin a role.
PIN_GROUPS = {"prefill": "sglang_prefill", "decode": "sglang_decode"}

#: The host variable that pins a role.
PIN_VAR = "sglang_pd_role"


def units(hosts, groups=None):
    """``(units, problems)``: the deploy's server units in inventory order. ``hosts`` are the
    server hosts in order; ``groups`` maps a multi-node group's name to its hosts in rank
    order (the groups named by ``sglang_server_group``). A unit is ``{"name", "hosts"}``,
    named by its group, or by its host."""
    hosts = [h for h in hosts or [] if isinstance(h, str)]
    problems = []
    group_of = {}
    for name, members in sorted((groups or {}).items()):
        members = list(members or [])
        outside = [m for m in members if m not in hosts]
        if outside:
            problems.append("multi-node group %s has %s, which %s no server host of this deploy: "
                            "the hosts of one server deploy together"
                            % (name, ", ".join(outside), "is" if len(outside) == 1 else "are"))
        for member in members:
            if member in group_of:
                problems.append("%s is in two multi-node groups (%s and %s); a host serves in one "
                                "server" % (member, group_of[member][0], name))
                continue
            group_of[member] = (name, members)
    out, seen = [], set()
    for host in hosts:
        if host in seen:
            continue
        if host in group_of:
            name, members = group_of[host]
            members = [m for m in members if m in hosts]
            seen.update(members)
            out.append({"name": name, "hosts": members})
        else:
            seen.add(host)
            out.append({"name": host, "hosts": [host]})
    return out, problems


def pins(hosts, host_roles=None, groups=None):
    """``(pinned, problems)``: host -> {role: [source, ...]} of the hosts that pin roles.
    ``host_roles`` maps a host to its ``sglang_pd_role`` (a role, a list of roles, or
    None/""); ``groups`` maps an inventory group's name to its hosts (``sglang_prefill`` and
    ``sglang_decode`` count)."""
    pinned, problems = {}, []
    for host in hosts or []:
        value = (host_roles or {}).get(host)
        if value is None or value == "" or value == []:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        bad = [v for v in values if not isinstance(v, str) or v.strip().lower() not in PD_ROLES]
        if bad or not values:
            problems.append("%s of %s must be prefill or decode (or a list of both), got %s"
                            % (PIN_VAR, host, json.dumps(value, default=str)[:60]))
            continue
        for role in values:
            pinned.setdefault(host, {}).setdefault(role.strip().lower(), []).append(PIN_VAR)
    for role in PD_ROLES:
        for host in (groups or {}).get(PIN_GROUPS[role]) or []:
            if host in (hosts or []):
                pinned.setdefault(host, {}).setdefault(role, []).append("group " + PIN_GROUPS[role])
    return pinned, problems


def previous_from_records(records):
    """The previous assignment from each host's deployment record (``sglang.fact``):
    host -> ``[{"role", "base_gpu_id", "gpus"}]``. The record's ``pd`` key holds a host's
    placements (a list of those mappings, or a role's name); a record without one (a
    co-located server, or none) gives no previous role."""
    out = {}
    for host, record in (records or {}).items():
        value = (record or {}).get("pd") if isinstance(record, dict) else None
        items = value if isinstance(value, list) else [value] if value else []
        found = []
        for item in items:
            if isinstance(item, str):
                item = {"role": item}
            if isinstance(item, dict) and item.get("role") in PD_ROLES:
                found.append({"role": item["role"], "base_gpu_id": item.get("base_gpu_id"),
                              "gpus": item.get("gpus")})
        if found:
            out[host] = found
    return out


def _sizes(roles):
    return dict((r, int(roles[r]["gpus"])) for r in PD_ROLES)


def shapes(roles, unit_list, gpus_per_node=None):
    """``(shapes, per_host, problems)``: per role ``{"nodes", "gpus", "split"}`` (``nodes``:
    hosts per server; ``split``: the server takes ``gpus`` of one host's GPUs) and the GPUs
    per host planned with (``gpus_per_node``, or the one inferred; see the module's doc)."""
    need = _sizes(roles)
    sizes = sorted(set(len(u["hosts"]) for u in unit_list)) or [1]
    out, problems = {}, []
    if gpus_per_node:
        g = int(gpus_per_node)
        for role in PD_ROLES:
            n = need[role]
            if n % g == 0:
                out[role] = {"nodes": n // g, "gpus": n, "split": False}
            elif g % n == 0:
                out[role] = {"nodes": 1, "gpus": n, "split": True}
            else:
                problems.append(
                    "the %s servers of %s (%s) need %d GPUs each: hosts of %d GPUs (sglang_gpu_count) "
                    "hold them neither whole (a multiple of %d) nor in equal parts (a divisor of %d)"
                    % (role, pd_name(roles), roles[role]["name"], n, g, g, g))
        return out, g, problems
    candidates = sorted(set(need[r] // k for r in PD_ROLES for k in sizes if need[r] % k == 0),
                        reverse=True)
    for g in candidates:
        if all(need[r] % g == 0 and need[r] // g in sizes for r in PD_ROLES):
            for role in PD_ROLES:
                out[role] = {"nodes": need[role] // g, "gpus": need[role], "split": False}
            return out, g, []
    problems.append(
        "without sglang_gpu_count the controller cannot tell how many hosts a server of each "
        "role of %s spans: %s fit no unit size of this deploy (%s); set sglang_gpu_count (a host "
        "may then hold several servers on its GPUs), or declare the multi-node groups "
        "(sglang_server_group)"
        % (pd_name(roles), " and ".join("%s %s (%d GPUs)" % (r, roles[r]["name"], need[r])
                                        for r in PD_ROLES),
           ", ".join("%d host%s" % (k, "" if k == 1 else "s") for k in sizes)))
    return {}, None, problems


def _gpu_text(p):
    if p.get("base_gpu_id") is None or p.get("gpus") is None:
        return "all GPUs"
    first, count = int(p["base_gpu_id"]), int(p["gpus"])
    return "GPU %d" % first if count == 1 else "GPUs %d-%d" % (first, first + count - 1)


def gpu_overlaps(placements):
    """Problems for servers that would share GPUs of one host: ``placements`` is
    host -> ``[{"server", "role", "base_gpu_id", "gpus"}]`` (``base_gpu_id``/``gpus`` None:
    the whole host)."""
    problems = []
    for host, items in sorted((placements or {}).items()):
        items = list(items or [])
        for i, a in enumerate(items):
            for b in items[i + 1:]:
                if a.get("base_gpu_id") is None or b.get("base_gpu_id") is None or \
                        a.get("gpus") is None or b.get("gpus") is None:
                    shared = True
                else:
                    a0, b0 = int(a["base_gpu_id"]), int(b["base_gpu_id"])
                    shared = a0 < b0 + int(b["gpus"]) and b0 < a0 + int(a["gpus"])
                if shared:
                    kind = "two roles" if a.get("role") != b.get("role") else "two servers"
                    problems.append(
                        "%s: %s %s (%s) and %s %s (%s) would share GPUs: %s cannot run on the same "
                        "GPUs" % (host, a.get("role"), a.get("server"), _gpu_text(a), b.get("role"),
                                  b.get("server"), _gpu_text(b), kind))
    return problems


class _Fleet(object):
    """The free GPUs of each unit while servers are placed."""

    def __init__(self, unit_list, shape, per_host, exact):
        self.shape = shape
        self.per_host = per_host
        self.exact = exact  # the GPUs per host are known (not inferred)
        self.free = dict((u["name"], [True] * (per_host or 1)) for u in unit_list)
        self.servers = []
        self.count = dict((r, 0) for r in PD_ROLES)

    def used(self, unit):
        return not all(self.free[unit["name"]])

    def place(self, unit, role, prefer_base=None):
        """Place one server of ``role`` on ``unit``; the server, or None when it does not fit."""
        shape = self.shape[role]
        free = self.free[unit["name"]]
        if shape["split"]:
            if len(unit["hosts"]) != 1:
                return None
            n = shape["gpus"]
            bases = list(range(0, self.per_host, n))
            if prefer_base in bases:
                bases.remove(prefer_base)
                bases.insert(0, prefer_base)
            for base in bases:
                if all(free[base:base + n]):
                    free[base:base + n] = [False] * n
                    return self._add(unit, role, base, n)
            return None
        if len(unit["hosts"]) != shape["nodes"] or not all(free):
            return None
        free[:] = [False] * len(free)
        return self._add(unit, role, 0 if self.exact else None, self.per_host if self.exact else None)

    def _add(self, unit, role, base, gpus):
        server = {"name": "%s-%d" % (role, self.count[role]), "role": role, "unit": unit["name"],
                  "hosts": list(unit["hosts"]), "nnodes": len(unit["hosts"]),
                  "base_gpu_id": base, "gpus": gpus}
        self.count[role] += 1
        self.servers.append(server)
        return server


def assign(roles, unit_list, gpus_per_node=None, pinned=None, previous=None):
    """``(plan, problems)``: the servers of ``roles`` (``_strategy.parse_pd``'s) placed on
    ``unit_list`` (:func:`units`'), with ``pinned`` (:func:`pins`') and ``previous``
    (:func:`previous_from_records`') as the module's doc says.

    ``plan``: ``{"layout": canonical name, "gpus_per_node", "servers": [{"name", "role",
    "unit", "hosts", "nnodes", "base_gpu_id", "gpus"}], "hosts": host -> [{"role", "server",
    "node_rank", "base_gpu_id", "gpus", "slot"}], "moved": host -> {"from", "to"}}``; servers
    are numbered per role in unit order. ``problems`` is empty when it can be deployed.
    """
    pinned = pinned or {}
    previous = previous or {}
    shape, per_host, problems = shapes(roles, unit_list, gpus_per_node)
    if problems:
        return None, problems
    fleet = _Fleet(unit_list, shape, per_host, bool(gpus_per_node))
    left = dict((r, int(roles[r]["count"])) for r in PD_ROLES)

    def unit_pins(unit):
        found = {}
        for host in unit["hosts"]:
            for role, sources in (pinned.get(host) or {}).items():
                found.setdefault(role, []).extend(
                    s if len(unit["hosts"]) == 1 else "%s: %s" % (host, s) for s in sources)
        return found

    def unit_previous(unit):
        # a multi-node server's role is its first host's (rank 0 in the record)
        return list(previous.get(unit["hosts"][0]) or [])

    allowed = {}
    for unit in unit_list:
        found = unit_pins(unit)
        if not found:
            allowed[unit["name"]] = PD_ROLES
            continue
        if len(unit["hosts"]) > 1:
            unpinned = [h for h in unit["hosts"] if not pinned.get(h)]
            differ = len(set(tuple(sorted(pinned.get(h) or {})) for h in unit["hosts"])) > 1
            if differ:
                problems.append("the hosts of multi-node server %s pin different roles (%s%s): "
                                "they form one server of one role"
                                % (unit["name"], "; ".join("%s: %s" % (r, ", ".join(s))
                                                           for r, s in sorted(found.items())),
                                   "; %s: none" % ", ".join(unpinned) if unpinned else ""))
        allowed[unit["name"]] = tuple(r for r in PD_ROLES if r in found)

    # (1) pinned units take their roles, the previous GPUs first
    refused = set()
    for unit in unit_list:
        found = unit_pins(unit)
        if not found:
            continue
        before = [p for p in unit_previous(unit) if p["role"] in found]
        order = [(p["role"], p.get("base_gpu_id")) for p in before] + \
                [(r, None) for r in PD_ROLES if r in found]
        placed_roles = set()
        for role, base in order:
            if role in placed_roles and not shape[role]["split"]:
                continue
            if left[role] > 0 and fleet.place(unit, role, base):
                left[role] -= 1
                placed_roles.add(role)
        for role in PD_ROLES:
            if role not in found or role in placed_roles:
                continue
            refused.add(unit["name"])
            if left[role] == 0 and not fleet.used(unit):
                holders = [s["unit"] for s in fleet.servers if s["role"] == role]
                problems.append(
                    "%s is pinned to %s by %s, but %s has %d %s server%s, already placed on %s "
                    "(pinned too): pin fewer hosts or raise the %s count"
                    % (unit["name"], role, ", ".join(found[role]), pd_name(roles),
                       int(roles[role]["count"]), role, "" if roles[role]["count"] == 1 else "s",
                       ", ".join(holders), role))
            elif left[role] > 0:
                others = [s for s in fleet.servers if s["unit"] == unit["name"]]
                if others:
                    first = others[0]["role"]
                    problems.append(
                        "%s is pinned to both roles (%s), but its %s server%s on %s leave%s no "
                        "GPUs for a %s server (%s, %s): two roles cannot run on the same GPUs; pin "
                        "it to one role%s"
                        % (unit["name"], ", ".join(sorted(set(
                            s for r in found for s in found[r]))),
                           first, "" if len(others) == 1 else "s",
                           ", ".join(_gpu_text(o) for o in others),
                           "s" if len(others) == 1 else "", role, roles[role]["name"],
                           _hosts_text(shape[role]),
                           "" if gpus_per_node else ", or set sglang_gpu_count if its GPUs hold "
                                                    "both"))
                else:
                    problems.append(
                        "%s is pinned to %s (%s), but a %s server (%s) takes %s, and %s has %d "
                        "host%s" % (unit["name"], role, ", ".join(found[role]), role,
                                    roles[role]["name"], _hosts_text(shape[role]), unit["name"],
                                    len(unit["hosts"]), "" if len(unit["hosts"]) == 1 else "s"))

    # (2) a unit keeps the role it had, while the layout has a server of that role for it
    for unit in unit_list:
        if unit_pins(unit):
            continue
        for item in unit_previous(unit):
            role = item["role"]
            if left[role] > 0 and fleet.place(unit, role, item.get("base_gpu_id")):
                left[role] -= 1

    # (3) the remaining servers: the first free units, prefill first
    for role in PD_ROLES:
        for unit in unit_list:
            while left[role] > 0 and role in allowed[unit["name"]] and fleet.place(unit, role):
                left[role] -= 1
                if not shape[role]["split"]:
                    break

    short = [r for r in PD_ROLES if left[r] > 0]
    if short:
        pinned_away = ["%s to %s" % (u["name"], "/".join(allowed[u["name"]])) for u in unit_list
                       if allowed[u["name"]] != PD_ROLES]
        count = sum(len(u["hosts"]) for u in unit_list)
        needed = " and ".join("%d %s server%s (%s, %s)" % (
            int(roles[r]["count"]), r, "" if roles[r]["count"] == 1 else "s", roles[r]["name"],
            _hosts_text(shape[r])) for r in PD_ROLES)
        listed = ", ".join(u["name"] if len(u["hosts"]) == 1 else "%s: %s" % (u["name"], ", ".join(u["hosts"]))
                           for u in unit_list) or "none"
        missing = " and ".join("%d %s server%s" % (left[r], r, "" if left[r] == 1 else "s") for r in short)
        problems.append(
            "%s needs %s; on the deploy's %d server host%s (%s), %s find%s no place: add hosts to the "
            "server group or lower the count%s"
            % (pd_name(roles), needed, count, "" if count == 1 else "s", listed, missing,
               "s" if sum(left[r] for r in short) == 1 else "",
               "; pinned: %s" % ", ".join(pinned_away) if pinned_away else ""))
    spare = [u for u in unit_list if not fleet.used(u) and u["name"] not in refused]
    if spare:
        problems.append(
            "%s would leave %s without a server (%d server%s placed on the other hosts): it would "
            "keep serving what it served before, outside the PD layout; give a role more servers "
            "or leave %s out of the deploy (-e target=...)"
            % (pd_name(roles), ", ".join(u["name"] for u in spare),
               len(fleet.servers), "" if len(fleet.servers) == 1 else "s",
               "it" if len(spare) == 1 else "them"))

    # servers numbered per role in unit order (then by GPU), whatever step placed them
    order = dict((u["name"], i) for i, u in enumerate(unit_list))
    fleet.servers.sort(key=lambda srv: (PD_ROLES.index(srv["role"]), order[srv["unit"]],
                                        srv["base_gpu_id"] or 0))
    numbers = dict((r, 0) for r in PD_ROLES)
    for server in fleet.servers:
        server["name"] = "%s-%d" % (server["role"], numbers[server["role"]])
        numbers[server["role"]] += 1
    hosts = {}
    for server in fleet.servers:
        for rank, host in enumerate(server["hosts"]):
            hosts.setdefault(host, []).append({
                "role": server["role"], "server": server["name"], "node_rank": rank,
                "base_gpu_id": server["base_gpu_id"], "gpus": server["gpus"]})
    for host, items in hosts.items():
        items.sort(key=lambda p: (p["base_gpu_id"] or 0))
        for slot, item in enumerate(items):
            item["slot"] = slot
    problems.extend(gpu_overlaps(dict((h, [dict(p) for p in items]) for h, items in hosts.items())))
    moved = {}
    for unit in unit_list:
        for host in unit["hosts"]:
            before = sorted(set(p["role"] for p in previous.get(host) or []))
            after = sorted(set(p["role"] for p in hosts.get(host, [])))
            if before and before != after:
                moved[host] = {"from": before, "to": after}
    plan = {"layout": pd_name(roles), "gpus_per_node": per_host,
            "gpus_per_node_inferred": not gpus_per_node, "servers": fleet.servers,
            "hosts": hosts, "moved": moved}
    return plan, problems


def _hosts_text(shape):
    if shape["split"]:
        return "%d GPUs of one host" % shape["gpus"]
    return "%d host%s each" % (shape["nodes"], "" if shape["nodes"] == 1 else "s")


def fleet_plan(roles, hosts, multinode=None, gpus_per_node=None, host_roles=None, groups=None,
               previous=None, facts=None):
    """``(plan, problems)`` of a PD layout over the deploy's server ``hosts`` (inventory
    order): :func:`units` of the ``multinode`` groups, :func:`pins` from ``host_roles``
    (``sglang_pd_role`` per host) and the inventory ``groups``, then :func:`assign`.
    ``facts`` (``_pd.facts_from_help``'s, or None when unknown): a host holding several
    servers needs ``--base-gpu-id``."""
    unit_list, problems = units(hosts, multinode)
    pinned, more = pins(hosts, host_roles, groups)
    problems.extend(more)
    if not unit_list:
        problems.append("a PD layout needs server hosts; the deploy has none")
        return None, problems
    plan, more = assign(roles, unit_list, gpus_per_node, pinned, previous)
    problems.extend(more)
    if plan and facts is not None and "base_gpu_id" not in facts.get("flags", []):
        shared = sorted(h for h, items in plan["hosts"].items() if len(items) > 1)
        if shared:
            problems.append("%s would hold several servers on separate GPUs, but the release has "
                            "no --base-gpu-id" % ", ".join(shared))
    return plan, problems


# --- the names and ports of a host's servers, by slot ----------------------------------

#: How far apart the ports of two slots of one host are (``sglang_pd_slot_port_step``).
SLOT_PORT_STEP = 10


def slot_ports(slot, server_port, bootstrap_port, step=SLOT_PORT_STEP):
    """``(http_port, bootstrap_port)`` of the server in ``slot`` of a host (a placement's
    ``slot``): slot 0 listens on ``server_port`` and ``bootstrap_port`` themselves, slot k on
    each plus ``k * step``. A ``bootstrap_port`` of None (a server with none) stays None."""
    shift = int(slot) * int(step)
    return (int(server_port) + shift,
            None if bootstrap_port is None else int(bootstrap_port) + shift)


def slot_names(slot):
    """What the server in ``slot`` of a host is called: ``service_name`` (the unit's stem, as
    ``server_unit`` takes it: ``sglang``, ``sglang-s<k>``), ``unit`` (``sglang.service``,
    ``sglang-s<k>.service``), ``record`` (the deployment record's file name: ``sglang.fact``,
    ``sglang_s<k>.fact``; an Ansible local fact is named by its file, so
    ``ansible_local.sglang_s<k>``) and ``record_path`` (beside ``_paths.RECORD_PATH``)."""
    k = int(slot)
    stem, ext = os.path.splitext(os.path.basename(_paths.RECORD_PATH))
    service = "sglang" if k == 0 else "sglang-s%d" % k
    record = stem + ext if k == 0 else "%s_s%d%s" % (stem, k, ext)
    return {"service_name": service, "unit": service + ".service", "record": record,
            "record_path": os.path.join(os.path.dirname(_paths.RECORD_PATH), record)}
