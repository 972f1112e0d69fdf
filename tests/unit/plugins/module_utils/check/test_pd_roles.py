# -*- coding: utf-8 -*-
"""Which hosts serve which role of a PD layout: deterministic, stable across re-runs, the
fewest hosts moved when the ratio changes, pins, multi-node roles, shared hosts, and the
refusals (not enough hosts or GPUs, two roles on the same GPUs, a host left without a
server)."""

from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd_roles as roles_
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import parse_pd

HOSTS = ["gpu-1", "gpu-2", "gpu-3"]


def plan_of(layout, hosts=None, gpus=8, multinode=None, host_roles=None, groups=None, previous=None,
            facts=None):
    return roles_.fleet_plan(parse_pd(layout), hosts or HOSTS, multinode, gpus, host_roles, groups, previous, facts)


def role_map(plan):
    """host -> the roles it serves, in GPU order."""
    return dict((h, [p["role"] for p in items]) for h, items in plan["hosts"].items())


def records_of(plan):
    """What the rollout would record on each host (the record's ``pd`` key)."""
    return dict((h, {"pd": items}) for h, items in plan["hosts"].items())


def test_one_prefill_two_decode_in_inventory_order():
    plan, problems = plan_of("prefill:ep8+decode:2xep8")
    assert problems == []
    assert role_map(plan) == {"gpu-1": ["prefill"], "gpu-2": ["decode"], "gpu-3": ["decode"]}
    assert [(s["name"], s["hosts"], s["base_gpu_id"], s["gpus"]) for s in plan["servers"]] == [
        ("prefill-0", ["gpu-1"], 0, 8), ("decode-0", ["gpu-2"], 0, 8), ("decode-1", ["gpu-3"], 0, 8)]
    assert plan["layout"] == "prefill:ep8+decode:2xep8" and plan["moved"] == {}


def test_a_re_run_keeps_every_role_even_when_the_inventory_order_changes():
    first = plan_of("prefill:ep8+decode:2xep8")[0]
    previous = roles_.previous_from_records(records_of(first))
    again, problems = plan_of("prefill:ep8+decode:2xep8", previous=previous)
    assert problems == [] and again == first
    # the inventory lists the hosts the other way round: without the record, gpu-3 would
    # become the prefill host; with it, nobody moves
    reordered, problems = plan_of("prefill:ep8+decode:2xep8", hosts=list(reversed(HOSTS)), previous=previous)
    assert problems == [] and role_map(reordered) == role_map(first) and reordered["moved"] == {}
    fresh = plan_of("prefill:ep8+decode:2xep8", hosts=list(reversed(HOSTS)))[0]
    assert role_map(fresh)["gpu-3"] == ["prefill"]  # the control


def test_a_ratio_change_moves_as_few_hosts_as_possible():
    one_p_two_d = plan_of("prefill:ep8+decode:2xep8")[0]
    previous = roles_.previous_from_records(records_of(one_p_two_d))
    two_p_one_d, problems = plan_of("prefill:2xep8+decode:ep8", previous=previous)
    assert problems == []
    # gpu-1 stays prefill and gpu-2 decode; one decode host becomes a prefill host
    assert role_map(two_p_one_d) == {"gpu-1": ["prefill"], "gpu-2": ["decode"], "gpu-3": ["prefill"]}
    assert two_p_one_d["moved"] == {"gpu-3": {"from": ["decode"], "to": ["prefill"]}}
    # and back: one host moves again, the same one
    back, problems = plan_of("prefill:ep8+decode:2xep8",
                             previous=roles_.previous_from_records(records_of(two_p_one_d)))
    assert problems == [] and role_map(back) == role_map(one_p_two_d)
    assert back["moved"] == {"gpu-3": {"from": ["prefill"], "to": ["decode"]}}


