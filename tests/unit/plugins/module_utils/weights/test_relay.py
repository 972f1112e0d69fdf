"""The swarm's relay file on the controller: when the one-task relay can run, where it lives,
that only a private directory is trusted, and what a peer reads of it."""
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _relay


@pytest.mark.parametrize("hosts,forks,fits", [
    (["a", "b", "c"], 10, True),
    (["a", "b", "c"], 3, True),
    (["a", "b", "c"], 2, False),   # a peer could hold the worker the feeder waits for
    ([], 10, False),
    (["a"], None, False),
    (["a"], "16", True),
])
def test_fits(hosts, forks, fits):
    assert _relay.fits(hosts, forks) is fits


def test_directory_and_path():
    assert _relay.directory("abc", base="/t") == "/t/gpufleet-relay-abc"
    assert _relay.path("/t/d", "host-1") == "/t/d/host-1.jsonl"
    assert _relay.path("/t/d", "a/b") == "/t/d/a_b.jsonl"


def test_create_makes_a_private_directory_and_refuses_an_open_one(tmp_path):
    relay_dir = str(tmp_path / "r")
    _relay.create(relay_dir)
    assert os.stat(relay_dir).st_mode & 0o777 == 0o700
    _relay.create(relay_dir)  # a second feeder of the same session uses it
    os.chmod(relay_dir, 0o755)
    with pytest.raises(_relay.RelayError, match="mode 0755"):
        _relay.create(relay_dir)
    not_dir = str(tmp_path / "f")
    with open(not_dir, "w") as handle:
        handle.write("x")
    with pytest.raises(_relay.RelayError, match="not a directory"):
        _relay.private(not_dir)


def test_a_peer_reads_the_new_lines_of_its_session(tmp_path):
    relay_dir = str(tmp_path / "r")
    _relay.create(relay_dir)
    path = _relay.path(relay_dir, "seed")
    assert _relay.read(path, "s1", 0) == ([], None, 0)  # not there yet
    _relay.append(path, "s1", records=[{"path": "a"}, {"path": "b"}])
    _relay.append(path, "s0", records=[{"path": "old"}])  # an earlier step's session
    records, failed, seen = _relay.read(path, "s1", 0)
    assert (records, failed, seen) == ([{"path": "a"}, {"path": "b"}], None, 1)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert _relay.read(path, "s1", seen) == ([], None, 1)
    with open(path, "a") as handle:  # a line still being written is not read yet
        handle.write('{"session": "s1", "add": [{"path"')
    assert _relay.read(path, "s1", seen) == ([], None, 1)
    _relay.append(path, "s1", records=[{"path": "c"}])
    _relay.append(path, "s1", failed="the transfer on seed ended")
    assert _relay.read(path, "s1", seen) == ([{"path": "c"}], "the transfer on seed ended", 3)


def test_a_relay_directory_others_can_open_is_not_read(tmp_path):
    relay_dir = str(tmp_path / "r")
    _relay.create(relay_dir)
    path = _relay.path(relay_dir, "seed")
    _relay.append(path, "s1", records=[{"path": "a"}])
    os.chmod(relay_dir, 0o777)
    with pytest.raises(_relay.RelayError, match="open to other users"):
        _relay.read(path, "s1", 0)
    with pytest.raises(_relay.RelayError):
        _relay.remove(relay_dir)
    assert os.path.exists(path)
    os.chmod(relay_dir, 0o700)
    assert _relay.remove(relay_dir) is True
    assert not os.path.exists(relay_dir)
    assert _relay.remove(relay_dir) is False
