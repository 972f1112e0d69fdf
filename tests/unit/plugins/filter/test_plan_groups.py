# -*- coding: utf-8 -*-
"""playbooks/plan.yml's grouping: one table per host group, and the hosts that differ."""

from ansible_collections.gpufleet.sglang.plugins.filter.plan import plan_groups

T8 = ["| tp8 | ... | yes |"]
T4 = ["| tp8 | ... | no |"]


def _host(groups, table, count=8, name="NVIDIA H200"):
    return {"group_names": groups, "sglang_model_path": "/models/k",
            "plan_result": {"table": table, "gpus": {"count": count, "memory_mib": 143771, "name": name}}}


def test_one_table_per_group_and_the_host_that_differs_prints_its_own():
    hostvars = {"a1": _host(["a"], T8), "a2": _host(["a"], T8), "a3": _host(["a"], T4),
                "b1": _host(["b"], T4, count=4, name="")}
    groups = {"all": ["a1", "a2", "a3", "b1"], "a": ["a1", "a2", "a3"], "b": ["b1"]}
    out = plan_groups(["a1", "a2", "a3", "b1"], hostvars, groups)
    assert [g["group"] for g in out["groups"]] == ["a", "b"]
    a, b = out["groups"]
    assert (a["same"], a["other"]) == (["a1", "a2"], ["a3"])
    assert a["lines"] == ["== group a: 8 x 143771 MiB (NVIDIA H200), /models/k "
                          "(hosts: a1, a2; own tables below: a3)"] + T8
    assert b["lines"] == ["== group b: 4 x 143771 MiB (as given), /models/k (hosts: b1)"] + T4
    assert out["own_tables"] == ["a3"]


def test_only_the_play_hosts_count_and_hosts_without_groups_are_all():
    hostvars = {"x": _host([], T8), "y": _host([], T4), "z": _host([], T4)}
    groups = {"all": ["x", "y", "z"]}
    out = plan_groups(["y", "z"], hostvars, groups)  # x is not in the play
    assert [(g["group"], g["same"], g["other"]) for g in out["groups"]] == [("all", ["y", "z"], [])]
    assert out["own_tables"] == []
