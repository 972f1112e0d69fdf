"""The swarm step (module_utils/weights/_swarm_step) on loopback: a seed that downloads from the Hub
double hashing as it writes, two peers that get the records through their inbox, a holder
that serves a verified copy, and a kill/resume. Needs libtorrent (skipped without it; the
molecule scenario `model` runs it on the test hosts with Debian's python3-libtorrent)."""
import math
import os
import threading
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files, _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import (
    _model,
    _model_hub,
    _swarm,
    _swarm_step)
from ansible_collections.gpufleet.sglang.tests.ports import port_open
from hub_double import REPO_ID

pytest.importorskip("huggingface_hub")
lt = _swarm.import_engine()
if lt is None:
    pytest.skip("libtorrent is not installed", allow_module_level=True)

ADDRS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def params(hub, commit, tmp, role, address, port, session="s1", addrs=None, fetchers=None):
    """A host's parameters; the first address is the feeder, the others fetch (unless
    ``fetchers`` says otherwise)."""
    addrs = addrs or ADDRS
    return {"repo_id": REPO_ID, "commit": commit, "endpoint": hub.endpoint, "token": "",
            "xet": False, "workers": 2,
            "swarm": {"role": role, "address": address, "port": port,
                      "peers": addrs, "feeder": addrs[0],
                      "fetchers": addrs[1:] if fetchers is None else fetchers,
                      "session": session, "inbox": str(tmp / ("inbox-" + address)),
                      "published": str(tmp / ("published-" + address)), "deadline": 60}}


def result():
    return dict(bytes_transferred=0, bytes_redundant=0, resumed_from={}, bytes_hashed=0, bytes_read_to_hash=0,
                bytes_served=0, transferred=[], removed=[])


def relay(seed_p, peers_p, stop_when, timeout=60, others=()):
    """What the role's wave.yml does: the feeder's published records to the peers' inboxes,
    then the stop once every host is complete."""
    handed = 0
    deadline = time.time() + timeout
    while time.time() < deadline:
        recs = [line["record"] for line in _files.read_lines(seed_p["swarm"]["published"])
                if line.get("session") == seed_p["swarm"]["session"]]
        if len(recs) > handed:
            for p in peers_p:
                _files.append_line(p["swarm"]["inbox"], {"session": p["swarm"]["session"],
                                                         "add": recs[handed:]})
            handed = len(recs)
        if stop_when():
            break
        time.sleep(0.1)
    for p in [seed_p] + list(peers_p) + list(others):
        _files.append_line(p["swarm"]["inbox"], {"session": p["swarm"]["session"], "stop": True})


def run_step(step, missing, out):
    try:
        out[step.role + step.sw["address"]] = step.run(missing)
    except Exception as error:  # reported by the test, its traceback in the output
        import traceback
        traceback.print_exc()
        out[step.role + step.sw["address"]] = error


def test_seed_and_two_peers_hash_once_and_close_the_port(hub, tmp_path, swarm_port):
    """Files of one piece: fewer pieces than fetchers, no slices."""
    _seed_and_peers(hub, tmp_path, ADDRS, swarm_port, sliced=False)


def test_seed_and_three_peers_in_slices_hash_once_and_close_the_port(hub_of_big_shards,
                                                                     tmp_path, swarm_port):
    """A site of 4 hosts, shards of 5 pieces: each peer takes its slice of a shard from the
    seed, then the rest from the other peers only; every peer gets every file, verified
    piece by piece, and the seed sends each shard's pieces once. The control: the same
    site without slices (no fetchers given), where the seed sends more than one copy."""
    served = {}
    for sliced in (True, False):
        base = tmp_path / ("sliced" if sliced else "plain")
        base.mkdir()
        hub_of_big_shards.state.reset()  # one Hub copy per run
        served[sliced] = _seed_and_peers(hub_of_big_shards, base, ADDRS + ["127.0.0.4"],
                                         swarm_port, sliced=sliced, session="s%d" % int(sliced))
    print("seed sent (bytes, the shards' size):", served)
    assert served[True][0] <= served[True][1] < served[False][0]


