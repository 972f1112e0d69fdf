"""The swarm's pure parts: piece length, hashing while writing, bencoding, info dicts and
records, and the plan (who seeds, who swarms, who falls back to rsync rounds)."""
import hashlib
import os
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files, _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _fanout, _swarm


def test_piece_length_is_a_power_of_two_for_about_1024_pieces():
    assert _weights.piece_length(0) == 256 * 1024
    assert _weights.piece_length(256 * 1024 ** 2) == 256 * 1024
    assert _weights.piece_length(256 * 1024 ** 2 + 1) == 512 * 1024
    assert _weights.piece_length(1024 ** 3) == 1024 * 1024
    assert _weights.piece_length(1024 ** 3 + 1) == 2 * 1024 * 1024
    assert _weights.piece_length(5 * 10 ** 9) == 8 * 1024 * 1024
    assert _weights.piece_length(10 ** 13) == 16 * 1024 * 1024


@pytest.mark.parametrize("algo,size", [("sha256", 100000), ("git-sha1", 33), ("sha256", 65536)])
def test_stream_hash_equals_a_read_back_and_the_pieces(tmp_path, algo, size):
    data = os.urandom(size)
    hasher = _weights.StreamHash(algo, size, plen=16384)
    for start in range(0, size, 7001):  # chunks that straddle piece boundaries
        hasher.update(data[start:start + 7001])
    digest, pieces = hasher.finish()
    path = tmp_path / "f"
    path.write_bytes(data)
    assert digest == _files.digest(str(path), algo, size)
    want = b"".join(hashlib.sha1(data[i:i + 16384]).digest() for i in range(0, size, 16384))
    assert pieces == want


def test_bencode_follows_bep3():
    assert _weights.bencode(3) == b"i3e"
    assert _weights.bencode(b"spam") == b"4:spam"
    assert _weights.bencode(["spam", 42]) == b"l4:spami42ee"
    assert _weights.bencode({"spam": ["a", "b"], "cow": "moo"}) == b"d3:cow3:moo4:spaml1:a1:bee"
    with pytest.raises(_weights.SwarmError):
        _weights.bencode(1.5)


def test_the_info_hash_is_the_one_libtorrent_makes_from_the_same_file(tmp_path):
    lt = _swarm.import_engine()
    if lt is None:
        pytest.skip("libtorrent is not installed")
    data = os.urandom(300000)
    (tmp_path / "shard.bin").write_bytes(data)
    hasher = _weights.StreamHash("sha256", len(data), plen=16384)
    hasher.update(data)
    _digest, pieces = hasher.finish()
    ours = _weights.info_hash(_weights.info_dict("d/shard.bin", len(data), 16384, pieces))
    storage = lt.file_storage()
    lt.add_files(storage, str(tmp_path / "shard.bin"))
    made = lt.create_torrent(storage, 16384, flags=lt.create_torrent.v1_only)
    made.set_priv(True)
    lt.set_piece_hashes(made, str(tmp_path))
    theirs = hashlib.sha1(lt.bencode(made.generate()[b"info"])).hexdigest()
    assert ours == theirs


def test_a_record_checks_against_the_manifest_and_its_info_hash():
    entry = {"path": "a/b.safetensors", "size": 40000, "algo": "sha256", "digest": "d" * 64}
    hasher = _weights.StreamHash("sha256", 40000, plen=16384)
    hasher.update(b"\0" * 40000)
    _digest, pieces = hasher.finish()
    rec = _weights.record(entry, entry["digest"], 16384, pieces, "seed-1")
    assert rec["pieces"] == pieces.hex() and len(pieces) == 3 * 20
    info = _weights.check_record(rec, {entry["path"]: entry})
    assert info["name"] == "b.safetensors" and info["private"] == 1
    with pytest.raises(_weights.SwarmError):
        _weights.check_record(dict(rec, info_hash="0" * 40), {entry["path"]: entry})
    with pytest.raises(_weights.SwarmError):
        _weights.check_record(dict(rec, pieces=rec["pieces"][:80]), {entry["path"]: entry})
    with pytest.raises(_weights.SwarmError):
        _weights.check_record(rec, {})
    assert _weights.against(rec, "hub").startswith("sha256:" + "d" * 64)
    assert _weights.against(rec, "peer").startswith("btv1:" + rec["info_hash"])


