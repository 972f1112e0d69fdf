import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
    PRESETS,
    StrategyError,
    check_fits,
    gpus_needed,
    is_pd,
    parse_pd,
    parse_strategy,
    pd_gpus,
    pd_name,
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


# --- prefill/decode (PD) layouts --------------------------------------------------------

@pytest.mark.parametrize("text, prefill, decode, name", [
    ("prefill:ep8+decode:2xep8", (1, "ep8"), (2, "ep8"), "prefill:ep8+decode:2xep8"),
    ("prefill:2xep8+decode:ep8", (2, "ep8"), (1, "ep8"), "prefill:2xep8+decode:ep8"),
    # either order, blanks and case do not count, a count of 1 may be written
    ("Decode: 2 x EP8 + prefill:1xtp8-ep8", (1, "ep8"), (2, "ep8"), "prefill:ep8+decode:2xep8"),
    # any one-server layout, multi-node ones included (tp16 over two hosts of 8 GPUs)
    ("prefill:tp16+decode:4xtp8-dp8", (1, "tp16"), (4, "tp8-dp8"), "prefill:tp16+decode:4xtp8-dp8"),
    ("prefill:tp4+decode:tp4", (1, "tp4"), (1, "tp4"), "prefill:tp4+decode:tp4"),
])
def test_pd_layouts_parse_into_roles(text, prefill, decode, name):
    roles = parse_pd(text)
    assert is_pd(text)
    for role, (count, layout) in (("prefill", prefill), ("decode", decode)):
        assert roles[role]["count"] == count
        assert roles[role]["layout"] == parse_strategy(layout)
        assert roles[role]["name"] == strategy_name(parse_strategy(layout))
        assert roles[role]["gpus"] == gpus_needed(parse_strategy(layout))
    assert pd_name(roles) == name == pd_name(text)
    assert parse_pd(pd_name(roles)) == roles
    assert pd_gpus(roles) == prefill[0] * gpus_needed(parse_strategy(prefill[1])) + \
        decode[0] * gpus_needed(parse_strategy(decode[1]))


@pytest.mark.parametrize("text, expect", [
    ("prefill:ep8", "must name two roles joined by one '+' (got 1 part)"),
    ("prefill:ep8+decode:ep8+decode:ep8", "(got 3 parts)"),
    ("prefill:ep8+prefill:2xep8", "names prefill twice"),
    ("p:ep8+d:ep8", "unknown role 'p'; the roles are prefill and decode"),
    ("prefill=ep8+decode=ep8", "'prefill=ep8' is not <role>:[<N>x]<layout>"),
    ("prefill:ep8+decode:", "the decode role has no layout"),
    ("prefill:ep8+decode:0xep8", "the decode count must be between 1 and 1024 servers, got 0"),
    ("prefill:ep8+decode:02xep8", "got 02"),
    ("prefill:ep8+decode:2000xep8", "got 2000"),
    ("prefill:ep8+decode:2xtp8-ep3", "PD layout 'prefill:ep8+decode:2xtp8-ep3', decode role: strategy "
                                     "'tp8-ep3': ep 3 does not divide tp 8"),
    ("prefill:tp7x+decode:ep8", "prefill role: unknown strategy 'tp7x'"),
    ("prefill:ep8+decode:2x", "the decode role has no layout"),
])
def test_malformed_pd_layouts_name_the_input_the_role_and_the_form(text, expect):
    with pytest.raises(StrategyError) as err:
        parse_pd(text)
    assert expect in str(err.value)
    assert repr(text.lower())[:12] in str(err.value)


def test_pd_layout_needs_a_string():
    with pytest.raises(StrategyError, match="a PD layout must be a string"):
        parse_pd({"prefill": "ep8"})


def test_a_pd_layout_is_no_one_server_strategy():
    # every step that takes one server's layout (the planner, the tune's space, the doctor)
    # says so, instead of "unknown strategy"
    for text in ("prefill:ep8+decode:2xep8", "prefill:ep8"):
        with pytest.raises(StrategyError, match="is a prefill/decode .PD. layout"):
            parse_strategy(text)
    assert not is_pd("tp8-ep8") and not is_pd(None)
    # no comma: a comma-separated list of strategies keeps PD layouts whole
    assert "," not in pd_name("prefill:ep8+decode:2xep8")
