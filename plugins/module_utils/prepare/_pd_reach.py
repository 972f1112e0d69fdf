# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Whether the hosts of a prefill/decode (PD) layout reach each other's ports, before any
server starts (docs/experiments/pd-rollout-design.md, section 1, item 4).

A PD server talks to its peers on two kinds of port:

* **bootstrap**: a prefill server's bootstrap server (``--disaggregation-bootstrap-port``,
  8998 by default, ``+ slot * step`` for a host's later slots) runs beside its HTTP server,
  on the host of its node rank 0. The router hands each request the prefill's
  ``bootstrap_host`` (smg: the host of the prefill's worker URL) and every decode rank
  connects there first;
* **KV**: each rank's KV manager binds a port the kernel picks (``get_free_port()``, so a
  port of ``ip_local_port_range``) on the host's address: the decode side sends the KV
  indices to the prefill's, the prefill side sends status and KV to the decode's. Every
  PD host of both roles listens for the check on one port drawn from that range
  (:func:`kv_port`), which stands for the range: a firewall that drops it drops the
  release's KV managers too.

So a decode slot connects to each prefill's bootstrap port and to each prefill host's KV
port; a prefill slot connects to each decode host's KV port (:func:`targets`). Every PD
host listens on its :func:`listen_ports` (``async``, a few seconds) while the others
connect (:func:`connect`, through ``common/_net.listening``, the collection's one port probe);
:func:`verdict` turns what failed into one line per port.

The placements are ``_pd_roles.assign``'s: its plan's ``servers`` (``{"name", "role",
"hosts", "base_gpu_id", ...}``, hosts in node-rank order), or the plan itself. A host's
slots are numbered as ``assign`` numbers them (its servers by first GPU).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import selectors
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpufleet.sglang.plugins.module_utils.common._net import listening

#: SGLang's ``--disaggregation-bootstrap-port`` default.
DEFAULT_BOOTSTRAP_PORT = 8998

#: How far apart the ports of a host's slots are (``sglang_pd_slot_port_step``).
DEFAULT_SLOT_PORT_STEP = 10

#: What each kind of port is called in a problem.
WHAT = {"bootstrap": "the bootstrap port", "kv": "the KV port"}

#: The kernel's range when ``ip_local_port_range`` cannot be read.
EPHEMERAL_DEFAULT = "32768\t60999"


def _servers(placements):
    """The plan's servers, from the plan or from its ``servers`` list."""
    if isinstance(placements, dict):
        placements = placements.get("servers")
    out = []
    for server in placements or []:
        if not isinstance(server, dict) or server.get("role") not in ("prefill", "decode"):
            raise ValueError("a placement must be a server of _pd_roles.assign's plan "
                             "({name, role: prefill|decode, hosts, ...}), got %r" % (server,))
        if not server.get("hosts") or not server.get("name"):
            raise ValueError("placement %r has no name or no hosts" % (server,))
        out.append(server)
    return out


def slots(placements):
    """host -> ``[(slot, server)]``: each host's servers numbered as ``_pd_roles.assign``
    numbers them (by first GPU, then plan order)."""
    per_host = {}
    for server in _servers(placements):
        for host in server["hosts"]:
            per_host.setdefault(host, []).append(server)
    out = {}
    for host, servers in per_host.items():
        ordered = sorted(servers, key=lambda s: s.get("base_gpu_id") or 0)
        out[host] = list(enumerate(ordered))
    return out


def bootstrap_port_of(server, placements, bootstrap_port=DEFAULT_BOOTSTRAP_PORT,
                      step=DEFAULT_SLOT_PORT_STEP):
    """A prefill server's bootstrap port: its own ``bootstrap_port`` when the placement
    carries one, else ``bootstrap_port + slot * step``, its slot on its node-rank-0 host."""
    if server.get("bootstrap_port") not in (None, ""):
        return int(server["bootstrap_port"])
    head = server["hosts"][0]
    for slot, other in slots(placements).get(head, []):
        if other is server or other.get("name") == server.get("name"):
            return int(bootstrap_port) + slot * int(step)
    return int(bootstrap_port)


def _address(hosts, host, missing):
    entry = (hosts or {}).get(host)
    value = entry.get("address") if isinstance(entry, dict) else None
    if not isinstance(value, str) or not value.strip():
        missing.append("%s has no address" % host)
        return None
    return value.strip()


def _kv(hosts, host, missing):
    entry = (hosts or {}).get(host)
    value = entry.get("kv_port") if isinstance(entry, dict) else None
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = None
    if isinstance(value, bool) or port is None or not 1 <= port <= 65535:
        missing.append("%s has no kv_port (a port 1-65535, got %r)" % (host, value))
        return None
    return port


def _raise(missing):
    if missing:
        seen = []
        for item in missing:
            if item not in seen:
                seen.append(item)
        raise ValueError("the PD check's hosts lack what it needs: %s" % "; ".join(seen))


def _mine(me, placements):
    """This host's servers by role: role -> [server names]."""
    mine = {}
    for _slot, server in slots(placements).get(me, []):
        mine.setdefault(server["role"], []).append(server["name"])
    return mine


def targets(me, placements, hosts, bootstrap_port=DEFAULT_BOOTSTRAP_PORT, step=DEFAULT_SLOT_PORT_STEP):
    """The ports ``me`` connects to, in plan order: ``[{"host", "role", "servers",
    "address", "port", "what", "from"}]`` (``host``/``role``/``servers``: the peer host, its
    role and its servers behind that port; ``what``: ``bootstrap`` or ``kv``; ``from``:
    ``me``'s servers that need it).

    A decode slot connects to each prefill server's bootstrap port (on the prefill's first
    host, the worker URL's) and to the KV port of each host of each prefill server; a
    prefill slot to the KV port of each host of each decode server. ``hosts`` maps a host to
    ``{"address", "kv_port"}``; ValueError names every host that lacks one it needs. A host
    outside the layout connects to nothing."""
    servers = _servers(placements)
    mine = _mine(me, servers)
    found, order, missing = {}, [], []

    def add(what, host, role, server, port_value, senders):
        key = (what, host, role, port_value)
        if key not in found:
            found[key] = {"host": host, "role": role, "servers": [], "address": _address(hosts, host, missing),
                          "port": port_value, "what": what, "from": list(senders)}
            order.append(key)
        if server not in found[key]["servers"]:
            found[key]["servers"].append(server)

    for server in servers:
        senders = mine.get("decode" if server["role"] == "prefill" else "prefill")
        if not senders:
            continue
        if server["role"] == "prefill":
            add("bootstrap", server["hosts"][0], "prefill", server["name"],
                bootstrap_port_of(server, servers, bootstrap_port, step), senders)
        for host in server["hosts"]:
            port = _kv(hosts, host, missing)
            add("kv", host, server["role"], server["name"], port, senders)
    _raise(missing)
    return [found[key] for key in order]


def listen_ports(me, placements, hosts, bootstrap_port=DEFAULT_BOOTSTRAP_PORT, answering=(),
                 step=DEFAULT_SLOT_PORT_STEP):
    """The ports ``me`` listens on for the check: ``[{"port", "what", "servers"}]``, the
    bootstrap port of each prefill server whose first host it is (unless it is in
    ``answering``: a running server answers there already), then its KV port; [] for a
    host outside the layout; ValueError when ``hosts`` has no KV port for ``me``."""
    servers = _servers(placements)
    mine = slots(servers).get(me, [])
    if not mine:
        return []
    out, missing = [], []
    for _slot, server in mine:
        if server["role"] == "prefill" and server["hosts"][0] == me:
            port = bootstrap_port_of(server, servers, bootstrap_port, step)
            if port not in answering:
                out.append({"port": port, "what": "bootstrap", "servers": [server["name"]]})
    port = _kv(hosts, me, missing)
    _raise(missing)
    out.append({"port": port, "what": "kv", "servers": [s["name"] for _slot, s in mine]})
    return out


def _seconds(value):
    return ("%.2f" % value).rstrip("0").rstrip(".") or "0"


def probe_error(ok, elapsed, timeout):
    """The reason a probe failed, from what the probe tells (whether something answered)
    and how long it took; None when it answered."""
    if ok:
        return None
    if elapsed >= timeout * 0.9:
        return "timed out after %s s" % _seconds(timeout)
    return ("refused or unreachable after %s s (nothing listens there, a firewall rejects it, "
            "or no route to the host)" % _seconds(elapsed))


def connect(target_list, timeout, probe=listening, clock=time.monotonic, workers=16):
    """Probe every target's ``address:port`` once (several at a time, so that a few
    silent hosts do not outlast the peers' listening window); the targets with ``ok``,
    ``error`` (:func:`probe_error`) and ``elapsed`` added."""
    unique = []
    for target in target_list:
        key = (target["address"], target["port"])
        if key not in unique:
            unique.append(key)

    def one(key):
        start = clock()
        ok = bool(probe(key[0], key[1], timeout))
        return ok, clock() - start

    if not unique:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(unique)))) as pool:
        answers = dict(zip(unique, pool.map(one, unique)))
    results = []
    for target in target_list:
        ok, elapsed = answers[(target["address"], target["port"])]
        result = dict(target)
        result.update(ok=ok, elapsed=round(elapsed, 3), error=probe_error(ok, elapsed, timeout))
        results.append(result)
    return results


