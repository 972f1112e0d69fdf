# -*- coding: utf-8 -*-
"""Every deploy input checked at once; the messages the bad-input table shows."""

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _inputs
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._inputs import MISSING, check_fields

GOOD = {
    "strategy": "pp8", "sglang_gpu_count": 8, "sglang_gpu_memory_mib": 97887,
    "sglang_release": "0.5.9", "sglang_model_path": "/models/k", "server_port": 30000,
    "server_health_timeout": 1800, "server_extra_args": {}, "server_served_model_name": "",
    "server_api_key": "", "server_hf_token": "",
}


def _with(**changes):
    values = dict(GOOD)
    values.update(changes)
    return values


def test_good_inputs_have_no_problem():
    assert check_fields(GOOD) == []


def test_a_bare_inventory_learns_every_required_input_in_one_run():
    problems = check_fields({})
    names = [p.split(" ")[0] for p in problems]
    # the release has a default (the newest tested one), the GPUs come from the host
    assert names == ["strategy", "sglang_model_repo"]
    assert "or sglang_model_path" in problems[1]
    for problem in problems:
        assert "is not set:" in problem and "(e.g. " in problem


@pytest.mark.parametrize("unset", [MISSING, None, "", "  "])
def test_the_gpu_variables_are_optional(unset):
    values = _with(sglang_gpu_count=unset, sglang_gpu_memory_mib=unset)
    assert check_fields(values) == []


@pytest.mark.parametrize("changes, expect", [
    ({"sglang_gpu_memory_mib": "lots"}, 'sglang_gpu_memory_mib must be a positive integer (got "lots")'),
    ({"sglang_gpu_memory_mib": -1}, "sglang_gpu_memory_mib must be a positive integer (got -1)"),
    ({"sglang_gpu_memory_mib": 97887.5}, "sglang_gpu_memory_mib must be a positive integer (got 97887.5)"),
])
def test_a_set_gpu_memory_must_be_a_positive_integer(changes, expect):
    problems = check_fields(_with(sglang_gpu_count=MISSING, **changes))
    assert problems == [expect + ", e.g. 97887"]


@pytest.mark.parametrize("changes, expect", [
    ({"sglang_gpu_count": "eight"}, 'sglang_gpu_count must be a positive integer (got "eight")'),
    ({"sglang_gpu_count": 0}, "sglang_gpu_count must be a positive integer (got 0)"),
    ({"sglang_gpu_count": True}, "sglang_gpu_count must be a positive integer (got true)"),
    ({"sglang_nnodes": -1}, "sglang_nnodes must be a positive integer (got -1)"),
    ({"sglang_rollout_batch": 0}, "sglang_rollout_batch must be a positive number of hosts"),
    ({"sglang_rollout_batch": "101%"}, "(got 101%)"),
    ({"sglang_rollout_batch": [1, "x"]}, 'sglang_rollout_batch'),
    ({"sglang_release": "0.5.9;touch /tmp/pwned"},
     'sglang_release must be a version such as 0.5.9 (got "0.5.9;touch /tmp/pwned")'),
    ({"venv_release": "0.5.9 $(id)"}, 'venv_release must be a version such as 0.5.9 (got "0.5.9 $(id)")'),
    ({"capacity_mem_fraction_static": 1.5}, "capacity_mem_fraction_static (1.5) must be in [0, 1)"),
    ({"capacity_mem_fraction_static": "most"},
     'capacity_mem_fraction_static must be a number (0 plans with SGLang\'s default) (got "most")'),
    ({"server_extra_args": {"--mem-fraction-static": 1.5}},
     "server_extra_args --mem-fraction-static must be a number in (0, 1]"),
    ({"server_extra_args": {"mem_fraction_static": 0}},
     "server_extra_args mem_fraction_static must be a number in (0, 1], the fraction of GPU memory "
     "for weights and KV cache (got 0)"),
    ({"server_extra_args": "--trust-remote-code"}, 'must be a mapping of flag to value, e.g. '
     '{"--trust-remote-code": true} (got string "--trust-remote-code")'),
    ({"server_port": 70000}, "server_port must be 1-65535 (got 70000)"),
    ({"server_port": "http"}, "server_port must be 1-65535 (got http)"),
    ({"server_health_timeout": -5}, "server_health_timeout must be positive (got -5)"),
    ({"server_served_model_name": "k" * 10000}, "(got 10000 characters"),
    ({"server_served_model_name": "kimi\nk2"}, "server_served_model_name must be a string of at most 256"),
    ({"server_api_key": "abc\ndef"}, "server_api_key must not contain newlines"),
    ({"server_hf_token": "hf_\x07bell"}, "server_hf_token must not contain newlines or other control characters"),
])
def test_each_malformed_input_is_named_with_its_value(changes, expect):
    problems = check_fields(_with(**changes))
    assert len(problems) == 1, problems
    assert expect in problems[0]


