import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._health import (
    info_paths,
    parse_unit_show,
    readiness_path,
    unit_failure,
)


@pytest.mark.parametrize("release, path", [
    ("0.4.6.post5", "/health_generate"),
    ("0.5.4.post3", "/health"),
    ("0.5.9", "/health"),
    ("0.5.23", "/ready"),
    ("0.6.0", "/ready"),
])
def test_readiness_path_per_release(release, path):
    assert readiness_path(release) == path


@pytest.mark.parametrize("release", ["latest", "nightly", "", None])
def test_unreadable_release_refused(release):
    with pytest.raises(ValueError, match="cannot read an SGLang version from"):
        readiness_path(release)
    with pytest.raises(ValueError, match="cannot read an SGLang version from"):
        info_paths(release)


@pytest.mark.parametrize("release, path", [
    ("v0.5.23", "/ready"),
    ("0.5.23rc1", "/health"),  # a pre-release of 0.5.23 is older than 0.5.23
    ("0.5.22.post1", "/health"),
    ("0.5.0rc0", "/health_generate"),
    ("0.5.12.dev136+g9dfb1d2eb", "/health"),
])
def test_readiness_path_orders_like_pep440(release, path):
    assert readiness_path(release) == path


def test_info_paths():
    assert info_paths("0.5.4.post3")["server_info"] == "/get_server_info"
    assert info_paths("0.5.9")["server_info"] == "/server_info"


def test_unit_failure():
    show = parse_unit_show("ActiveState=active\nSubState=running\nNRestarts=0\nResult=success\n")
    assert unit_failure(show, 0) is None
    assert "failed state" in unit_failure({"ActiveState": "failed", "Result": "exit-code"}, 0)
    assert "restart" in unit_failure({"ActiveState": "activating", "SubState": "auto-restart"}, 0)
    assert "1 time" in unit_failure({"ActiveState": "active", "SubState": "running", "NRestarts": "3"}, 2)
    assert unit_failure({"ActiveState": "inactive"}, 0)
