#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: deploy_check
short_description: Check every input of an SGLang deployment at once, on the controller
version_added: 0.2.0
author: gpufleet developers (@gpufleet)
description:
  - Checks every input the deploy path needs and refuses once, listing each missing or
    malformed input with what it means, the value it got and an example.
  - Turns the strategy into a layout and, for a multi-node server (O(nnodes) > 1), works
    out the hosts that form it, this host's node rank and rank 0's rendezvous address
    (C(--dist-init-addr)).
  - With O(gpu_count) set, the layout is checked against that count times O(nnodes). Without
    it, only the strategy's grammar and sizes are checked here (ep divides tp);
    M(gpufleet.sglang.server_preflight) checks the layout against the GPUs the host has,
    with the same rule.
  - Runs on the controller only; it never connects to the host.
  - "Pass every input as V(null) when it is not set (C(| default(none))): a missing input is
    then reported by name instead of as a templating error."
extends_documentation_fragment:
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  strategy:
    description:
      - The parallelism strategy (C(tp8), C(pp8), C(ep8), C(ep4) or C(tp<N>[-pp<N>][-ep<N>][-dp<N>])).
      - Or a prefill/decode layout, C(prefill:[<N>x]<layout>+decode:[<N>x]<layout>) (C(prefill:ep8+decode:2xep8)).
        Its roles are placed on the play's hosts (pinned by the host variable C(sglang_pd_role) or the
        groups C(sglang_prefill) and C(sglang_decode)), and the release's PD flags, the transfer backend,
        C(server_extra_args) and the routers are checked. A PD layout is refused at the end (RV(pd) still
        returned) until prepare, the rollout and the router deploy it.
    type: raw
  gpu_count:
    description:
      - GPUs on each host (C(sglang_gpu_count)); V(null) or empty when the host's GPUs decide.
      - When set, the layout is checked against it here, and the host checks it against its GPUs.
    type: raw
  gpu_memory_mib:
    description:
      - Memory of one GPU in MiB (C(sglang_gpu_memory_mib)); V(null) or empty when the host's
        GPUs decide. When set, it must be a positive integer.
    type: raw
  release:
    description: The SGLang release (C(sglang_release)).
    type: raw
  model_path:
    description: The fleet's model directory (C(sglang_model_path)).
    type: raw
  model_repo:
    description:
      - The Hugging Face repo id of the model step (C(sglang_model_repo)), C(<org>/<name>).
      - Set, it stands in for O(model_path) as the required model input.
    type: raw
  nnodes:
    description: Hosts that form one server (C(sglang_nnodes)).
    type: raw
  server_group:
    description: The inventory group of the hosts that form one multi-node server.
    type: str
  dist_init_port:
    description: Port of rank 0's rendezvous.
    type: int
    default: 50000
  rollout_batch:
    description:
      - Hosts per rollout batch (C(sglang_rollout_batch)).
      - The hosts of one multi-node server must fall into one batch; a batch size that
        splits them is refused.
    type: raw
  rollout_hosts:
    description: The hosts in rollout order; defaults to the play's hosts.
    type: list
    elements: str
  venv_release:
    description: The release the venv holds (C(venv_release)).
    type: raw
  venv_wheels:
    description:
      - Wheels on the controller the venv step installs (C(venv_wheels)).
      - Each must be a readable file; a missing one is refused naming it and the release.
      - Unset, the host's C(venv_wheels) are read and templated as the venv step does, with
        C(venv_release) set to the server's release.
    type: list
    elements: str
  capacity_mem_fraction_static:
    description: The planner's static memory fraction (0 for SGLang's default).
    type: raw
  extra_args:
    description: Further launch flags (C(server_extra_args)).
    type: raw
  port:
    description: The server's HTTP port (C(server_port)).
    type: raw
  health_timeout:
    description: Seconds the server may take to become ready (C(server_health_timeout)).
    type: raw
  server_model_path:
    description: The model directory of this host's server (C(server_model_path)).
    type: raw
  served_model_name:
    description: The name the OpenAI routes report (C(server_served_model_name)).
    type: raw
  api_key:
    description: The server's API key (C(server_api_key)); never shown.
    type: raw
  hf_token:
    description: The Hugging Face token (C(server_hf_token)); never shown.
    type: raw
  router_group:
    description:
      - The inventory group of the routers in front of this server (C(server_router_group)).
        A server whose C(server_api_key) differs from a router's C(router_api_key) is
        refused. smg forwards its clients' C(Authorization) header to the server unchanged,
        and sends the server's own key only on requests without one, so the server would
        refuse every routed request.
    type: str
    default: ""
  pd_transfer_backend:
    description:
      - With a prefill/decode layout, the KV transfer backend forced (C(sglang_pd_transfer_backend)), one of
        C(mooncake), C(mooncake_tcp) or C(nixl); V(null) chooses from the hosts' RDMA devices in prepare.
      - Refused when the release's C(--disaggregation-transfer-backend) lacks it (C(mooncake_tcp) before 0.5.23).
    type: raw
  pd_bootstrap_port:
    description:
      - With a prefill/decode layout, the prefill servers' bootstrap port (C(sglang_pd_bootstrap_port)).
      - V(null) for the release's default (8998).
    type: raw
  pd_ib_device:
    description:
      - With a prefill/decode layout, C(--disaggregation-ib-device) given verbatim (C(sglang_pd_ib_device)).
      - V(null) maps each GPU to its nearest RDMA devices.
    type: raw
  fleet:
    description:
      - Check only that O(target) selects at least one host of the inventory (the deploy's
        first task, on localhost); every other option is ignored. An inventory whose server
        group C(sglang_servers) is empty is refused ("nothing to deploy", naming the group
        and the inventory) instead of skipping every play with rc 0.
    type: bool
    default: false
  target:
    description: With O(fleet), the deploy's C(target) host pattern; empty means C(sglang_servers).
    type: str
    default: ""
