# -*- coding: utf-8 -*-
"""Issue 47: the planner's messages print numbers for a person (a fraction to 3 decimals, GiB
to 1, tokens as integers), the recommended mem_fraction_static rounded DOWN so that it still
fits; the plan's data keeps its full precision.

The controls are the old formatting (the message as it was built before, from the same
plan), which every check of the printed form refuses."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

import pytest

from ansible_collections.gpufleet.sglang.plugins.filter.plan import FilterModule
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _capacity as cap
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _preflight
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES

RTX_PRO_6000_MIB = 97887


@pytest.fixture(scope="module")
def k25():
    return cap.load_model(os.path.join(FIXTURES, "models", "moonshotai__Kimi-K2.5"))


def old_unfit_message(plan_, host):
    """The refusal as _preflight.unfit_message built it before issue 47 (the control)."""
    need = (" (need %d)" % plan_["context_length"]) if plan_.get("context_length") else ""
    return (
        "%s: strategy %s does not fit %s x %s MiB: weights %s-%s GiB per GPU, budget %s GiB at "
        "mem_fraction_static %s (%s), KV margin %s GiB, %s KV tokens%s; recommended "
        "mem_fraction_static: %s. Set capacity_allow_unfit=true to deploy anyway."
        % (host, plan_["name"], plan_["gpus"], plan_["gpu_memory_mib"],
           plan_["weights_per_gpu_min_gib"], plan_["weights_per_gpu_max_gib"], plan_["budget_gib"],
           plan_["mem_fraction_static"], plan_.get("fraction_from", "planned"), plan_["margin_gib"],
           plan_["kv_tokens"], need, plan_.get("recommended_mem_fraction_static") or "none fits"))


def printed(message, label):
    """The number printed after ``label`` in ``message`` (as text)."""
    found = re.search(re.escape(label) + r" (-?[0-9.]+)", message)
    assert found, (label, message)
    return found.group(1).rstrip(".")


def decimals(text):
    return len(text.split(".", 1)[1]) if "." in text else 0


def person_readable(message):
    """Every number of the refusal as the issue asks: GiB 1 decimal, fractions 3 (4 only for a
    recommendation that 3 would not fit), tokens whole."""
    gib = [printed(message, "KV margin"), printed(message, "budget")]
    gib += list(re.search(r"weights (-?[0-9.]+)-(-?[0-9.]+) GiB", message).groups())
    return (all(decimals(x) <= 1 for x in gib)
            and decimals(printed(message, "at mem_fraction_static")) <= 3
            and decimals(printed(message, "recommended mem_fraction_static:")) <= 4
            and decimals(printed(message, "GiB,")) == 0)


@pytest.fixture
def unfit(k25):
    """K2.5 tp8 on RTX PRO 6000 at mem_fraction_static 0.7 with 0.5.23's default formula:
    the recommendation is SGLang's own (vision-adjusted, unrounded) default."""
    plan_ = cap.plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB, mem_fraction_static=0.7,
                            release="0.5.23")
    plan_["fraction_from"] = "capacity_mem_fraction_static"
    assert not plan_["fits"]
    return plan_


def test_the_refusal_rounds_for_a_person_and_the_plan_keeps_full_precision(unfit):
    message = cap.unfit_message(unfit, "gpu-1")
    assert person_readable(message), message
    # the data keeps its precision: SGLang's vision-adjusted default has more than 4 decimals
    recommended = unfit["recommended_mem_fraction_static"]
    assert recommended == unfit["default_mem_fraction_static"] and decimals(repr(recommended)) > 4
    assert repr(recommended) not in message
    # the control: the message as it was printed the full float and 2-decimal GiB
    old = old_unfit_message(unfit, "gpu-1")
    assert "recommended mem_fraction_static: %r." % recommended in old
    assert not person_readable(old)


def test_the_recommendation_is_rounded_down_and_still_fits(unfit):
    """0.5.23's default for K2.5 on this GPU is 0.75781...; the weights and 8192 KV tokens need
    0.75700...: 3 decimals rounded down (0.757) would no longer fit, so 4 are printed, still
    rounded down (0.7578, not 0.758), and the message says it was rounded."""
    message = cap.unfit_message(unfit, "gpu-1")
    shown = float(printed(message, "recommended mem_fraction_static:"))
    recommended, needed = unfit["recommended_mem_fraction_static"], unfit["needed_mem_fraction_static"]
    assert needed <= shown <= recommended
    assert "recommended mem_fraction_static: 0.7578 (rounded down, so that it still fits)." in message
    # the controls: rounding to the nearest 3 decimals goes up, rounding down to 3 does not fit
    assert round(recommended, 3) > recommended
    assert int(recommended * 1000) / 1000.0 < needed


