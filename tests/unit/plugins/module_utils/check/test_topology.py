# -*- coding: utf-8 -*-
"""The multi-node rules: group, ranks, one server, rank 0's rendezvous address."""

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.check._topology import (
    TopologyError,
    dist_init_addr,
    plan,
    ranks,
)

GROUPS = {"kimi": ["a", "b"], "three": ["a", "b", "c"]}
SAME = {"a": {"sglang_release": "0.5.9"}, "b": {"sglang_release": "0.5.9"}}


def test_single_host_is_its_own_server():
    got = plan("a", 1, None, {}, {}, {}, 50000, {})
    assert got == {"members": ["a"], "node_rank": 0, "rank0": "a", "dist_init_addr": "",
                   "serves_http": True}


def test_inventory_order_numbers_the_ranks():
    addresses = {"a": "10.0.0.1", "b": "10.0.0.2"}
    first = plan("a", 2, "kimi", GROUPS, {"a": None, "b": None}, addresses, 50000, SAME)
    second = plan("b", 2, "kimi", GROUPS, {"a": None, "b": None}, addresses, 50000, SAME)
    assert (first["node_rank"], second["node_rank"]) == (0, 1)
    assert first["dist_init_addr"] == second["dist_init_addr"] == "10.0.0.1:50000"
    assert first["serves_http"] and not second["serves_http"]


def test_declared_ranks_win_over_the_order():
    got = ranks(["a", "b"], {"a": 1, "b": "0"})
    assert got == {"a": 1, "b": 0}


@pytest.mark.parametrize("declared, fragment", [
    ({"a": 1, "b": 1}, "no host has rank 0"),
    ({"a": 0, "b": None}, "each once"),
    ({"a": 0, "b": 2}, "0 to 1"),
    ({"a": "zero", "b": 1}, "each once"),
])
def test_bad_ranks_are_refused(declared, fragment):
    with pytest.raises(TopologyError) as err:
        ranks(["a", "b"], declared)
    assert fragment in str(err.value)


@pytest.mark.parametrize("group, host, fragment", [
    ("", "a", "which is no group"),
    ("missing", "a", "which is no group"),
    ("three", "a", "with 3 hosts"),
    ("kimi", "z", "with 2 hosts"),
])
def test_the_group_must_hold_exactly_the_server(group, host, fragment):
    with pytest.raises(TopologyError) as err:
        plan(host, 2, group, GROUPS, {}, {}, 50000, SAME)
    assert "sglang_nnodes=2" in str(err.value) and fragment in str(err.value)


def test_every_rank_runs_the_same_server():
    differ = {"a": {"sglang_release": "0.5.9"}, "b": {"sglang_release": "0.5.23"}}
    with pytest.raises(TopologyError) as err:
        plan("a", 2, "kimi", GROUPS, {}, {}, 50000, differ)
    assert "differ in sglang_release" in str(err.value)


def test_ipv6_rendezvous_is_bracketed():
    assert dist_init_addr("fd00::1", 50000) == "[fd00::1]:50000"
    assert dist_init_addr("node-1", "50001") == "node-1:50001"


from ansible_collections.gpufleet.sglang.plugins.module_utils.check._topology import (  # noqa: E402
    batches,
    check_one_batch,
)


@pytest.mark.parametrize("serial, expect", [
    (1, [["a"], ["b"], ["c"], ["d"]]),
    ("50%", [["a", "b"], ["c", "d"]]),
    ("30%", [["a"], ["b"], ["c"], ["d"]]),
    ([1, 2], [["a"], ["b", "c"], ["d"]]),
    ("100%", [["a", "b", "c", "d"]]),
])
def test_batches_follow_ansible_cores_serial(serial, expect):
    assert batches(["a", "b", "c", "d"], serial) == expect


def test_a_server_split_across_batches_is_refused():
    check_one_batch(["a", "b"], ["a", "b", "c", "d"], "50%")
    check_one_batch(["c", "d"], ["a", "b", "c", "d"], [2])
    with pytest.raises(TopologyError) as err:
        check_one_batch(["b", "c"], ["a", "b", "c", "d"], "50%")
    assert "b in batch 1, c in batch 2" in str(err.value)
    with pytest.raises(TopologyError):
        check_one_batch(["a", "b"], ["a", "b", "c", "d"], 1)
