# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters that turn a strategy name into a checked layout and render unit arguments."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
    StrategyError,
    resolve,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._server_unit import (
    systemd_arg as _systemd_arg,
)


def strategy_plan(strategy, gpus_per_node, nnodes=1):
    """Parse and check ``strategy`` for ``nnodes`` hosts of ``gpus_per_node`` GPUs."""
    try:
        return resolve(strategy, _as_int(gpus_per_node, "gpus_per_node"), _as_int(nnodes, "nnodes"))
    except StrategyError as exc:
        raise AnsibleFilterError(str(exc))


def systemd_arg(value):
    """Quote one argument for a systemd ``ExecStart=`` line (see ``_server_unit.systemd_arg``)."""
    try:
        return _systemd_arg(value)
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