def _endpoint(address, port):
    return "[%s]:%s" % (address, port) if ":" in str(address) else "%s:%s" % (address, port)


def verdict(me, results):
    """One problem per port ``me`` could not reach, or []:
    ``gpufleet-router-2 (decode-0) cannot reach gpufleet-router-1 (prefill-0) at
    10.88.0.5:8998, the bootstrap port: timed out after 3 s``."""
    problems = []
    for result in results or []:
        if result.get("ok"):
            continue
        problems.append("%s (%s) cannot reach %s (%s) at %s, %s: %s" % (
            me, ", ".join(result.get("from") or []) or "no server", result.get("host"),
            ", ".join(result.get("servers") or []) or result.get("role"),
            _endpoint(result.get("address"), result.get("port")),
            WHAT.get(result.get("what"), "port %s" % result.get("port")),
            result.get("error") or "no answer"))
    return problems


def parse_port_range(range_text):
    """``(low, high)`` of an ``ip_local_port_range`` text (``"32768\\t60999"``)."""
    fields = (range_text or "").split()
    try:
        low, high = int(fields[0]), int(fields[1])
    except (IndexError, ValueError):
        raise ValueError("cannot read a port range from %r (ip_local_port_range holds two ports, "
                         "e.g. '32768\\t60999')" % (range_text,))
    if not 1 <= low <= high <= 65535:
        raise ValueError("the port range %d-%d is not a range of ports 1-65535" % (low, high))
    return low, high


