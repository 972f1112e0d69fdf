#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: capacity_plan
short_description: Plan GPU memory for SGLang parallelism strategies of a model
version_added: 0.1.0
author: gpufleet developers (@gpufleet)
description:
  - Reads the model directory's C(config.json) (and C(model.safetensors.index.json) when
    present) on the host and computes, for every strategy, the weights each GPU holds,
    the KV cache bytes per token, the KV tokens SGLang's pool would hold, whether the plan
    fits and the C(mem_fraction_static) to use.
  - For pipeline parallelism it proposes the layer split that maximises the smallest
    stage's KV capacity, as a C(SGLANG_PP_LAYER_PARTITION) string, when that beats
    SGLang's default split.
  - Knows MLA models (DeepSeek-V2/V3, Kimi K2, K2.5/K2.6), Llama/Mistral/Qwen2/Qwen3 and
    Mixtral/Qwen2-MoE/Qwen3-MoE; BF16/FP16, FP8 block, compressed-tensors INT4
    pack-quantized and ModelOpt NVFP4/FP8 checkpoints. Anything else fails with the
    reason instead of giving a wrong number.
  - Only reads files; never changes anything.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Only reads files, so it runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  model_path:
    description: Model directory on the host; must contain C(config.json).
    type: path
    required: true
  gpu_count:
    description:
      - GPUs per host that the server uses.
      - When omitted, the GPUs C(nvidia-smi) reads on the host. With O(gpu_memory_mib) also
        given, the plan is for the given GPUs (a what-if), with a warning when the host's
        differ; on a host without GPUs give both.
    type: int
  gpu_memory_mib:
    description:
      - Memory of one GPU in MiB, as C(nvidia-smi) reports it (97887 for an RTX PRO 6000, 143771 for an H200).
      - When omitted, C(memory.total) of the host's smallest GPU.
    type: int
  host:
    description: The host's name in messages (the playbook passes C(inventory_hostname)).
    type: str
    default: this host
  nvidia_smi:
    description: Path of C(nvidia-smi) to read the GPUs with; default is to find it on C(PATH).
    type: path
  strategies:
    description:
      - Strategies to plan. A string is a strategy name (V(tp8), V(pp8), V(ep8), V(ep4) or
        C(tp<N>[-pp<N>][-ep<N>][-dp<N>])); a mapping is a layout with keys C(tp), C(pp),
        C(ep), C(dp) and optionally C(name), C(dp_attention) and
        C(pp_layer_partition) (a split to evaluate instead of searching one).
      - C(dp) is DP attention as the collection renders it (C(--dp-size N
        --enable-dp-attention), C(--attn-dp-size N) from 0.5.23), which splits the TP group, on
        C(tp*pp) GPUs. C(dp_attention=false) plans plain C(--dp-size) replicas instead, N copies
        of the C(tp*pp) group on C(tp*pp*dp) GPUs; default V(true).
    type: list
    elements: raw
    required: true
  mem_fraction_static:
    description: SGLang's C(--mem-fraction-static); SGLang's default for the layout when omitted.
    type: float
  context_length:
    description: Tokens the KV pool must hold at least for the plan to fit (one request of this length).
    type: int
  kv_dtype:
    description: SGLang's C(--kv-cache-dtype) (V(auto) is the model dtype).
    type: str
    default: auto
  nnodes:
    description: Hosts one server spans (C(gpu_count) GPUs each).
    type: int
    default: 1
  release:
    description:
      - The SGLang release the servers run, for its own default C(mem_fraction_static)
        when O(mem_fraction_static) is not given. V(0.5.9) and older, and V(0.5.23) and
        newer, follow those releases' formulas (checked against the real packages,
        vision-language adjustment included); other values and no value use 0.5.10's.
      - A deploy replaces this estimate with the number the installed release derives
        itself (the C(server_args) that M(gpufleet.sglang.server_preflight) returns).
    type: str
