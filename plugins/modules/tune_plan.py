#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: tune_plan
short_description: Expand a tune's search space, and plan its next round of trials
version_added: 0.3.0
author: gpufleet developers (@gpufleet)
description:
  - Runs on the controller only (an action plugin); it never connects to a host and writes
    nothing. All the logic is in C(plugins/module_utils/tune/) (see C(docs/tune.md)).
  - "O(mode=check): the first task of C(playbooks/tune.yml), on localhost, before anything
    is read or loaded: every input in O(request) at once (C(tune_space)'s shape and its
    strategies' grammar, C(tune_load) over its defaults, C(tune_slo), C(keep), C(tune_budget),
    C(tune_method), and C(tune_hosts): every term of the host pattern a host or group of
    O(inventory_hosts)/O(groups), selecting at least one host), one problem per line, each
    naming the variable and its value. Returns RV(load), RV(hosts), RV(keep), RV(budget),
    RV(method), RV(slo)."
  - "O(mode=values): the results of C(<python> -m sglang.launch_server <argv> --help) for each
    of RV(probes) (O(probes)): fails naming the knob, the value the release's argparse refuses
    and O(release), before any candidate is gated or loaded."
  - "O(mode=outcome): fails, naming why, when no candidate of O(plan) has a successful trial
    in O(journal) (every trial failed: each with its reason; or none ran)."
  - "O(mode=expand): checks the search space O(space) all at once (every knob a flag of the
    installed release's C(--help) in O(flags), every value of the right kind for it, every
    strategy in the collection's grammar) and returns RV(candidates), the product of
    strategies and knob values, in a stable order with stable ids."
  - "O(mode=gate): builds the entries of M(gpufleet.sglang.server_preflight)'s O(gpufleet.sglang.server_preflight#module:candidates)
    (RV(requests)), so that one call gates the whole space on the host: each candidate with
    the layout and strategy that M(gpufleet.sglang.deploy_check) resolved for it in O(checks)
    (its own strategy when that check refused it), and O(base_extra_args) under its own flags."
  - "O(mode=next): judges every candidate from its M(gpufleet.sglang.server_preflight) result
    in O(preflight) (refused when the preflight failed - planner, argparse or the release's
    gate - or when the release rewrote a value the candidate asked for), fingerprints the
    admissible ones, reads the journal O(journal), and assigns one DIFFERENT candidate to
    each trial host (or multi-node group) of O(hosts) for the next round, by the method
    O(method) within O(budget) trials. A candidate whose fingerprint is in the journal is
    never assigned again (resume); a refused candidate is never assigned."
  - The plan is stateless. Each call recomputes the search from the journal, so an
    interrupted tune resumes where it stopped, and a re-run with nothing new assigns nothing
    (RV(done) is true at once).
