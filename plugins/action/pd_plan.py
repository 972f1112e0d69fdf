# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.pd_plan: one PD host's transfer backend and servers, on
the controller, from every PD host's transport facts."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd_roles
from ansible_collections.gpufleet.sglang.plugins.plugin_utils.controller import ControllerAction

#: The variable each PD host registers its transport facts in (gpu_prereqs, transport: true).
FACT_NAME = "__server_pd_facts"


def transport_of(value):
    """The transport facts in a host's registered variable: gpu_prereqs' whole result (its
    ``transport``) or the transport dict itself; None for a skipped or failed probe, or
    anything else."""
    if not isinstance(value, dict) or value.get("skipped") or value.get("failed"):
        return None
    if isinstance(value.get("transport"), dict):
        return value["transport"]
    if "ib_devices" in value or "peermem" in value:
        return value
    return None


class ActionModule(ControllerAction):
    """Choose the PD transfer backend over every PD host and render this host's servers."""

    ARGUMENT_SPEC = dict(
        pd=dict(type="raw", required=True),
        placements=dict(type="list", elements="dict"),
        hosts=dict(type="list", elements="str"),
        release=dict(type="str", required=True),
        help_flags=dict(type="dict"),
        server_port=dict(type="raw", required=True),
        bootstrap_port=dict(type="raw"),
        forced_backend=dict(type="str"),
        ib_device=dict(type="raw"),
        fact_name=dict(type="str", default=FACT_NAME),
        slot_port_step=dict(type="int", default=_pd_roles.SLOT_PORT_STEP),
    )

    _vars = {}  # the task's variables (run)

    def run(self, tmp=None, task_vars=None):
        self._vars = task_vars or {}
        return super(ActionModule, self).run(tmp, task_vars)

    def _hostvar(self, host, name):
        """Another host's variable; None when it is undefined or broken."""
        try:
            return self._vars.get("hostvars", {})[host].get(name)
        except Exception:  # an undefined or broken variable of another host
            return None

    def act(self, result, args):
        result["changed"] = False
        host = self._vars.get("inventory_hostname", "this host")
        pd, placements, hosts = args["pd"], args["placements"], args["hosts"]
        if isinstance(pd, dict) and isinstance(pd.get("roles"), dict):
            # deploy_check's pd: its roles, this host's placements, the plan's hosts
            if placements is None:
                placements = pd.get("placements")
            if hosts is None:
                hosts = sorted(((pd.get("plan") or {}).get("hosts") or {}))
            if not args["forced_backend"]:
                args["forced_backend"] = pd.get("transfer_backend")
            pd = pd["roles"]
        if not hosts:
            hosts = list(self._vars.get("ansible_play_hosts_all") or [host])
        facts = _pd.facts_from_help(args["help_flags"]) if args["help_flags"] else None
        hosts_facts = dict((h, transport_of(self._hostvar(h, args["fact_name"]))) for h in hosts)
        out = _pd.render(pd, args["release"], facts, hosts_facts, host, placements or [],
                         args["server_port"], args["bootstrap_port"], args["forced_backend"] or None,
                         args["ib_device"] or None, args["slot_port_step"])
        result.update(backend=out["backend"], backend_reason=out["backend_reason"], slots=out["slots"])
        if out["problems"]:
            problems = out["problems"]
            result.update(failed=True, problems=problems, msg=(
                "%s: %s" % (host, problems[0]) if len(problems) == 1 else
                "%s: %d problems with the PD plan:\n%s" % (host, len(problems),
                                                           "\n".join("- " + p for p in problems))))
            return result
        result["msg"] = "%s: %s (%s); %s" % (
            host, out["backend"], out["backend_reason"], "; ".join(
                "slot %d %s %s on %s, port %d%s" % (
                    s["slot"], s["role"], s["server"], s["unit"], s["port"],
                    ", bootstrap port %d" % s["bootstrap_port"] if s["bootstrap_port"] else "")
                for s in out["slots"]))
        return result
