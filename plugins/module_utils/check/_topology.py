# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection.
"""Multi-node servers: which hosts form one server, their ranks and the rendezvous address.

One SGLang server can span several hosts (``--nnodes N``). The hosts of one inventory
group form it; each gets ``--node-rank`` (from ``sglang_node_rank`` on every host, or
the group's inventory order when no host sets one) and the same
``--dist-init-addr <rank 0 address>:<port>``. Rank 0 is the only one that serves HTTP.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class TopologyError(ValueError):
    """A multi-node group that cannot form one server."""


def check_group(nnodes, group, groups, host):
    """The hosts of the server ``host`` belongs to; raise TopologyError naming the inputs."""
    members = groups.get(group) if group else None
    if not group or members is None or host not in members or len(members) != nnodes:
        if members is None:
            found = "which is no group"
        else:
            found = "with %d hosts" % len(members)
        raise TopologyError(
            "sglang_nnodes=%d needs server_node_group (sglang_server_group) to name the "
            "inventory group of exactly %d hosts that form the server, with this host in it "
            "(got %s %s)" % (nnodes, nnodes, _quote(group), found))
    return list(members)


def ranks(members, declared):
    """Map each member to its node rank.

    ``declared`` maps a member to its ``sglang_node_rank`` (None where unset). With no
    rank declared anywhere the inventory order numbers them; otherwise every member must
    declare one and the ranks must be 0 .. n-1, each once.
    """
    values = [declared.get(m) for m in members]
    if all(v is None for v in values):
        return dict((m, i) for i, m in enumerate(members))
    result = {}
    for member, value in zip(members, values):
        try:
            result[member] = int(value) if value is not None and not isinstance(value, bool) else None
        except (TypeError, ValueError):
            result[member] = None
    found = sorted(v for v in result.values() if v is not None)
    if found != list(range(len(members))) or None in result.values():
        shown = dict((m, declared.get(m)) for m in members)
        raise TopologyError(
            "the hosts of the server must have the node ranks 0 to %d, each once "
            "(sglang_node_rank on every host, or on none); got %s%s"
            % (len(members) - 1, _json(shown), "" if 0 in found else " - no host has rank 0"))
    return result


def check_same_server(members, settings):
    """Every member must run the same server: ``settings`` maps member -> {name: value}."""
    names = sorted(set(k for s in settings.values() for k in s))
    differ = [n for n in names if len(set(repr(settings[m].get(n)) for m in members)) > 1]
    if differ:
        raise TopologyError(
            "the hosts of one multi-node server must share %s: they form one server "
            "(they differ in %s)" % (", ".join(names), ", ".join(differ)))


def rank0(rank_map):
    """The member with rank 0."""
    for member, rank in rank_map.items():
        if rank == 0:
            return member
    raise TopologyError("no host has rank 0")


def dist_init_addr(address, port):
    """``host:port`` of rank 0's rendezvous (IPv6 addresses in brackets)."""
    text = str(address)
    if ":" in text and not text.startswith("["):
        text = "[%s]" % text
    return "%s:%d" % (text, int(port))


def plan(host, nnodes, group, groups, declared_ranks, addresses, port, settings):
    """Everything a host needs to take its place in a multi-node server.

    Returns ``{members, node_rank, rank0, dist_init_addr, serves_http}``. For a one-host
    server (nnodes 1) the host is its own server.
    """
    if nnodes <= 1:
        return {"members": [host], "node_rank": 0, "rank0": host, "dist_init_addr": "",
                "serves_http": True}
    members = check_group(nnodes, group, groups, host)
    rank_map = ranks(members, declared_ranks)
    check_same_server(members, settings)
    first = rank0(rank_map)
    return {"members": members, "node_rank": rank_map[host], "rank0": first,
            "dist_init_addr": dist_init_addr(addresses.get(first, first), port),
            "serves_http": rank_map[host] == 0}


def _quote(value):
    import json
    return json.dumps(value if value is None or isinstance(value, str) else str(value))[:80]


def _json(value):
    import json
    return json.dumps(value, sort_keys=True, default=str)


def _batch_size(value, total):
    """One ``serial`` value as a host count, as ansible-core counts it (a percentage is
    rounded down, at least 1)."""
    text = str(value).strip()
    if text.endswith("%"):
        return max(1, int(int(text[:-1]) / 100.0 * total))
    return max(1, int(text))


def batches(hosts, serial):
    """The rollout batches ``serial`` (a value or a list; the last one repeats) makes of ``hosts``."""
    sizes = list(serial) if isinstance(serial, (list, tuple)) else [serial]
    result, start, i = [], 0, 0
    while start < len(hosts):
        size = _batch_size(sizes[min(i, len(sizes) - 1)], len(hosts))
        result.append(list(hosts[start:start + size]))
        start += size
        i += 1
    return result


def check_one_batch(members, hosts, serial):
    """Refuse a multi-node server whose hosts would restart in different rollout batches."""
    if serial is None or len(members) < 2:
        return
    where = {}
    for number, batch in enumerate(batches(hosts, serial), 1):
        for host in batch:
            where[host] = number
    found = sorted(set(where.get(m) for m in members if m in where))
    if len(found) > 1:
        raise TopologyError(
            "the hosts of one multi-node server (%s) would restart in different rollout batches "
            "(%s) with sglang_rollout_batch=%s; they restart and roll back together: choose a "
            "batch size that keeps them in one batch"
            % (", ".join(members), ", ".join("%s in batch %s" % (m, where.get(m)) for m in members),
               _json(serial)))