extends_documentation_fragment:
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  mode:
    description:
      - V(check) (the tune's inputs), V(expand) (the space to candidates), V(values) (the knob
        values against the release's argparse), V(gate) (the gate's requests), V(next)
        (verdicts and the next round; fails when every candidate is refused) or V(outcome)
        (fails when nothing was measured).
    type: str
    choices: [check, expand, values, gate, next, outcome]
    required: true
  request:
    description:
      - "O(mode=check): C(tune_space), C(tune_load), C(tune_slo), C(keep), C(tune_budget),
        C(tune_method), C(tune_hosts) as given (V(null) when unset)."
    type: dict
  inventory_hosts:
    description: O(mode=check) - every host of the inventory (C(groups['all'])).
    type: list
    elements: str
    default: []
  groups:
    description: O(mode=check) - the inventory's groups (C(groups)).
    type: dict
    default: {}
  probes:
    description:
      - "O(mode=values): the C(results) of a registered loop of C(ansible.builtin.command) over
        RV(probes) (each with its probe as C(item), run with C(failed_when: false))."
    type: list
    elements: dict
  plan:
    description: O(mode=outcome) - the last O(mode=next) result.
    type: dict
  space:
    description:
      - "The search space C(tune_space): C(strategies) (list of strategy names, at least
        one), C(knobs) (flag to the list of values to try; a value V(null) means the flag is
        not passed, so the release's default; V(true)/V(false) for a switch: passed or not),
        C(fixed) (flag to one value passed to every candidate)."
      - Used by O(mode=expand); with O(mode=next) it is only used to order the knobs (coordinate
        descent walks them in the order given) when O(candidates) does not carry it.
    type: dict
  release:
    description: The installed SGLang release, for the messages and the fingerprint.
    type: str
  flags:
    description:
      - The parsed C(launch_server --help) of the installed release, as
        M(gpufleet.sglang.server_flags) returns it with C(return_flags=true) (flag to spec;
        aliases are accepted). A knob or fixed flag that is not there is refused, naming the
        knob, the value and the release.
      - Required with O(mode=expand).
    type: dict
  candidates:
    description: RV(candidates) of the O(mode=expand) call (O(mode=gate), O(mode=next)).
    type: list
    elements: dict
  checks:
    description:
      - "O(mode=gate): the C(results) of a registered loop of M(gpufleet.sglang.deploy_check)
        over O(candidates) (each with the candidate as C(item); run with C(failed_when: false))."
    type: raw
  base_extra_args:
    description: "O(mode=gate): the inventory's C(server_extra_args); each candidate's own flags win."
    type: dict
    default: {}
  preflight:
    description:
      - "O(mode=next): the M(gpufleet.sglang.server_preflight) result of every candidate,
        either the C(results) list of a registered loop over O(candidates) (each result
        carries the candidate as C(item); run the loop with C(failed_when: false)) or a
        dict candidate id to result; the C(results) of one
        M(gpufleet.sglang.server_preflight) call with O(gpufleet.sglang.server_preflight#module:candidates)
        have the same shape."
      - A candidate without a result is refused (C(no preflight result)).
    type: raw
  journal:
    description: The trial journal on the controller (JSON lines, see C(docs/tune.md)); missing means empty.
    type: path
  model_commit:
    description: The model commit (part of the fingerprint); empty when unknown.
    type: str
    default: ''
  load:
    description:
      - "The load shape C(tune_load), part of the fingerprint: C(input_len), C(output_len),
        C(concurrencies) (list), C(num_prompts) (per concurrency, or a dict concurrency to
        prompts), optional C(dataset) and C(tool) (V(bench_serving) or V(aiperf))."
    type: dict
    default: {}
  hosts:
    description:
      - The trial hosts. Each element is a host name (one server) or a list of host names
        (one multi-node server; the first is rank 0). Every element gets its own candidate
        in a round.
    type: list
    elements: raw
  budget:
    description:
      - C(tune_budget), in trials (one trial = one candidate loaded and measured over the
        whole concurrency sweep). Trials already in the journal count against it. V(0)
        means no limit.
    type: int
    default: 0
  method:
    description:
      - V(auto) runs V(exhaustive) when every admissible candidate fits O(budget), else
        V(coordinate).
      - V(exhaustive) measures every admissible candidate (within O(budget) when it is set;
        what does not fit is listed in RV(left_out)).
      - V(coordinate) - each strategy's seed (its base knobs) first, then a bounded climb
        around the best one or two strategies only (one knob moved one step in its list of
        values; a move needs a gain beyond the noise); the other strategies are dropped
        with the reason - see C(docs/tune.md).
    type: str
    choices: [auto, exhaustive, coordinate]
    default: auto
  slo:
    description:
      - "C(tune_slo): C(ttft_p99_ms) and C(tpot_p99_ms) (each optional; unset means no
        limit). A trial's goodput is the highest output tok/s per GPU among its concurrencies
        that meet both, with no failed request."
    type: dict
    default: {}
  require_gate:
    description:
      - Refuse a candidate whose preflight skipped the release's server-args gate (GPU model
        not read). V(false) admits it with a note.
    type: bool
    default: true
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
seealso:
  - module: gpufleet.sglang.tune_record
  - module: gpufleet.sglang.tune_report
  - module: gpufleet.sglang.server_preflight
