"""The model step's logic (module_utils) against the Hub double and real huggingface_hub."""
import hashlib
import json
import os
import urllib.request

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import (
    _model,
    _model_hub)
from hub_double import REPO_ID

pytest.importorskip("huggingface_hub")


def knobs(hub, **change):
    req = urllib.request.Request(hub.endpoint + "/_admin/knobs", data=json.dumps(change).encode(),
                                 method="POST")
    return json.load(urllib.request.urlopen(req))


def resolved(hub, **kw):
    return _model_hub.resolve(hub.endpoint, REPO_ID, "main", **kw)


def test_resolve_branch_to_commit_and_manifest(hub):
    commit, manifest, xet = resolved(hub)
    assert commit == hub.repo.commit and not xet
    assert [m["path"] for m in manifest] == sorted(hub.repo.files)
    algos = dict((m["path"], m["algo"]) for m in manifest)
    assert algos["config.json"] == _model.GIT_SHA1
    assert algos["model-00001-of-00003.safetensors"] == _model.SHA256
    assert hub.state.counters()["requests"]["revision"] == 1


@pytest.mark.parametrize("repo,revision,expect", [
    ("nobody/nothing", "main", "model_repo nobody/nothing is not on"),
    (REPO_ID, "no-such-branch", "model_revision 'no-such-branch'"),
])
def test_resolve_refuses_unknown_repo_or_revision(hub, repo, revision, expect):
    with pytest.raises(_model.ModelError) as refused:
        _model_hub.resolve(hub.endpoint, repo, revision)
    assert expect in str(refused.value)


@pytest.mark.parametrize("knob,status", [({"token": "s3cret"}, "401"),
                                         ({"forbidden": True}, "403")])
def test_resolve_refuses_401_403_naming_the_token_variable(hub, knob, status):
    knobs(hub, **knob)
    with pytest.raises(_model.ModelError) as refused:
        _model_hub.resolve(hub.endpoint, REPO_ID, "main", token="wrong-token-value")
    message = str(refused.value)
    assert status in message and "model_hf_token" in message
    assert "wrong-token-value" not in message


def test_resolve_refuses_a_manifest_without_config_json(hub):
    with pytest.raises(_model.ModelError) as refused:
        _model_hub.resolve(hub.endpoint, REPO_ID, "main", allow=["*.safetensors"])
    assert "lists no config.json" in str(refused.value)


def test_resolve_refuses_xet_advertised_not_served(hub):
    knobs(hub, xet=True)
    with pytest.raises(_model.ModelError) as refused:
        _model_hub.resolve(hub.endpoint, REPO_ID, "main", xet=True)
    assert "model_xet: false" in str(refused.value)
    assert "HF_HUB_DISABLE_XET=1" in str(refused.value)
    # with Xet off, the same mirror is fine
    assert resolved(hub, xet=False)[2] is True


def test_download_verify_marker_quick_and_deep(hub, tmp_path):
    commit, manifest, _xet = resolved(hub)
    staging = str(tmp_path / "stage")
    _resumed, _removed, streamed, _gets = _model_hub.download_hashing(
        staging, REPO_ID, commit, manifest, hub.endpoint, chunk=64 * 1024)
    assert set(streamed) == set(m["path"] for m in manifest)
    good, bad, hashed = _weights.verify_files(staging, manifest, workers=3)
    assert not bad and hashed == _model.total_bytes(manifest)
    # what was hashed while written is what a read back gives
    assert all(streamed[m["path"]][0] == m["digest"] for m in manifest)
    _model.write_json(os.path.join(staging, _model.MANIFEST), {"files": manifest})
    _weights.write_marker(staging, REPO_ID, commit, good)
    final = str(tmp_path / "final")
    _model.place(staging, final)
    assert _weights.quick_check(final, commit)["verified"]
    assert not _weights.quick_check(final, "0" * 40)["verified"]
    # a byte flipped in place with size and mtime kept: the quick check cannot see it ...
    shard = os.path.join(final, "model-00002-of-00003.safetensors")
    st = os.stat(shard)
    with open(shard, "r+b") as handle:
        handle.seek(1000)
        byte = handle.read(1)
        handle.seek(1000)
        handle.write(bytes([byte[0] ^ 1]))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _weights.quick_check(final, commit)["verified"]
    # ... hashing can
    _good, bad, _hashed = _weights.verify_files(final, manifest)
    assert list(bad) == ["model-00002-of-00003.safetensors"]
    # a truncation with a new mtime: the quick check sees it
    with open(shard, "r+b") as handle:
        handle.truncate(100)
    state = _weights.quick_check(final, commit)
    assert not state["verified"] and "100 bytes" in state["problems"][0]


