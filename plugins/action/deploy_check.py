# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.deploy_check: the deploy inputs, checked on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _inputs
from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd_roles
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._topology import (
    TopologyError,
    check_one_batch,
    plan as topology_plan,
)

# The argument names of the task -> the input names the messages use.
_ARGS = {
    "strategy": "strategy",
    "gpu_count": "sglang_gpu_count",
    "gpu_memory_mib": "sglang_gpu_memory_mib",
    "release": "sglang_release",
    "model_path": "sglang_model_path",
    "model_repo": "sglang_model_repo",
    "nnodes": "sglang_nnodes",
    "rollout_batch": "sglang_rollout_batch",
    "venv_release": "venv_release",
    "capacity_mem_fraction_static": "capacity_mem_fraction_static",
    "extra_args": "server_extra_args",
    "port": "server_port",
    "health_timeout": "server_health_timeout",
    "server_model_path": "server_model_path",
    "served_model_name": "server_served_model_name",
    "api_key": "server_api_key",
    "hf_token": "server_hf_token",
    "pd_transfer_backend": "sglang_pd_transfer_backend",
    "pd_bootstrap_port": "sglang_pd_bootstrap_port",
    "pd_ib_device": "sglang_pd_ib_device",
}

# What every host of one multi-node server must share.
_SHARED = ("strategy", "sglang_strategy", "sglang_release", "sglang_model_path")