def test_secrets_are_never_shown():
    problems = check_fields(_with(server_api_key="s3cret\n", server_hf_token="zz9tok\x01"))
    assert len(problems) == 2
    assert not any("s3cret" in p or "zz9tok" in p for p in problems)


def test_several_problems_are_listed_together():
    problems = check_fields(_with(server_port=0, sglang_model_path=MISSING, sglang_gpu_count="x"))
    assert len(problems) == 3
    text = _inputs.report(problems, "gpu-1")
    assert text.startswith("gpu-1: 3 problems with the deploy inputs:\n- ")
    assert "sglang_model_repo is not set" in text and "server_port must be" in text


@pytest.mark.parametrize("strategy, gpus, nnodes, expect", [
    ("tp7x", 8, 1, "unknown strategy 'tp7x'; valid forms"),
    ("tp4", 8, 1, "strategy 'tp4' needs tp*pp = 4*1 = 4 GPUs, but the server has 8"),
    ("tp8-ep3", 8, 1, "ep 3 does not divide tp 8"),
    ("tp16", 8, 1, "needs tp*pp = 16*1 = 16 GPUs, but the server has 8"),
])
def test_strategy_problems(strategy, gpus, nnodes, expect):
    layout, problem = _inputs.layout(_with(strategy=strategy, sglang_gpu_count=gpus), nnodes)
    assert layout is None and expect in problem


def test_strategy_layout_for_two_nodes():
    layout, problem = _inputs.layout(_with(strategy="tp16", sglang_gpu_count="8"), 2)
    assert problem is None
    assert (layout["name"], layout["tp"], layout["nnodes"], layout["gpus"]) == ("tp16", 16, 2, 16)


def test_no_layout_verdict_without_a_usable_gpu_count():
    assert _inputs.layout(_with(sglang_gpu_count="eight"), 1) == (None, None)
    assert _inputs.layout(_with(sglang_gpu_count=0), 1) == (None, None)


@pytest.mark.parametrize("unset", [MISSING, None, ""])
@pytest.mark.parametrize("strategy, nnodes, expect", [
    ("tp4", 1, {"name": "tp4", "tp": 4, "pp": 1, "ep": 1, "dp": 1, "nnodes": 1, "gpus": 4}),
    ("tp8-ep8", 1, {"name": "ep8", "tp": 8, "pp": 1, "ep": 8, "dp": 1, "nnodes": 1, "gpus": 8}),
    ("tp16", 2, {"name": "tp16", "tp": 16, "pp": 1, "ep": 1, "dp": 1, "nnodes": 2, "gpus": 16}),
    ("tp4-dp2", 1, {"name": "tp4-dp2", "tp": 4, "pp": 1, "ep": 1, "dp": 2, "nnodes": 1, "gpus": 4}),
])
def test_without_a_gpu_count_the_fit_is_left_to_the_host(unset, strategy, nnodes, expect):
    # no GPU count on the controller: the layout is the strategy's, not checked against GPUs
    layout, problem = _inputs.layout(_with(strategy=strategy, sglang_gpu_count=unset), nnodes)
    assert problem is None
    assert layout == expect


