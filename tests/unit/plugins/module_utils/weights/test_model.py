"""Manifest, hashing, marker and fan-out arithmetic of the model step."""
import hashlib
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _weights
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _fanout, _model


def test_git_blob_sha1_matches_git():
    # `printf 'hello\n' | git hash-object --stdin`
    path = "/tmp/gpufleet-hello"
    with open(path, "wb") as handle:
        handle.write(b"hello\n")
    assert _weights.file_digest(path, _model.GIT_SHA1) == "ce013625030ba8dba906f756967f9e9ca394464a"
    assert _weights.file_digest(path, _model.SHA256) == hashlib.sha256(b"hello\n").hexdigest()
    os.unlink(path)


def test_manifest_from_tree_and_allow_patterns():
    tree = [{"type": "directory", "path": "sub"},
            {"type": "file", "path": "config.json", "size": 3, "oid": "a" * 40},
            {"type": "file", "path": "m.safetensors", "size": 9, "oid": "b" * 40,
             "lfs": {"oid": "c" * 64, "size": 9}}]
    manifest = _model.manifest_from_tree(tree)
    assert manifest == [
        {"path": "config.json", "size": 3, "algo": "git-sha1", "digest": "a" * 40},
        {"path": "m.safetensors", "size": 9, "algo": "sha256", "digest": "c" * 64}]
    assert [m["path"] for m in _model.manifest_from_tree(tree, ["*.json"])] == ["config.json"]
    with pytest.raises(_model.ModelError):
        _model.check_manifest(_model.manifest_from_tree(tree, ["*.safetensors"]), "o/n", "c")


def test_model_path_and_staging():
    assert _weights.model_path("/models", "org/name", "main") == "/models/org--name/main"
    assert _model.staging_path("/models/org--name/main") == "/models/org--name/.main.staging"
    with pytest.raises(_model.ModelError):
        _weights.model_path("/models", "noslash", "main")


def test_clean_orphans_keeps_manifest_and_own_files(tmp_path):
    for name in ("config.json", "old.bin", ".config.json.Ab12Cd", _model.MARKER):
        (tmp_path / name).write_text("x")
    os.makedirs(tmp_path / ".cache" / "huggingface")
    (tmp_path / ".cache" / "huggingface" / "x.incomplete").write_text("x")
    removed = _model.clean_orphans(str(tmp_path), [{"path": "config.json"}])
    assert sorted(removed) == [".config.json.Ab12Cd", "old.bin"]
    assert (tmp_path / _model.MARKER).exists() and (tmp_path / ".cache").exists()


def test_plan_doubles_sources_each_round():
    hosts = dict(("h%d" % i, "lan") for i in range(1, 9))
    plan = _fanout.plan(hosts)
    assert plan["hub"] == ["h1"]
    assert [len(r) for r in plan["rounds"]] == [1, 2, 4]
    assert plan["rounds"][0] == {"h2": "h1"}
    assert plan["rounds"][1] == {"h3": "h1", "h4": "h2"}
    served = set(["h1"])
    for pairs in plan["rounds"]:
        assert all(source in served for source in pairs.values())
        assert len(set(pairs.values())) == len(pairs)  # one receiver per source per round
        served.update(pairs)
    assert served == set(hosts)


def test_plan_per_site_and_verified_hosts_skip_the_hub():
    hosts = {"a1": "east", "a2": "east", "a3": "east", "b1": "west", "b2": "west"}
    plan = _fanout.plan(hosts, verified=["a2"], seeds={"west": "b2"})
    assert plan["hub"] == ["b2"]  # east has a verified copy: no Hub download there
    assert plan["rounds"] == [{"a1": "a2", "b1": "b2"}, {"a3": "a2"}]
    with pytest.raises(ValueError):
        _fanout.plan(hosts, seeds={"west": "a1"})
    assert _fanout.plan({"x": "s"}, verified=["x"]) == {"hub": [], "rounds": [],
                                                        "sites": {"s": ["x"]},
                                                        "swarm": {}, "fallback": [],
                                                        "site_addresses": {"s": ["x"]}}


def test_server_preflight_refuses_an_unverified_model_dir(tmp_path):
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _preflight
    commit = "a" * 40
    (tmp_path / "config.json").write_text("{}")
    manifest = [{"path": "config.json", "size": 2, "algo": _model.GIT_SHA1,
                 "digest": _weights.file_digest(str(tmp_path / "config.json"), _model.GIT_SHA1)}]
    # no marker: refused with the commit and the variable named
    with pytest.raises(_preflight.PreflightError) as refused:
        _preflight.check_model_dir(str(tmp_path), "h1", commit)
    assert "not verified for commit %s" % commit in str(refused.value)
    assert "server_model_commit" in str(refused.value)
    # verified: accepted; without a commit the check is the old one (config.json only)
    good, bad, _hashed = _weights.verify_files(str(tmp_path), manifest)
    assert not bad
    _model.write_json(str(tmp_path / _model.MANIFEST), {"files": manifest})
    _weights.write_marker(str(tmp_path), "o/n", commit, good)
    _preflight.check_model_dir(str(tmp_path), "h1", commit)
    # a file changed after verification: refused again
    (tmp_path / "config.json").write_text('{"x": 1}')
    with pytest.raises(_preflight.PreflightError):
        _preflight.check_model_dir(str(tmp_path), "h1", commit)
    _preflight.check_model_dir(str(tmp_path), "h1")
