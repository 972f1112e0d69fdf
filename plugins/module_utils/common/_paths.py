# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Where the collection keeps its state on a host: written once, here.

Modules import these names; role vars that need the same path say so in a comment and a
lockstep test (tests/unit/test_paths_lockstep.py) checks them against this file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The deployment record (an Ansible local fact: ansible_local.sglang).
RECORD_PATH = "/etc/ansible/facts.d/sglang.fact"
# Verdicts cached on the host (probe, gate, doctor) and other host-side caches.
CACHE_DIR = "/var/cache/gpufleet-sglang"
# The collection's own state directory on a host (markers that are not Ansible facts).
STATE_DIR = "/var/lib/gpufleet-sglang"
# Present while a server is held out of every router on purpose (a tune trial, an
# operator's hold): JSON {"reason", "since", "by"}; router membership keeps it out.
ROUTER_HOLD_PATH = STATE_DIR + "/router-hold.json"
# The launcher a unit with an API key starts through (roles/server/files/secret_exec.py):
# it passes the key as an argument in-process, out of /proc/<pid>/cmdline and the journal.
SECRET_EXEC_PATH = "/usr/local/libexec/gpufleet-sglang/secret_exec.py"
