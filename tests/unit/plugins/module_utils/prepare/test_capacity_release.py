# -*- coding: utf-8 -*-
"""The planner's per-release default mem_fraction_static against the real releases.

``tests/fixtures/server-args/server-args.json`` holds what the real sglang 0.5.9 and
0.5.23 derived for the collection's argv on an 8x RTX PRO 6000 host (97,887 MiB, SM 12.0),
for Kimi K2.5 (multimodal: vision adjustment) and DeepSeek-V3 (text-only). The planner,
given the release (as ``playbooks/plan.yml`` does with ``sglang_release``), must plan with
the same number the server takes.
"""

import json
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _capacity as cap
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._capacity_model import load_model
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import parse_strategy
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES as _FIXTURES

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
with open(os.path.join(_FIXTURES, "server-args", "server-args.json")) as _handle:
    FIXTURE = json.load(_handle)

# the cases whose flags the planner knows (strategies; no extra launch flags)
CASES = {"tp8": 1, "pp8": 1, "ep8": 1, "ep4": 1, "tp8-dp8": 1, "tp16-2nodes": 2,
         "tp8-pp2-2nodes": 2}


@pytest.mark.parametrize("release", ["0.5.9", "0.5.23"])
@pytest.mark.parametrize("model", ["kimi-k2.5", "deepseek-v3"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_plan_takes_the_fraction_the_release_derives(release, model, case):
    real = FIXTURE["releases"][release][model][case]
    assert real["verdict"] == "ok", real.get("error")
    spec = load_model(os.path.join(ROOT, FIXTURE["model_dirs"][model]))
    layout = parse_strategy(real["strategy"])
    plan = cap.plan_layout(spec, layout, FIXTURE["gpu"]["count"], FIXTURE["gpu"]["memory_mib"],
                           nnodes=CASES[case], release=release)
    derived = real["derived"]["mem_fraction_static"]
    assert plan["default_mem_fraction_static"] == pytest.approx(derived, abs=1e-9)
    assert plan["mem_fraction_static"] == round(derived, 3)


def test_k25_tp8_numbers_per_release():
    """0.5.9 has no MLA term (0.848), 0.5.23 has one (0.833); both scale by the vision
    factor 0.909736 (27 x 1152 ViT); the old planner (0.5.10, no vision) said 0.833."""
    spec = load_model(os.path.join(ROOT, FIXTURE["model_dirs"]["kimi-k2.5"]))
    assert cap.vlm_fraction_factor(spec.sglang_vit) == pytest.approx(0.909736, abs=1e-6)
    old, _r = cap.default_mem_fraction_static(97887, 8, 1, mla=True)
    v059, r059 = cap.default_mem_fraction_static(97887, 8, 1, mla=True, release="0.5.9", vit=spec.sglang_vit)
    v0523, r0523 = cap.default_mem_fraction_static(97887, 8, 1, mla=True, release="0.5.23", vit=spec.sglang_vit)
    assert (old, r059, r0523) == (0.833, 14848, 16384)
    assert round(v059, 4) == 0.7715 and round(v0523, 4) == 0.7578


@pytest.mark.parametrize("release", ["0.5.3rc0", "0.5.3", "0.5.9.post1", "v0.5.9"])
def test_a_pre_or_post_release_plans_with_its_own_releases_formula(release):
    """0.5.3rc0 is a pre-release of 0.5.3 (older than 0.5.9), not '0.5.30': it gets
    0.5.9's formula. The control: 0.5.9 and 0.5.23 differ for this case, so a planner that
    read 0.5.3rc0 as 0.5.30 would plan 0.5.23's number and fail here."""
    spec = load_model(os.path.join(ROOT, FIXTURE["model_dirs"]["kimi-k2.5"]))

    def plan(rel):
        return cap.plan_layout(spec, parse_strategy("tp8"), FIXTURE["gpu"]["count"],
                               FIXTURE["gpu"]["memory_mib"], nnodes=1, release=rel)

    v059, v0523 = plan("0.5.9"), plan("0.5.23")
    assert v059["default_mem_fraction_static"] != v0523["default_mem_fraction_static"]
    got = plan(release)
    assert got["default_mem_fraction_static"] == v059["default_mem_fraction_static"]
    assert got["mem_fraction_static"] == v059["mem_fraction_static"]


def test_a_release_that_is_no_version_is_refused_naming_it():
    with pytest.raises(cap.CannotPlan, match=r"sglang_release='latest'"):
        cap.default_mem_fraction_static(97887, 8, 1, mla=True, release="latest")
