# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters of the monitoring role: Prometheus file_sd target groups from the inventory."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# The module_utils are imported where a filter runs, not when this file loads: Ansible
# resolves any gpufleet.sglang filter by loading every filter file of the collection, in
# each task's worker process (see plugins/filter/router.py).


def _monitoring():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.monitoring import _monitoring as mod
    return mod


def monitoring_server_targets(servers, groups, hostvars, group="sglang_servers",
                              default_port=30000, extra_labels=None):
    """One file_sd group per server (a multi-node server's rank 0), labelled from its record."""
    mod = _monitoring()
    try:
        return mod.server_targets(list(servers), groups, hostvars, group, default_port, extra_labels)
    except mod.MonitoringError as exc:
        raise AnsibleFilterError(str(exc))


def monitoring_router_targets(routers, hostvars, group="sglang_servers", extra_labels=None):
    """One file_sd group per router: its Prometheus endpoint."""
    mod = _monitoring()
    try:
        return mod.router_targets(list(routers), hostvars, group, extra_labels)
    except mod.MonitoringError as exc:
        raise AnsibleFilterError(str(exc))


def monitoring_rules(settings=None):
    """The alert rules (a rule file's content) for these settings, checked all at once."""
    mod = _monitoring()
    try:
        return mod.alert_rules(dict(settings or {}))
    except mod.MonitoringError as exc:
        raise AnsibleFilterError(str(exc))


def monitoring_model_commit(marker):
    """The commit a model directory's marker names, or an empty string."""
    return _monitoring().model_commit(marker) or ""


class FilterModule(object):
    def filters(self):
        return {
            "monitoring_server_targets": monitoring_server_targets,
            "monitoring_router_targets": monitoring_router_targets,
            "monitoring_rules": monitoring_rules,
            "monitoring_model_commit": monitoring_model_commit,
        }