def _seed_and_peers(hub, tmp_path, addrs, port, sliced, session="s1"):
    commit, manifest, _xet = _model_hub.resolve(hub.endpoint, REPO_ID, "main")
    n = len(addrs)
    bases = [str(tmp_path / ("h%d" % i)) for i in range(n)]
    for base in bases:
        os.makedirs(base)
    ps = [params(hub, commit, tmp_path, "seed" if i == 0 else "peer", addrs[i], port,
                 addrs=addrs, session=session, fetchers=None if sliced else [])
          for i in range(n)]
    results = [result() for _index in range(n)]
    steps = [_swarm_step.Step(ps[i], bases[i], manifest, {}, str(tmp_path / ("prog%d" % i)),
                              results[i], lt) for i in range(n)]
    out = {}
    threads = [threading.Thread(target=run_step, args=(steps[i], manifest if i == 0 else [], out))
               for i in range(n)]
    for thread in threads:
        thread.start()
    relay(ps[0], ps[1:], lambda: all(s.complete() for s in steps))
    for thread in threads:
        thread.join(30)
    assert all(value is True for value in out.values()), out
    counters = hub.state.counters()
    assert counters["file_bytes_total"] == _model.total_bytes(manifest)  # one Hub copy
    nonempty = [e for e in manifest if e["size"] > 0]
    for i, base in enumerate(bases):
        good, bad, _hashed = _weights.verify_files(base, manifest)
        assert not bad, (i, bad)
        assert results[i]["bytes_read_to_hash"] == 0
        assert results[i]["engine_disk"]["read_back"] == 0  # nor did the engine, serving
        assert results[i]["bytes_hashed"] == _model.total_bytes(manifest)
    # the peers got every byte from the swarm, and the seed served at least one copy
    assert results[0]["bytes_served"] >= _model.total_bytes(nonempty)
    assert sorted(results[1]["transferred"]) == sorted(e["path"] for e in nonempty)
    notes = steps[1].against
    assert all(notes[e["path"]].startswith("btv1:") for e in nonempty)
    # the per-file timeline in each host's record: the seed verified every shard; a peer got
    # each record, then held the file
    seed_at = dict((path, t) for t, what, path in results[0]["events"] if what == "verified")
    assert sorted(seed_at) == sorted(e["path"] for e in nonempty)
    for res in results[1:]:
        got = dict((path, t) for t, what, path in res["events"] if what == "record")
        held = dict((path, t) for t, what, path in res["events"] if what == "held")
        assert sorted(got) == sorted(held) == sorted(seed_at)
        assert all(got[path] <= held[path] for path in held)
    assert all(steps[0].against[e["path"]].startswith(e["algo"] + ":") for e in manifest)
    # the files of more pieces than fetchers were sliced: each peer added them again
    # once it held its slice; the others (and every file without fetchers) were not
    pieces = dict((e["path"], int(math.ceil(e["size"] / float(_weights.piece_length(e["size"])))))
                  for e in nonempty)
    sliced_paths = sorted(p for p, count in pieces.items() if sliced and count >= n - 1)
    assert not sliced or sliced_paths
    for step, res in zip(steps[1:], results[1:]):
        assert sorted(step.swarm.moved) == sliced_paths
        assert not step.swarm.slicing and not step.swarm.moving
        # its record: each sliced file's slice held after its record came, before the file
        at = dict(((what, path), t) for t, what, path in res["events"])
        assert sorted(p for (what, p) in at if what == "sliced") == sliced_paths
        assert all(at["record", p] <= at["sliced", p] <= at["held", p] for p in sliced_paths)
        assert not [p for (what, p) in at if what == "stalled"]
    assert not steps[0].swarm.moved
    for address in addrs:  # nothing listens on the swarm port any more
        assert not port_open(address, port, timeout=1), (address, port)
    # what the seed sent, against the shards' size plus every peer's copy of the files
    # that are not sliced
    many = [p for p, count in pieces.items() if count >= n - 1]
    others = sum(e["size"] for e in nonempty if e["path"] not in many)
    shards = sum(e["size"] for e in nonempty if e["path"] in many)
    return results[0]["bytes_served"] - (n - 1) * others, shards