def test_a_ratio_change_where_inventory_order_alone_would_move_three_hosts():
    hosts = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    # deployed when the inventory listed the hosts the other way round: prefill on gpu-4, gpu-3
    two_two = plan_of("prefill:2xep8+decode:2xep8", hosts=list(reversed(hosts)))[0]
    assert role_map(two_two) == {"gpu-4": ["prefill"], "gpu-3": ["prefill"], "gpu-2": ["decode"],
                                 "gpu-1": ["decode"]}
    three_one, problems = plan_of("prefill:3xep8+decode:ep8", hosts=hosts,
                                  previous=roles_.previous_from_records(records_of(two_two)))
    assert problems == [] and sorted(three_one["moved"]) == ["gpu-2"]
    assert role_map(three_one) == {"gpu-1": ["decode"], "gpu-2": ["prefill"], "gpu-3": ["prefill"],
                                   "gpu-4": ["prefill"]}
    # the control: by inventory order alone, three hosts would change roles (and restart)
    fresh = plan_of("prefill:3xep8+decode:ep8", hosts=hosts)[0]
    assert [h for h in hosts if role_map(fresh)[h] != role_map(two_two)[h]] == ["gpu-1", "gpu-2", "gpu-4"]


def test_a_co_located_record_is_no_previous_role():
    records = {"gpu-1": {"strategy": "ep8"}, "gpu-2": {"pd": "decode"}, "gpu-3": None,
               "gpu-4": {"pd": [{"role": "prefill", "base_gpu_id": 4, "gpus": 4}, {"role": "nonsense"}]}}
    assert roles_.previous_from_records(records) == {
        "gpu-2": [{"role": "decode", "base_gpu_id": None, "gpus": None}],
        "gpu-4": [{"role": "prefill", "base_gpu_id": 4, "gpus": 4}]}
    # gpu-2 decoded before: it keeps decoding, the first free host takes prefill
    plan, problems = plan_of("prefill:ep8+decode:2xep8", previous=roles_.previous_from_records(records))
    assert problems == [] and role_map(plan)["gpu-2"] == ["decode"] and role_map(plan)["gpu-1"] == ["prefill"]


def test_pins_by_host_variable_and_by_group_come_first():
    plan, problems = plan_of("prefill:ep8+decode:2xep8", host_roles={"gpu-3": "prefill"})
    assert problems == [] and role_map(plan) == {"gpu-1": ["decode"], "gpu-2": ["decode"], "gpu-3": ["prefill"]}
    plan, problems = plan_of("prefill:ep8+decode:2xep8", groups={"sglang_decode": ["gpu-1", "gpu-3"]})
    assert problems == [] and role_map(plan) == {"gpu-1": ["decode"], "gpu-2": ["prefill"], "gpu-3": ["decode"]}
    # a pin wins over the record
    previous = {"gpu-1": [{"role": "prefill"}], "gpu-2": [{"role": "decode"}], "gpu-3": [{"role": "decode"}]}
    plan, problems = plan_of("prefill:ep8+decode:2xep8", host_roles={"gpu-1": "decode"}, previous=previous)
    assert problems == [] and role_map(plan)["gpu-1"] == ["decode"]
    assert plan["moved"]["gpu-1"] == {"from": ["prefill"], "to": ["decode"]}


def test_a_malformed_pin_is_named_with_the_host():
    pinned, problems = roles_.pins(HOSTS, {"gpu-1": "prefil", "gpu-2": ["decode", 3]})
    assert problems == ['sglang_pd_role of gpu-1 must be prefill or decode (or a list of both), got "prefil"',
                        'sglang_pd_role of gpu-2 must be prefill or decode (or a list of both), got ["decode", 3]']
    assert pinned == {}


def test_more_pinned_hosts_than_servers_is_refused():
    plan, problems = plan_of("prefill:ep8+decode:2xep8", groups={"sglang_prefill": ["gpu-2", "gpu-3"]})
    assert problems[0] == ("gpu-3 is pinned to prefill by group sglang_prefill, but prefill:ep8+decode:2xep8 "
                           "has 1 prefill server, already placed on gpu-2 (pinned too): pin fewer hosts or "
                           "raise the prefill count")
    assert "1 decode server finds no place" in problems[1] and "pinned: gpu-2 to prefill, gpu-3 to prefill" \
        in problems[1]
    assert len(problems) == 2