def test_session_settings_keep_the_swarm_inside_the_fleet():
    settings = _swarm.session_settings("10.0.0.5", 8731)
    assert settings["listen_interfaces"] == "10.0.0.5:8731"
    for key in ("enable_dht", "enable_lsd", "enable_upnp", "enable_natpmp"):
        assert settings[key] is False
    assert settings["aio_threads"] == 2
    assert settings["max_out_request_queue"] == _swarm.MAX_REQUESTS


def test_the_model_scenario_bounds_redundancy_by_the_request_queue():
    """The model scenario's repair bounds the bytes received twice by what the two holders
    owe at once (their request queues): its figure must follow MAX_REQUESTS."""
    from ansible_collections.gpufleet.sglang.tests.paths import ROOT
    with open(os.path.join(ROOT, "extensions", "molecule", "model", "verify.yml")) as f:
        text = f.read()
    assert 'swarm_queue_bytes: "{{ %d * 16384 }}"' % _swarm.MAX_REQUESTS in text


def test_process_cpu_counts_this_process_work():
    before = _swarm.process_cpu()
    assert set(before) == {"user", "system"}
    deadline = time.time() + 0.3
    while time.time() < deadline:
        sum(range(10000))
    after = _swarm.process_cpu()
    assert after["user"] + after["system"] > before["user"] + before["system"]


HOSTS = {"a1": "east", "a2": "east", "a3": "east", "a4": "east", "b1": "west", "b2": "west"}
ADDR = dict((h, "10.0.%d.%d" % (1 if h[0] == "a" else 2, int(h[1]))) for h in HOSTS)


def test_plan_swarms_every_engine_host_and_rounds_the_rest():
    plan = _fanout.plan(HOSTS, engine=["a1", "a2", "a3", "b1", "b2"], addresses=ADDR)
    assert plan["hub"] == ["a1", "b1"]
    assert plan["swarm"]["a1"] == {"role": "seed", "feeder": "a1",
                                   "peers": ["10.0.1.1", "10.0.1.2", "10.0.1.3"],
                                   "feeder_address": "10.0.1.1",
                                   "fetchers": ["10.0.1.2", "10.0.1.3"]}
    assert plan["swarm"]["a3"]["role"] == "peer" and "a4" not in plan["swarm"]
    assert plan["swarm"]["b2"] == {"role": "peer", "feeder": "b1",
                                   "peers": ["10.0.2.1", "10.0.2.2"],
                                   "feeder_address": "10.0.2.1", "fetchers": ["10.0.2.2"]}
    # a4 lacks the engine: one round from a swarm host, which is verified by then
    assert plan["rounds"] == [{"a4": "a1"}]
    assert plan["fallback"] == ["a4"]
    assert plan["site_addresses"]["west"] == ["10.0.2.1", "10.0.2.2"]


def test_plan_a_verified_engine_host_feeds_without_the_hub():
    plan = _fanout.plan(HOSTS, verified=["a2", "a3", "a4", "b1", "b2"], engine=list(HOSTS),
                        addresses=ADDR)
    assert plan["hub"] == []
    assert plan["swarm"]["a1"]["role"] == "peer" and plan["swarm"]["a1"]["feeder"] == "a2"
    assert plan["swarm"]["a2"]["role"] == "holder"
    # only a1 fetches: a site of one fetcher takes no slices (slice_of)
    assert plan["swarm"]["a3"]["fetchers"] == ["10.0.1.1"]
    assert plan["swarm"]["a3"]["feeder_address"] == "10.0.1.2"
    assert "b1" not in plan["swarm"] and plan["rounds"] == []