notes:
  - The journal line format, the fingerprint and the search methods are described in
    C(docs/tune.md) of the collection.
"""

EXAMPLES = r"""
- name: Expand the search space
  gpufleet.sglang.tune_plan:
    mode: expand
    space:
      strategies: [tp8, ep8, tp8-dp8]
      knobs:
        --cuda-graph-max-bs: [null, 32, 128]
        --chunked-prefill-size: [null, 2048]
        --mem-fraction-static: [null, 0.80, 0.90]
      fixed: {--enable-metrics: true}
    release: "{{ flags.version }}"
    flags: "{{ flags.flags }}"
  run_once: true
  register: tune_space

- name: Every candidate through the planner and the release's gate, before any load
  gpufleet.sglang.server_preflight:
    host: "{{ inventory_hostname }}"
    python: "{{ server_python }}"
    model_path: "{{ sglang_model_path }}"
    layout: "{{ item.layout }}"
    strategy: "{{ item.strategy }}"
    server_args: {--model-path: "{{ sglang_model_path }}", --host: 0.0.0.0, --port: 30000}
    extra_args: "{{ item.extra_args }}"
    plan: {gpu_count: null, gpu_memory_mib: null, nnodes: 1, release: "{{ sglang_release }}"}
    port: 30000
  loop: "{{ tune_space.candidates }}"
  loop_control:
    label: "{{ item.id }}"
  failed_when: false
  run_once: true
  register: tune_preflight

- name: Plan the next round
  gpufleet.sglang.tune_plan:
    mode: next
    candidates: "{{ tune_space.candidates }}"
    preflight: "{{ tune_preflight.results }}"
    journal: "{{ playbook_dir }}/../reports/tune-journal.jsonl"
    model_commit: "{{ sglang_model_commit | default('') }}"
    load: {input_len: 1024, output_len: 256, concurrencies: [1, 8, 32], num_prompts: 64}
    hosts: "{{ ansible_play_hosts | gpufleet.sglang.tune_units(hostvars, groups) }}"
    budget: 8
    method: auto
    slo: {ttft_p99_ms: 2000, tpot_p99_ms: 50}
  run_once: true
  register: tune_round
"""

RETURN = r"""
requests:
  description: "O(mode=gate): one entry per candidate, C(id), C(strategy), C(layout) and C(extra_args)."
  returned: with O(mode=gate)
  type: list
  elements: dict
