"""The Hub double against the real huggingface_hub client (pinned in requirements-dev.txt)."""
import hashlib
import json
import os
import urllib.request

import pytest

from hub_double import REPO_ID, git_blob_sha1

hf = pytest.importorskip("huggingface_hub")


def counters(hub):
    return json.load(urllib.request.urlopen(hub.endpoint + "/_admin/counters"))


def knobs(hub, **change):
    req = urllib.request.Request(hub.endpoint + "/_admin/knobs", data=json.dumps(change).encode(),
                                 method="POST")
    return json.load(urllib.request.urlopen(req))


def test_snapshot_download_gets_every_file_byte_exact(hub, tmp_path):
    path = hf.snapshot_download(REPO_ID, revision="main", local_dir=str(tmp_path),
                                endpoint=hub.endpoint)
    for name, data in hub.repo.files.items():
        with open(os.path.join(path, name), "rb") as handle:
            assert handle.read() == data, name
    seen = counters(hub)
    # one revision lookup (branch), the tree, a HEAD per file, the LFS bytes from the CDN port
    assert seen["requests"]["revision"] == 1
    assert seen["requests"]["head"] == len(hub.repo.files)
    assert seen["requests"]["cdn_get"] == 3
    assert seen["file_bytes_total"] == sum(len(d) for d in hub.repo.files.values())


def test_repeat_with_a_commit_makes_no_request(hub, tmp_path):
    hf.snapshot_download(REPO_ID, revision=hub.repo.commit, local_dir=str(tmp_path),
                         endpoint=hub.endpoint)
    hub.state.reset()
    hf.snapshot_download(REPO_ID, revision=hub.repo.commit, local_dir=str(tmp_path),
                         endpoint=hub.endpoint)
    assert counters(hub)["requests_total"] == 0


def test_tree_is_paginated_with_link_and_carries_hashes(hub):
    knobs(hub, page_size=2)
    api = hf.HfApi(endpoint=hub.endpoint)
    tree = list(api.list_repo_tree(REPO_ID, revision=hub.repo.commit, recursive=True))
    assert sorted(f.path for f in tree) == sorted(hub.repo.files)
    assert counters(hub)["requests"]["tree"] == 4  # 7 files, 2 a page
    for item in tree:
        data = hub.repo.files[item.path]
        assert item.blob_id == git_blob_sha1(data)
        if item.path.endswith(".safetensors"):
            assert item.lfs.sha256 == hashlib.sha256(data).hexdigest()
        else:
            assert item.lfs is None


def test_resolve_headers_redirect_and_range(hub):
    import http.client
    shard = "model-00001-of-00003.safetensors"
    conn = http.client.HTTPConnection("127.0.0.1", hub.port)
    conn.request("HEAD", "/%s/resolve/main/%s" % (REPO_ID, shard))
    head = conn.getresponse()
    head.read()
    assert head.status == 302
    assert head.getheader("X-Repo-Commit") == hub.repo.commit
    assert head.getheader("X-Linked-Etag").strip('"') == hub.repo.etag(shard)
    assert int(head.getheader("X-Linked-Size")) == len(hub.repo.files[shard])
    location = head.getheader("Location")
    assert ":%d/" % hub.cdn_port in location
    req = urllib.request.Request(location, headers={"Range": "bytes=10-19"})
    part = urllib.request.urlopen(req)
    assert part.status == 206
    assert part.headers["Content-Range"] == "bytes 10-19/%d" % len(hub.repo.files[shard])
    assert part.read() == hub.repo.files[shard][10:20]
    conn.request("HEAD", "/%s/resolve/main/config.json" % REPO_ID)
    small = conn.getresponse()
    small.read()
    assert small.status == 200
    assert small.getheader("ETag").strip('"') == git_blob_sha1(hub.repo.files["config.json"])


def test_unknown_repo_revision_and_token(hub):
    api = hf.HfApi(endpoint=hub.endpoint)
    with pytest.raises(hf.errors.RepositoryNotFoundError):
        api.model_info("nobody/nothing")
    with pytest.raises(hf.errors.RevisionNotFoundError):
        api.model_info(REPO_ID, revision="no-such-branch")
    knobs(hub, token="s3cret")
    with pytest.raises(hf.errors.HfHubHTTPError) as refused:
        api.model_info(REPO_ID, revision="main")
    assert refused.value.response.status_code == 401
    assert api.model_info(REPO_ID, revision="main", token="s3cret").sha == hub.repo.commit


def test_cut_connection_is_retried_in_process(hub, tmp_path):
    """A cut connection: the client retries in the same process. (It continues with Range only
    from what it had written; with its 10 MB read size and these small shards that is 0.)"""
    shard = "model-00002-of-00003.safetensors"
    knobs(hub, cut={"path": shard, "after": 100000, "times": 1})
    hf.hf_hub_download(REPO_ID, shard, revision=hub.repo.commit, local_dir=str(tmp_path),
                       endpoint=hub.endpoint)
    with open(tmp_path / shard, "rb") as handle:
        assert handle.read() == hub.repo.files[shard]
    gets = [e for e in counters(hub)["log"] if e["kind"] == "cdn_get"]
    assert [e["bytes"] for e in gets] == [100000, len(hub.repo.files[shard])]


def test_corrupt_bytes_are_accepted_by_the_client(hub, tmp_path):
    """The double's corrupt knob: same size, one byte flipped; huggingface_hub takes it."""
    shard = "model-00003-of-00003.safetensors"
    knobs(hub, corrupt=[shard])
    hf.hf_hub_download(REPO_ID, shard, revision=hub.repo.commit, local_dir=str(tmp_path),
                       endpoint=hub.endpoint)
    with open(tmp_path / shard, "rb") as handle:
        data = handle.read()
    assert len(data) == len(hub.repo.files[shard]) and data != hub.repo.files[shard]


def test_xet_advertised_but_not_served(hub):
    knobs(hub, xet=True)
    api = hf.HfApi(endpoint=hub.endpoint)
    tree = list(api.list_repo_tree(REPO_ID, revision=hub.repo.commit, recursive=True))
    assert any(item.xet_hash for item in tree if item.path.endswith(".safetensors"))
    status = urllib.request.urlopen(hub.endpoint + "/_admin/counters").status
    assert status == 200
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen("%s/api/models/%s/xet-read-token/%s"
                               % (hub.endpoint, REPO_ID, hub.repo.commit))
    assert missing.value.code == 404


def test_throttle(hub, tmp_path):
    import time
    knobs(hub, throttle_bps=1024 * 1024)
    began = time.monotonic()
    hf.hf_hub_download(REPO_ID, "model-00001-of-00003.safetensors", revision=hub.repo.commit,
                       local_dir=str(tmp_path), endpoint=hub.endpoint)
    assert time.monotonic() - began >= 0.2  # 256 KiB at 1 MiB/s