"""

EXAMPLES = r"""
- name: Plan Kimi K2.5 on 8 RTX PRO 6000
  gpufleet.sglang.capacity_plan:
    model_path: /models/Kimi-K2.5
    gpu_count: 8
    gpu_memory_mib: 97887
    strategies: [tp8, pp8, ep8, ep4]
  register: plan

- name: Print the table
  ansible.builtin.debug:
    msg: "{{ plan.table }}"
"""

RETURN = r"""
gpus:
  description:
    - The GPUs planned for, and where each number came from (V(inventory) or V(detected)).
  returned: success
  type: dict
  sample: {"count": 8, "memory_mib": 97887, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition",
           "source": "detected", "memory_source": "detected"}
plans:
  description: One entry per strategy, in the order given.
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: Strategy name.
      type: str
    layout:
      description: C(tp), C(pp), C(ep), C(dp), C(dp_attention).
      type: dict
    error:
      description: Why the layout cannot run (then only name, layout, fits are set).
      type: str
      returned: when the layout cannot run on these GPUs
    weights_per_gpu_gib:
      description: Weights on every GPU rank (rank = pp_rank * tp + tp_rank), GiB.
      type: list
      elements: float
    weights_per_gpu_min_gib:
      description: Smallest entry of RV(plans[].weights_per_gpu_gib).
      type: float
    weights_per_gpu_max_gib:
      description: Largest entry of RV(plans[].weights_per_gpu_gib).
      type: float
    kv_bytes_per_token_per_gpu:
      description: KV cache bytes one token takes on the GPU with the most layers.
      type: int
    kv_tokens:
      description: Tokens SGLang's KV pool would hold (minimum over PP stages).
      type: int
    fits:
      description: Weights fit with KV room left (and room for O(context_length) tokens when given).
      type: bool
    margin_gib:
      description: Smallest KV room per GPU, less O(context_length) tokens when given; negative when it does not fit.
      type: float
    mem_fraction_static:
      description: Fraction the numbers use.
      type: float
    default_mem_fraction_static:
      description: SGLang's default fraction for this layout and GPU.
      type: float
    recommended_mem_fraction_static:
      description:
        - Fraction to pass to SGLang; null when no fraction makes it fit. Full precision (SGLang's
          own default for a multimodal model is not rounded).
        - Messages print it rounded down to 3 decimals (more only when 3 would drop below
          RV(plans[].needed_mem_fraction_static)), never up, and say so when rounding changed it.
      type: float
    needed_mem_fraction_static:
      description:
        - The smallest fraction that holds the weights and the required KV tokens
          (O(context_length), else 8192) on every GPU; above 1 when the GPU cannot hold them.
      type: float
    pp_layer_partition:
      description: C(SGLANG_PP_LAYER_PARTITION) value when a better split than SGLang's default exists, else null.
      type: str
    default_pp_partition:
      description: SGLang's default layer split, comma separated.
      type: str
    default_pp_split:
      description: Weights per GPU (min, max) and KV tokens with SGLang's default split; null without PP.
      type: dict
    pp_stage_layers:
      description: Layers per PP stage of the split the numbers use.
      type: list
      elements: int
model:
  description: Model summary.
  returned: success
  type: dict
  contains:
    architecture:
      description: First entry of C(architectures).
      type: str
    quantization:
      description: Checkpoint format, e.g. V(int4-group32), V(fp8-block128x128), V(bf16).
      type: str
    total_weight_bytes:
      description: Weights the server loads (text model plus vision tower).
      type: int
    total_weight_gib:
      description: The same in GiB.
      type: float
    parameters:
      description: Parameters of the text model (without MTP layers and vision tower).
      type: int
table:
  description:
    - Text lines of a table of the plans, for printing. Its numbers are rounded for a person
      (GiB to 1 decimal, the fraction to 3 decimals); RV(plans) keeps their precision.
  returned: success
  type: list
  elements: str
