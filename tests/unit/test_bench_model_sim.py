"""The model behind docs/model-weights.md's figures (``scripts/bench_model_sim.py``, the
benchmark's own module: the closed form of the placement time and the swarm's piece-level
simulation). Moved here from the module_utils' tests with the code they test."""
import importlib.util
import os

import pytest

from ansible_collections.gpufleet.sglang.tests.paths import ROOT

_SPEC = importlib.util.spec_from_file_location(
    "bench_model_sim", os.path.join(ROOT, "scripts", "bench_model_sim.py"))
sim = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(sim)


def test_rounds_needed_and_placement_time():
    assert [sim.rounds_needed(n) for n in (1, 2, 3, 16, 17, 256)] == [0, 1, 2, 4, 5, 8]
    size = 548e9
    wan, lan = 10e9 / 8, 100e9 / 8  # 10 Gbit/s WAN, 100 Gbit/s LAN
    assert sim.placement_time(size, 16, wan, lan, "hub") == pytest.approx(size * 16 / wan)
    assert sim.placement_time(size, 16, wan, lan, "doubling") == pytest.approx(
        size / wan + 4 * size / lan)
    hashing = 8 * 150 * 2 ** 20  # 8 cores
    assert sim.placement_time(size, 16, wan, lan, "doubling", hash_bps=hashing) == \
        pytest.approx(size / wan + size / hashing + 4 * (size / lan + size / hashing))
    rows = sim.figures(size, [16, 256], wan, lan)
    assert rows[1]["rounds"] == 8 and rows[1]["doubling_s"] < rows[1]["hub_s"] / 50
    with pytest.raises(ValueError):
        sim.placement_time(size, 16, wan, lan, "carrier-pigeon")


def test_swarm_model_is_one_download_plus_the_last_file_whatever_the_hosts():
    size, wan, lan = 548e9, 1.25e9, 12.5e9
    shard = size / 64
    one = sim.placement_time(size, 1, wan, lan, "swarm")
    assert one == pytest.approx(size / wan)
    for hosts in (16, 256, 1024):
        swarm = sim.placement_time(size, hosts, wan, lan, "swarm", file_bytes=shard,
                                   efficiency=0.5)
        tail = shard / (lan * 0.5) + sim.rounds_needed(hosts) * 8 * 1024 * 1024 / lan
        assert swarm == pytest.approx(size / wan + tail)
        # against its control, doubling rounds on the same links
        assert sim.placement_time(size, hosts, wan, lan, "doubling") > swarm + 3 * size / lan
    # links of one speed (the test bed): 8 hosts need 4 copy times by doubling, ~1 swarming
    rate = 16 * 2 ** 20
    repo = 256 * 2 ** 20
    assert sim.placement_time(repo, 8, rate, rate, "doubling") == pytest.approx(4 * repo / rate)
    assert sim.placement_time(repo, 8, rate, rate, "swarm", file_bytes=repo / 8,
                              efficiency=0.5) < 1.3 * repo / rate
    # the seed hashes while it writes: a slow hash caps the seed's rate
    assert sim.placement_time(size, 16, wan, lan, "swarm", hash_bps=0.5e9,
                              file_bytes=shard) > size / 0.5e9
    with pytest.raises(ValueError):
        sim.placement_time(size, 16, wan, lan, "chain")


def test_the_simulated_swarm_against_its_bounds_and_doubling():
    files, ppf = 8, 16
    total = files * ppf
    two = sim.simulate_swarm(2, files, ppf, 1.0, 1.0)
    # never faster than the stream plus the last file's own spread
    assert two >= total + 1
    eight = sim.simulate_swarm(8, files, ppf, 1.0, 1.0)
    # the control: doubling rounds need 1 + log2(8) = 4 whole copies on the same links
    assert two <= eight < 4 * total * 0.5
    assert sim.simulate_swarm(8, files, ppf, 1.0, 0.5) > eight
    # a WAN ten times slower than the LAN: the LAN fan-out hides behind the download
    slow = sim.simulate_swarm(8, files, ppf, 0.1, 1.0)
    assert total / 0.1 <= slow <= total / 0.1 * 1.2
