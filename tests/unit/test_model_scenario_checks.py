# -*- coding: utf-8 -*-
"""The model scenario's check scripts (extensions/molecule/model/files/*.py), which replaced
the Jinja and shell that parsed what verify.yml read (issue 47): the slurped fetch records and
markers, the Hub double's counters, /proc/net/tcp, ``ps``, a nested ansible-playbook's JSON
output, the swarm jobs and a download's progress file.

The inputs are shaped as the scenario gets them: the Hub double's own ``/_admin/repo`` and
``/_admin/counters`` (tests/hub_double), records and markers written by the collection's
writers and base64-encoded as ``ansible.builtin.slurp`` returns them, the kernel's socket
tables and ``ps -e -o pid=,ppid=`` as they print, the json callback's document after
model_wait's progress lines. Each check has a control: the bad input it exists to catch."""

import base64
import importlib.util
import io
import json
import os
import signal
import sys

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files, _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _lease, _model
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES, ROOT

FILES = os.path.join(ROOT, "extensions", "molecule", "model", "files")
sys.path.insert(0, FILES)  # as for the scripts themselves: their folder first (files/_stdin_json.py)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fetch_records = _load("fetch_records", os.path.join(FILES, "fetch_records.py"))
ports = _load("ports", os.path.join(FILES, "ports.py"))
nested_run = _load("nested_run", os.path.join(FILES, "nested_run.py"))
lease_jobs = _load("lease_jobs", os.path.join(FILES, "lease_jobs.py"))
kill_tree = _load("kill_tree", os.path.join(FILES, "kill_tree.py"))
hub_download = _load("hub_download", os.path.join(FILES, "hub_download.py"))
hub_double = _load("hub_double", os.path.join(ROOT, "tests", "hub_double", "hub_double.py"))

HOSTS = ["gpufleet-model-1", "gpufleet-model-2", "gpufleet-model-3"]
SHARD2 = "model-00002-of-00003.safetensors"


# --- inputs as the scenario reads them ---------------------------------------------------------

@pytest.fixture(scope="module")
def double_repo():
    with open(os.path.join(FIXTURES, "models", "moonshotai__Kimi-K2.5", "config.json"), "rb") as handle:
        files = hub_double.build_repo(handle.read(), shards=3, shard_size=64 * 1024)
    return hub_double.Repo(hub_double.REPO_ID, files)


@pytest.fixture(scope="module")
def repo(double_repo):
    """``/_admin/repo``, as the lookup gives it."""
    return json.loads(json.dumps({"repo_id": double_repo.repo_id, "commit": double_repo.commit,
                                  "refs": double_repo.refs, "tree": list(double_repo.entries.values())}))


def _size(repo, path):
    return [e["size"] for e in repo["tree"] if e["path"] == path][0]


def _total(repo):
    return sum(e["size"] for e in repo["tree"])