"""


from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._capacity import (
    CannotPlan,
    format_table,
    load_model,
    plan_model,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._gpu_doctor import Prober
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._preflight import (
    PreflightError,
    host_gpus,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
    StrategyError,
    parse_strategy,
    strategy_name,
)

_EXTRA_KEYS = ("name", "dp_attention", "pp_layer_partition")


def _strategy_entries(raw_list):
    """Turn the strategies option into (name, layout, extras) triples."""
    entries = []
    for raw in raw_list:
        if isinstance(raw, dict):
            extras = dict((k, raw[k]) for k in _EXTRA_KEYS if k in raw)
            layout = parse_strategy(dict((k, v) for k, v in raw.items() if k not in _EXTRA_KEYS))
            name = str(extras.get("name") or strategy_name(layout))
        else:
            layout = parse_strategy(raw)
            name = str(raw).strip()
            extras = {}
        entries.append((name, layout, extras))
    return entries


def plan_gpus(module, params):
    """The GPUs to plan for: given ones as they are on a host without GPUs; otherwise the
    host's (nvidia-smi), which given ones must agree with. Fails naming what to give."""
    settings = {"gpu_count": params["gpu_count"], "gpu_memory_mib": params["gpu_memory_mib"]}
    found, detail = [], None
    if params["nvidia_smi"] or None in settings.values() or module.get_bin_path("nvidia-smi"):
        facts = Prober(module).gpus(params["nvidia_smi"])
        found, detail = facts["gpus"], facts["smi"].get("detail")
    try:
        return host_gpus(settings, found, params["host"], detail)
    except PreflightError as exc:
        if None in settings.values():
            module.fail_json(msg=str(exc))
        # both given: a what-if for other hardware is planned as asked, with a warning
        module.warn("planning for the given GPUs, not the host's: %s" % exc)
        return {"count": settings["gpu_count"], "memory_mib": settings["gpu_memory_mib"],
                "name": None, "source": "inventory", "memory_source": "inventory"}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            model_path=dict(type="path", required=True),
            gpu_count=dict(type="int"),
            gpu_memory_mib=dict(type="int"),
            host=dict(type="str", default="this host"),
            nvidia_smi=dict(type="path"),
            strategies=dict(type="list", elements="raw", required=True),
            mem_fraction_static=dict(type="float"),
            context_length=dict(type="int"),
            kv_dtype=dict(type="str", default="auto"),
            nnodes=dict(type="int", default=1),
            release=dict(type="str"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if params["nnodes"] < 1:
        module.fail_json(msg="nnodes must be positive, got %s" % params["nnodes"])
    gpus = plan_gpus(module, params)
    if not params["strategies"]:
        module.fail_json(msg="strategies must list at least one strategy")
    path = params["model_path"]
    try:
        entries = _strategy_entries(params["strategies"])
    except StrategyError as exc:
        module.fail_json(msg="invalid strategy: %s" % exc)
    try:
        spec = load_model(path)
        plans = []
        for name, layout, extras in entries:
            kwargs = dict(
                mem_fraction_static=params["mem_fraction_static"],
                context_length=params["context_length"],
                kv_dtype=params["kv_dtype"],
                nnodes=params["nnodes"],
                release=params["release"],
            )
            if "dp_attention" in extras:
                kwargs["dp_attention"] = module.boolean(extras["dp_attention"])
            if extras.get("pp_layer_partition"):
                kwargs["pp_partition"] = extras["pp_layer_partition"]
            plans.extend(plan_model(spec, [(name, layout)], gpus["count"],
                                    gpus["memory_mib"], **kwargs))
    except CannotPlan as exc:
        module.fail_json(msg=str(exc), model_path=path)
    summary = spec.summary()
    for warning in summary["warnings"]:
        module.warn(warning)
    module.exit_json(changed=False, plans=plans, model=summary, gpus=gpus,
                     table=format_table(spec, plans))


if __name__ == "__main__":
    main()
