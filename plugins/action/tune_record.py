# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.tune_record: one trial appended to the journal."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as _metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as _plan
from ansible_collections.gpufleet.sglang.plugins.plugin_utils.controller import ControllerAction


class ActionModule(ControllerAction):
    """Append one trial to the journal on the controller."""

    ARGUMENT_SPEC = dict(
        journal=dict(type="path", required=True),
        candidate=dict(type="dict", required=True),
        host=dict(type="str", required=True),
        runs=dict(type="list", elements="dict", default=[]),
        status=dict(type="str", choices=["ok", "failed"], default="ok"),
        reason=dict(type="str", default=""),
        wall_s=dict(type="float"),
        started=dict(type="float"),
        load=dict(type="dict", default={}),
        slo=dict(type="dict", default={}),
    )

    def act(self, result, args):
        parent = os.path.dirname(args["journal"])
        if parent and not os.path.isdir(parent) and not self._task.check_mode:
            os.makedirs(parent)
        try:
            out = _plan.record(args["journal"], args["candidate"], args["host"], args["runs"],
                               args["status"], args["reason"], args["wall_s"], args["load"],
                               args["slo"], check_mode=self._task.check_mode,
                               started=args["started"])
        except (_plan.PlanError, _metrics.SloError) as exc:
            result.update(failed=True, changed=False, msg=str(exc))
            return result
        result.update(out)
        return result
