# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.tune_plan: the space and the next round, on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import journal as _journal
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as _plan
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import request as _request
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import space as _space
from ansible_collections.gpufleet.sglang.plugins.plugin_utils.controller import ControllerAction


class ActionModule(ControllerAction):
    """Expand the search space, build the gate's requests, or plan the next round of trials."""

    ARGUMENT_SPEC = dict(
        mode=dict(type="str", choices=["check", "expand", "values", "gate", "next", "outcome"],
                  required=True),
        request=dict(type="dict"),
        inventory_hosts=dict(type="list", elements="str", default=[]),
        groups=dict(type="dict", default={}),
        probes=dict(type="list", elements="dict"),
        plan=dict(type="dict"),
        space=dict(type="dict"),
        release=dict(type="str"),
        flags=dict(type="dict"),
        candidates=dict(type="list", elements="dict"),
        preflight=dict(type="raw"),
        journal=dict(type="path"),
        model_commit=dict(type="str", default=""),
        load=dict(type="dict", default={}),
        hosts=dict(type="list", elements="raw"),
        budget=dict(type="int", default=0),
        method=dict(type="str", choices=["auto", "exhaustive", "coordinate"], default="auto"),
        slo=dict(type="dict", default={}),
        require_gate=dict(type="bool", default=True),
        checks=dict(type="raw"),
        base_extra_args=dict(type="dict", default={}),
    )

    def act(self, result, args):
        result["changed"] = False
        if args["mode"] == "check":
            try:
                result.update(_request.check(args["request"], args["inventory_hosts"], args["groups"]))
            except _request.RequestError as exc:
                result.update(failed=True, problems=exc.problems, msg=str(exc))
            return result
        if args["mode"] == "values":
            problems = _request.argparse_problems(args["probes"], args["release"])
            if problems:
                result.update(failed=True, problems=problems, msg=(
                    "the release's argparse refuses %s of tune_space, before any candidate is "
                    "gated or loaded:\n- %s" % ("a value" if len(problems) == 1 else "values",
                                                "\n- ".join(problems))))
            return result
        if args["mode"] == "outcome":
            msg = _request.nothing_measured(args["plan"], _journal.read(args["journal"]))
            result["msg"] = msg or "some candidate was measured"
            if msg:
                result["failed"] = True
            return result
        if args["mode"] == "expand":
            try:
                space = _space.expand(args["space"], args["flags"], args["release"])
            except _space.SpaceError as exc:
                result.update(failed=True, problems=exc.problems,
                              msg="tune_space is not valid for sglang %s:\n- %s"
                              % (args["release"] or "(unknown release)", "\n- ".join(exc.problems)))
                return result
            result.update(candidates=space["candidates"], knobs=space["knobs"],
                          strategies=space["strategies"], space_size=len(space["candidates"]),
                          probes=_request.value_probes(args["space"]))
            return result
        if args["mode"] == "gate":
            result["requests"] = _plan.gate_requests(args["candidates"] or [], args["checks"],
                                                     args["base_extra_args"])
            return result
        knobs = None
        if isinstance(args["space"], dict) and isinstance(args["space"].get("knobs"), dict):
            knobs = ["--" + k.lstrip("-").replace("_", "-") for k in args["space"]["knobs"]]
        try:
            out = _plan.next_round(args["candidates"] or [], knobs, args["preflight"],
                                   args["journal"], args["hosts"], args["budget"], args["method"],
                                   args["slo"], args["release"], args["model_commit"],
                                   args["load"], args["require_gate"])
        except _plan.PlanError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        result.update(out)
        refused_all = _request.nothing_admissible(out.get("candidates"), args["release"])
        if refused_all:
            result.update(failed=True, msg=refused_all)
        return result