def test_two_roles_on_the_same_gpus_are_refused():
    plan, problems = plan_of("prefill:ep8+decode:ep8", hosts=["gpu-1", "gpu-2"],
                             host_roles={"gpu-1": ["prefill", "decode"]})
    assert problems[0] == ("gpu-1 is pinned to both roles (sglang_pd_role), but its prefill server on GPUs 0-7 "
                           "leaves no GPUs for a decode server (ep8, 1 host each): two roles cannot run on "
                           "the same GPUs; pin it to one role")
    # the control: two tp4 servers share a host of 8 GPUs on separate GPUs
    plan, problems = plan_of("prefill:tp4+decode:tp4", hosts=["gpu-1"], host_roles={"gpu-1": ["prefill", "decode"]})
    assert problems == []
    assert [(p["role"], p["base_gpu_id"], p["gpus"], p["slot"]) for p in plan["hosts"]["gpu-1"]] == [
        ("prefill", 0, 4, 0), ("decode", 4, 4, 1)]


def test_gpu_overlaps_in_any_placement():
    overlap = {"gpu-1": [{"server": "prefill-0", "role": "prefill", "base_gpu_id": 0, "gpus": 8},
                         {"server": "decode-0", "role": "decode", "base_gpu_id": 4, "gpus": 4}],
               "gpu-2": [{"server": "decode-1", "role": "decode", "base_gpu_id": 0, "gpus": 4},
                         {"server": "decode-2", "role": "decode", "base_gpu_id": 4, "gpus": 4}],
               "gpu-3": [{"server": "prefill-1", "role": "prefill", "base_gpu_id": None, "gpus": None},
                         {"server": "prefill-2", "role": "prefill", "base_gpu_id": 2, "gpus": 2}]}
    assert roles_.gpu_overlaps(overlap) == [
        "gpu-1: prefill prefill-0 (GPUs 0-7) and decode decode-0 (GPUs 4-7) would share GPUs: two roles cannot "
        "run on the same GPUs",
        "gpu-3: prefill prefill-1 (all GPUs) and prefill prefill-2 (GPUs 2-3) would share GPUs: two servers "
        "cannot run on the same GPUs"]


def test_not_enough_hosts_is_refused_naming_the_servers_and_the_hosts():
    plan, problems = plan_of("prefill:ep8+decode:3xep8")
    assert problems == [
        "prefill:ep8+decode:3xep8 needs 1 prefill server (ep8, 1 host each) and 3 decode servers (ep8, 1 host "
        "each); on the deploy's 3 server hosts (gpu-1, gpu-2, gpu-3), 1 decode server finds no place: add "
        "hosts to the server group or lower the count"]


def test_a_host_left_without_a_server_is_refused():
    plan, problems = plan_of("prefill:ep8+decode:ep8")
    assert problems == [
        "prefill:ep8+decode:ep8 would leave gpu-3 without a server (2 servers placed on the other hosts): it "
        "would keep serving what it served before, outside the PD layout; give a role more servers or leave it "
        "out of the deploy (-e target=...)"]


def test_a_layout_the_hosts_gpus_do_not_divide_is_refused():
    plan, problems = plan_of("prefill:tp6+decode:2xep8")
    assert plan is None and problems == [
        "the prefill servers of prefill:tp6+decode:2xep8 (tp6) need 6 GPUs each: hosts of 8 GPUs "
        "(sglang_gpu_count) hold them neither whole (a multiple of 8) nor in equal parts (a divisor of 8)"]


def test_hosts_are_split_by_gpus_when_the_gpu_count_allows():
    plan, problems = plan_of("prefill:2xtp4+decode:2xtp4", hosts=["gpu-1", "gpu-2"])
    assert problems == []
    assert [(s["name"], s["hosts"], s["base_gpu_id"]) for s in plan["servers"]] == [
        ("prefill-0", ["gpu-1"], 0), ("prefill-1", ["gpu-1"], 4), ("decode-0", ["gpu-2"], 0),
        ("decode-1", ["gpu-2"], 4)]
    # a shared host's servers keep their GPUs across re-runs
    previous = {"gpu-1": [{"role": "decode", "base_gpu_id": 4, "gpus": 4}]}
    plan, problems = plan_of("prefill:tp4+decode:tp4", hosts=["gpu-1"], previous=previous)
    assert problems == [] and [(p["role"], p["base_gpu_id"]) for p in plan["hosts"]["gpu-1"]] == [
        ("prefill", 0), ("decode", 4)]
    # a release without --base-gpu-id cannot share a host
    plan, problems = plan_of("prefill:tp4+decode:tp4", hosts=["gpu-1"], facts={"flags": ["mode"]})
    assert problems == ["gpu-1 would hold several servers on separate GPUs, but the release has no --base-gpu-id"]


