#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: pd_plan
short_description: Choose a prefill/decode layout's transfer backend and render one host's PD servers
version_added: 0.4.0
author: gpufleet developers (@gpufleet)
description:
  - "Runs on the controller only (an action plugin), once per PD host (not C(run_once): a tune
    round may hold several layouts); it never connects to a host and writes nothing. The
    logic is C(plugins/module_utils/check/_pd.py) C(render) (see C(docs/pd.md))."
  - "Reads the transport facts of every host of the PD layout from C(hostvars) (the variable
    O(fact_name), registered by M(gpufleet.sglang.gpu_prereqs) with
    O(gpufleet.sglang.gpu_prereqs#module:transport=true): its whole result or its
    C(transport)), and chooses the KV transfer backend once over all of them, so that every
    host comes to the same choice - V(mooncake) where every PD host has RDMA devices and
    GPUDirect RDMA, else V(mooncake_tcp) where the release has it, else a refusal; or
    O(forced_backend), checked against the release and the hosts."
  - Then, for each server this host holds (O(placements)), its slot's names and ports - slot 0
    C(sglang.service) on O(server_port) and O(bootstrap_port), slot k C(sglang-s<k>.service) on
    each plus k times O(slot_port_step), its record C(sglang_s<k>.fact) - its PD flags (mode,
    backend, the bootstrap port on prefill servers, the IB devices, C(--base-gpu-id), the other
    role's sizes where the release has those flags) and its environment
    (C(CUDA_DEVICE_ORDER=PCI_BUS_ID) on every PD server, C(MC_FORCE_TCP=1) with V(mooncake_tcp)).
  - Fails with every problem at once, one line each, naming the host, the slot and the value
    (a host of the layout without transport facts, a release without the PD flags or the
    forced backend, no backend the hosts and the release allow, a malformed port or IB device,
    two slots of the host whose ports meet).
extends_documentation_fragment:
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  pd:
    description:
      - The PD layout, as its text (C(prefill:ep8+decode:2xep8)), as its parsed roles, or as
        M(gpufleet.sglang.deploy_check)'s RV(gpufleet.sglang.deploy_check#module:pd) (then its
        C(roles); its C(placements), its plan's hosts and its C(transfer_backend) stand in for
        O(placements), O(hosts) and O(forced_backend) when those are not given).
    type: raw
    required: true
  placements:
    description:
      - This host's servers of the plan (each C(role), C(server), C(node_rank), C(base_gpu_id),
        C(gpus), C(slot)), from M(gpufleet.sglang.deploy_check)'s C(pd.placements).
    type: list
    elements: dict
  hosts:
    description:
      - The hosts of the PD layout, whose facts choose the backend; by default the plan's hosts
        (O(pd) from the check), else the play's hosts.
    type: list
    elements: str
  release:
    description: The SGLang release (C(sglang_release)).
    type: str
    required: true
  help_flags:
    description:
      - The installed release's parsed C(--help) flags (M(gpufleet.sglang.server_flags)'
        C(flags)); without them, the collection's facts of O(release), and a release it has no
        help text of is refused.
    type: dict
  server_port:
    description: The servers' HTTP port (C(server_port)), slot 0's.
    type: raw
    required: true
  bootstrap_port:
    description:
      - The prefill servers' bootstrap port (C(sglang_pd_bootstrap_port)), slot 0's; V(null) for
        the release's default (8998).
    type: raw
  forced_backend:
    description:
      - The transfer backend (C(sglang_pd_transfer_backend)), V(mooncake), V(mooncake_tcp) or
        V(nixl); V(null) chooses from the hosts.
    type: str
  ib_device:
    description:
      - C(--disaggregation-ib-device) verbatim on every server (C(sglang_pd_ib_device)); with
        V(null) and V(mooncake), each GPU's nearest RDMA devices from the host's C(nvidia-smi topo -m).
    type: raw
  fact_name:
    description: The variable each PD host's transport facts are registered in.
    type: str
    default: __server_pd_facts
  slot_port_step:
    description: How far apart the ports of two servers of one host are (C(sglang_pd_slot_port_step)).
    type: int
    default: 10
"""

EXAMPLES = r"""
- name: What the KV transfer finds on each PD host
  gpufleet.sglang.gpu_prereqs:
    python: "{{ server_python }}"
    transport: true
  register: __server_pd_facts

- name: One backend for the layout, and this host's PD servers
  gpufleet.sglang.pd_plan:
    pd: "{{ __server_check.pd }}"
    release: "{{ sglang_release }}"
    help_flags: "{{ __server_flags.flags }}"
    server_port: "{{ server_port }}"
    bootstrap_port: "{{ sglang_pd_bootstrap_port | default(none) }}"
    forced_backend: "{{ sglang_pd_transfer_backend | default(none) }}"
    ib_device: "{{ sglang_pd_ib_device | default(none) }}"
  register: __server_pd_plan
"""

RETURN = r"""
backend:
  description: The transfer backend of the whole layout (V(null) when none could be chosen).
  returned: always
  type: str
  sample: mooncake_tcp
backend_reason:
  description: Why (C(sglang_pd_transfer_backend) when forced).
  returned: always
  type: str
  sample: "not every PD host can do RDMA with GPUDirect (h2: no RDMA device ...): KV over TCP"
slots:
  description:
    - This host's servers, by slot - C(slot), C(role), C(server), C(node_rank), C(base_gpu_id),
      C(gpus) (the host's GPU indexes; V(null) for all), C(service_name) (the unit's stem, as
      M(gpufleet.sglang.server_unit) takes it), C(unit), C(port), C(bootstrap_port) (V(null) on
      decode), C(record), C(record_path), C(ib_device), C(flags) (C([flag, value]) pairs) and
      C(environment).
  returned: always
  type: list
  elements: dict
  sample:
    - slot: 1
      role: decode
      server: decode-0
      node_rank: 0
      base_gpu_id: 4
      gpus: [4, 5, 6, 7]
      service_name: sglang-s1
      unit: sglang-s1.service
      port: 30010
      bootstrap_port: null
      record: sglang_s1.fact
      ib_device: null
      flags: [[--disaggregation-mode, decode], [--disaggregation-transfer-backend, mooncake_tcp], [--base-gpu-id, 4]]
      environment: {CUDA_DEVICE_ORDER: PCI_BUS_ID, MC_FORCE_TCP: "1"}
problems:
  description: Every problem found, one sentence each.
  returned: failure
  type: list
  elements: str
"""
