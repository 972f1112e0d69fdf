"""model_fetch (local source, through rsync) and model_check, run in-process."""
import os
import shutil

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _model
from ansible_collections.gpufleet.sglang.plugins.modules import model_check, model_fetch, model_swarm

pytestmark = pytest.mark.skipif(shutil.which("rsync") is None, reason="needs rsync")

COMMIT = "c" * 40


@pytest.fixture
def source(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "x"}')
    (src / "model-00001-of-00001.safetensors").write_bytes(os.urandom(300000))
    manifest = []
    for name in sorted(os.listdir(str(src))):
        algo = _model.SHA256 if name.endswith(".safetensors") else _model.GIT_SHA1
        full = str(src / name)
        manifest.append({"path": name, "size": os.path.getsize(full), "algo": algo,
                         "digest": _weights.file_digest(full, algo)})
    return src, manifest


def fetch_args(tmp_path, src, manifest, **extra):
    args = {"path": str(tmp_path / "models" / "m"), "repo_id": "o/n", "commit": COMMIT,
            "manifest": manifest, "source": "local", "source_path": str(src)}
    args.update(extra)
    return args


def test_local_source_placed_verified_and_idempotent(run_module, tmp_path, source):
    src, manifest = source
    args = fetch_args(tmp_path, src, manifest)
    result, failed = run_module(model_fetch, args)
    assert not failed, result
    assert result["changed"] and result["bytes_hashed"] == _model.total_bytes(manifest)
    assert sorted(result["transferred"]) == [m["path"] for m in manifest]
    assert _weights.quick_check(args["path"], COMMIT)["verified"]
    assert not os.path.exists(_model.staging_path(args["path"]))
    again, failed = run_module(model_fetch, args)
    assert not failed and not again["changed"] and again["bytes_hashed"] == 0
    state, _failed = run_module(model_check, {"path": args["path"], "commit": COMMIT, "deep": True})
    assert state["verified"] and state["bytes_hashed"] == _model.total_bytes(manifest)


def test_space_refused_before_any_byte(run_module, tmp_path, source):
    src, manifest = source
    result, failed = run_module(model_fetch, fetch_args(tmp_path, src, manifest, free_bytes=10))
    assert failed
    assert "needed %d bytes" % _model.total_bytes(manifest) in result["msg"]
    assert "free 10 bytes" in result["msg"]
    assert result["needed_bytes"] == _model.total_bytes(manifest) and result["free_bytes"] == 10
    assert not os.path.exists(str(tmp_path / "models" / "m"))
    assert not os.path.exists(_model.staging_path(str(tmp_path / "models" / "m")))


def test_corrupt_source_is_refused_and_nothing_placed(run_module, tmp_path, source):
    src, manifest = source
    shard = src / "model-00001-of-00001.safetensors"
    data = bytearray(shard.read_bytes())
    data[100] ^= 0xFF
    shard.write_bytes(bytes(data))
    args = fetch_args(tmp_path, src, manifest)
    result, failed = run_module(model_fetch, args)
    assert failed and "model-00001-of-00001.safetensors: sha256" in result["msg"]
    assert not os.path.exists(args["path"])  # never moved into place
    staging = _model.staging_path(args["path"])
    assert os.path.exists(os.path.join(staging, "config.json"))
    assert not os.path.exists(os.path.join(staging, "model-00001-of-00001.safetensors"))


def test_the_swarm_module_touches_the_inbox_on_keepalive_and_appends_only_records(
        run_module, tmp_path):
    inbox = tmp_path / "models" / "inbox.jsonl"
    res, failed = run_module(model_swarm, {"inbox": str(inbox), "session": "s1",
                                           "keepalive": True})
    assert not failed and res["changed"] is False and res["added"] == 0
    assert inbox.read_text() == ""  # created, nothing appended
    os.utime(str(inbox), (1000, 1000))
    res, failed = run_module(model_swarm, {"inbox": str(inbox), "session": "s1",
                                           "keepalive": True})
    assert inbox.stat().st_mtime > 1000 and inbox.read_text() == ""
    res, failed = run_module(model_swarm, {"inbox": str(inbox), "session": "s1",
                                           "keepalive": True, "add": [{"path": "a"}]})
    assert res["changed"] and res["added"] == 1
    assert _model_lines(inbox) == [{"session": "s1", "add": [{"path": "a"}], "stop": False}]
    other = tmp_path / "other.jsonl"  # control: without keepalive nothing is created
    res, failed = run_module(model_swarm, {"inbox": str(other), "session": "s1"})
    assert not failed and res["changed"] is False and not other.exists()


def _model_lines(path):
    from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
    return _files.read_lines(str(path))