class ActionModule(ActionBase):
    """Check every deploy input at once; plan the layout and the host's place in its server."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def _venv_wheels(self, args, task_vars):
        """The wheels the venv step will install: the task's ``venv_wheels``, else the host's,
        templated as the server role's prepare step does (``venv_release`` is the server's
        release there, and the venv role's default is not loaded in this play)."""
        if args.get("venv_wheels") is not None:
            return args.get("venv_wheels")
        if "venv_wheels" not in task_vars:
            return []
        env = dict(task_vars)
        if args.get("release") is not None:
            env["venv_release"] = args.get("release")
        return self._templar.copy_with_new_env(available_variables=env).template(
            task_vars["venv_wheels"])

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        result["changed"] = False
        args = self._task.args
        if args.get("fleet"):
            # the deploy's first task (on localhost): does the target select any host?
            groups = task_vars.get("groups", {})
            problem = _inputs.fleet_problem(args.get("target"), groups.get("all", []), groups,
                                            task_vars.get("ansible_inventory_sources"))
            if problem:
                result.update(failed=True, msg=problem)
            else:
                result["msg"] = "%s selects hosts of the inventory" % (args.get("target") or "sglang_servers")
            return result
        values = {}
        for arg, name in _ARGS.items():
            value = args.get(arg, None)
            values[name] = _inputs.MISSING if value is None else value
        host = task_vars.get("inventory_hostname", "this host")

        problems = _inputs.check_fields(values)
        problems.extend(_inputs.wheel_problems(
            self._venv_wheels(args, task_vars), args.get("release"),
            lambda path: os.path.isfile(path) and os.access(path, os.R_OK)))
        routers = self._routers(task_vars, args)
        problems.extend(_inputs.router_key_problems(args.get("api_key"), routers))
        nnodes = _inputs.nnodes_of(values)
        topology = None
        if nnodes > 1:
            try:
                topology = self._topology(task_vars, host, nnodes, args)
            except TopologyError as exc:
                problems.append(str(exc))
        layout, problem, deferred = _inputs.layout_or_host(values, nnodes)
        if problem:
            problems.append(problem)
        if _inputs.is_pd_strategy(values):
            problems.extend(_pd.router_problems(self._router_releases(task_vars, args)))
            if layout is not None:
                result["pd"], more = self._pd(task_vars, args, host, values, layout, nnodes)
                problems.extend(more)
            # until prepare, the rollout and the router deploy PD, a PD layout stops here
            problems.append(_pd.NOT_DEPLOYED)
        else:
            problems.extend(self._pins_outside_pd(task_vars, host, values))
        if problems:
            result.update(failed=True, problems=problems, msg=_inputs.report(problems, host))
            return result
        if topology is None:
            topology = topology_plan(host, 1, None, {}, {}, {}, 0, {})
        count = values["sglang_gpu_count"]
        memory = values["sglang_gpu_memory_mib"]
        gpus = {"count": None if _inputs.is_unset(count) else int(str(count)),
                "memory_mib": None if _inputs.is_unset(memory) else int(str(memory))}
        # without a count, or with one the strategy does not fit (the host says whether the
        # count or the strategy is wrong), the GPU fit is the host's to check (server_preflight)
        checked = gpus["count"] is not None and deferred is None
        if deferred:
            result["deferred"] = "%s: left to the host, which compares sglang_gpu_count with its GPUs" % deferred
        strategy = values["strategy"]
        result.update(layout=layout, layout_checked=checked, gpus=gpus, topology=topology,
                      nnodes=nnodes, strategy=strategy if isinstance(strategy, str) else layout["name"],
                      msg="%s: %s on %s x %d host(s)" % (
                          host, layout["name"],
                          "%d GPU(s)" % gpus["count"] if checked else "the GPUs the host has",
                          nnodes))
        return result

    @staticmethod
    def _hostvar(task_vars, host, name, default=None):
        """Another host's variable; ``default`` when it is undefined or broken."""
        try:
            return task_vars.get("hostvars", {})[host].get(name, default)
        except Exception:  # an undefined or broken variable of another host
            return default

    def _routers(self, task_vars, args):
        """``[(host, router_api_key)]`` of the router group in front of this server."""
        group = args.get("router_group") or ""
        return [(host, self._hostvar(task_vars, host, "router_api_key") or "")
                for host in (task_vars.get("groups", {}).get(group, []) if group else [])]

    def _router_releases(self, task_vars, args):
        """``[(host, router_package, router_version)]`` of the routers in front (None where
        the inventory leaves the router role's default)."""
        group = args.get("router_group") or ""
        return [(host, self._hostvar(task_vars, host, "router_package"),
                 self._hostvar(task_vars, host, "router_version"))
                for host in (task_vars.get("groups", {}).get(group, []) if group else [])]

    def _pins_outside_pd(self, task_vars, host, values):
        """A role pinned on this host (``sglang_pd_role``, the groups ``sglang_prefill`` and
        ``sglang_decode``) under a strategy that is no PD layout: the router role would start
        in PD mode in front of co-located servers (it reads the pins), so it is refused."""
        groups = dict((g, task_vars.get("groups", {}).get(g) or [])
                      for g in _pd_roles.PIN_GROUPS.values())
        pinned, problems = _pd_roles.pins(
            [host], {host: self._hostvar(task_vars, host, _pd_roles.PIN_VAR)}, groups)
        for role, sources in sorted(pinned.get(host, {}).items()):
            problems.append(
                "%s pins the role %s on %s, but strategy %s is no prefill/decode "
                "layout: the router would route in PD mode to co-located servers; use a PD "
                "layout (prefill:ep8+decode:2xep8) or remove the pin"
                % (" and ".join(sources), role, host, _inputs.shown(values.get("strategy"))))
        return problems

    def _pd(self, task_vars, args, host, values, layout, nnodes):
        """``(pd, problems)``: the PD layout's roles placed on the deploy's server hosts
        (``_pd_roles.fleet_plan``) and this host's place in it. Pins, multi-node groups, GPU
        counts and the previous assignment (the deployment record, where facts were
        gathered: ``ansible_local.sglang.pd``) are read from the hosts' variables."""
        hosts = list(args.get("rollout_hosts") or task_vars.get("ansible_play_hosts_all") or [host])
        groups = task_vars.get("groups", {})

        def var(member, *names):
            for name in names:
                value = self._hostvar(task_vars, member, name)
                if value not in (None, ""):
                    return value
            return None

        multinode = {}
        for member in hosts:
            count = var(member, "server_nnodes", "sglang_nnodes")
            group = var(member, "server_node_group", "sglang_server_group")
            if group and group in groups and _inputs.is_positive_int(count) and int(str(count)) > 1:
                multinode[group] = list(groups[group])
        counts = set(str(var(m, "sglang_gpu_count")).strip() for m in hosts)
        gpus = int(counts.pop()) if len(counts) == 1 and all(_inputs.is_positive_int(c) for c in counts) \
            else None
        records = {}
        for member in hosts:
            local = var(member, "ansible_local")
            if isinstance(local, dict) and isinstance(local.get("sglang"), dict):
                records[member] = local["sglang"]
        release = _inputs.release_of(values)
        facts = _pd.release_facts(release)
        plan, problems = _pd_roles.fleet_plan(
            layout["pd"], hosts, multinode, gpus,
            dict((m, var(m, "sglang_pd_role")) for m in hosts),
            dict((g, groups.get(g) or []) for g in _pd_roles.PIN_GROUPS.values()),
            _pd_roles.previous_from_records(records), facts)
        mine = (plan or {}).get("hosts", {}).get(host, [])
        for placement in mine:
            server = [s for s in plan["servers"] if s["name"] == placement["server"]][0]
            if server["nnodes"] != nnodes:
                problems.append(
                    "%s serves %s, a %s server over %d host(s) (%s), but sglang_nnodes is %d here: "
                    "the hosts of a multi-node server set sglang_nnodes=%d and sglang_server_group"
                    % (host, server["name"], server["role"], server["nnodes"],
                       ", ".join(server["hosts"]), nnodes, server["nnodes"]))
        backend = values.get("sglang_pd_transfer_backend")
        return {"layout": layout["name"], "roles": layout["pd"], "plan": plan, "placements": mine,
                "release": release, "release_facts": facts,
                "transfer_backend": None if _inputs.is_unset(backend) else backend}, problems

    def _topology(self, task_vars, host, nnodes, args):
        group = args.get("server_group") or ""
        groups = task_vars.get("groups", {})
        members = groups.get(group, []) if group else []

        def var(member, name, default=None):
            return self._hostvar(task_vars, member, name, default)

        declared = dict((m, var(m, "sglang_node_rank")) for m in members)
        addresses = dict((m, var(m, "sglang_node_address") or var(m, "ansible_host") or m)
                         for m in members)
        settings = {}
        for member in members:
            settings[member] = dict((n, var(member, n)) for n in _SHARED)
        topology = topology_plan(host, nnodes, group, groups, declared, addresses,
                                 int(args.get("dist_init_port") or 50000), settings)
        rollout_hosts = args.get("rollout_hosts") or task_vars.get("ansible_play_hosts_all") or []
        check_one_batch(topology["members"], list(rollout_hosts), args.get("rollout_batch"))
        return topology