@pytest.mark.parametrize("strategy, expect", [
    ("tp7x", "unknown strategy 'tp7x'; valid forms"),
    ("tp8-ep3", "strategy 'tp8-ep3': ep 3 does not divide tp 8"),
    ("pp0", "unknown strategy 'pp0'"),
])
def test_without_a_gpu_count_grammar_and_divisibility_are_still_checked(strategy, expect):
    layout, problem = _inputs.layout(_with(strategy=strategy, sglang_gpu_count=MISSING), 1)
    assert layout is None and expect in problem


def test_a_given_count_still_resolves_the_full_layout():
    layout, problem = _inputs.layout(_with(strategy="tp4", sglang_gpu_count=4), 1)
    assert problem is None and layout["gpus"] == 4
    layout, problem = _inputs.layout(_with(strategy="tp4", sglang_gpu_count="8"), 1)
    assert layout is None
    assert problem.startswith("strategy 'tp4' needs tp*pp = 4*1 = 4 GPUs, but the server has 8")


@pytest.mark.parametrize("repo", ["not", "", None])
def test_a_model_repo_without_an_org_is_named_and_stands_in_for_the_path(repo):
    """The model directory follows from sglang_model_repo; a repo id that is no
    <org>/<name> is named here (the filter that derives the path returns nothing for it)."""
    values = _with(sglang_model_path="", sglang_model_repo=repo)
    problems = check_fields(values)
    if repo:
        assert problems == ['sglang_model_repo must be a Hugging Face repo id <org>/<name> '
                            '(got "not"), e.g. moonshotai/Kimi-K2.5']
    else:  # the control: neither given is the missing model input
        assert [p.split(" ")[0] for p in problems] == ["sglang_model_repo"]
        assert "is not set" in problems[0]
    assert check_fields(_with(sglang_model_path="", sglang_model_repo="org/m")) == []


def test_a_wheel_the_controller_cannot_read_is_named_with_the_release(tmp_path):
    there = tmp_path / "sglang-0.5.9-py3-none-any.whl"
    there.write_bytes(b"PK")
    missing = str(tmp_path / "sglang-0.5.99-py3-none-any.whl")

    def readable(path):
        return path == str(there)

    assert _inputs.wheel_problems([str(there)], "0.5.9", readable) == []
    assert _inputs.wheel_problems([str(there), missing], "0.5.99", readable) == [
        "venv_wheels: %s is not a readable file on the controller; is there a wheel of "
        "sglang_release 0.5.99?" % missing]
    assert _inputs.wheel_problems([], "0.5.99", readable) == []
    assert _inputs.wheel_problems("x.whl", "0.5.99", readable) == [
        'venv_wheels must be a list of wheel paths on the controller (got "x.whl")']


def test_router_key_problems_name_the_routers_and_never_a_key():
    routers = [("r1", "rk-Z9x"), ("r2", ""), ("r3", "sk-Q7y")]
    (problem,) = _inputs.router_key_problems("sk-Q7y", routers)
    assert problem.startswith("server_api_key differs from router_api_key of r1: ")
    assert "r2" not in problem and "r3" not in problem
    assert "Z9x" not in problem and "Q7y" not in problem
    assert _inputs.router_key_problems("", routers) == []
    assert _inputs.router_key_problems(None, routers) == []
    assert _inputs.router_key_problems("sk-Q7y", [("r2", ""), ("r3", "sk-Q7y")]) == []


# --- prefill/decode (PD) layouts --------------------------------------------------------

PD = "prefill:ep8+decode:2xep8"


def test_a_pd_layout_with_good_inputs_has_no_problem():
    for release in ("0.5.9", "0.5.23", MISSING):
        assert check_fields(_with(strategy=PD, sglang_release=release)) == []
    assert check_fields(_with(strategy=PD, sglang_release=MISSING, sglang_pd_transfer_backend="mooncake_tcp",
                              sglang_pd_bootstrap_port=9000, sglang_pd_ib_device="mlx5_0,mlx5_1")) == []


