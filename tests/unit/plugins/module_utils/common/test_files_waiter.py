"""The one file helper and the one waiter."""
import hashlib
import json
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files, _waiter


def test_write_atomic_replaces_whole_and_sets_mode(tmp_path):
    path = str(tmp_path / "f")
    _files.write_atomic(path, "old")
    _files.write_atomic(path, b"new", mode=0o600)
    assert open(path).read() == "new"
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert os.listdir(str(tmp_path)) == ["f"]  # no temporary file left


def test_write_atomic_leaves_old_file_on_failure(tmp_path, monkeypatch):
    path = str(tmp_path / "f")
    _files.write_atomic(path, "old")

    def boom(*_):
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", boom)
    with pytest.raises(OSError):
        _files.write_atomic(path, "new")
    assert open(path).read() == "old"
    assert os.listdir(str(tmp_path)) == ["f"]


def test_json_round_trip_and_default(tmp_path):
    path = str(tmp_path / "d.json")
    assert _files.read_json(path, default={}) == {}
    _files.write_json(path, {"b": 1, "a": [2]})
    assert _files.read_json(path) == {"a": [2], "b": 1}
    assert open(path).read().endswith("\n")
    open(path, "w").write("{torn")
    assert _files.read_json(path) is None


def test_journal_skips_a_torn_last_line(tmp_path):
    path = str(tmp_path / "j.jsonl")
    _files.append_line(path, {"n": 1})
    _files.append_line(path, {"n": 2})
    with open(path, "a") as handle:
        handle.write('{"n": 3')  # killed mid-write
    assert _files.read_lines(path) == [{"n": 1}, {"n": 2}]
    assert _files.read_lines(str(tmp_path / "none")) == []


def test_an_append_after_a_torn_line_is_not_lost(tmp_path):
    path = str(tmp_path / "j.jsonl")
    _files.append_line(path, {"n": 1})
    with open(path, "a") as handle:
        handle.write('{"n": 2')  # killed mid-write
    _files.append_line(path, {"n": 3})
    assert _files.read_lines(path) == [{"n": 1}, {"n": 3}]
    # the control: glued to the torn line, the record would be lost with it
    assert '{"n": 2{"n": 3}' not in open(path).read()


@pytest.mark.parametrize("algorithm,expected", [
    ("sha256", "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"),
    ("sha1", "aaf4c61ddcc5e8a2dabede0f3b482cd9aea9434d"),
    # `printf hello | git hash-object --stdin`
    ("git-sha1", "b6fc4c620b67d95f953a5c1c1230aaab5db5a1b0"),
])
def test_digest(tmp_path, algorithm, expected):
    path = str(tmp_path / "h")
    open(path, "wb").write(b"hello")
    assert _files.digest(path, algorithm) == expected
    if algorithm != "git-sha1":
        assert _files.digest_bytes(b"hello", algorithm) == expected


def test_hasher_streams_to_the_digest_of_the_whole_file(tmp_path):
    path = str(tmp_path / "h")
    open(path, "wb").write(b"hello")
    for algorithm in ("sha256", "git-sha1"):
        hash_object = _files.hasher(algorithm, 5)
        hash_object.update(b"he")
        hash_object.update(b"llo")
        assert hash_object.hexdigest() == _files.digest(path, algorithm)
    # the control: without git's blob header the same bytes give plain sha1, not the blob id
    assert _files.hasher("git-sha1", 5).hexdigest() != hashlib.sha1().hexdigest()
    assert hashlib.sha1(b"hello").hexdigest() != _files.digest(path, "git-sha1")


def test_load_json_names_the_reason_read_json_gives_the_default(tmp_path):
    path = str(tmp_path / "d.json")
    with pytest.raises(OSError):
        _files.load_json(path)
    open(path, "w").write("{torn")
    with pytest.raises(ValueError):
        _files.load_json(path)
    assert _files.read_json(path, default={}) == {}  # the control: the forgiving reader
    open(path, "w").write('{"a": 1}')
    assert _files.load_json(path) == {"a": 1}


class Clock(object):
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("values,timeout,interval,ok,polls,elapsed", [
    ([1], 10, 1, True, 1, 0),                       # ready at once: no sleep
    ([0, 0, 5], 10, 1, True, 3, 2),                 # ready on the third poll
    ([0] * 50, 3, 1, False, 4, 3),                  # times out: polls at 0, 1, 2, 3
    ([0] * 50, 2.5, 1, False, 4, 2.5),              # never sleeps past the deadline
])
def test_wait(values, timeout, interval, ok, polls, elapsed):
    clock = Clock()
    seq = iter(values)
    res = _waiter.wait(lambda: next(seq), timeout=timeout, interval=interval,
                       clock=clock, sleep=clock.sleep)
    assert (res.ok, res.polls, res.elapsed) == (ok, polls, elapsed)
    assert all(s <= interval for s in clock.sleeps)


def test_wait_retries_listed_errors_and_reports_polls():
    clock = Clock()
    seen = []
    answers = iter([IOError("refused"), IOError("refused"), {"ready": True}])

    def probe():
        item = next(answers)
        if isinstance(item, Exception):
            raise item
        return item
    res = _waiter.wait(probe, lambda v: v["ready"], timeout=10, interval=2, retry_on=(IOError,),
                       on_poll=lambda v, e: seen.append((v, e)), clock=clock, sleep=clock.sleep)
    assert res.ok and res.polls == 3 and res.elapsed == 4
    assert seen == [(None, 0), (None, 2), ({"ready": True}, 4)]


def test_wait_does_not_swallow_other_errors():
    def probe():
        raise ValueError("bad answer")
    with pytest.raises(ValueError):
        _waiter.wait(probe, timeout=1, interval=1, retry_on=(IOError,))


def test_on_poll_can_stop_the_wait():
    class Failed(Exception):
        pass

    def on_poll(value, _elapsed):
        if value == "failed":
            raise Failed(value)
    clock = Clock()
    seq = iter(["loading", "failed"])
    with pytest.raises(Failed):
        _waiter.wait(lambda: next(seq), lambda v: v == "ready", timeout=10, interval=1,
                     on_poll=on_poll, clock=clock, sleep=clock.sleep)
    assert json.dumps(clock.sleeps) == "[1]"
