# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""The tune's trial units from the inventory (playbooks/tasks/tune_plan.yml): a host per
single-host server, one list per multi-node server (rank 0 first)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# The module_utils are imported where a filter runs, not when this file loads: Ansible
# resolves any gpufleet.sglang filter by loading every filter file of the collection, in
# each task's worker process (see plugins/filter/router.py).

# the inventory variables that make a multi-node server (roles/server/defaults/main.yml)
SETTINGS = (("nnodes", "sglang_nnodes"), ("group", "sglang_server_group"),
            ("rank", "sglang_node_rank"))


def tune_units(hosts, hostvars, groups):
    """The ``hosts`` of gpufleet.sglang.tune_plan for the play's ``hosts``; fails naming
    every problem at once (a multi-node server only partly among the trial hosts, a group
    that cannot form one server)."""
    def settings_of(host):
        own = hostvars[host] if host in hostvars else {}
        return dict((key, own.get(name)) for key, name in SETTINGS)

    settings = dict((host, settings_of(host)) for host in hosts)
    # the other hosts of each multi-node group, for their ranks
    for host in list(settings):
        group = settings[host]["group"]
        for member in (groups.get(group) or []) if group else []:
            if member not in settings:
                settings[member] = settings_of(member)
    from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as _plan

    units, problems = _plan.trial_units(hosts, settings, groups)
    if problems:
        raise AnsibleFilterError("tune_units: " + "; ".join(problems))
    return [unit[0] if len(unit) == 1 else unit for unit in units]


class FilterModule(object):
    """gpufleet.sglang tune filters."""

    def filters(self):
        return {"tune_units": tune_units}