@pytest.mark.parametrize("count, fetchers", [(128, 7), (129, 7), (7, 7), (2, 2), (33, 3)])
def test_slices_split_a_file_among_the_fetchers(count, fetchers):
    """Every piece is one fetcher's, the slices differ by a piece at most, and the fetcher
    of the first piece turns with the info-hash."""
    addrs = ["10.0.0.%d" % (i + 2) for i in range(fetchers)]
    firsts = set()
    for info_hash in ("00000000ab", "00000001ab", "00000002ab", "00000003ab"):
        slices = [_swarm.slice_of(count, info_hash, addrs, a) for a in addrs]
        assert sorted(i for s in slices for i in s) == list(range(count))
        sizes = [len(s) for s in slices]
        assert max(sizes) - min(sizes) <= 1
        firsts.add([i for i, s in enumerate(slices) if 0 in s][0])
        # the same slices whatever the order the hosts are listed in
        assert slices == [_swarm.slice_of(count, info_hash, list(reversed(addrs)), a)
                          for a in addrs]
    assert len(firsts) == min(4, fetchers)


def test_no_slice_for_one_fetcher_few_pieces_or_a_host_that_does_not_fetch():
    addrs = ["10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert _swarm.slice_of(3, "00", addrs, "10.0.0.2") == [0]
    assert _swarm.slice_of(2, "00", addrs, "10.0.0.2") is None  # fewer pieces than hosts
    assert _swarm.slice_of(100, "00", ["10.0.0.2"], "10.0.0.2") is None  # one fetcher
    assert _swarm.slice_of(100, "00", addrs, "10.0.0.1") is None  # the feeder, a holder


def test_plan_without_the_engine_on_the_seed_is_today_s_rounds():
    control = _fanout.plan(HOSTS)
    plan = _fanout.plan(HOSTS, engine=["a2", "a3", "a4", "b2"], addresses=ADDR)
    assert plan["swarm"] == {} and plan["rounds"] == control["rounds"]
    assert plan["fallback"] == ["a1", "b1"]  # the seeds lack it
    assert control["swarm"] == {} and control["fallback"] == []
    assert len(control["rounds"]) == _fanout.rounds_needed(4)


def test_fleet_inputs_from_the_hosts_facts():
    hostvars = {
        "a": {"__model_site": "s", "__model_address": "10.0.0.1", "__model_is_seed": "False",
              "__model_check": {"verified": False}, "__model_engine": "libtorrent"},
        "b": {"__model_site": "s", "__model_address": "10.0.0.2", "__model_is_seed": "True",
              "__model_check": {"verified": True}, "__model_engine": ""},
        "c": {"__model_site": "t", "__model_check": {"verified": False}},
    }
    hosts, verified, seeds, engine, addresses = _fanout.fleet_inputs(["a", "b", "c"], hostvars)
    assert hosts == {"a": "s", "b": "s", "c": "t"}
    assert verified == ["b"] and seeds == {"s": "b"} and engine == ["a"]
    assert addresses == {"a": "10.0.0.1", "b": "10.0.0.2", "c": "c"}


class FakeSession(object):
    """A libtorrent session that lets go of its torrents after ``lingers`` looks."""

    def __init__(self, lingers):
        self.torrents = ["handle"]
        self.lingers = lingers
        self.looks = 0
        self.paused = False

    def remove_torrent(self, handle):
        pass

    def get_torrents(self):
        self.looks += 1
        return self.torrents if self.looks <= self.lingers else []

    def pause(self):
        self.paused = True


def _swarm_on(session):
    swarm = _swarm.Swarm.__new__(_swarm.Swarm)  # no libtorrent: the session is a fake
    swarm.session, swarm.handles = session, {"f": "handle"}
    return swarm


def test_close_waits_until_the_session_lets_go_of_its_torrents():
    session = FakeSession(lingers=2)
    _swarm_on(session).close(timeout=5.0)
    assert session.looks == 3 and session.paused
    # the control: a session that never lets go is left after the timeout, not waited on
    stuck = FakeSession(lingers=10 ** 6)
    swarm = _swarm_on(stuck)
    swarm.close(timeout=0.25)
    assert 2 <= stuck.looks <= 5 and stuck.paused and swarm.session is None
