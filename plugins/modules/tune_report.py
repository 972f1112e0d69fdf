#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: tune_report
short_description: Write a tune's report - markdown, JSON and the Pareto chart - and name the winner
version_added: 0.3.0
author: gpufleet developers (@gpufleet)
description:
  - Runs on the controller only (an action plugin). Reads the trials of this tune from
    O(journal) (the lines whose fingerprint is one of O(plan)'s candidates) and writes
    O(dest)C(.md), O(dest)C(.json) and O(dest)C(.png).
  - The chart draws output tok/s per GPU (y) against tok/s per user (x) for every trial and
    concurrency, and the Pareto frontier of the points that meet O(slo) (the legend says
    so; a point missing the SLO is never on it); the winner is marked; the band outside
    the TPOT target is shaded from the plot's left edge to 1000 / C(tpot_p99_ms); an axis
    whose values span 8x or more is logarithmic. Every point drawn is in the JSON
    (C(points), C(frontier), C(frontier_over), C(axes.x_range)), so a test can check the
    chart against it.
  - Each goodput carries its noise (the run's own spread of TPOT, never under 2 % of the
    goodput). Candidates within the noise of the highest goodput are tied, and a tie goes
    to the candidate with the fewest knobs off their base; the report says when the winner
    was chosen among tied candidates and which ones tied (C(tie), the markdown's "Chosen
    among tied candidates" line). See C(docs/tune.md), "Ties and noise".
  - The table has one row per measured candidate, the winner first, then by goodput, then the
    refused candidates with their reasons, the search's budget, the strategies it climbed
    and dropped, what it left out and why, and the method that ran.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is written; RV(files) names what would be.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A file is rewritten only when its content differs.
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
requirements:
  - matplotlib (for the chart only; without it the chart is skipped with a warning)
options:
  journal:
    description: The trial journal.
    type: path
    required: true
  plan:
    description:
      - The registered result of the last M(gpufleet.sglang.tune_plan) O(gpufleet.sglang.tune_plan#module:mode=next) call
        (its C(candidates), C(method), C(left_out), C(refused)).
    type: dict
    required: true
  slo:
    description: C(tune_slo) (C(ttft_p99_ms), C(tpot_p99_ms)).
    type: dict
    default: {}
  dest:
    description: Path of the report files without extension (e.g. C(reports/tune-<time>)); parent directories are created. Nothing is written when unset.
    type: path
  chart:
    description: Write the PNG chart.
    type: bool
    default: true
  title:
    description: Title of the report and the chart.
    type: str
seealso:
  - module: gpufleet.sglang.tune_plan
  - module: gpufleet.sglang.tune_record
"""

EXAMPLES = r"""
- name: Write reports/tune-<time>.{md,json,png}
  gpufleet.sglang.tune_report:
    journal: "{{ tune_journal }}"
    plan: "{{ tune_round }}"
    slo: "{{ tune_slo }}"
    dest: "reports/tune-{{ now(utc=true, fmt='%Y%m%dT%H%M%SZ') }}"
  run_once: true
  register: tune_result
"""

RETURN = r"""
winner:
  description:
    - The candidate with the highest goodput, or among those within its noise the one with
      the fewest knobs off their base (C(id), C(strategy), C(extra_args), C(argv),
      C(goodput), C(concurrency) it was reached at, C(noise), C(tied_with) the ids it tied
      with), V(null) when no trial met the SLO without failed requests.
  returned: always
  type: dict
report:
  description:
    - The report as written to the JSON (C(rows), C(points), C(frontier), C(frontier_over), C(winner), C(tie),
      C(noise_floor), C(method), C(budget), C(kept), C(dropped), C(left_out), C(refused), C(slo), C(axes)).
  returned: always
  type: dict
markdown:
  description: The markdown report.
  returned: always
  type: str
table:
  description: The markdown report as lines, for printing.
  returned: always
  type: list
  elements: str
files:
  description: Paths written (or that would be written in check mode).
  returned: always
  type: list
  elements: str
chart_error:
  description: Why no chart was written.
  returned: when the chart was skipped
  type: str
"""
