# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The collection's one TCP port probe (the server's health wait, the PD reachability
check and the tests' port helpers use it)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import socket


def listening(host, port, timeout):
    """Whether something listens on ``host:port`` (the server's port opens once the weights
    are loaded). A probe of a local port inside the kernel's ephemeral range, while nothing
    listens there, can be given that port as its own source and connect to itself (TCP
    simultaneous open); that is no listener."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError:
        return False
    try:
        return sock.getsockname()[:2] != sock.getpeername()[:2]
    except OSError:
        return False
    finally:
        sock.close()