def test_a_record_that_does_not_match_the_manifest_is_refused(hub):
    commit, manifest, _xet = _model_hub.resolve(hub.endpoint, REPO_ID, "main")
    entry = [e for e in manifest if e["size"] > 0][0]
    hasher = _weights.StreamHash(entry["algo"], entry["size"])
    hasher.update(b"x" * entry["size"])
    digest, pieces = hasher.finish()
    rec = _weights.record(entry, entry["digest"], hasher.plen, pieces, "h")
    by_path = {entry["path"]: entry}
    _weights.check_record(rec, by_path)  # its own info-hash matches
    forged = dict(rec, pieces=("00" * 20) + rec["pieces"][40:])
    with pytest.raises(_weights.SwarmError) as refused:
        _weights.check_record(forged, by_path)
    assert "does not match its pieces" in str(refused.value)
    with pytest.raises(_weights.SwarmError):
        _weights.check_record(dict(rec, digest="0" * 64), by_path)


def test_holders_repair_a_truncated_shard_with_no_hub_byte(hub, tmp_path, swarm_port):
    """Two verified hosts serve (holders, from their kept records); the third lost the end of
    a shard: it keeps the pieces it holds (libtorrent checks them) and receives the rest."""
    commit, manifest, _xet = _model_hub.resolve(hub.endpoint, REPO_ID, "main")
    port = swarm_port
    bases = [str(tmp_path / ("h%d" % i)) for i in range(3)]
    for base in bases:
        os.makedirs(base)
    # place a verified copy on hosts 0 and 1 the way a seed does (hashing while writing)
    _resumed, _removed, hashed, _gets = _model_hub.download_hashing(
        bases[0], REPO_ID, commit, manifest, hub.endpoint)
    records = dict((e["path"], _weights.record(e, *hashed[e["path"]], host="h0")) for e in manifest
                   if e["size"] > 0)
    import shutil
    shutil.rmtree(os.path.join(bases[0], ".cache"))
    for base in bases[1:]:
        shutil.rmtree(base)
        shutil.copytree(bases[0], base)
    for base in bases[:2]:
        _files.write_json(os.path.join(base, _model.PIECES), records)
    shard = [e for e in manifest if e["path"].endswith(".safetensors")][0]
    keep = 100000
    with open(os.path.join(bases[2], shard["path"]), "r+b") as handle:
        handle.truncate(keep)
    good = dict((e["path"], (e["size"], 0)) for e in manifest if e["path"] != shard["path"])
    before = hub.state.counters()["file_bytes_total"]
    ps = [params(hub, commit, tmp_path, "holder" if i < 2 else "peer", ADDRS[i], port, "s2")
          for i in range(3)]
    results = [result() for _index in range(3)]
    steps = [_swarm_step.Step(ps[i], bases[i], manifest,
                              dict((e["path"], (e["size"], 0)) for e in manifest) if i < 2
                              else good, None, results[i], lt) for i in range(3)]
    out = {}
    threads = [threading.Thread(target=run_step, args=(steps[i], [], out)) for i in range(3)]
    for thread in threads:
        thread.start()
    relay(ps[0], ps[2:], steps[2].complete, others=[ps[1]])
    for thread in threads:
        thread.join(30)
    assert out == {"holder127.0.0.1": True, "holder127.0.0.2": True, "peer127.0.0.3": True}
    assert hub.state.counters()["file_bytes_total"] == before  # 0 Hub bytes
    _good, bad, _hashed = _weights.verify_files(bases[2], [shard])
    assert not bad
    assert results[2]["transferred"] == [shard["path"]]
    # only what was missing, to a piece: at most one piece more than the lost part, besides
    # the end game's blocks received twice (reported apart)
    plen = _weights.piece_length(shard["size"])
    unique = results[2]["bytes_transferred"] - results[2]["bytes_redundant"]
    assert shard["size"] - keep <= unique <= shard["size"] - keep + plen
    assert results[0]["bytes_read_to_hash"] == results[1]["bytes_read_to_hash"] == 0
    assert results[0]["engine_disk"]["read_back"] == results[1]["engine_disk"]["read_back"] == 0