def test_without_a_gpu_count_no_host_is_shared():
    plan, problems = plan_of("prefill:tp4+decode:tp4", hosts=["gpu-1"], gpus=None)
    assert problems[0].startswith("prefill:tp4+decode:tp4 needs 1 prefill server (tp4, 1 host each) and 1 decode")
    plan, problems = plan_of("prefill:tp4+decode:tp4", hosts=["gpu-1", "gpu-2"], gpus=None)
    assert problems == [] and plan["gpus_per_node_inferred"]
    # the host checks its real GPUs: the plan claims no GPU range
    assert plan["servers"][0]["base_gpu_id"] is None and plan["servers"][0]["gpus"] is None


def test_a_multi_node_role_takes_a_declared_group():
    hosts = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    for gpus in (8, None):
        plan, problems = plan_of("prefill:tp16+decode:2xep8", hosts=hosts, gpus=gpus,
                                 multinode={"prefill_pair": ["gpu-3", "gpu-4"]})
        assert problems == []
        assert [(s["name"], s["hosts"], s["nnodes"]) for s in plan["servers"]] == [
            ("prefill-0", ["gpu-3", "gpu-4"], 2), ("decode-0", ["gpu-1"], 1), ("decode-1", ["gpu-2"], 1)]
        assert [p["node_rank"] for p in plan["hosts"]["gpu-3"] + plan["hosts"]["gpu-4"]] == [0, 1]
    # without the group: no unit of two hosts
    plan, problems = plan_of("prefill:tp16+decode:2xep8", hosts=hosts)
    assert "1 prefill server finds no place" in problems[0] and "(tp16, 2 hosts each)" in problems[0]
    plan, problems = plan_of("prefill:tp16+decode:2xep8", hosts=hosts, gpus=None)
    assert problems == [
        "without sglang_gpu_count the controller cannot tell how many hosts a server of each role of "
        "prefill:tp16+decode:2xep8 spans: prefill tp16 (16 GPUs) and decode ep8 (8 GPUs) fit no unit size of "
        "this deploy (1 host); set sglang_gpu_count (a host may then hold several servers on its GPUs), or "
        "declare the multi-node groups (sglang_server_group)"]


def test_the_hosts_of_a_multi_node_server_agree_on_their_pin():
    hosts = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    plan, problems = plan_of("prefill:tp16+decode:2xep8", hosts=hosts, multinode={"pair": ["gpu-3", "gpu-4"]},
                             host_roles={"gpu-3": "prefill", "gpu-4": "decode"})
    assert problems[0].startswith("the hosts of multi-node server pair pin different roles (decode: gpu-4: "
                                  "sglang_pd_role; prefill: gpu-3: sglang_pd_role)")


def test_units_of_the_inventory():
    units, problems = roles_.units(["a", "b", "c"], {"pair": ["b", "c"]})
    assert problems == [] and units == [{"name": "a", "hosts": ["a"]}, {"name": "pair", "hosts": ["b", "c"]}]
    units, problems = roles_.units(["a", "b"], {"pair": ["b", "z"], "other": ["a", "b"]})
    assert problems == [
        "multi-node group pair has z, which is no server host of this deploy: the hosts of one server "
        "deploy together",
        "b is in two multi-node groups (other and pair); a host serves in one server"]
    assert units == [{"name": "other", "hosts": ["a", "b"]}]


def test_a_host_pinned_to_a_role_whose_server_spans_more_hosts_is_refused():
    hosts = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
    plan, problems = plan_of("prefill:tp16+decode:2xep8", hosts=hosts, multinode={"pair": ["gpu-3", "gpu-4"]},
                             host_roles={"gpu-1": "prefill"})
    assert problems[0] == ("gpu-1 is pinned to prefill (sglang_pd_role), but a prefill server (tp16) takes 2 hosts "
                           "each, and gpu-1 has 1 host")
    assert plan["hosts"]["gpu-3"][0]["role"] == "prefill"