def kv_port(range_text, seed, avoid=()):
    """The KV port the check listens on: one port of the kernel's ``ip_local_port_range``
    (``range_text``), drawn from ``seed`` (the host's name) so that every host draws the
    same port for it on every run; the next one when it is in ``avoid``."""
    low, high = parse_port_range(range_text)
    span = high - low + 1
    draw = int(hashlib.sha256(str(seed).encode("utf-8")).hexdigest(), 16) % span
    for step in range(span):
        port = low + (draw + step) % span
        if port not in avoid:
            return port
    raise ValueError("every port of %d-%d is taken by the check's other ports" % (low, high))


def open_listeners(ports, address="0.0.0.0", answers=None):
    """Listen on each of ``ports`` (:func:`listen_ports`' entries) at ``address``:
    ``(sockets, states, problems)``. ``sockets`` maps a port to its listening socket;
    ``states`` is the entries with ``state``: ``listening``, or ``answered by a running
    process`` where the port is held and ``answers(port)`` says something answers there;
    ``problems`` the ports it could not listen on."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sockets, states, problems = {}, [], []
    for entry in ports:
        port = entry["port"]
        state = dict(entry)
        if port in sockets:
            state["state"] = "listening"
            states.append(state)
            continue
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((address, port))
            sock.listen(64)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE and answers is not None and answers(port):
                state["state"] = "answered by a running process"
            else:
                state["state"] = "not listening"
                problems.append("cannot listen on %s for %s (%s): %s" % (
                    _endpoint(address, port), WHAT.get(entry.get("what"), "the check"),
                    ", ".join(entry.get("servers") or []), exc.strerror or exc))
            states.append(state)
            continue
        sockets[port] = sock
        state["state"] = "listening"
        states.append(state)
    return sockets, states, problems


def serve(sockets, seconds, clock=time.monotonic):
    """Accept and close every connection to ``sockets`` (port -> listening socket) until
    ``seconds`` passed; close them. Returns port -> the peer addresses that connected, in
    order."""
    accepted = dict((port, []) for port in sockets)
    selector = selectors.DefaultSelector()
    try:
        for port, sock in sockets.items():
            selector.register(sock, selectors.EVENT_READ, port)
        end = clock() + max(0.0, float(seconds))
        while sockets:
            left = end - clock()
            if left <= 0:
                break
            for key, _events in selector.select(timeout=min(left, 1.0)):
                try:
                    conn, peer = key.fileobj.accept()
                except OSError:
                    continue
                conn.close()
                accepted[key.data].append(str(peer[0]))
    finally:
        selector.close()
        for sock in sockets.values():
            sock.close()
    return accepted