def _served_file(folder, name, size):
    """A file of random bytes in ``folder`` (made) and its record, as a seed makes it."""
    data = os.urandom(size)
    folder.mkdir(parents=True, exist_ok=True)
    with open(str(folder / name), "wb") as handle:
        handle.write(data)
    hasher = _weights.StreamHash("sha256", size)
    hasher.update(data)
    digest, pieces = hasher.finish()
    entry = {"path": name, "size": size, "algo": "sha256", "digest": digest}
    return _weights.record(entry, digest, hasher.plen, pieces, "feeder")


def _fetch_without_the_other_fetcher(tmp_path, port, stall_s, monkeypatch, until):
    """The feeder (127.0.0.1) serves a file of 5 pieces; fetcher 127.0.0.2 of a site whose
    other fetcher (127.0.0.3) never comes. Runs until the fetcher ``until`` ("moved": added
    the file again without the feeder; "finished"), then 3 s more (the byte counters are
    libtorrent's of the second before; the control shows that nothing else comes), 60 s at
    most. Returns (the fetcher's state of the file, the pieces of its slice, the bytes the
    feeder sent, the files the fetcher moved)."""
    monkeypatch.setattr(_swarm, "STALL_S", stall_s)
    rec = _served_file(tmp_path / "feeder", "shard.bin", 4 * _weights.PIECE_MIN + 5)
    addrs = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    feeder = _swarm.Swarm(lt, addrs[0], port, addrs, addrs, feeder=addrs[0],
                          fetchers=addrs[1:])
    fetcher = _swarm.Swarm(lt, addrs[1], port, addrs, addrs, feeder=addrs[0],
                           fetchers=addrs[1:])
    try:
        feeder.add(rec, str(tmp_path / "feeder"), seed=True)
        fetcher.add(rec, str(tmp_path / "fetcher"))
        mine = _swarm.slice_of(5, rec["info_hash"], addrs[1:], addrs[1])
        deadline, settled = time.time() + 60, None
        while time.time() < (settled or deadline):
            feeder.tick()
            fetcher.tick()
            done = fetcher.moved if until == "moved" else fetcher.state()["shard.bin"][0]
            if done and settled is None:
                settled = time.time() + 3.0
            time.sleep(0.1)
        return fetcher.state()["shard.bin"], mine, feeder.served(), fetcher.moved
    finally:
        feeder.close()
        fetcher.close()


def test_a_fetcher_asks_the_feeder_again_when_its_site_stalls(tmp_path, swarm_port,
                                                              monkeypatch):
    """A fetcher that holds its slice fetches the rest from the site's other fetchers only;
    when none of them serves (a host that failed inside its slice), it asks the feeder again
    after STALL_S without progress, and completes. The control: with a stall longer than
    the test, 3 s after it held its slice it still lacks the other slice, and the feeder
    sent its slice only."""
    state, mine, served, moved = _fetch_without_the_other_fetcher(
        tmp_path / "control", swarm_port, 1000.0, monkeypatch, until="moved")
    plen = _weights.PIECE_MIN
    slice_bytes = sum(plen if i < 4 else 5 for i in mine)
    assert moved == ["shard.bin"]  # it held its slice, and was added again without the feeder
    assert state[0] is False and state[1] == slice_bytes
    assert served == slice_bytes
    state, mine, served, moved = _fetch_without_the_other_fetcher(
        tmp_path / "stall", swarm_port, 1.0, monkeypatch, until="finished")
    assert moved == ["shard.bin"]
    assert state[0] is True and state[1] == 4 * plen + 5
    assert served == 4 * plen + 5  # the feeder sent one copy: the slice, then the rest


def _rec_for(tmp_path, path, size):
    data = os.urandom(size)
    hasher = _weights.StreamHash("sha256", size)
    hasher.update(data)
    digest, pieces = hasher.finish()
    entry = {"path": path, "size": size, "algo": "sha256", "digest": digest}
    return entry, _weights.record(entry, digest, hasher.plen, pieces, "seed")


