#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: bench_report
short_description: Compare benchmark results of SGLang strategies and write the report
version_added: 0.1.0
author: gpufleet developers (@gpufleet)
description:
  - Summarizes benchmark results (as made by the P(gpufleet.sglang.bench_parse#filter)
    filter) per strategy - single-request tok/s, TTFT and ITL, aggregate output tok/s per
    concurrency and the peak - lists refused strategies as C(refused <reason>) and picks
    the winner for O(objective).
  - Writes O(dest)C(.md) (markdown table), O(dest)C(.json) and, when matplotlib can be
    imported, O(dest)C(.png) (throughput against concurrency, one line per strategy).
  - Run it on the controller (delegate it to C(localhost)).
requirements:
  - matplotlib (for the chart only)
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A file is rewritten only when its content differs.
options:
  runs:
    description: Results, each naming its strategy and concurrency.
    type: list
    elements: dict
    default: []
  refused:
    description: Strategy name to the reason it was not measured.
    type: dict
    default: {}
  strategies:
    description: Order of the strategies in the table (default order of first appearance).
    type: list
    elements: str
    default: []
  objective:
    description:
      - C(throughput) picks the highest peak aggregate output tok/s, C(latency) the fastest
        single request (ties within O(tie) broken on the lower TTFT).
    type: str
    choices: [throughput, latency]
    default: throughput
  tie:
    description: Relative difference under which two strategies tie.
    type: float
    default: 0.01
  dest:
    description: Path of the report files without extension; parent directories are created. Nothing is written when unset.
    type: path
  chart:
    description: Write the PNG chart (skipped with a warning when matplotlib is missing).
    type: bool
    default: true
  title:
    description: Title of the markdown report and the chart.
    type: str
"""

EXAMPLES = r"""
- name: Write reports/compare-<time>.{md,json,png}
  gpufleet.sglang.bench_report:
    runs: "{{ compare_runs }}"
    refused: "{{ compare_refused }}"
    strategies: [tp8, pp8, ep8, ep4]
    objective: throughput
    dest: "reports/compare-{{ now(fmt='%Y%m%dT%H%M%S') }}"
  delegate_to: localhost
  register: compare_report
"""

RETURN = r"""
winner:
  description: The winning strategy, null when none was measured.
  type: str
  returned: always
  sample: ep8
report:
  description: The summary (objective, winner, concurrencies, one row per strategy, refused, runs).
  type: dict
  returned: always
markdown:
  description: The markdown report.
  type: str
  returned: always
table:
  description: The markdown report as lines, for printing.
  type: list
  elements: str
  returned: always
files:
  description: Paths written (or that would be written in check mode).
  type: list
  elements: str
  returned: always
chart_error:
  description: Why no chart was written.
  type: str
  returned: when the chart was skipped
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_tool import BenchError
from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_report import (
    render_json,
    render_markdown,
    summarize,
)


def _write(module, path, data):
    """Write when the content differs; True when it (would have) changed."""
    try:
        with open(path, "rb") as handle:
            if handle.read() == data:
                return False
    except (IOError, OSError):
        pass
    if not module.check_mode:
        _files.write_atomic(path, data, mode=0o644)
    return True


def main():
    module = AnsibleModule(
        argument_spec=dict(
            runs=dict(type="list", elements="dict", default=[]),
            refused=dict(type="dict", default={}),
            strategies=dict(type="list", elements="str", default=[]),
            objective=dict(type="str", choices=["throughput", "latency"], default="throughput"),
            tie=dict(type="float", default=0.01),
            dest=dict(type="path"),
            chart=dict(type="bool", default=True),
            title=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        report = summarize(p["runs"], p["strategies"], p["refused"], p["objective"], p["tie"])
    except BenchError as exc:
        module.fail_json(msg=str(exc))
    markdown = render_markdown(report, p["title"])
    result = dict(changed=False, winner=report["winner"], report=report, markdown=markdown,
                  table=markdown.rstrip("\n").splitlines(), files=[])
    if p["dest"]:
        dest = p["dest"]
        outputs = [(dest + ".md", to_bytes(markdown)), (dest + ".json", to_bytes(render_json(report)))]
        if p["chart"]:
            from ansible_collections.gpufleet.sglang.plugins.module_utils.bench._bench_chart import (
                matplotlib_error,
                render_png,
            )
            reason = matplotlib_error()
            if reason:
                result["chart_error"] = "matplotlib is not available on the controller: %s" % reason
                module.warn(result["chart_error"])
            else:
                try:
                    outputs.append((dest + ".png", render_png(report, p["title"])))
                except BenchError as exc:
                    result["chart_error"] = str(exc)
                    module.warn(result["chart_error"])
        parent = os.path.dirname(dest)
        if parent and not os.path.isdir(parent) and not module.check_mode:
            os.makedirs(parent)
        for path, data in outputs:
            result["changed"] = _write(module, path, data) or result["changed"]
            result["files"].append(path)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
