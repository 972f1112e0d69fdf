"""The Hub double, started in this process on free loopback ports."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(ROOT, "tests", "hub_double"))

import hub_double  # noqa: E402

CONFIG = os.path.join(ROOT, "tests", "fixtures", "models", "moonshotai__Kimi-K2.5", "config.json")


@pytest.fixture
def hub():
    with open(CONFIG, "rb") as handle:
        files = hub_double.build_repo(handle.read(), shards=3, shard_size=256 * 1024)
    double = hub_double.HubDouble(hub_double.Repo(hub_double.REPO_ID, files)).start()
    yield double
    double.stop()
