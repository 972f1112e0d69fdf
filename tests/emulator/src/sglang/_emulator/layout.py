"""Resolve the parallel layout like ServerArgs.__post_init__ does, check that the
emulated machine can hold it, and pick the token rates for it."""

import json
import os

from sglang._emulator.release import version_tuple

DEFAULT_GPUS = 8

# Modelled on Kimi K2.5 on 8x RTX PRO 6000 (tok/s): per-request single-stream rate and
# the aggregate ceiling shared by all active requests.
DEFAULT_RATES = {
    "tp8": {"single": 26.0, "ceiling": 700.0},
    "tp1-pp8": {"single": 30.0, "ceiling": 900.0},
    "tp8-ep4": {"single": 45.0, "ceiling": 1150.0},
    "tp8-ep8": {"single": 65.0, "ceiling": 1531.0},
}
FALLBACK_RATES = {"single": 20.0, "ceiling": 500.0}
# Strategy names of the collection, accepted as keys of SGLANG_EMULATOR_RATES too.
STRATEGY_ALIASES = {"tp8": "tp8", "tp1-pp8": "pp8", "tp8-ep4": "ep4", "tp8-ep8": "ep8"}

# a2a backends for which the real ServerArgs forces ep_size = tp_size (0.5.x).
EP_SPANNING_A2A = ("deepep", "mooncake", "deepep_v2", "megamoe")


class LayoutError(Exception):
    """Carries the exception class the real server would die with."""

    def __init__(self, exc_type, message):
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message


def machine_gpus():
    raw = os.environ.get("SGLANG_EMULATOR_GPUS", "")
    try:
        val = int(raw) if raw.strip() else DEFAULT_GPUS
    except ValueError:
        val = DEFAULT_GPUS
    return max(val, 0)


def resolve(release, args):
    """Return (layout dict, warnings) after the release's own adjustments."""
    warnings = []
    tp = int(args.get("tp_size") or 1)
    pp = int(args.get("pp_size") or 1)
    ep = int(args.get("ep_size") or 1)
    dp = int(args.get("dp_size") or 1)
    nnodes = int(args.get("nnodes") or 1)
    node_rank = int(args.get("node_rank") or 0)
    attn_dp = int(args.get("attn_dp_size") or 1)
    dp_attention = bool(args.get("enable_dp_attention"))
    v = version_tuple(release)

    if v < (0, 5):
        if args.get("enable_ep_moe") or args.get("enable_deepep_moe"):
            what = "DeepEP MoE" if args.get("enable_deepep_moe") else "EP MoE"
            ep = tp
            warnings.append(
                "%s is enabled. The expert parallel size is adjusted to be the same as the "
                "tensor parallel size[%d]." % (what, tp))
    else:
        a2a = args.get("moe_a2a_backend")
        if a2a in EP_SPANNING_A2A:
            ep = tp
            names = {"deepep": "DeepEP", "mooncake": "Mooncake", "deepep_v2": "DeepEP v2",
                     "megamoe": "MegaMoE"}
            warnings.append(
                "%s MoE is enabled. The expert parallel size is adjusted to be the same as "
                "the tensor parallel size[%d]." % (names[a2a], tp))

    if dp_attention and dp == 1 and attn_dp <= 1:
        # dp 1 clears DP attention silently (0.5.9 srt/server_args.py:2110-2112; 0.5.23
        # srt/arg_groups/parallel_hook.py:50-61 turns it into attn_dp_size 1)
        dp_attention = False
    if v >= (0, 5, 23) and dp_attention:
        # 0.5.23: "--dp-size N --enable-dp-attention" means "--attn-dp-size N".
        attn_dp = dp
        dp = 1
    elif dp_attention:
        attn_dp = dp

    layout = {
        "tp_size": tp, "pp_size": pp, "ep_size": ep, "dp_size": dp,
        "attn_dp_size": attn_dp if (dp_attention or attn_dp > 1) else 1,
        "enable_dp_attention": dp_attention or attn_dp > 1,
        "nnodes": nnodes, "node_rank": node_rank,
    }
    # GPUs: attention DP runs inside the TP group; plain DP replicates the model.
    layout["gpus_needed"] = tp * pp * (1 if layout["enable_dp_attention"] else dp)
    layout["name"] = layout_name(layout)
    return layout, warnings


def layout_name(layout):
    name = "tp%d" % layout["tp_size"]
    if layout["pp_size"] > 1:
        name += "-pp%d" % layout["pp_size"]
    if layout["ep_size"] > 1:
        name += "-ep%d" % layout["ep_size"]
    if layout["dp_size"] > 1:
        name += "-dp%d" % layout["dp_size"]
    return name


def validate(layout, gpus_per_node):
    """Raise LayoutError for layouts the real server would die on during init."""
    tp, pp, ep = layout["tp_size"], layout["pp_size"], layout["ep_size"]
    nnodes, node_rank = layout["nnodes"], layout["node_rank"]
    for key in ("tp_size", "pp_size", "ep_size", "dp_size", "nnodes"):
        if layout[key] < 1:
            raise LayoutError(ValueError, "%s must be >= 1, got %d" % (key, layout[key]))
    if not 0 <= node_rank < nnodes:
        raise LayoutError(AssertionError, "node_rank (%d) must be in [0, nnodes=%d)"
                          % (node_rank, nnodes))
    if tp % ep != 0:
        raise LayoutError(AssertionError, "tp_size (%d) must be divisible by ep_size (%d)"
                          % (tp, ep))
    if layout["enable_dp_attention"] and tp % layout["attn_dp_size"] != 0:
        raise LayoutError(
            AssertionError,
            "tp_size (%d) must be divisible by dp_size (%d) when DP attention is enabled"
            % (tp, layout["attn_dp_size"]))
    need = layout["gpus_needed"]
    have = gpus_per_node * nnodes
    if need > have:
        raise LayoutError(
            RuntimeError,
            "CUDA error: invalid device ordinal (sglang emulator: the layout tp_size=%d x "
            "pp_size=%d x dp_size=%d needs %d GPUs, the machine has %d GPU(s) per node x "
            "%d node(s) = %d)" % (tp, pp, layout["dp_size"], need, gpus_per_node, nnodes,
                                  have))
    if nnodes > 1 and need % nnodes != 0:
        raise LayoutError(
            AssertionError,
            "the %d GPUs of tp_size x pp_size x dp_size cannot be split evenly over "
            "nnodes=%d" % (need, nnodes))


def rates_for(layout_name_):
    """(single, ceiling, source) for a layout, env SGLANG_EMULATOR_RATES first."""
    alias = STRATEGY_ALIASES.get(layout_name_)
    raw = os.environ.get("SGLANG_EMULATOR_RATES", "").strip()
    if raw:
        try:
            table = json.loads(raw)
        except ValueError:
            table = {}
        for key in (layout_name_, alias, "default", "*"):
            if key and isinstance(table, dict) and key in table:
                entry = table[key]
                return float(entry["single"]), float(entry["ceiling"]), "env:" + key
    entry = DEFAULT_RATES.get(layout_name_, FALLBACK_RATES)
    src = "default:" + (layout_name_ if layout_name_ in DEFAULT_RATES else "other")
    return entry["single"], entry["ceiling"], src