def test_the_inbox_is_read_only_when_it_grew(tmp_path, swarm_port, monkeypatch):
    """A peer's loop looks 4 times a second: it reads the inbox again only when its size
    changed (a look at an unchanged inbox reads nothing), and every line appended since is
    taken, the stop too."""
    entries, recs = zip(*[_rec_for(tmp_path, "f%d.bin" % i, 1000 + i) for i in range(2)])
    p = {"swarm": {"role": "peer", "address": "127.0.0.1", "port": swarm_port,
                   "peers": ["127.0.0.1"], "session": "s9",
                   "inbox": str(tmp_path / "inbox"), "published": str(tmp_path / "pub")}}
    step = _swarm_step.Step(p, str(tmp_path / "base"), list(entries), {}, None, result(), lt)
    reads = []
    real = _files.read_lines

    def counted(path):
        reads.append(path)
        return real(path)

    monkeypatch.setattr(_swarm_step._files, "read_lines", counted)
    try:
        step.read_inbox()  # no inbox yet: nothing to read
        assert reads == [] and step.records == {}
        _files.append_line(p["swarm"]["inbox"], {"session": "s9", "add": [recs[0]]})
        step.read_inbox()
        step.read_inbox()  # unchanged: not read again
        assert len(reads) == 1 and sorted(step.records) == ["f0.bin"]
        _files.append_line(p["swarm"]["inbox"], {"session": "other", "add": [recs[1]]})
        step.read_inbox()  # grew (another session's line): read, nothing taken
        assert len(reads) == 2 and sorted(step.records) == ["f0.bin"]
        _files.append_line(p["swarm"]["inbox"], {"session": "s9", "add": [recs[1]]})
        _files.append_line(p["swarm"]["inbox"], {"session": "s9", "stop": True})
        step.read_inbox()
        step.read_inbox()
        assert len(reads) == 3 and sorted(step.records) == ["f0.bin", "f1.bin"]
        assert step.stop is True
        assert [what for _t, what, _p in step.events] == ["record", "record"]
    finally:
        step.swarm.close()


def test_the_progress_file_is_written_on_a_change_or_once_a_second(tmp_path, swarm_port,
                                                                   monkeypatch):
    """The progress file is written when a file is done or published (or complete), and
    otherwise once a second since the last write; a look in between writes nothing."""
    entries, _recs = zip(*[_rec_for(tmp_path, "f%d.bin" % i, 1000 + i) for i in range(2)])
    p = {"swarm": {"role": "peer", "address": "127.0.0.1", "port": swarm_port,
                   "peers": ["127.0.0.1"], "session": "s8",
                   "inbox": str(tmp_path / "inbox"), "published": str(tmp_path / "pub")}}
    clock = [1000.0]

    class Clock(object):  # the step's clock only (time of the module _swarm_step)
        @staticmethod
        def time():
            return clock[0]

        @staticmethod
        def monotonic():
            return clock[0]

    monkeypatch.setattr(_swarm_step, "time", Clock)
    step = _swarm_step.Step(p, str(tmp_path / "base"), list(entries), {},
                            str(tmp_path / "progress.json"), result(), lt)
    writes = []
    real = _files.write_json

    def counted(path, data):
        writes.append(dict(data))
        return real(path, data)

    monkeypatch.setattr(_swarm_step._files, "write_json", counted)
    try:
        step.progress(0)
        assert len(writes) == 1  # the first look writes
        clock[0] += 0.5
        step.progress(100)  # bytes moved, same files: within the second, not written
        assert len(writes) == 1
        clock[0] += 0.5
        step.progress(200)  # a second since the last write
        assert len(writes) == 2 and writes[-1]["bytes_done"] == 200
        clock[0] += 0.1
        step.good["f0.bin"] = (1000, 0)  # a file done: written at once
        step.progress(0)
        assert len(writes) == 3 and writes[-1]["files_done"] == 1
        clock[0] += 0.1
        step.progress(0)
        assert len(writes) == 3
    finally:
        step.swarm.close()


