"""The model step's logic (module_utils) against the Hub double and real huggingface_hub."""
import json
import os
import urllib.request

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils import _model, _model_hub
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
    _model_hub.download(staging, REPO_ID, commit, manifest, hub.endpoint)
    good, bad, hashed = _model.verify_files(staging, manifest, workers=3)
    assert not bad and hashed == _model.total_bytes(manifest)
    _model.write_json(os.path.join(staging, _model.MANIFEST), {"files": manifest})
    _model.write_marker(staging, REPO_ID, commit, good)
    final = str(tmp_path / "final")
    _model.place(staging, final)
    assert _model.quick_check(final, commit)["verified"]
    assert not _model.quick_check(final, "0" * 40)["verified"]
    # a byte flipped in place with size and mtime kept: the quick check cannot see it ...
    shard = os.path.join(final, "model-00002-of-00003.safetensors")
    st = os.stat(shard)
    with open(shard, "r+b") as handle:
        handle.seek(1000)
        byte = handle.read(1)
        handle.seek(1000)
        handle.write(bytes([byte[0] ^ 1]))
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert _model.quick_check(final, commit)["verified"]
    # ... hashing can
    _good, bad, _hashed = _model.verify_files(final, manifest)
    assert list(bad) == ["model-00002-of-00003.safetensors"]
    # a truncation with a new mtime: the quick check sees it
    with open(shard, "r+b") as handle:
        handle.truncate(100)
    state = _model.quick_check(final, commit)
    assert not state["verified"] and "100 bytes" in state["problems"][0]


def test_corrupt_mirror_bytes_are_caught_by_verify(hub, tmp_path):
    commit, manifest, _xet = resolved(hub)
    knobs(hub, corrupt=["model-00001-of-00003.safetensors"])
    staging = str(tmp_path / "stage")
    _model_hub.download(staging, REPO_ID, commit, manifest, hub.endpoint)
    _good, bad, _hashed = _model.verify_files(staging, manifest)
    assert list(bad) == ["model-00001-of-00003.safetensors"]
    assert "sha256" in bad["model-00001-of-00003.safetensors"]


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
    resumed, removed = _model_hub.download(staging, REPO_ID, commit, [shard], hub.endpoint)
    assert resumed == {shard["path"]: 100000}
    assert removed == [".cache/huggingface/download/zzz.deadbeef.00000000.incomplete"]
    with open(os.path.join(staging, shard["path"]), "rb") as handle:
        assert handle.read() == data
    seen = hub.state.counters()
    assert seen["file_bytes_total"] == len(data) - 100000
    assert [e["range"] for e in seen["log"] if e["kind"] == "cdn_get"] == ["bytes=100000-"]


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
