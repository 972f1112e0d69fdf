# -*- coding: utf-8 -*-
"""Free TCP ports for the tests: one helper, imported as
``ansible_collections.gpufleet.sglang.tests.ports`` (tests/conftest.py makes that import
path work)."""

import random
import socket


def free_port(addresses=("127.0.0.1",), tries=200):
    """A TCP port nobody holds on any of ``addresses`` (a test's servers or swarm hosts take
    their own). Random, not the kernel's next ephemeral port: the in-process swarm's hosts
    listen on several loopback addresses, and a port derived from the process id was the
    same for every test of the process; a session of an earlier test that had not let go of
    it left the next test's hosts unable to listen, the relay waiting until its timeout."""
    rng = random.Random()
    for _try in range(tries):
        port = rng.randrange(20000, 60000)
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