candidates:
  description:
    - "O(mode=expand): every candidate, C(id) (C(c<NN>-<strategy>), stable for the same space),
      C(strategy), C(layout) (C(name), C(tp), C(pp), C(ep), C(dp) of the strategy, for
      M(gpufleet.sglang.server_preflight)'s O(gpufleet.sglang.server_preflight#module:layout)),
      C(extra_args) (flag to value: the fixed flags and this candidate's knob values; a knob
      at V(null) is left out), C(knobs) (knob flag to this candidate's value, V(null)
      included), C(index) (position of each knob's value in its list)."
    - "O(mode=next): the same, each with C(verdict) (V(ok), V(refused) or V(rewritten)),
      C(reason), C(fingerprint) (admissible ones), C(argv), C(gpus) (C(name), C(count) per
      host, C(used) by the server), C(state) (V(measured), V(assigned), V(refused),
      V(left_out), V(pending))."
  returned: always
  type: list
  elements: dict
knobs:
  description: The knob flags in the order of the space (O(mode=expand)).
  returned: always
  type: list
  elements: str
strategies:
  description: The strategies of the space, normalized, in their order (O(mode=expand)).
  returned: mode=expand
  type: list
  elements: str
slo:
  description: O(slo) with numbers (V(null) for no limit), as the goodput used it.
  returned: mode=next
  type: dict
space_size:
  description: Number of candidates.
  returned: always
  type: int
assignment:
  description:
    - "O(mode=next): every trial host to its candidate of this round (the candidate dict of
      RV(candidates), with C(fingerprint), C(argv), C(gpus)) or V(null) when it has none this
      round. All hosts of one multi-node group get the same candidate."
  returned: mode=next
  type: dict
leads:
  description:
    - "O(mode=next): the host of each trial unit that is measured and journals the trial
      (a multi-node server's rank 0; the host itself for a server of one host)."
  returned: mode=next
  type: list
  elements: str
done:
  description: O(mode=next) - nothing is left to assign (RV(assignment) is all V(null)).
  returned: mode=next
  type: bool
method:
  description: The method that runs (V(exhaustive) or V(coordinate)) with O(method=auto) resolved.
  returned: mode=next
  type: str
phase:
  description: V(strategies), V(descent) or V(exhaustive), the phase this round belongs to (V(done) at the end).
  returned: mode=next
  type: str
left_out:
  description: Admissible candidates the search did not (or will not) measure, each C(id) and C(reason).
  returned: mode=next
  type: list
  elements: dict
refused:
  description: Refused candidates, each C(id), C(strategy), C(extra_args), C(verdict) and C(reason).
  returned: mode=next
  type: list
  elements: dict
measured:
  description: Number of candidates of this space already in the journal.
  returned: mode=next
  type: int
budget_left:
  description: Trials still allowed by O(budget) (V(null) without a budget).
  returned: mode=next
  type: int
best:
  description: The best measured candidate so far (C(id), C(goodput)), V(null) when none qualifies.
  returned: mode=next
  type: dict
budget:
  description: O(mode=check) and O(mode=next) - C(tune_budget) in trials, as a number (V(0) for no limit).
  returned: mode=check or mode=next
  type: int
tie:
  description:
    - "O(mode=next) - the tie at the top, V(null) when none: C(winner) (among the candidates
      within the fastest one's noise, the one with the fewest knobs off their base),
      C(among) (the tied ids), C(best) (the fastest) and the noise."
  returned: mode=next
  type: raw
kept:
  description: O(mode=next) - the strategies the climb goes on with (V(coordinate)), best first.
  returned: mode=next
  type: list
  elements: str
dropped:
  description: O(mode=next) - the strategies measured at their seed only, each C(strategy) and C(reason).
  returned: mode=next
  type: list
  elements: dict
rounds_left:
  description:
    - Upper bound of the rounds still to come, this one included (for a playbook's loop
      over rounds; skip the iterations after RV(done)). Exact for V(exhaustive); for
      V(coordinate) one candidate per round (the descent picks each round from the last
      one's results), so the loop has spare iterations.
  returned: mode=next
  type: int
probes:
  description:
    - "O(mode=expand): one argv per knob (every value of it, the flag repeated) and one for the
      fixed flags, each C(where), C(flag), C(values), C(argv): the release's argparse converts
      every occurrence, so C(launch_server <argv> --help) exits 2 naming the first value it
      refuses."
  returned: mode=expand
  type: list
  elements: dict
load:
  description: O(mode=check) - C(tune_load) over the defaults (C(tool) bench_serving, C(input_len) 1024,
    C(output_len) 256, C(concurrencies) [1, 8, 32], C(num_prompts) 32), numbers as integers.
  returned: mode=check
  type: dict
hosts:
  description: O(mode=check) - the hosts C(tune_hosts) selects (default C(sglang_servers)), in inventory order.
  returned: mode=check
  type: list
  elements: str
keep:
  description: O(mode=check) - V(best) or V(original).
  returned: mode=check
  type: str
problems:
  description: Every problem of the space, one sentence each (O(mode=expand) failure).
  returned: failure
  type: list
  elements: str
"""
