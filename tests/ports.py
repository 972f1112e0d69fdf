# -*- coding: utf-8 -*-
"""Free TCP ports for the tests, and whether something listens on one: one helper,
imported as ``ansible_collections.gpufleet.sglang.tests.ports`` (tests/conftest.py makes
that import path work)."""

import random
import socket

from ansible_collections.gpufleet.sglang.plugins.module_utils.common._net import listening

# where the kernel takes the source ports of outgoing connections, when it cannot be read
EPHEMERAL_DEFAULT = (32768, 60999)
LOWEST = 10000


def ephemeral_range(path="/proc/sys/net/ipv4/ip_local_port_range"):
    """The kernel's range of source ports for outgoing connections (``lo``, ``hi``)."""
    try:
        with open(path, encoding="ascii") as handle:
            low, high = (int(field) for field in handle.read().split()[:2])
    except (OSError, ValueError):
        return EPHEMERAL_DEFAULT
    return low, high


def candidate_ports(ephemeral=None):
    """Ports from LOWEST up that lie outside the ephemeral range. A port inside it can be
    handed to any outgoing connection as its source port: the server under test then cannot
    bind it, and a client that polls a port nobody listens on yet can be given that very
    port as its source, and so connect to itself (TCP simultaneous open) - the poll says
    "open" while nothing listens, and the next request is refused."""
    low, high = ephemeral or ephemeral_range()
    ports = [p for p in range(LOWEST, 65536) if not low <= p <= high]
    if not ports:
        raise RuntimeError("the ephemeral range %d-%d leaves no port from %d up" % (low, high, LOWEST))
    return ports


def free_port(addresses=("127.0.0.1",), tries=200, ephemeral=None):
    """A TCP port nobody holds on any of ``addresses`` (a test's servers or swarm hosts take
    their own), outside the kernel's ephemeral range. Random, not the kernel's next
    ephemeral port: the in-process swarm's hosts listen on several loopback addresses, and a
    port derived from the process id was the same for every test of the process; a session
    of an earlier test that had not let go of it left the next test's hosts unable to
    listen, the relay waiting until its timeout."""
    rng = random.Random()
    ports = candidate_ports(ephemeral)
    for _try in range(tries):
        port = rng.choice(ports)
        held = []
        try:
            for address in addresses:
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                held.append(sock)
                sock.bind((address, port))
            return port
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
    raise RuntimeError("no free port on %s in %d tries" % (", ".join(addresses), tries))


def port_open(address, port, timeout=0.2):
    """Whether something listens on ``address:port``: the collection's own probe
    (``common/_net.listening``), which takes no connection to itself for a listener."""
    return listening(address, port, timeout)


def connected_to_itself(port, address="127.0.0.1"):
    """A socket bound to ``address:port`` and connected to that same address: what a probe
    of a port nobody listens on gets when the kernel hands it the polled port as its
    source port. For the tests of the probes."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.connect((address, port))
    return sock