def test_corrupt_mirror_bytes_are_caught_while_written(hub, tmp_path):
    commit, manifest, _xet = resolved(hub)
    knobs(hub, corrupt=["model-00001-of-00003.safetensors"])
    staging = str(tmp_path / "stage")
    with pytest.raises(_model.ModelError) as refused:
        _model_hub.download_hashing(staging, REPO_ID, commit, manifest, hub.endpoint,
                                    workers=1, chunk=64 * 1024)
    assert "model-00001-of-00003.safetensors" in str(refused.value)
    assert "sha256" in str(refused.value) and "removed" in str(refused.value)
    assert not os.path.exists(os.path.join(staging, "model-00001-of-00003.safetensors"))
    assert _model_hub.partial_sizes(staging, manifest) == {}


def test_a_killed_download_is_continued_with_range(hub, tmp_path):
    """A partial file as huggingface_hub leaves it after a killed process: continued, and the
    double counts only the missing bytes. Without the resume the whole file is fetched again."""
    commit, manifest, _xet = resolved(hub)
    shard = [m for m in manifest if m["path"] == "model-00003-of-00003.safetensors"][0]
    data = hub.repo.files[shard["path"]]

    def leave_partial(staging, keep):
        folder = os.path.join(staging, ".cache", "huggingface", "download")
        os.makedirs(folder)
        with open(os.path.join(folder, "abc123.%s.1a2b3c4d.incomplete" % shard["digest"]),
                  "wb") as handle:
            handle.write(data[:keep])
        with open(os.path.join(folder, "zzz.deadbeef.00000000.incomplete"), "wb") as handle:
            handle.write(b"orphan of another file")

    staging = str(tmp_path / "stage")
    leave_partial(staging, 100000)
    assert _model_hub.partial_sizes(staging, manifest) == {shard["path"]: 100000}
    hub.state.reset()
    resumed, removed, _hashed, gets = _model_hub.download_hashing(
        staging, REPO_ID, commit, [shard], hub.endpoint, chunk=64 * 1024)
    assert resumed == {shard["path"]: 100000}
    assert gets == {shard["path"]: len(_model_hub.ranges(100000, len(data), 64 * 1024))}
    assert removed == [".cache/huggingface/download/zzz.deadbeef.00000000.incomplete"]
    with open(os.path.join(staging, shard["path"]), "rb") as handle:
        assert handle.read() == data
    seen = hub.state.counters()
    assert seen["file_bytes_total"] == len(data) - 100000
    assert sorted(e["range"] for e in seen["log"] if e["kind"] == "cdn_get") == sorted(
        "bytes=%d-%d" % r for r in _model_hub.ranges(100000, len(data), 64 * 1024))


