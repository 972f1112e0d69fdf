# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.tune_record: one trial appended to the journal; what a
trial host served before the tune, noted once (mode original) and closed (mode stays)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import journal as _journal
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as _metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as _plan
from ansible_collections.gpufleet.sglang.plugins.plugin_utils.controller import ControllerAction


class ActionModule(ControllerAction):
    """Append one trial (or a host's original / stays line) to the journal on the controller."""

    ARGUMENT_SPEC = dict(
        mode=dict(type="str", choices=["trial", "original", "stays"], default="trial"),
        journal=dict(type="path", required=True),
        candidate=dict(type="dict"),
        host=dict(type="str", required=True),
        runs=dict(type="list", elements="dict", default=[]),
        status=dict(type="str", choices=["ok", "failed"], default="ok"),
        reason=dict(type="str", default=""),
        wall_s=dict(type="float"),
        started=dict(type="float"),
        ended_ago=dict(type="float"),
        load=dict(type="dict", default={}),
        slo=dict(type="dict", default={}),
        row=dict(type="dict"),
        strategy=dict(type="str"),
        keep=dict(type="str", choices=["best", "original"]),
        winner=dict(type="str"),
    )

    def act(self, result, args):
        parent = os.path.dirname(args["journal"])
        if parent and not os.path.isdir(parent) and not self._task.check_mode:
            os.makedirs(parent)
        mode, check = args["mode"], self._task.check_mode
        if mode == "original":
            if args["row"] is None:
                result.update(failed=True, changed=False,
                              msg="mode original needs row (server_status's row of the host)")
                return result
            result.update(_journal.note_original(args["journal"], args["host"], args["row"],
                                                 args["strategy"], check_mode=check))
            return result
        if mode == "stays":
            if not args["keep"] or not args["strategy"]:
                result.update(failed=True, changed=False,
                              msg="mode stays needs keep and strategy (what the tune left on the host)")
                return result
            result.update(_journal.close_original(args["journal"], args["host"], args["keep"],
                                                  args["strategy"], args["winner"], check_mode=check))
            return result
        try:
            ended = _journal.ended_at(args["ended_ago"])
        except ValueError as exc:
            result.update(failed=True, changed=False, msg=str(exc))
            return result
        try:
            out = _plan.record(args["journal"], args["candidate"], args["host"], args["runs"],
                               args["status"], args["reason"], args["wall_s"], args["load"],
                               args["slo"], check_mode=check,
                               started=args["started"], ended=ended)
        except (_plan.PlanError, _metrics.SloError) as exc:
            result.update(failed=True, changed=False, msg=str(exc))
            return result
        result.update(out)
        return result