@pytest.mark.parametrize("recommended,needed,text", [
    (0.7714564062499999, 0.757, "0.771 (rounded down, so that it still fits)"),
    (0.757810361328125, 0.7570071526267014, "0.7578 (rounded down, so that it still fits)"),
    (0.778, 0.7771, "0.778"),           # the planner's own 3 decimals: nothing rounded
    (0.81, 0.5, "0.81"),
    (0.9, None, "0.9"),
    (0.7714564062499999, None, "0.771 (rounded down)"),  # a plan without needed_mem_fraction_static
    (None, 1.7, "none fits"),
])
def test_recommended_text(recommended, needed, text):
    assert cap.recommended_text({"recommended_mem_fraction_static": recommended,
                                 "needed_mem_fraction_static": needed}) == text


@pytest.mark.parametrize("value,text", [
    (71.83, "71.8"), (-24.03, "-24.0"), (0.61, "0.6"), (-0.04, "-0.04"), (0.0, "0.0"), (554.27, "554.3"),
])
def test_gib_text(value, text):
    assert cap.gib_text(value) == text


def test_fraction_and_tokens_text():
    assert [cap.fraction_text(v) for v in (0.05, 0.7, 0.758, 0.757810361328125, 0.9)] == [
        "0.05", "0.7", "0.758", "0.758", "0.9"]
    assert cap.tokens_text(9365.0) == "9365"


def test_the_allowed_misfit_warning_rounds_the_margin(unfit):
    warning = cap.misfit_warning(unfit, "gpu-1")
    assert warning == ("gpu-1: strategy tp8 does not fit (KV margin -4.9 GiB); going on because "
                       "capacity_allow_unfit is set")
    assert _preflight.judge_plan(unfit, "gpu-1", True) == [warning]
    # the control: the data's margin has 2 decimals
    assert unfit["margin_gib"] != round(unfit["margin_gib"], 1)


def tokens_of(plan_):
    return "%d" % plan_["kv_tokens"]


def test_the_table_and_the_notes_round_gib(k25):
    plan_ = cap.plan_layout(k25, {"tp": 8}, 8, RTX_PRO_6000_MIB, release="0.5.23", context_length=262144)
    row = cap.format_table(k25, [plan_])[-1].split()
    # strategy, layout (4 words), mfs, weights, KV B/tok, KV tokens, margin, fits, PP-split
    assert row[0] == "tp8" and row[8] == tokens_of(plan_) and row[9] == cap.gib_text(plan_["margin_gib"])
    assert decimals(row[9]) == 1 and row[9] != "%.2f" % plan_["margin_gib"]  # the old %8.2f
    assert plan_["notes"] == ["vision tower (%.1f GiB) counted unsplit on every stage-0 GPU"
                              % (k25.vision_bytes / cap.GIB)]
    assert "%.2f GiB" % (k25.vision_bytes / cap.GIB) not in plan_["notes"][0]  # the old note
    message = cap.unfit_message(plan_, "gpu-1")
    assert "%d KV tokens (need 262144)" % plan_["kv_tokens"] in message and person_readable(message)


def test_the_capacity_role_and_the_deploy_refuse_in_the_same_words(unfit):
    """The capacity role prints the plan_unfit filter's message; the deploy's preflight (and
    the model step) raise judge_plan's: one wording."""
    words = FilterModule().filters()["plan_unfit"](unfit, "gpu-1")
    with pytest.raises(_preflight.PreflightError) as refused:
        _preflight.judge_plan(unfit, "gpu-1", False)
    assert words["message"] == str(refused.value)
    assert words["warning"] == cap.misfit_warning(unfit, "gpu-1")
    assert "at mem_fraction_static 0.7 (capacity_mem_fraction_static)," in words["message"]
    # capacity_plan's own plans have no fraction_from: no empty parentheses
    del unfit["fraction_from"]
    assert "at mem_fraction_static 0.7, KV margin" in cap.unfit_message(unfit, "gpu-1")