def test_files_come_whole_one_after_another_in_ranges(hub, tmp_path):
    """Three connections on one file's ranges at a time: the files are whole in the
    manifest's order, the first one before the last file's ranges are all asked for (a
    swarm's peers start on it while the rest downloads), and the ranges tile each file
    once. The control: one connection per file, as the download was, holds every file
    until near the end (all three shards are in flight together)."""
    commit, manifest, _xet = resolved(hub)
    shards = [m for m in manifest if m["path"].endswith(".safetensors")]
    last = shards[-1]["path"]
    chunk = 16 * 1024
    hub.state.reset()
    knobs(hub, throttle_bps=1 << 20)  # per connection: a transfer takes time, as on a WAN
    seen = []

    def on_file(item, _hashed):
        log = hub.state.counters()["log"]
        seen.append((item["path"], sum(1 for e in log if e["kind"] == "cdn_get"
                                       and e["file"] == last)))

    staging = str(tmp_path / "stage")
    _model_hub.download_hashing(staging, REPO_ID, commit, shards, hub.endpoint, workers=3,
                                on_file=on_file, chunk=chunk)
    assert [p for p, _n in seen] == [m["path"] for m in shards]
    last_ranges = len(_model_hub.ranges(0, shards[-1]["size"], chunk))
    assert seen[0][1] < last_ranges // 2, seen
    counters = hub.state.counters()
    for m in shards:
        got = sorted(e["range"] for e in counters["log"]
                     if e["kind"] == "cdn_get" and e["file"] == m["path"])
        assert got == sorted("bytes=%d-%d" % r for r in _model_hub.ranges(0, m["size"], chunk))
        assert counters["bytes_by_path"][m["path"]] == m["size"]
    assert counters["requests"]["head"] == len(shards)
    # the control: a range as large as the file, three files at once
    hub.state.reset()
    seen[:] = []
    _model_hub.download_hashing(str(tmp_path / "control"), REPO_ID, commit, shards,
                                hub.endpoint, workers=3, on_file=on_file,
                                chunk=max(m["size"] for m in shards))
    assert seen[0][1] == 1, seen


def test_git_files_come_before_the_lfs_files(hub, tmp_path):
    """The small files git keeps (config, index, tokenizer, README) are whole before the
    first shard, so the last file a seed publishes is the last shard alone. The control: in
    the manifest's own order the index and tokenizer files come after the shards."""
    commit, manifest, _xet = resolved(hub)
    order = [m["path"] for m in manifest]
    git = [m["path"] for m in manifest if m["algo"] == "git-sha1"]
    lfs = [m["path"] for m in manifest if m["algo"] == "sha256"]
    assert git and lfs and max(order.index(p) for p in git) > min(order.index(p) for p in lfs)
    seen = []
    _model_hub.download_hashing(str(tmp_path / "stage"), REPO_ID, commit, manifest,
                                hub.endpoint, workers=1,
                                on_file=lambda item, _hashed: seen.append(item["path"]))
    assert seen == git + lfs
    assert [m["path"] for m in _model_hub.download_order(manifest)] == git + lfs


def test_a_cut_range_is_fetched_again_alone(hub, tmp_path):
    """huggingface_hub drops what it read of a cut response before handing it over, so the
    cut range is asked for again; no other range is."""
    commit, manifest, _xet = resolved(hub)
    shard = [m for m in manifest if m["path"] == "model-00002-of-00003.safetensors"][0]
    hub.state.reset()
    knobs(hub, cut={"path": shard["path"], "after": 5000, "times": 1})
    staging = str(tmp_path / "stage")
    _model_hub.download_hashing(staging, REPO_ID, commit, [shard], hub.endpoint, workers=2,
                                chunk=64 * 1024)
    with open(os.path.join(staging, shard["path"]), "rb") as handle:
        assert handle.read() == hub.repo.files[shard["path"]]
    gets = [e for e in hub.state.counters()["log"] if e["kind"] == "cdn_get"]
    asked = [e["range"] for e in gets]
    # Which range meets the cut depends on which of the two connections asks first: the
    # Hub double marks the one it cut.
    cut = [e["range"] for e in gets if e.get("cut")]
    assert len(cut) == 1, gets
    assert sorted(asked) == sorted(["bytes=%d-%d" % r for r in _model_hub.ranges(
        0, shard["size"], 64 * 1024)] + cut), asked