def _outsider_gets(tmp_path, port, admitted, wait_s):
    """A seed at 127.0.0.1 whose site is 127.0.0.1-2 (plus 127.0.0.4 when ``admitted``)
    serves a file; 127.0.0.4 knows its record and connects. Returns the outsider's bytes
    and the seconds it took to get them all (or ``wait_s``)."""
    rec = _served_file(tmp_path / "seed", "shard.bin", 2 * _weights.PIECE_MIN)
    site = ["127.0.0.1", "127.0.0.2"] + (["127.0.0.4"] if admitted else [])
    seed = _swarm.Swarm(lt, "127.0.0.1", port, site, site)
    outsider = _swarm.Swarm(lt, "127.0.0.4", port, ["127.0.0.1"], ["127.0.0.1"])
    try:
        seed.add(rec, str(tmp_path / "seed"), seed=True)
        outsider.add(rec, str(tmp_path / "outsider"))
        deadline = time.time() + wait_s
        while time.time() < deadline and not outsider.state()["shard.bin"][0]:
            outsider.tick()
            seed.tick()
            time.sleep(0.1)
        return outsider.state()["shard.bin"][1], time.time() - (deadline - wait_s)
    finally:
        seed.close()
        outsider.close()


def test_a_host_outside_the_site_gets_no_byte(tmp_path, swarm_port, monkeypatch):
    """Every torrent applies the session's IP filter (the site's addresses only): a host
    outside the site that knows a file's record connects and gets nothing. The controls: the
    same host admitted to the site gets the file, and so does the outsider when torrents do
    not apply the filter (libtorrent's default flags replaced without it, as before)."""
    size = 2 * _weights.PIECE_MIN
    got, took = _outsider_gets(tmp_path / "in", swarm_port, admitted=True, wait_s=60.0)
    assert got == size
    # refused: nothing in twice the time the admitted host took for all of it (3 s at least)
    assert _outsider_gets(tmp_path / "out", swarm_port, admitted=False,
                          wait_s=max(3.0, 2 * took))[0] == 0
    plain = _swarm.base_flags
    monkeypatch.setattr(_swarm, "base_flags",
                        lambda lt_: plain(lt_) & ~lt_.torrent_flags.apply_ip_filter)
    assert _outsider_gets(tmp_path / "unfiltered", swarm_port, admitted=False,
                          wait_s=60.0)[0] == size


class _FinishedSwarm(object):
    """What collect() reads of the swarm: one file libtorrent reports finished."""

    moved, stalled = [], []

    def __init__(self, path, size):
        self.path, self.size = path, size

    def state(self):
        return {self.path: (True, self.size, self.size, self.size, 0)}

    def errors(self):
        return {}


def test_a_finished_file_is_held_once_its_bytes_are_on_disk(tmp_path):
    """libtorrent reports a piece once it passed its check, which it can run on blocks not
    written yet: a file it reports finished is held only once it is on disk at its size. The
    control: the same file there at its size is held at once."""
    path, size = "README.md", 52
    step = _swarm_step.Step.__new__(_swarm_step.Step)  # collect() only: no libtorrent session
    step.base, step.by_path = str(tmp_path), {path: {"path": path, "size": size}}
    step.good, step.against, step.events, step.started = {}, {}, [], time.time()
    step.records = {path: {"info_hash": "ab" * 20, "pieces": "cd" * 20, "piece_length": 65536,
                           "seed": "h0", "algo": "sha256", "digest": "ef" * 32}}
    step.result = result()
    step.seen = {"sliced": 0, "stalled": 0}
    step.role, step.swarm = "peer", _FinishedSwarm(path, size)
    step.keep = lambda: None
    assert step.collect() == size and step.good == {}  # not there yet: still in flight
    with open(str(tmp_path / path), "wb") as handle:
        handle.write(b"x" * (size - 1))
    assert step.collect() == size and step.good == {}  # its last bytes not written yet
    with open(str(tmp_path / path), "ab") as handle:
        handle.write(b"x")
    assert step.collect() == 0 and list(step.good) == [path]
    assert [what for _t, what, _p in step.events] == ["held"]
    assert step.result["transferred"] == [path]