attributes:
  action:
    description: Indicates this has a corresponding action plugin so some parts of the options can be executed on the controller.
    support: full
seealso:
  - module: gpufleet.sglang.server_preflight
notes:
  - The strategy and GPU-count rules are the collection's one strategy table
    (C(plugins/module_utils/check/_strategy.py)).
"""

EXAMPLES = r"""
- name: Check the deploy inputs
  gpufleet.sglang.deploy_check:
    strategy: "{{ strategy | default(sglang_strategy) | default(none) }}"
    # optional: unset, the host's GPUs decide (gpufleet.sglang.server_preflight)
    gpu_count: "{{ sglang_gpu_count | default(none) }}"
    gpu_memory_mib: "{{ sglang_gpu_memory_mib | default(none) }}"
    release: "{{ sglang_release | default(none) }}"
    model_path: "{{ sglang_model_path | default(none) }}"
  register: request
"""

RETURN = r"""
layout:
  description:
    - The layout (C(name), C(tp), C(pp), C(ep), C(dp), C(nnodes), C(gpus)); C(gpus) is the
      GPUs the server needs.
    - Checked against O(gpu_count) when that is set (see RV(layout_checked)); otherwise the
      host checks it (M(gpufleet.sglang.server_preflight) returns the checked one).
  returned: success
  type: dict
  sample: {name: ep8, tp: 8, pp: 1, ep: 8, dp: 1, nnodes: 1, gpus: 8}
layout_checked:
  description:
    - Whether RV(layout) was checked against a GPU count here (O(gpu_count) set and the
      strategy fits it).
    - "A strategy that does not fit a set O(gpu_count) is left to the host (RV(deferred)):
      the host compares the count with its GPUs first (C(sglang_gpu_count is 16, but gpu-1
      has 8 GPUs (...))), then fits the strategy to them."
  returned: success
  type: bool
deferred:
  description: Why the GPU fit was left to the host although O(gpu_count) is set.
  returned: when the strategy does not fit O(gpu_count)
  type: str
gpus:
  description: C(count) and C(memory_mib) as given (V(null) when the host's GPUs decide).
  returned: success
  type: dict
  sample: {count: null, memory_mib: null}
strategy:
  description: The strategy as given (the layout's name when it was not a string), for the host's messages.
  returned: success
  type: str
  sample: ep8
topology:
  description: C(members), C(node_rank), C(rank0), C(dist_init_addr) and C(serves_http) of this host's server.
  returned: success
  type: dict
pd:
  description:
    - With a prefill/decode layout, C(layout) (its canonical name), C(roles) (each role's C(count), C(layout),
      C(name), C(gpus)), C(plan) (every server's role, hosts and GPUs, each host's placements, the hosts
      whose role C(moved)), C(placements) (this host's), C(release), C(release_facts) (the release's PD
      flags and transfer backends, V(null) for a release the collection has no help text of) and
      C(transfer_backend) (as forced, or V(null)).
  returned: with a prefill/decode layout
  type: dict
problems:
  description: Every problem found, one sentence each.
  returned: failure
  type: list
  elements: str
"""
