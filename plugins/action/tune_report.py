# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.tune_report: markdown, JSON and the frontier chart."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_tool import BenchError
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_chart import matplotlib_error
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import journal as _journal
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics as _metrics
from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import report as _report
from ansible_collections.gpufleet.sglang.plugins.plugin_utils.controller import ControllerAction


def _differs(path, data):
    try:
        with open(path, "rb") as handle:
            return handle.read() != data
    except (IOError, OSError):
        return True


class ActionModule(ControllerAction):
    """Write the tune's report on the controller."""

    ARGUMENT_SPEC = dict(
        journal=dict(type="path", required=True),
        plan=dict(type="dict", required=True),
        slo=dict(type="dict", default={}),
        dest=dict(type="path"),
        chart=dict(type="bool", default=True),
        title=dict(type="str"),
    )

    def act(self, result, args):
        result["changed"] = False
        try:
            report = _report.build(args["plan"], _journal.read(args["journal"]), args["slo"] or None)
        except _metrics.SloError as exc:
            result.update(failed=True, msg=str(exc))
            return result
        markdown = _report.render_markdown(report, args["title"])
        result.update(winner=report["winner"], report=report, markdown=markdown,
                      table=markdown.rstrip("\n").splitlines(), files=[])
        if not args["dest"]:
            return result
        dest = args["dest"]
        outputs = [(dest + ".md", markdown.encode("utf-8")),
                   (dest + ".json", _report.render_json(report).encode("utf-8"))]
        if args["chart"]:
            reason = matplotlib_error()
            if reason:
                result["chart_error"] = "matplotlib is not available on the controller: %s" % reason
            else:
                try:
                    outputs.append((dest + ".png", _report.render_png(report, args["title"])))
                except BenchError as exc:
                    result["chart_error"] = str(exc)
            if result.get("chart_error"):
                result.setdefault("warnings", []).append(result["chart_error"])
        parent = os.path.dirname(dest)
        if parent and not os.path.isdir(parent) and not self._task.check_mode:
            os.makedirs(parent)
        for path, data in outputs:
            if _differs(path, data):
                result["changed"] = True
                if not self._task.check_mode:
                    _files.write_atomic(path, data)
            result["files"].append(path)
        return result