@pytest.mark.parametrize("at_once", [1, 2, 3])
def test_a_fetcher_asks_for_so_many_slices_at_a_time(tmp_path, swarm_port, monkeypatch,
                                                     at_once):
    """A fetcher given three records at once asks the feeder for the first SLICES_AT_ONCE
    files' slices only; the next file asks for its slice once one of them holds its own.
    With SLICES_AT_ONCE at 3 (the control) every file asks for its slice at once."""
    monkeypatch.setattr(_swarm, "SLICES_AT_ONCE", at_once)
    addrs = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
    names = ["a.bin", "b.bin", "c.bin"]
    recs = [_served_file(tmp_path / "feeder", name, 4 * _weights.PIECE_MIN) for name in names]
    feeder = _swarm.Swarm(lt, addrs[0], swarm_port, addrs, addrs, feeder=addrs[0],
                          fetchers=addrs[1:])
    fetcher = _swarm.Swarm(lt, addrs[1], swarm_port, addrs, addrs, feeder=addrs[0],
                           fetchers=addrs[1:])
    try:
        for rec in recs:
            feeder.add(rec, str(tmp_path / "feeder"), seed=True)
        for rec in recs:
            fetcher.add(rec, str(tmp_path / "fetcher"))

        def wants(path):  # the file's torrent now in the session wants a piece
            handle = fetcher.handles.get(path)
            return handle is not None and any(p > 0 for p in handle.get_piece_priorities())

        assert [wants(path) for path in names] == [index < at_once for index in range(3)]
        assert fetcher.waiting == names[at_once:]
        c_asked = None  # the files moved when c.bin was first seen asking for its slice
        deadline = time.time() + 60
        while time.time() < deadline and len(fetcher.moved) < 3:
            feeder.tick()
            fetcher.tick()
            # never more torrents asking for their slice than SLICES_AT_ONCE (read off
            # their priorities, not the Swarm's own bookkeeping)
            assert sum(1 for path in fetcher.slicing if wants(path)) <= at_once
            if c_asked is None and (wants("c.bin") or "c.bin" in fetcher.moved):
                c_asked = list(fetcher.moved)
            time.sleep(0.05)
        assert sorted(fetcher.moved) == names
        if at_once < 3:
            assert c_asked and "c.bin" not in c_asked  # it asked once a slice was held
        if at_once == 1:
            assert fetcher.moved == names
        assert fetcher.waiting == []
    finally:
        feeder.close()
        fetcher.close()


def _served_and_hashed(tmp_path, port):
    """A holder (127.0.0.1) serves a verified file of 6 pieces and 5 bytes to a peer
    (127.0.0.2). Returns the bytes the peer holds and each host's engine disk counters."""
    rec = _served_file(tmp_path / "holder", "shard.bin", 6 * _weights.PIECE_MIN + 5)
    addrs = ["127.0.0.1", "127.0.0.2"]
    holder = _swarm.Swarm(lt, addrs[0], port, addrs, addrs)
    peer = _swarm.Swarm(lt, addrs[1], port, addrs, addrs)
    try:
        holder.add(rec, str(tmp_path / "holder"), seed=True)
        peer.add(rec, str(tmp_path / "peer"))
        deadline = time.time() + 60
        while time.time() < deadline and not peer.state()["shard.bin"][0]:
            holder.tick()
            peer.tick()
            time.sleep(0.1)
        return peer.state()["shard.bin"][1], holder.disk_counters(), peer.disk_counters()
    finally:
        holder.close()
        peer.close()


def test_a_verified_file_is_served_without_reading_it_back_to_hash_it(tmp_path, swarm_port,
                                                                      monkeypatch):
    """A file the host verified (the seed hashed it as it wrote it; a holder's pieces are in
    its records) is served as held: its engine reads no block back to hash it, and neither
    does the peer, which hashes each piece as it arrives. The control: added in libtorrent's
    seed mode, the same file is read back and hashed, piece by piece, the first time a peer
    asks for it."""
    size = 6 * _weights.PIECE_MIN + 5
    blocks = math.ceil(size / 16384.0)
    held, holder, peer = _served_and_hashed(tmp_path / "held", swarm_port)
    assert held == size
    assert holder["read_back"] == 0 and holder["hash_us"] == 0
    assert peer["read_back"] == 0 and peer["hash_us"] > 0

    def seed_mode(self, rec, save_dir):
        return self._params(rec, save_dir, self.lt.torrent_flags.seed_mode)

    monkeypatch.setattr(_swarm.Swarm, "_served_params", seed_mode)
    held, holder, _peer = _served_and_hashed(tmp_path / "seed-mode", swarm_port)
    assert held == size
    assert holder["read_back"] >= blocks and holder["hash_us"] > 0


