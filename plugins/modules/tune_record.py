#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: tune_record
short_description: Append one measured (or failed) tune trial to the journal on the controller
version_added: 0.3.0
author: gpufleet developers (@gpufleet)
description:
  - Runs on the controller only (an action plugin). Appends one JSON line to O(journal) for
    one trial - one candidate on one host (or multi-node group) over its whole concurrency
    sweep - with the candidate's fingerprint, so that M(gpufleet.sglang.tune_plan) never
    assigns it again. The line format is in C(docs/tune.md).
  - The metrics of each concurrency (output tok/s per GPU, tok/s per user = 1000 / TPOT,
    TTFT / TPOT / ITL p50 and p99, failed requests) are computed from O(runs) and stored in
    the line; a trial with failed requests, or with O(status=failed), never wins.
  - The append is fsynced; a kill can tear at most the last line, which readers skip.
  - A trial whose fingerprint is already in the journal is not appended again (C(changed)
    is false).
  - With O(mode=original), notes what the host served before the tune - from its
    M(gpufleet.sglang.server_status) row at the first run's start - as an C(original) line,
    once - while the journal holds an open C(original) line for the host (a killed tune
    resumed), that line is returned as it is, whatever the trials wrote in the host's
    deployment record since - and returns RV(restore), what C(keep=original) deploys
    there. With O(mode=stays), closes the host's C(original) line once the tune left its
    server in place, so that the next tune notes what runs then.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details: In check mode nothing is appended; RV(record) shows the line.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: The same fingerprint is appended once; a host's C(original) line once per tune.
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
options:
  mode:
    description:
      - V(trial) appends one trial (O(candidate) is required).
      - V(original) reads or writes the host's C(original) line (O(row) is required;
        O(strategy) is the inventory's strategy, deployed by C(keep=original) when nothing
        was deployed before the tune).
      - V(stays) appends the host's C(stays) line when its C(original) line is open
        (O(keep) and O(strategy), what the tune deployed, are required; O(winner) the
        winner's id).
    type: str
    choices: [trial, original, stays]
    default: trial
  journal:
    description: The trial journal (JSON lines); its directory is created when missing.
    type: path
    required: true
  candidate:
    description:
      - The candidate of this host, as RV(gpufleet.sglang.tune_plan#module:assignment) gives it
        (C(id), C(strategy), C(extra_args), C(fingerprint), C(argv), C(gpus)). C(fingerprint)
        is required.
      - Required with O(mode=trial).
    type: dict
  host:
    description: The trial host (rank 0 of a multi-node group).
    type: str
    required: true
  runs:
    description:
      - The benchmark results of the sweep, one per concurrency, as the
        P(gpufleet.sglang.bench_parse#filter) filter returns them (the benchmark role's
        C(benchmark_results)).
    type: list
    elements: dict
    default: []
  status:
    description:
      - V(ok) when the candidate was deployed and measured; V(failed) when its deploy or its
        benchmark failed (O(reason) says why). A failed trial is journaled too, so it is not
        loaded again, and it never wins.
    type: str
    choices: [ok, failed]
    default: ok
  reason:
    description: Why the trial failed (O(status=failed)).
    type: str
    default: ''
  wall_s:
    description:
      - Seconds the trial took (deploy and sweep), for the report; ignored when O(started)
        and O(ended_ago) are both given.
    type: float
  ended_ago:
    description:
      - How many seconds before this task the trial's own measurement ended, measured on
        the trial host's own clock (the age of its last result file; V(0) for now). With
        O(started), the line's C(wall_s) is the trial's own time, from the start of its load
        to the end of its own measurement, not its round's.
    type: float
  started:
    description:
      - When the trial began (epoch seconds), kept in the line to the millisecond as
        C(started); the line's C(time) is cut to the second.
    type: float
  load:
    description: The load shape of the sweep (C(tune_load)), recorded with the trial.
    type: dict
    default: {}
  slo:
    description: C(tune_slo) (C(ttft_p99_ms), C(tpot_p99_ms)); only for RV(goodput).
    type: dict
    default: {}
  row:
    description:
      - With O(mode=original), the host's row of M(gpufleet.sglang.server_status)
        (C(deployed), C(strategy), C(release), C(deployed_at)).
    type: dict
  strategy:
    description:
      - With O(mode=original), the inventory's strategy of the host (C(server_strategy)),
        what C(keep=original) deploys when no deployment record existed before the tune.
      - With O(mode=stays), the strategy the tune left on the host.
    type: str
  keep:
    description: With O(mode=stays), the tune's C(keep).
    type: str
    choices: [best, original]
  winner:
    description: With O(mode=stays), the winner's id (none when there is no winner).
    type: str
seealso:
  - module: gpufleet.sglang.tune_plan
  - module: gpufleet.sglang.tune_report
"""

EXAMPLES = r"""
- name: Journal the trial
  gpufleet.sglang.tune_record:
    journal: "{{ tune_journal }}"
    candidate: "{{ tune_round.assignment[inventory_hostname] }}"
    host: "{{ inventory_hostname }}"
    runs: "{{ benchmark_results }}"
    load: "{{ tune_load }}"
    slo: "{{ tune_slo }}"
  delegate_to: localhost

- name: Journal a candidate that did not come up
  gpufleet.sglang.tune_record:
    journal: "{{ tune_journal }}"
    candidate: "{{ tune_round.assignment[inventory_hostname] }}"
    host: "{{ inventory_hostname }}"
    status: failed
    reason: "{{ ansible_failed_result.msg | default('failed') }}"
  delegate_to: localhost

- name: Note what ran before the tune, once (a resumed tune gets the first run's line)
  gpufleet.sglang.tune_record:
    mode: original
    journal: "{{ tune_journal }}"
    host: "{{ inventory_hostname }}"
    row: "{{ tune_before.row }}"
    strategy: "{{ server_strategy }}"
  delegate_to: localhost
  register: tune_original
"""

RETURN = r"""
record:
  description: The journal line (see C(docs/tune.md)).
  returned: O(mode=trial) or O(mode=stays)
  type: dict
original:
  description:
    - The host's open C(original) line (C(host), C(time), C(deployed), C(strategy),
      C(release), C(deployed_at)), the one already in the journal or the one written now.
  returned: O(mode=original)
  type: dict
restore:
  description:
    - What C(keep=original) deploys on the host. C(strategy) - the original line's, or the
      inventory's (O(strategy)) when nothing was deployed before the tune; C(source) -
      V(record) or V(inventory); C(says) - one line for the play's output.
  returned: O(mode=original)
  type: dict
metrics:
  description:
    - One entry per concurrency, C(concurrency), C(output_tok_s), C(output_tok_s_per_gpu),
      C(tok_s_per_user), C(ttft_p50_ms), C(ttft_p99_ms), C(tpot_p50_ms), C(tpot_p99_ms),
      C(itl_p50_ms), C(itl_p99_ms), C(failed), C(meets_slo).
  returned: O(mode=trial)
  type: list
  elements: dict
goodput:
  description: Highest output tok/s per GPU that meets O(slo) with no failed request; V(null) when none does.
  returned: O(mode=trial)
  type: float
appended:
  description:
    - Whether the line was appended (false when the fingerprint was already there, when the
      host's C(original) line was already there, or when no C(original) line was open for
      O(mode=stays)).
  returned: always
  type: bool
"""
