# -*- coding: utf-8 -*-
"""One variable across the fleet's hosts (in place of Jinja chains over hostvars)."""

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.sglang.plugins.filter.fleet import hostvar_values, hosts_with

HOSTVARS = {
    "a": {"__model_check": {"verified": True}, "__server_new_failed": True, "__server_new_failure": "a: oom"},
    "b": {"__model_check": {"verified": False}},
    "c": {"__model_check": None},
    "d": {},
}


def test_hosts_with_keeps_the_order_and_reads_dotted_paths():
    hosts = ["d", "c", "b", "a"]
    assert hosts_with(hosts, HOSTVARS, "__model_check.verified", "falsy") == ["b"]
    assert hosts_with(hosts, HOSTVARS, "__model_check.verified", "truthy") == ["a"]
    assert hosts_with(hosts, HOSTVARS, "__model_check") == ["c", "b", "a"]
    assert hosts_with(hosts, HOSTVARS, "__server_new_failed") == ["a"]
    assert hosts_with(["zz"], HOSTVARS, "__server_new_failed") == []


def test_hostvar_values_of_the_hosts_that_define_it():
    assert hostvar_values(["d", "a", "b"], HOSTVARS, "__server_new_failure") == ["a: oom"]
    assert hostvar_values(["a", "b"], HOSTVARS, "__model_check.verified") == [True, False]


def test_an_unknown_test_is_named():
    with pytest.raises(AnsibleFilterError, match="test must be one of defined, truthy, falsy"):
        hosts_with(["a"], HOSTVARS, "x", "maybe")
