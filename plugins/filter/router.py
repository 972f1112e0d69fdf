# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filter of the router role: the router's worker URLs from the inventory."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.sglang.plugins.module_utils._router import (
    RouterError,
    worker_urls,
)


def router_worker_urls(servers, groups, hostvars, default_port=30000):
    """One worker URL per server of ``servers`` (a multi-node server's rank 0)."""
    try:
        return worker_urls(list(servers), groups, hostvars, default_port)
    except RouterError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    def filters(self):
        return {"router_worker_urls": router_worker_urls}
