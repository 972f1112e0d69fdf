"""The swarm step (module_utils/weights/_swarm_step) on loopback: a seed that downloads from the Hub
double hashing as it writes, two peers that get the records through their inbox, a holder
that serves a verified copy, and a kill/resume. Needs libtorrent (skipped without it; the
molecule scenario `model` runs it on the test hosts with Debian's python3-libtorrent)."""
import math
import os
import threading
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import (
    _model,
    _model_hub,
    _swarm,
    _swarm_step)
from hub_double import REPO_ID

pytest.importorskip("huggingface_hub")
lt = _swarm.import_engine()
if lt is None:
    pytest.skip("libtorrent is not installed", allow_module_level=True)

ADDRS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def params(hub, commit, tmp, role, address, port, session="s1", addrs=None):
    return {"repo_id": REPO_ID, "commit": commit, "endpoint": hub.endpoint, "token": "",
            "xet": False, "workers": 2,
            "swarm": {"role": role, "address": address, "port": port,
                      "peers": addrs or ADDRS,
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
    except Exception as error:  # reported by the test
        out[step.role + step.sw["address"]] = error


def test_seed_and_two_peers_hash_once_and_close_the_port(hub, tmp_path, swarm_port):
    _seed_and_peers(hub, tmp_path, ADDRS, swarm_port, super_seeded=False)


def test_seed_and_three_peers_super_seeded_hash_once_and_close_the_port(hub_of_big_shards,
                                                                        tmp_path, swarm_port):
    """A site of 4 hosts: the seed super-seeds its shards of 2 pieces (BEP 16) and every
    peer still gets every file, verified piece by piece, the seed sending about one copy."""
    _seed_and_peers(hub_of_big_shards, tmp_path, ADDRS + ["127.0.0.4"], swarm_port,
                    super_seeded=True)


def _seed_and_peers(hub, tmp_path, addrs, port, super_seeded):
    commit, manifest, _xet = _model_hub.resolve(hub.endpoint, REPO_ID, "main")
    n = len(addrs)
    bases = [str(tmp_path / ("h%d" % i)) for i in range(n)]
    for base in bases:
        os.makedirs(base)
    ps = [params(hub, commit, tmp_path, "seed" if i == 0 else "peer", addrs[i], port,
                 addrs=addrs) for i in range(n)]
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
        good, bad, _hashed = _model.verify_files(base, manifest)
        assert not bad, (i, bad)
        assert results[i]["bytes_read_to_hash"] == 0
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
    # shards of more than one piece on both sites: super-seeded on 4 hosts, not on 3
    assert steps[0].swarm is not None and steps[0].swarm.super_seed is super_seeded
    pieces = [int(math.ceil(e["size"] / float(_swarm.piece_length(e["size"])))) for e in nonempty]
    assert max(pieces) > 1
    import socket
    for address in addrs:  # nothing listens on the swarm port any more
        with pytest.raises(OSError):
            socket.create_connection((address, port), timeout=1).close()


def test_a_record_that_does_not_match_the_manifest_is_refused(hub):
    commit, manifest, _xet = _model_hub.resolve(hub.endpoint, REPO_ID, "main")
    entry = [e for e in manifest if e["size"] > 0][0]
    hasher = _swarm.StreamHash(entry["algo"], entry["size"])
    hasher.update(b"x" * entry["size"])
    digest, pieces = hasher.finish()
    rec = _swarm.record(entry, entry["digest"], hasher.plen, pieces, "h")
    by_path = {entry["path"]: entry}
    _swarm.check_record(rec, by_path)  # its own info-hash matches
    forged = dict(rec, pieces=("00" * 20) + rec["pieces"][40:])
    with pytest.raises(_swarm.SwarmError) as refused:
        _swarm.check_record(forged, by_path)
    assert "does not match its pieces" in str(refused.value)
    with pytest.raises(_swarm.SwarmError):
        _swarm.check_record(dict(rec, digest="0" * 64), by_path)


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
    records = dict((e["path"], _swarm.record(e, *hashed[e["path"]], host="h0")) for e in manifest
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
    _good, bad, _hashed = _model.verify_files(bases[2], [shard])
    assert not bad
    assert results[2]["transferred"] == [shard["path"]]
    # only what was missing, to a piece: at most one piece more than the lost part, besides
    # the end game's blocks received twice (reported apart)
    plen = _swarm.piece_length(shard["size"])
    unique = results[2]["bytes_transferred"] - results[2]["bytes_redundant"]
    assert shard["size"] - keep <= unique <= shard["size"] - keep + plen
    assert results[0]["bytes_read_to_hash"] == results[1]["bytes_read_to_hash"] == 0


def test_a_verified_copy_of_several_pieces_is_super_seeded_on_a_site_of_four_hosts(
        tmp_path, swarm_port):
    """On a site of 4 hosts (3 other hosts, SUPER_SEED_PEERS) the seed (and a holder) shows
    each peer the pieces few others hold (BEP 16), for a file of more than one piece; a
    file of one piece is served plainly, and a peer's torrent never is super-seeded. The
    control: on a site of 2 hosts nothing is."""
    port = swarm_port

    def rec(path, size):
        data = os.urandom(size)
        with open(str(tmp_path / path), "wb") as handle:
            handle.write(data)
        hasher = _swarm.StreamHash("sha256", size)
        hasher.update(data)
        digest, pieces = hasher.finish()
        entry = {"path": path, "size": size, "algo": "sha256", "digest": digest}
        return _swarm.record(entry, digest, hasher.plen, pieces, "seed")

    several = rec("shard.bin", 2 * _swarm.PIECE_MIN + 5)
    one = rec("config.json", 300)
    assert len(several["pieces"]) == 3 * 40 and len(one["pieces"]) == 40
    seen = {}
    for hosts in (4, 2):
        addrs = ["127.0.0.%d" % (i + 1) for i in range(hosts)]
        swarm = _swarm.Swarm(lt, "127.0.0.1", port, addrs, addrs)
        try:
            flags = {"several": swarm.add(several, str(tmp_path), seed=True).flags(),
                     "one": swarm.add(one, str(tmp_path), seed=True).flags(),
                     "peer": swarm.add(dict(several, path="wanted.bin"),
                                       str(tmp_path / "peer")).flags()}
        finally:
            swarm.close()
        seen[hosts] = {k: bool(v & lt.torrent_flags.super_seeding) for k, v in flags.items()}
    assert seen == {4: {"several": True, "one": False, "peer": False},
                    2: {"several": False, "one": False, "peer": False}}


def _rec_for(tmp_path, path, size):
    data = os.urandom(size)
    hasher = _swarm.StreamHash("sha256", size)
    hasher.update(data)
    digest, pieces = hasher.finish()
    entry = {"path": path, "size": size, "algo": "sha256", "digest": digest}
    return entry, _swarm.record(entry, digest, hasher.plen, pieces, "seed")


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

    class Clock(object):  # the step's clock only (time.time of the module _swarm_step)
        @staticmethod
        def time():
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
