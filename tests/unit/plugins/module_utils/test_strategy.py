import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
    PRESETS,
    StrategyError,
    check_fits,
    gpus_needed,
    parse_strategy,
    resolve,
    strategy_name,
)


@pytest.mark.parametrize(
    "name, layout",
    [
        ("tp8", {"tp": 8, "pp": 1, "ep": 1, "dp": 1}),
        ("pp8", {"tp": 1, "pp": 8, "ep": 1, "dp": 1}),
        ("ep8", {"tp": 8, "pp": 1, "ep": 8, "dp": 1}),
        ("ep4", {"tp": 8, "pp": 1, "ep": 4, "dp": 1}),
        ("tp16", {"tp": 16, "pp": 1, "ep": 1, "dp": 1}),
        ("tp8-pp2", {"tp": 8, "pp": 2, "ep": 1, "dp": 1}),
        ("tp8-ep8", {"tp": 8, "pp": 1, "ep": 8, "dp": 1}),
        ("tp8-pp2-ep4-dp2", {"tp": 8, "pp": 2, "ep": 4, "dp": 2}),
        ("tp8-dp8", {"tp": 8, "pp": 1, "ep": 1, "dp": 8}),
        ("pp4-ep1", {"tp": 1, "pp": 4, "ep": 1, "dp": 1}),
        (" TP8 ", {"tp": 8, "pp": 1, "ep": 1, "dp": 1}),
    ],
)
def test_parse(name, layout):
    assert parse_strategy(name) == layout


@pytest.mark.parametrize(
    "name",
    ["", "tp", "tp0", "tp08", "tp8-", "ep8-tp8", "tp8-pp2-pp2", "tp-8", "tp8 pp2", "tp8-xp2",
     "tp8-ep", "tp1.5", "tp8-dp2-ep2", "\u0442p8", "tp99999"],
)
def test_unknown_forms_name_the_input_and_the_valid_forms(name):
    with pytest.raises(StrategyError) as err:
        parse_strategy(name)
    assert "valid forms" in str(err.value) or "between 1 and" in str(err.value)
    if name.strip():
        assert repr(name.encode("ascii", "backslashreplace").decode("ascii"))[1:-1][:10] in str(err.value)


def test_non_string():
    with pytest.raises(StrategyError, match="must be a string"):
        parse_strategy(8)


@pytest.mark.parametrize("name, msg", [("tp8-ep3", "ep 3 does not divide tp 8"),
                                       ("tp6-ep4", "ep 4 does not divide tp 6"),
                                       ("pp8-ep8", "ep 8 does not divide tp 1")])
def test_divisibility(name, msg):
    with pytest.raises(StrategyError, match=msg):
        parse_strategy(name)


def test_dp_is_dp_attention_and_must_divide_tp():
    # a strategy's dp is DP attention: it splits the TP group, so it must divide tp
    with pytest.raises(StrategyError, match="strategy 'tp8-dp3': dp 3 does not divide tp 8"):
        parse_strategy("tp8-dp3")
    layout = parse_strategy("tp8-dp8")
    assert layout == {"tp": 8, "pp": 1, "ep": 1, "dp": 8}
    assert gpus_needed(layout) == 8
    check_fits(layout, 8)
    # plain --dp-size replicas (the planner's dp_attention=False) would need 64
    assert gpus_needed(layout, dp_attention=False) == 64
    with pytest.raises(StrategyError,
                       match=r"needs tp\*pp\*dp = 8\*1\*8 = 64 GPUs, but the server has 8 "
                             r"\(1 node\(s\) x 8 GPUs\); tp\*pp\*dp must equal the GPU count"):
        check_fits(layout, 8, dp_attention=False)


def test_tp4_dp2_needs_four_gpus():
    """tp4-dp2 renders DP attention: dp splits the tp4 group, 4 GPUs."""
    layout = parse_strategy("tp4-dp2")
    assert gpus_needed(layout) == 4
    check_fits(layout, 4)
    with pytest.raises(StrategyError, match=r"needs tp\*pp = 4\*1 = 4 GPUs, but the server has 8"):
        check_fits(layout, 8)
    assert resolve("tp4-dp2", 4)["gpus"] == 4
    with pytest.raises(StrategyError):
        resolve("tp4-dp2", 8)


@pytest.mark.parametrize("name, gpus", [("tp8", 8), ("pp8", 8), ("ep4", 8), ("tp8-pp2", 16),
                                        ("tp2-pp2-dp2", 4), ("tp8-dp8", 8), ("tp8-pp2-ep4-dp2", 16)])
def test_gpus_needed(name, gpus):
    assert gpus_needed(parse_strategy(name)) == gpus
    assert resolve(name, gpus)["gpus"] == gpus


def test_layout_dicts_are_checked():
    assert parse_strategy({"tp": 4, "ep": "2"}) == {"tp": 4, "pp": 1, "ep": 2, "dp": 1}
    for bad in ({"tp": 0}, {"tp": -8}, {"tp": "eight"}, {"tp": 8.5}, {"tp": True}, {"xp": 2}):
        with pytest.raises(StrategyError):
            parse_strategy(bad)


def test_gpu_count_must_match():
    check_fits(parse_strategy("pp8"), 8)
    check_fits(parse_strategy("tp16"), 8, nnodes=2)
    with pytest.raises(StrategyError, match=r"needs tp\*pp = 8\*1 = 8 GPUs, but the server has 4"):
        check_fits(parse_strategy("tp8"), 4)
    with pytest.raises(StrategyError, match="GPUs, but the server has 8"):
        check_fits(parse_strategy("tp4"), 8)
    with pytest.raises(StrategyError, match="GPU count must be a positive integer"):
        check_fits(parse_strategy("tp8"), 0)


def test_resolve_and_names():
    plan = resolve("tp8-ep8", 8)
    assert plan["name"] == "ep8" and plan["gpus"] == 8 and plan["nnodes"] == 1
    assert resolve("tp8-pp2", 8, 2)["name"] == "tp8-pp2"
    for name, layout in PRESETS.items():
        assert strategy_name(layout) == name
        assert parse_strategy(strategy_name(layout)) == layout