def test_an_ordered_file_writes_the_head_through_and_holds_the_rest(tmp_path):
    hasher = _weights.StreamHash("sha256", 9)
    partial = str(tmp_path / "p")
    state = _model_hub.OrderedFile({"path": "f"}, partial, str(tmp_path / "f"), 0, hasher)
    first, second, third = state.sink(0, 2), state.sink(3, 5), state.sink(6, 8)
    third.write(b"ghi")
    assert state.done(third) == (0, False)
    second.write(b"d")
    first.write(b"ab")  # the head: straight to the file
    state.handle.flush()
    assert (state.next, os.path.getsize(partial)) == (2, 2)
    first.write(b"c")
    assert state.done(first) == (1, False)  # the second range's "d" follows it out
    second.write(b"ef")  # now the head: straight through
    state.handle.flush()
    assert (state.next, os.path.getsize(partial)) == (6, 6)
    assert state.done(second) == (2, True)  # and the held third range with it
    state.close()
    with open(partial, "rb") as handle:
        assert handle.read() == b"abcdefghi"
    assert hasher.finish()[0] == hashlib.sha256(b"abcdefghi").hexdigest()
    with pytest.raises(_model.ModelError):
        first.seek(0)


def test_a_range_is_a_power_of_two_near_a_quarter_of_a_connections_share():
    mib = 1 << 20
    assert _model_hub.range_bytes(0, 4) == mib
    assert _model_hub.range_bytes(16 * mib + 4096, 4) == mib  # the model scenario's shards
    assert _model_hub.range_bytes(32 * mib, 4) == 2 * mib  # bench-model's
    assert _model_hub.range_bytes(9 * 10 ** 9, 4) == 32 * mib  # a Kimi shard: ~270 GETs
    assert _model_hub.range_bytes(9 * 10 ** 9, 64) == 32 * mib
    assert _model_hub.range_bytes(64 * mib, 1) == 16 * mib


def test_ranges_tile_what_is_left():
    assert _model_hub.ranges(0, 10, 4) == [(0, 3), (4, 7), (8, 9)]
    assert _model_hub.ranges(5, 10, 4) == [(5, 8), (9, 9)]
    assert _model_hub.ranges(10, 10, 4) == [] and _model_hub.ranges(0, 0, 4) == []


def test_space_check_names_both_numbers(tmp_path):
    manifest = [{"path": "a", "size": 1000, "algo": "sha256", "digest": "x"}]
    assert _model.space_check(str(tmp_path / "m"), manifest, 400, free=600) == (600, 600)
    with pytest.raises(_model.ModelError) as refused:
        _model.space_check(str(tmp_path / "m"), manifest, 400, free=599)
    assert "needed 600 bytes" in str(refused.value) and "free 599 bytes" in str(refused.value)


@pytest.mark.parametrize("memory_mib,fits", [(97887, True), (24576, False)])
def test_plan_before_transfer_from_config_json_alone(hub, memory_mib, fits):
    """The double serves the real Kimi-K2.5 config.json: pp8 over 8 x 96 GiB fits, over
    8 x 24 GiB it does not; only config.json moves (no shard byte) either way."""
    capacity = {"strategy": "pp8", "gpu_count": 8, "gpu_memory_mib": memory_mib}
    if fits:
        plan = _model_hub.plan_before_transfer(hub.endpoint, REPO_ID, hub.repo.commit, "",
                                               capacity)
        assert plan["fits"]
    else:
        with pytest.raises(_model.ModelError) as refused:
            _model_hub.plan_before_transfer(hub.endpoint, REPO_ID, hub.repo.commit, "",
                                            capacity)
        assert "refused before the transfer" in str(refused.value)
        assert "pp8" in str(refused.value) and "fit" in str(refused.value)
        assert "tp*pp must equal" not in str(refused.value)
    assert set(hub.state.counters()["bytes_by_path"]) == {"config.json"}
