"""The Hub double, started in this process on free loopback ports."""
import os
import sys

import pytest

# the double's source (tests/hub_double); this conftest is imported before the collection's
# import path is set up when pytest is given this directory, so it cannot import tests.paths
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "hub_double"))

import hub_double  # noqa: E402


def _hub(fixtures_dir, shard_size):
    with open(os.path.join(fixtures_dir, "models", "moonshotai__Kimi-K2.5", "config.json"), "rb") as handle:
        files = hub_double.build_repo(handle.read(), shards=3, shard_size=shard_size)
    return hub_double.HubDouble(hub_double.Repo(hub_double.REPO_ID, files)).start()


@pytest.fixture
def hub(fixtures_dir):
    double = _hub(fixtures_dir, 256 * 1024)
    yield double
    double.stop()


@pytest.fixture
def hub_of_big_shards(fixtures_dir):
    """Shards of 1 MiB and a bit: 5 pieces each (the swarm's pieces are 256 KiB at least),
    so the 3 peers of a site of 4 take them in slices."""
    double = _hub(fixtures_dir, 1024 * 1024 + 4096)
    yield double
    double.stop()


@pytest.fixture
def swarm_port():
    """A port free on 127.0.0.1-127.0.0.4 (the in-process swarm's hosts)."""
    # imported here: the collection's import path is set up after this conftest is loaded
    from ansible_collections.gpufleet.sglang.tests.ports import free_port
    return free_port(["127.0.0.%d" % i for i in range(1, 5)])