def _lease_step(tmp_path, port, role, lease):
    """One host's step with a ``lease``: a holder of a verified file (complete), or a peer
    handed the record of a file nobody serves (incomplete, nothing moves). Runs in a thread;
    returns (step, out, thread)."""
    rec = _served_file(tmp_path / "base", "f0.bin", 3 * _weights.PIECE_MIN + 7)
    entry = dict((k, rec[k]) for k in ("path", "size", "algo", "digest"))
    base = str(tmp_path / "base")
    good = {}
    if role == "holder":
        st = os.stat(os.path.join(base, "f0.bin"))
        good = {"f0.bin": (st.st_size, st.st_mtime_ns)}
    else:
        os.remove(os.path.join(base, "f0.bin"))
    p = {"swarm": {"role": role, "address": "127.0.0.1", "port": port,
                   "peers": ["127.0.0.1", "127.0.0.2"], "session": "s7",
                   "inbox": str(tmp_path / "inbox"), "published": str(tmp_path / "pub"),
                   "deadline": 120, "lease": lease}}
    if role == "peer":
        _files.append_line(p["swarm"]["inbox"], {"session": "s7", "add": [rec]})
    step = _swarm_step.Step(p, base, [entry], good, None, result(), lt)
    out = {}

    def run():
        try:
            out["complete"] = step.run([])
        except Exception as error:  # the test reads it
            out["error"] = error
        out["ended_at"] = time.monotonic()

    thread = threading.Thread(target=run)
    thread.start()
    return step, out, thread


@pytest.mark.parametrize("role", ["holder", "peer"])
def test_a_swarm_whose_controller_is_gone_ends_on_its_own_after_its_lease(
        tmp_path, swarm_port, role):
    """No word from the controller and no byte moving for the lease (2 s): the host's part
    ends on its own and its port closes; a holder that holds every file ends as if stopped,
    a peer that does not fails with the lease's message. While the inbox is touched every
    0.5 s (the controller's looks and keepalives) it runs on; the control, with no lease,
    still listens 4 s after the last touch and ends only at the stop."""
    started = time.monotonic()
    step, out, thread = _lease_step(tmp_path / "lease", swarm_port, role, 2.0)
    inbox = str(tmp_path / "lease" / "inbox")
    for _touch in range(8):  # touched for 4 s: twice the lease
        _files.touch(inbox)
        last_word = time.monotonic()
        time.sleep(0.5)
        assert "ended_at" not in out, out
    assert port_open("127.0.0.1", swarm_port)
    thread.join(10)
    assert not thread.is_alive()
    assert 2.0 <= out["ended_at"] - last_word <= 4.0, (out["ended_at"] - last_word)
    assert out["ended_at"] - started >= 5.5  # the last touch at 3.5 s, then the lease
    assert step.result["lease_expired"] is True
    assert step.result["lease"]["words"] >= 7 and step.result["lease"]["lease_s"] == 2.0
    if role == "holder":
        assert out["complete"] is True and "stop_at" in step.result
    else:
        assert "no word from the controller for 2 s" in str(out["error"])
    assert not port_open("127.0.0.1", swarm_port)

    # the control: no lease, the same silence
    step, out, thread = _lease_step(tmp_path / "none", swarm_port, role, 0)
    time.sleep(4.0)
    assert "ended_at" not in out and port_open("127.0.0.1", swarm_port)
    _files.append_line(str(tmp_path / "none" / "inbox"), {"session": "s7", "stop": True})
    thread.join(10)
    assert not thread.is_alive() and "lease_expired" not in step.result
    assert not port_open("127.0.0.1", swarm_port)