def test_pd_layout_is_the_roles_and_the_unknown_form_names_pd():
    layout, problem = _inputs.layout(_with(strategy=" Decode:2xep8+prefill:tp8-ep8 "), 1)
    assert problem is None and layout["name"] == PD and layout["gpus"] == 24
    assert layout["pd"]["decode"]["count"] == 2 and layout["pd"]["prefill"]["layout"]["ep"] == 8
    # the GPU count is the fleet's to judge (which host serves which role), not one server's
    assert _inputs.layout_or_host(_with(strategy=PD, sglang_gpu_count=4), 1)[1:] == (None, None)
    layout, problem = _inputs.layout(_with(strategy="prefill:ep8+decode:2xtp7x"), 1)
    assert layout is None and problem.startswith("PD layout 'prefill:ep8+decode:2xtp7x', decode role: unknown")
    layout, problem = _inputs.layout(_with(strategy="tp7x"), 1)
    assert problem.endswith("; or a prefill/decode layout prefill:[<N>x]<layout>+decode:[<N>x]<layout>, each "
                            "<layout> one server's strategy (e.g. prefill:ep8+decode:2xep8: one prefill server "
                            "on ep8, two decode servers on ep8)")


@pytest.mark.parametrize("changes, expect", [
    # mooncake_tcp before it existed (0.5.9's help has no such choice)
    ({"sglang_release": "0.5.9", "sglang_pd_transfer_backend": "mooncake_tcp"},
     "sglang_pd_transfer_backend is mooncake_tcp, but sglang 0.5.9 has no such transfer backend"),
    ({"sglang_pd_transfer_backend": "fake"}, "sglang_pd_transfer_backend is fake, which the collection does not"),
    ({"sglang_pd_bootstrap_port": 30000}, "sglang_pd_bootstrap_port 30000 is the server's HTTP port"),
    ({"sglang_pd_ib_device": "mlx5_0 mlx5_1"}, "sglang_pd_ib_device must be"),
    ({"server_extra_args": {"--disaggregation-bootstrap-port": 9000}},
     'server_extra_args --disaggregation-bootstrap-port: 9000: the PD layout "prefill:ep8+decode:2xep8" sets '
     "--disaggregation-bootstrap-port on each server by its role; choose the port with sglang_pd_bootstrap_port"),
])
def test_pd_inputs_are_refused_with_the_variable_the_value_and_the_release(changes, expect):
    problems = check_fields(_with(strategy=PD, **changes))
    assert len(problems) == 1 and expect in problems[0]


def test_pd_flags_outside_a_pd_layout_are_refused():
    # today --disaggregation-mode prefill here starts every host as a prefill-only server
    problems = check_fields(_with(server_extra_args={"--disaggregation-mode": "prefill"}))
    assert problems == [
        'server_extra_args --disaggregation-mode: "prefill" is a prefill/decode (PD) flag, and strategy "pp8" is '
        "no PD layout: every server would start as a lone PD server (with --disaggregation-mode prefill: prefill "
        "only, no decode peer, /health 200 and no answer); deploy PD with a PD layout (-e sglang_strategy="
        "prefill:ep8+decode:2xep8), which sets the PD flags per role, or drop the flag"]
    # PD inputs without a PD layout are not looked at (a fleet may set them for the tune's PD candidates)
    assert check_fields(_with(sglang_pd_transfer_backend="fake")) == []


def test_an_unknown_release_leaves_the_pd_flags_to_prepare():
    assert check_fields(_with(strategy=PD, sglang_release="0.5.10", sglang_pd_transfer_backend="mooncake_tcp")) == []
    assert _inputs.release_of(_with(sglang_release=MISSING)) == _inputs.NEWEST_TESTED_RELEASE
