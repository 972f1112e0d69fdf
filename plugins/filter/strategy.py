# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters that turn a strategy name into a checked layout and render unit arguments."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# The module_utils are imported where a filter runs, not when this file loads: Ansible
# resolves any gpufleet.sglang filter by loading every filter file of the collection, in
# each task's worker process (see plugins/filter/router.py).


def strategy_plan(strategy, gpus_per_node, nnodes=1):
    """Parse and check ``strategy`` for ``nnodes`` hosts of ``gpus_per_node`` GPUs."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _strategy

    try:
        return _strategy.resolve(strategy, _as_int(gpus_per_node, "gpus_per_node"), _as_int(nnodes, "nnodes"))
    except _strategy.StrategyError as exc:
        raise AnsibleFilterError(str(exc))


def systemd_arg(value):
    """Quote one argument for a systemd ``ExecStart=`` line (see ``_server_unit.systemd_arg``)."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout import _server_unit

    try:
        return _server_unit.systemd_arg(value)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


def _as_int(value, what):
    if isinstance(value, bool):
        raise AnsibleFilterError("%s must be an integer, got %r" % (what, value))
    try:
        return int(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError("%s must be an integer, got %r" % (what, value))


class FilterModule(object):
    """gpufleet.sglang strategy filters."""

    def filters(self):
        return {
            "strategy_plan": strategy_plan,
            "systemd_arg": systemd_arg,
        }
