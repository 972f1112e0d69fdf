import shlex

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.sglang.plugins.filter.strategy import (
    FilterModule,
    strategy_plan,
    systemd_arg,
)


def test_registered():
    assert set(FilterModule().filters()) == {"strategy_plan", "systemd_arg"}


def test_strategy_plan():
    assert strategy_plan("pp8", "8")["pp"] == 8
    with pytest.raises(AnsibleFilterError, match="valid forms"):
        strategy_plan("tp9000x", 8)
    with pytest.raises(AnsibleFilterError, match="must equal the GPU count"):
        strategy_plan("tp8", 4)
    with pytest.raises(AnsibleFilterError, match="gpus_per_node must be an integer"):
        strategy_plan("tp8", "eight")


@pytest.mark.parametrize("value, rendered", [
    ("/models/kimi-k2.5", "/models/kimi-k2.5"),
    (30000, "30000"),
    ("Kimi K2.5", '"Kimi K2.5"'),
    ("50%", "50%%"),
    ("$HOME", "$$HOME"),
    ('{"a": "b"}', '"{\\"a\\": \\"b\\"}"'),
    ("a\\b", '"a\\\\b"'),
])
def test_systemd_arg(value, rendered):
    assert systemd_arg(value) == rendered


def test_systemd_arg_round_trips_through_a_shell_like_split():
    # systemd's quoting is close to POSIX double quotes for these characters
    for value in ["Kimi K2.5", 'say "hi"', "tab\there"]:
        quoted = systemd_arg(value).replace("\\t", "\t")
        assert shlex.split(quoted) == [value]


def test_nul_refused():
    with pytest.raises(AnsibleFilterError):
        systemd_arg("a\x00b")
