# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""The capacity plan's grouping across hosts (playbooks/plan.yml): one table per host group,
and the hosts whose table differs from their group's; the capacity role's refusal and
warning of a plan that does not fit (module_utils/prepare/_capacity.py words them, with the
numbers rounded for a person)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type


def _hostvar(hostvars, host, name, default=None):
    try:
        return hostvars[host].get(name, default)
    except (KeyError, AttributeError):
        return default


def plan_groups(play_hosts, hostvars, groups, register="plan_result"):
    """``{"groups": [{"group", "hosts", "same", "other", "lines"}], "own_tables": [hosts]}``.

    For each inventory group of the play's hosts (sorted; ``all`` when they have none): the
    group's hosts in the play, in inventory order; ``same``, those whose table (the
    ``register`` result of gpufleet.sglang.capacity_plan) equals the first one's, and
    ``other``, the rest; ``lines``, a header naming the GPUs, the model path and both lists,
    then the first host's table. ``own_tables``: every host in some group's ``other``, in
    play order (each prints its own table)."""
    play_hosts = list(play_hosts)
    names = sorted(set(name for host in play_hosts
                       for name in _hostvar(hostvars, host, "group_names", []) or []))
    out, own = [], set()
    for name in names or ["all"]:
        hosts = [h for h in groups.get(name, []) if h in play_hosts]
        if not hosts:
            continue
        first = hosts[0]
        result = _hostvar(hostvars, first, register, {}) or {}
        table = result.get("table")
        same = [h for h in hosts if (_hostvar(hostvars, h, register, {}) or {}).get("table") == table]
        other = [h for h in hosts if h not in same]
        own.update(other)
        gpus = result.get("gpus") or {}
        header = "== group %s: %s x %s MiB (%s), %s (hosts: %s%s)" % (
            name, gpus.get("count"), gpus.get("memory_mib"), gpus.get("name") or "as given",
            _hostvar(hostvars, first, "sglang_model_path"), ", ".join(same),
            ("; own tables below: " + ", ".join(other)) if other else "")
        out.append({"group": name, "hosts": hosts, "same": same, "other": other,
                    "lines": [header] + list(table or [])})
    return {"groups": out, "own_tables": [h for h in play_hosts if h in own]}


def plan_unfit(plan, host):
    """``{"message", "warning"}`` for ``plan`` (one entry of gpufleet.sglang.capacity_plan's
    ``plans``) on ``host``: the refusal of a plan that does not fit, and the warning when it
    is deployed anyway, worded as the deploy's preflight words them
    (``_capacity.unfit_message``, ``_capacity.misfit_warning``)."""
    # imported where the filter runs, not when Ansible loads every filter file
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _capacity

    return {"message": _capacity.unfit_message(plan, host),
            "warning": _capacity.misfit_warning(plan, host)}


class FilterModule(object):
    """gpufleet.sglang capacity plan filters."""

    def filters(self):
        return {"plan_groups": plan_groups, "plan_unfit": plan_unfit}
