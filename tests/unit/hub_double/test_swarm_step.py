"""The swarm step (module_utils/_swarm_step) on loopback: a seed that downloads from the Hub
double hashing as it writes, two peers that get the records through their inbox, a holder
that serves a verified copy, and a kill/resume. Needs libtorrent (skipped without it; the
molecule scenario `model` runs it on the test hosts with Debian's python3-libtorrent)."""
import os
import threading
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils import (
    _files, _model, _model_hub, _swarm, _swarm_step)
from hub_double import REPO_ID

pytest.importorskip("huggingface_hub")
lt = _swarm.import_engine()
if lt is None:
    pytest.skip("libtorrent is not installed", allow_module_level=True)

ADDRS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def params(hub, commit, tmp, role, address, port, session="s1"):
    return {"repo_id": REPO_ID, "commit": commit, "endpoint": hub.endpoint, "token": "",
            "xet": False, "workers": 2,
            "swarm": {"role": role, "address": address, "port": port, "peers": ADDRS,
                      "session": session, "inbox": str(tmp / ("inbox-" + address)),
                      "published": str(tmp / ("published-" + address)), "deadline": 60}}


def result():
    return dict(bytes_transferred=0, resumed_from={}, bytes_hashed=0, bytes_read_to_hash=0,
                bytes_served=0, transferred=[], removed=[])


def relay(seed_p, peers_p, stop_when, timeout=60):
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
    for p in [seed_p] + peers_p:
        _files.append_line(p["swarm"]["inbox"], {"session": p["swarm"]["session"], "stop": True})


def run_step(step, missing, out):
    try:
        out[step.role + step.sw["address"]] = step.run(missing)
    except Exception as error:  # reported by the test
        out[step.role + step.sw["address"]] = error


def test_seed_and_two_peers_hash_once_and_close_the_port(hub, tmp_path):
    commit, manifest, _xet = _model_hub.resolve(hub.endpoint, REPO_ID, "main")
    port = 17000 + os.getpid() % 1000
    bases = [str(tmp_path / ("h%d" % i)) for i in range(3)]
    for base in bases:
        os.makedirs(base)
    ps = [params(hub, commit, tmp_path, "seed" if i == 0 else "peer", ADDRS[i], port)
          for i in range(3)]
    results = [result() for _ in range(3)]
    steps = [_swarm_step.Step(ps[i], bases[i], manifest, {}, str(tmp_path / ("prog%d" % i)),
                              results[i], lt) for i in range(3)]
    out = {}
    threads = [threading.Thread(target=run_step, args=(steps[i], manifest if i == 0 else [], out))
               for i in range(3)]
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
    assert all(steps[0].against[e["path"]].startswith(e["algo"] + ":") for e in manifest)
    import socket
    for address in ADDRS:  # nothing listens on the swarm port any more
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