def counters(repo, clients=("10.88.0.3",), heads=1, ranges=3, revision=0):
    """``/_admin/counters`` after a seed fetched every file: a HEAD per file, then its bytes
    in ``ranges`` GETs (LFS files from the CDN port), as the double counts them."""
    state = hub_double.State()
    state.count("tree", "GET", "/api/models/x/tree/c", 200, clients[0], 900)
    for _lookup in range(revision):
        state.count("revision", "GET", "/api/models/x/revision/main", 200, clients[0], 300)
    for client in clients:
        for entry in repo["tree"]:
            for _head in range(heads):
                state.count("head", "HEAD", "/x/resolve/c/" + entry["path"], 200, client, 0, entry["path"])
            kind = "cdn_get" if "lfs" in entry else "resolve_get"
            step = -(-entry["size"] // ranges)
            for start in range(0, entry["size"], step):
                state.count(kind, "GET", "/" + entry["path"], 206, client,
                            min(step, entry["size"] - start), entry["path"], "bytes=%d-" % start)
    return json.loads(json.dumps(state.counters()))


def slurped(data):
    """A JSON file as the collection writes it, as ``ansible.builtin.slurp`` returns it."""
    return base64.b64encode(_files.dumps(data).encode()).decode()


def record(repo, source, **over):
    """A host's ``.<commit>.last-fetch.json``: model_fetch's result as settle() writes it."""
    result = dict(changed=True, needed_bytes=0, free_bytes=0, bytes_transferred=0, bytes_redundant=0,
                  resumed_from={}, hub_gets=0, bytes_hashed=_total(repo), bytes_read_to_hash=0,
                  bytes_served=0, transferred=[], removed=[], elapsed=3.14159, engine="libtorrent 2.0.8.0",
                  io={"rchar": 1, "wchar": 2, "read_bytes": 0, "write_bytes": _total(repo)}, cpu_s=0.5,
                  engine_disk={"read_back": 0, "hash_us": 1200})
    if source == "hub":
        result.update(hub_gets=len(repo["tree"]) * 3, bytes_transferred=_total(repo),
                      transferred=[e["path"] for e in repo["tree"]])
    else:
        result.update(bytes_transferred=_total(repo) - 1000)
    result.update(over)
    return dict(result, source=source, peer=None, commit=repo["commit"], finished_at=1765000000.5)


def _entry(repo, path):
    e = [e for e in repo["tree"] if e["path"] == path][0]
    if "lfs" in e:
        return {"path": path, "size": e["size"], "algo": "sha256", "digest": e["lfs"]["oid"]}
    return {"path": path, "size": e["size"], "algo": "git-sha1", "digest": e["oid"]}


def marker(tmp_path, repo, how, read_back=()):
    """A host's verified marker, written by _weights.write_marker: each file verified against
    the Hub's digest while written (``hub``) or the seed's pieces (``peer``); ``read_back``
    files read back and hashed."""
    good, against = {}, {}
    for e in repo["tree"]:
        entry = _entry(repo, e["path"])
        good[e["path"]] = (e["size"], 1765000000000000000)
        if e["path"] in read_back:
            against[e["path"]] = _weights.read_back(entry)
            continue
        plen = _weights.piece_length(e["size"])
        pieces = b"\x11" * 20 * (-(-e["size"] // plen))
        rec = _weights.record(entry, entry["digest"], plen, pieces, "gpufleet-model-1")
        against[e["path"]] = _weights.against(rec, "hub" if how == "hub" else "swarm")
    base = tmp_path / ("marker-" + how)
    base.mkdir(exist_ok=True)
    _weights.write_marker(str(base), repo["repo_id"], repo["commit"], good, against)
    return base64.b64encode((base / _weights.MARKER).read_bytes()).decode()


def run(module, argv, doc, capsys):
    rc = module.main(argv, stdin=io.StringIO(json.dumps(doc)))
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else out.err)


# --- fetch_records ------------------------------------------------------------------------------

def test_hub_each_file_once_one_client_one_head_each(repo, capsys):
    rc, fig = run(fetch_records, ["hub"], {"repo": repo, "hub": counters(repo)}, capsys)
    assert rc == 0
    assert [f["from_hub"] for f in fig["files"]] == [f["size"] for f in fig["files"]]
    assert [f["path"] for f in fig["files"]] == [e["path"] for e in repo["tree"]]
    assert fig["file_clients"] == ["10.88.0.3"]
    assert fig["head_requests"] == fig["tree_files"] == len(repo["tree"])
    assert fig["revision_requests"] == 0


def test_hub_controls_a_second_client_a_second_head_a_revision_lookup(repo):
    fig = fetch_records.hub_figures(repo, counters(repo, clients=("10.88.0.3", "10.88.0.4"), heads=2,
                                                   revision=1))
    assert all(f["from_hub"] == 2 * f["size"] for f in fig["files"])  # each file came twice
    assert fig["file_clients"] == ["10.88.0.3", "10.88.0.4"]
    assert fig["head_requests"] == 4 * len(repo["tree"])
    assert fig["revision_requests"] == 1
    # nothing fetched: no HEAD counted is null, not 0 == 0
    empty = fetch_records.hub_figures(repo, json.loads(json.dumps(hub_double.State().counters())))
    assert empty["head_requests"] is None and empty["file_clients"] == []
    assert all(f["from_hub"] == 0 for f in empty["files"])


def test_placement_one_seed_whose_ranges_are_the_hub_s_gets(repo, capsys):
    hub = counters(repo)
    recs = [record(repo, "hub"), record(repo, "peer", elapsed=2.004), record(repo, "peer")]
    rc, fig = run(fetch_records, ["placement"],
                  {"repo": repo, "hub": hub, "hosts": HOSTS, "fetched": [slurped(r) for r in recs]}, capsys)
    assert rc == 0
    assert fig["records"]["gpufleet-model-2"] == json.loads(json.dumps(recs[1]))
    assert fig["total_bytes"] == _total(repo) and fig["tree_files"] == len(repo["tree"])
    assert fig["hub_sources"] == 1 and fig["seed"] == "gpufleet-model-1"
    assert fig["seed_hub_gets"] == fig["hub_range_gets"] == 3 * len(repo["tree"]) > fig["tree_files"]
    assert fig["fanout"]["peer_bytes"] == 2 * (_total(repo) - 1000)
    assert fig["fanout"]["per_host"][1] == ["peer", _total(repo) - 1000, 2.0]
    assert fig["fanout"]["hub_file_bytes"] == hub["file_bytes_total"]


def test_placement_controls_two_seeds_no_seed_an_extra_get(repo):
    hub = counters(repo)
    two = fetch_records.placement(repo, hub, HOSTS, [slurped(record(repo, "hub"))] * 2
                                  + [slurped(record(repo, "peer"))])
    assert two["hub_sources"] == 2
    none = fetch_records.placement(repo, hub, HOSTS, [slurped(record(repo, "peer"))] * 3)
    assert none["hub_sources"] == 0 and none["seed"] is None and none["seed_hub_gets"] is None
    # the seed asked one range fewer than the Hub answered
    short = fetch_records.placement(repo, hub, HOSTS, [slurped(record(repo, "hub", hub_gets=3 * len(repo["tree"]) - 1))]
                                    + [slurped(record(repo, "peer"))] * 2)
    assert short["seed_hub_gets"] != short["hub_range_gets"]
    with pytest.raises(ValueError):
        fetch_records.placement(repo, hub, HOSTS, [slurped(record(repo, "hub"))])


def test_swarm_seed_and_peer_are_verified_against_their_source(repo, tmp_path, capsys):
    rc, seed = run(fetch_records, ["swarm"], {"repo": repo, "fetched": slurped(record(repo, "hub")),
                                              "marker": marker(tmp_path, repo, "hub")}, capsys)
    assert rc == 0
    assert seed["engine_is_libtorrent"] and seed["io_has_read_bytes"]
    assert seed["bytes_read_to_hash"] == 0 and seed["engine_read_back"] == 0
    assert seed["files"] == seed["tree_files"] == seed["against_matching"] == len(repo["tree"])
    peer = fetch_records.swarm(repo, slurped(record(repo, "peer", bytes_served=5)), marker(tmp_path, repo, "peer"))
    assert peer["against_matching"] == len(repo["tree"]) and peer["source"] == "peer"
    assert peer["bytes_served"] == 5


def test_swarm_controls_read_back_wrong_source_engine_io_marker(repo, tmp_path):
    # a peer's file read back and hashed is not verified against the seed's pieces
    read_back = fetch_records.swarm(repo, slurped(record(repo, "peer")),
                                    marker(tmp_path, repo, "peer", read_back=[SHARD2]))
    assert read_back["against_matching"] == len(repo["tree"]) - 1
    # a seed's marker that names the seed's pieces, not the Hub's digest
    assert fetch_records.swarm(repo, slurped(record(repo, "hub")), marker(tmp_path, repo, "peer"))["against_matching"] == 0
    # an empty file's digest passes for a peer (the swarm has no piece of it), not a file's
    empty = fetch_records.swarm(repo, slurped(record(repo, "peer")), marker(tmp_path, repo, "peer"))
    note = "sha256:%s (empty)" % ("0" * 64)
    assert fetch_records.re.match(empty["against_pattern"], note)
    assert not fetch_records.re.match(empty["against_pattern"], "sha256:%s (hashed while written)" % ("0" * 64))
    rsync = fetch_records.swarm(repo, slurped(record(repo, "hub", engine="", io={}, bytes_read_to_hash=7,
                                                     engine_disk={"read_back": 3})), marker(tmp_path, repo, "hub"))
    assert not rsync["engine_is_libtorrent"] and not rsync["io_has_read_bytes"]
    assert rsync["bytes_read_to_hash"] == 7 and rsync["engine_read_back"] == 3
    no_disk = dict(record(repo, "hub"))
    del no_disk["engine_disk"]
    assert fetch_records.swarm(repo, slurped(no_disk), marker(tmp_path, repo, "hub"))["engine_read_back"] is None
    short = json.loads(base64.b64decode(marker(tmp_path, repo, "hub")))
    del short["files"][SHARD2]
    assert fetch_records.swarm(repo, slurped(record(repo, "hub")), slurped(short))["files"] == len(repo["tree"]) - 1


def test_repair_the_shard_s_missing_part_and_the_received_bytes(repo, capsys):
    size = _size(repo, SHARD2)
    rec = record(repo, "peer", transferred=[SHARD2], bytes_transferred=size - 4000 + 16384,
                 bytes_redundant=16384, bytes_hashed=size, elapsed=1.23456)
    rc, fig = run(fetch_records, ["repair", "--shard", SHARD2, "--kept", "4000"],
                  {"repo": repo, "fetched": slurped(rec)}, capsys)
    assert rc == 0
    assert fig["shard_size"] == size and fig["shard_missing"] == size - 4000
    assert fig["received"] == size - 4000 and fig["elapsed_s"] == 1.23
    assert fig["fetch"]["transferred"] == [SHARD2] and fig["fetch"]["source"] == "peer"
    assert fig["total_bytes"] == _total(repo)


def test_repair_controls_no_record_another_shard_received_twice(repo, capsys):
    # a host that read no record (a skipped slurp: null)
    rc, fig = run(fetch_records, ["repair", "--shard", SHARD2], {"repo": repo, "fetched": None}, capsys)
    assert rc == 0 and fig["fetch"] is None and fig["received"] is None and fig["shard_missing"] is None
    assert fetch_records.repair(repo, None, "absent.safetensors", 10)["shard_size"] is None
    size = _size(repo, SHARD2)
    twice = fetch_records.repair(repo, slurped(record(repo, "peer", bytes_transferred=size, bytes_redundant=0)),
                                 SHARD2, 4000)
    assert twice["received"] > twice["shard_missing"]  # the whole shard again, not its missing part


def test_resume_only_the_missing_bytes_and_a_progress_line(repo, capsys):
    size = _size(repo, SHARD2)
    rest = [e["path"] for e in repo["tree"] if e["path"] > SHARD2 or e["path"] == SHARD2]
    rec = record(repo, "hub", resumed_from={SHARD2: 10000}, transferred=rest,
                 bytes_transferred=sum(_size(repo, p) for p in rest) - 10000)
    progress = ["gpufleet-model-1: " + _model.progress_line(2, 6, 3 << 20, 6 << 20, 3.0)]
    rc, fig = run(fetch_records, ["resume"], {"repo": repo, "fetched": slurped(rec), "progress": progress}, capsys)
    assert rc == 0
    assert fig["source"] == "hub" and fig["resumed_files"] == 1 and fig["resumed_bytes"] == 10000
    assert fig["missing_bytes"] == fig["bytes_transferred"] == sum(_size(repo, p) for p in rest) - 10000
    assert fig["missing_bytes"] < fig["total_bytes"] and size in [_size(repo, p) for p in rest]
    assert fig["progress_lines"] == 1 and fig["eta_lines"] == 1


def test_resume_controls_nothing_continued_no_eta_line(repo):
    rec = record(repo, "hub")
    fig = fetch_records.resume(repo, slurped(rec), ["gpufleet-model-1: waiting", "started"])
    assert fig["resumed_files"] == 0 and fig["resumed_bytes"] == 0
    assert fig["missing_bytes"] == fig["total_bytes"]  # everything came again
    assert fig["progress_lines"] == 2 and fig["eta_lines"] == 0


def test_unreadable_input_is_an_error_not_a_figure(repo, capsys):
    rc, err = run(fetch_records, ["swarm"], {"repo": repo, "fetched": "bm90IGpzb24=", "marker": "x"}, capsys)
    assert rc == 1 and "unreadable input" in err
    rc, err = run(fetch_records, ["resume"], {"repo": repo, "fetched": slurped({"source": "hub"}), "progress": []},
                  capsys)
    assert rc == 1 and "resumed_from" in err


# --- ports ---------------------------------------------------------------------------------------

TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0B00580A:221B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 81234 1 0000000000000000 100 0 0 10 0
   1: 0B00580A:0016 0100007F:A1C2 01 00000000:00000000 02:0009A5C1 00000000     0        0 80012 4 0000000000000000 20 4 30 10 -1
   2: 0B00580A:221B 0C00580A:B3F0 06 00000000:00000000 03:000016F3 00000000     0        0 0 3 0000000000000000
   3: 0B00580A:D204 0D00580A:221B 01 00000000:00000000 00:00000000 00000000     0        0 81302 1 0000000000000000 20 4 31 10 -1
"""
TCP6 = (
    "  sl  local_address                         remote_address                        st tx_queue rx_queue tr"
    " tm->when retrnsmt   uid  timeout inode\n"
    "   0: 00000000000000000000000000000000:221B 00000000000000000000000000000000:0000 0A 00000000:00000000"
    " 00:00000000 00000000     0        0 81235 1 0000000000000000 100 0 0 10 0\n")
TIME_WAIT_ONLY = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0B00580A:0016 0100007F:A1C2 01 00000000:00000000 02:0009A5C1 00000000     0        0 80012 4 0000000000000000 20 4 30 10 -1
   1: 0B00580A:221B 0C00580A:B3F0 06 00000000:00000000 03:000016F3 00000000     0        0 0 3 0000000000000000
   2: 0B00580A:D204 0D00580A:221B 06 00000000:00000000 03:00001702 00000000     0        0 0 3 0000000000000000
"""


def test_states_on_the_swarm_port_either_end(tmp_path, capsys):
    assert ports.states(TCP, 8731) == ["0A", "06", "01"]  # not the ssh socket (port 22)
    assert ports.states(TIME_WAIT_ONLY, 8731) == ["06", "06"]
    (tmp_path / "tcp").write_text(TIME_WAIT_ONLY)
    (tmp_path / "tcp6").write_text(TCP6.splitlines()[0] + "\n")
    assert ports.main(["states", "--port", "8731", str(tmp_path / "tcp"), str(tmp_path / "tcp6")]) == 0
    assert json.loads(capsys.readouterr().out) == {"port": 8731, "states": ["06", "06"], "open": []}
    # the control: a listening or established socket left on the port is open
    (tmp_path / "tcp6").write_text(TCP6)
    assert ports.main(["states", "--port", "8731", str(tmp_path / "tcp"), str(tmp_path / "tcp6")]) == 0
    assert json.loads(capsys.readouterr().out)["open"] == ["0A"]
    with pytest.raises(OSError):  # a table that cannot be read is an error (rc 1), not no socket
        ports.main(["states", "--port", "8731", str(tmp_path / "absent")])


def test_listening_counts_hosts_with_a_listener():
    tables = {"gpufleet-model-1": TCP + TCP6, "gpufleet-model-2": TCP6.replace(":221B ", ":221C ", 1),
              "gpufleet-model-3": TIME_WAIT_ONLY}
    got = ports.listening_on_hosts(HOSTS, 8731, read=tables.get)
    assert got["listening"] == {"gpufleet-model-1": 2, "gpufleet-model-2": 0, "gpufleet-model-3": 0}
    assert got["hosts_listening"] == 1 and got["errors"] == {}
    every = ports.listening_on_hosts(HOSTS, 8731, read=lambda host: TCP)
    assert every["hosts_listening"] == 3


def test_listening_a_host_that_cannot_be_read_counts_zero_and_fails(capsys):
    def read(host):
        if host == "gpufleet-model-2":
            raise OSError("podman exec gpufleet-model-2 cat: rc 125: no such container")
        return TCP
    got = ports.listening_on_hosts(HOSTS, 8731, read=read)
    assert got["hosts_listening"] == 2 and "no such container" in got["errors"]["gpufleet-model-2"]
    assert ports.main(["listening", "--port", "8731", "--hosts", ",".join(HOSTS)], read=read) == 1
    assert json.loads(capsys.readouterr().out)["listening"]["gpufleet-model-2"] == 0


# --- nested_run ----------------------------------------------------------------------------------

def _result(**over):
    base = {"_ansible_no_log": False, "action": "gpufleet.sglang.model_swarm", "changed": False}
    base.update(over)
    return base


SKIPPED = {"changed": False, "skip_reason": "Conditional result was False", "skipped": True,
           "false_condition": "inventory_hostname != __model_swarm.feeder"}


def _task(name, hosts):
    return {"hosts": hosts, "task": {"duration": {"end": "2026-12-07T19:24:32.7Z", "start": "2026-12-07T19:24:32.6Z"},
                                     "id": "02fc0000-0001-bc7d-1d94-000000000006", "name": name,
                                     "path": "/work/main/roles/model/tasks/wave.yml:37"}}


def _output(tasks, progress=True):
    doc = {"custom_stats": {}, "global_custom_stats": {},
           "plays": [{"play": {"name": "Put the model on every host", "id": "x", "path": "converge.yml:2",
                               "duration": {"end": "e", "start": "s"}}, "tasks": tasks}],
           "stats": {h: {"changed": 3, "failures": 0, "ok": 20, "skipped": 5} for h in HOSTS}}
    lines = ""
    if progress:
        lines = "".join("model transfer %s: %s\n" % (h, _model.progress_line(1, 6, 1 << 20, 6 << 20, 2.0))
                        for h in HOSTS)
    return lines + json.dumps(doc, indent=4, sort_keys=True)


RELAY = "gpufleet.sglang.model : Hand out the piece hashes as the site's feeder publishes them"
WAVE = "gpufleet.sglang.model : Hand their piece hashes to this peer, or touch this host's inbox"


def _waves_run(progress=True):
    return _output([
        _task(RELAY, {h: SKIPPED for h in HOSTS}),
        _task("gpufleet.sglang.model : Wait for the next files the site's feeder verified",
              {"gpufleet-model-1": _result(changed=True)}),
        _task(WAVE, {"gpufleet-model-1": SKIPPED, "gpufleet-model-2": _result(changed=False),
                     "gpufleet-model-3": _result(changed=True)}),
        _task(WAVE, {"gpufleet-model-1": SKIPPED, "gpufleet-model-2": _result(), "gpufleet-model-3": _result()}),
    ], progress)


def test_relay_the_waves_handed_host_3_the_records(capsys):
    rc, fig = run(nested_run, ["relay", "--host", "gpufleet-model-3"], {"output": _waves_run()}, capsys)
    assert rc == 0
    assert fig == {"waves": 2, "waves_changed": 1, "waves_unreadable": 0, "relay": 1, "relay_skipped": 1,
                   "relay_unreadable": 0}
    # the document alone (no progress line before it) reads the same
    assert nested_run.relay(_waves_run(progress=False), "gpufleet-model-3") == fig


def test_relay_controls_the_relay_ran_no_wave_changed_a_host_missing():
    relayed = _output([_task(RELAY, {h: _result(changed=True) for h in HOSTS}),
                       _task(WAVE, {h: _result() for h in HOSTS})])
    fig = nested_run.relay(relayed, "gpufleet-model-3")
    assert fig["relay_skipped"] == 0 < fig["relay"] and fig["waves_changed"] == 0
    missing = _output([_task(RELAY, {"gpufleet-model-1": SKIPPED}), _task(WAVE, {"gpufleet-model-1": _result()}),
                       _task(WAVE, {"gpufleet-model-3": {"skipped": True}})])
    fig = nested_run.relay(missing, "gpufleet-model-3")
    assert fig["relay_unreadable"] == 1 and fig["waves_unreadable"] == 2
    assert nested_run.relay(_output([]), "gpufleet-model-3")["relay"] == 0
    with pytest.raises(ValueError):
        nested_run.relay("model transfer gpufleet-model-3: 1/6 files\nTraceback (most recent call last):", "h")


def _refused(repo, free):
    manifest = [_entry(repo, e["path"]) for e in repo["tree"]]
    with pytest.raises(_model.ModelError) as refused:
        _model.space_check("/models/gpufleet-test--tiny-model/" + repo["commit"], manifest, 0, free)
    path = "/models/gpufleet-test--tiny-model/" + repo["commit"]
    return _output([_task("gpufleet.sglang.model : Check the space before any transfer", {
        "gpufleet-model-1": SKIPPED, "gpufleet-model-2": SKIPPED,
        "gpufleet-model-3": _result(failed=True, msg="%s: %s" % (path, refused.value))})], progress=False)


def test_refusal_names_needed_free_and_nothing_moved(repo, capsys):
    rc, fig = run(nested_run, ["refusal", "--free", "1000"], {"repo": repo, "output": _refused(repo, 1000)}, capsys)
    assert rc == 0
    assert fig["phrases"] == ["needed %d bytes" % _total(repo), "free 1000 bytes", "nothing was transferred"]
    assert fig["missing"] == [] and fig["needed_bytes"] == _total(repo)
    assert fig["failures"][0]["host"] == "gpufleet-model-3" and "free 1000 bytes" in fig["failures"][0]["msg"]


def test_refusal_controls_another_free_figure_and_no_refusal(repo):
    fig = nested_run.refusal(_refused(repo, 999), repo, 1000)
    assert fig["missing"] == ["free 1000 bytes"]
    fig = nested_run.refusal("ERROR! the playbook could not be read", repo, 1000)
    assert len(fig["missing"]) == 3 and fig["failures"] is None


# --- lease_jobs ----------------------------------------------------------------------------------

def _job(failed, idle_s=8.9, lease_s=8.0, expired=True, msg=None):
    lease = _lease.Lease(lease_s, 100.0)
    lease.look(100.0, (10, 1), (0, 0))
    report = dict(lease.report(100.0 + idle_s), idle_s=idle_s)
    job = {"changed": True, "bytes_transferred": 1000, "bytes_served": 0, "lease": report,
           "engine": "libtorrent 2.0.8.0", "invocation": {"module_args": {"swarm": {"lease": lease_s}}}}
    if expired is not None:
        job["lease_expired"] = expired
    if failed:
        job.update(failed=True, msg=msg or "/models/x/c: " + lease.message(100.0 + idle_s))
    return json.loads(json.dumps(job))


def test_lease_one_seed_two_peers_all_on_the_lease(capsys):
    jobs = {"gpufleet-model-1": _job(False), "gpufleet-model-2": _job(True), "gpufleet-model-3": _job(True)}
    rc = lease_jobs.main(["--hosts", ",".join(HOSTS)], read=jobs.get)
    fig = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert fig["lease_expired"] == [True] and fig["lease_s"] == [8.0]
    assert fig["seeds"] == 1 and fig["seed_idle_s"] == 8.9 and fig["peers"] == 2 and fig["peers_no_word"] == 2
    assert list(fig["ended"]) == HOSTS


def test_lease_controls_a_stop_two_seeds_another_message_another_lease():
    fig = lease_jobs.figures({"a": _job(False, expired=None), "b": _job(True), "c": _job(True)})
    assert fig["lease_expired"] == [None, True]
    fig = lease_jobs.figures({"a": _job(False), "b": _job(False), "c": _job(True, msg="the swarm ran past its deadline")})
    assert fig["seeds"] == 2 and fig["peers"] == 1 and fig["peers_no_word"] == 0
    fig = lease_jobs.figures({"a": _job(False, lease_s=30.0), "b": _job(True), "c": _job(True)})
    assert fig["lease_s"] == [30.0, 8.0]
    assert lease_jobs.figures({"a": _job(True), "b": _job(True), "c": _job(True)})["seed_idle_s"] is None


def test_lease_a_job_that_cannot_be_read_fails_naming_the_host(capsys):
    def read(host):
        raise OSError("%s: rc 1: cat: '$(grep': no such file" % host)
    assert lease_jobs.main(["--hosts", "gpufleet-model-2"], read=read) == 1
    assert "gpufleet-model-2" in capsys.readouterr().err


# --- kill_tree -----------------------------------------------------------------------------------

PS = """\
      1       0
     57       1
   4100       1
   4107    4100
   4120    4107
   4121    4107
   4133    4120
   4200    4133
   4300      57
"""


def test_the_tree_is_walked_level_by_level_from_ps():
    table = kill_tree.parents(PS)
    assert (4107, 4100) in table and len(table) == 9
    assert kill_tree.tree(table, 4107) == [4107, 4120, 4121, 4133, 4200]
    assert kill_tree.tree(table, 4300) == [4300]  # a leaf: itself only
    assert kill_tree.tree(table, 999) == [999]  # gone: itself, whose kill fails quietly


def test_stopped_first_then_the_tree_read_again_is_killed(tmp_path, capsys):
    (tmp_path / "pgid").write_text("4107\n")
    tables = [kill_tree.parents(PS), kill_tree.parents(PS + "   4400    4121\n")]  # forked before the stop
    sent = []

    def kill(pid, signum):
        sent.append((pid, signum))
        if pid == 4121 and signum == signal.SIGKILL:
            raise ProcessLookupError(pid)  # gone meanwhile: no error
    rc = kill_tree.main(["--root-file", str(tmp_path / "pgid")], table=lambda: tables.pop(0), kill=kill,
                        clock=lambda: 1765000123.25)
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["killed_at"] == 1765000123.25
    assert [p for p, s in sent if s == signal.SIGSTOP] == [4107, 4120, 4121, 4133, 4200]
    assert [p for p, s in sent if s == signal.SIGKILL] == [4107, 4120, 4121, 4133, 4400, 4200]
    assert sent.index((4200, signal.SIGSTOP)) < sent.index((4107, signal.SIGKILL))
    assert out["killed"] == [4107, 4120, 4121, 4133, 4400, 4200]


def test_a_root_file_without_a_pid_kills_nothing(tmp_path, capsys):
    (tmp_path / "pgid").write_text("\n")
    sent = []
    assert kill_tree.main(["--root-file", str(tmp_path / "pgid")], table=lambda: [], kill=lambda *a: sent.append(a)) == 1
    assert sent == [] and "holds no pid" in capsys.readouterr().err


# --- hub_download --------------------------------------------------------------------------------

def test_progress_reads_bytes_done_and_the_pid(tmp_path, capsys):
    path = tmp_path / ".c.progress.json"
    _files.write_json(str(path), {"pid": 4242, "files_done": 1, "files": 6, "bytes_done": 12 << 20,
                                  "bytes": 48 << 20, "rate_bps": 524288.0, "eta_s": 72.0, "elapsed_s": 24.0,
                                  "finished": False, "line": _model.progress_line(1, 6, 12 << 20, 48 << 20, 24.0)})
    assert hub_download.main(["progress", str(path)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["present"] and got["bytes_done"] == 12 << 20 and got["pid"] == 4242


def test_progress_controls_no_file_yet_and_a_file_cut_short(tmp_path):
    absent = hub_download.progress(str(tmp_path / "absent.json"))
    assert absent == {"present": False, "bytes_done": 0, "pid": None, "line": None}
    (tmp_path / "cut.json").write_text('{"pid": 42, "bytes_do')
    assert hub_download.progress(str(tmp_path / "cut.json"))["present"] is False


def test_the_client_is_killed_once_a_partial_file_holds_bytes(tmp_path):
    cache = tmp_path / "gpufleet-test--tiny-model" / ".c.staging" / ".cache" / "huggingface" / "download"
    cache.mkdir(parents=True)
    (cache / "empty.incomplete").write_bytes(b"")
    looks, sent = [], []

    def sleep(seconds):
        looks.append(seconds)
        if len(looks) == 3:  # the download writes its first bytes
            (cache / "Xa1b2.model-00002-of-00003.safetensors.incomplete").write_bytes(b"\0" * 700)
    found = hub_download.kill_when_partial(str(tmp_path / "gpufleet-test--tiny-model"), 4242,
                                           kill=lambda pid, sig: sent.append((pid, sig)), sleep=sleep)
    assert found.endswith("model-00002-of-00003.safetensors.incomplete")
    assert sent == [(4242, signal.SIGKILL)] and looks == [0.1, 0.1, 0.1]


def test_no_partial_file_no_kill(tmp_path, capsys):
    (tmp_path / "whole.safetensors").write_bytes(b"\0" * 10)
    (tmp_path / "empty.incomplete").write_bytes(b"")
    sent = []
    assert hub_download.kill_when_partial(str(tmp_path), 1, looks=5, kill=lambda *a: sent.append(a),
                                          sleep=lambda s: None) is None
    assert sent == []
    # 600 looks (no sleep here), then the shell's message and rc 1
    assert hub_download.main(["kill-when-partial", "--under", str(tmp_path), "--pid", "1"],
                             kill=lambda *a: sent.append(a), sleep=lambda s: None) == 1
    assert sent == [] and "no partial file in 60 s" in capsys.readouterr().out
