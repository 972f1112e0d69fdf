"""The host's half of the model wait: async_wrapper's results file read as async_status reads
it, and the watch's answers, on real files and a clock only the watch's sleeps move."""
import json

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _model_watch


@pytest.mark.parametrize("content,ended", [
    (None, True),  # no file: async_status says "could not find job"
    ('{"started": true, "finished": false, "ansible_job_id": "j1"}', False),
    ('{"started": 1, "finished": 0}', False),  # as ansible-core before 2.19 wrote it
    ('{"changed": true, "rc": 0}', True),  # the module's own result replaced it
    ('{"failed": true, "msg": "boom"}', True),
    ('{"started": true, "finis', False),  # not JSON (yet): running, as async_status says
])
def test_job_ended_reads_the_results_file_as_async_status_does(tmp_path, content, ended):
    path = tmp_path / "j1"
    if content is not None:
        path.write_text(content)
    assert _model_watch.job_ended(str(path)) is ended


class Host(object):
    """The host's files, and a clock that only the watch's sleeps move (in whole
    milliseconds, so that ten looks make a second); ``at`` schedules a change of the files
    at a time."""

    def __init__(self, tmp_path):
        self.ms = 100000
        self.job = str(tmp_path / "job")
        self.progress = str(tmp_path / "progress.json")
        self.journal = str(tmp_path / "published.jsonl")
        self.events = []
        self.sleeps = 0
        with open(self.job, "w") as handle:
            json.dump({"started": True, "finished": False}, handle)

    @property
    def now(self):
        return self.ms / 1000.0

    def at(self, seconds, change):
        self.events.append((self.ms + round(seconds * 1000), change))

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps += 1
        self.ms += round(seconds * 1000)
        for when, change in list(self.events):
            if when <= self.ms:
                self.events.remove((when, change))
                change()

    def params(self, until, **extra):
        out = {"until": until, "job_path": self.job, "progress_path": self.progress,
               "session": "s1", "published_path": self.journal, "published_after": 0,
               "published_total": 0, "published_batch": 1.0}
        out.update(extra)
        return out

    def write_progress(self, **doc):
        _files.write_json(self.progress, dict({"session": "s1", "line": "1/2 files"}, **doc))

    def publish(self, *paths, session="s1"):
        for path in paths:
            _files.append_line(self.journal, {"session": session, "record": {"path": path}})

    def end_job(self, result=None):
        with open(self.job, "w") as handle:
            json.dump(result or {"changed": True, "rc": 0}, handle)

    def watch(self, params, window):
        return _model_watch.watch(params, window, clock=self.clock, sleep=self.sleep)


def test_complete_is_answered_at_the_first_look_after_the_progress_says_so(tmp_path):
    host = Host(tmp_path)
    host.write_progress(complete=False)
    host.at(0.45, lambda: host.write_progress(complete=True, line="2/2 files"))
    seen = host.watch(host.params("complete"), 10)
    assert seen["answered"] and seen["complete"] and not seen["ended"]
    assert seen["progress"]["line"] == "2/2 files"
    assert seen["looks"] == 6 and host.now == pytest.approx(100.5)  # 0.1 s looks


def test_a_copy_of_another_session_is_not_complete_and_the_window_ends_the_watch(tmp_path):
    host = Host(tmp_path)
    host.write_progress(complete=True, session="s0")  # a previous step's copy
    seen = host.watch(host.params("complete"), 2)
    assert not seen["answered"] and not seen["complete"]
    assert seen["progress"]["session"] == "s0"  # the controller's line
    assert host.now == pytest.approx(102.0) and seen["looks"] == 21


def test_records_are_gathered_for_the_batch_then_handed_out(tmp_path):
    host = Host(tmp_path)
    host.publish("a")
    host.at(0.5, lambda: host.publish("b"))
    host.at(1.5, lambda: host.publish("c"))  # after the batch: the next wave's
    seen = host.watch(host.params("published", published_total=4), 10)
    assert seen["answered"] and [r["path"] for r in seen["published"]] == ["a", "b"]
    assert seen["count"] == 2 and not seen["all_published"]
    assert host.now == pytest.approx(101.0)


def test_the_last_records_are_handed_out_at_once_and_only_this_sessions(tmp_path):
    host = Host(tmp_path)
    host.publish("x", session="s0")
    host.publish("a", "b")
    host.at(0.3, lambda: host.publish("c"))
    seen = host.watch(host.params("published", published_after=1, published_total=3), 10)
    assert [r["path"] for r in seen["published"]] == ["b", "c"] and seen["all_published"]
    assert host.now == pytest.approx(100.3)  # not the batch's second


def test_records_gathered_when_the_window_ends_are_handed_out(tmp_path):
    host = Host(tmp_path)
    host.at(0.6, lambda: host.publish("a"))
    seen = host.watch(host.params("published", published_total=3), 1.0)
    assert seen["answered"] and [r["path"] for r in seen["published"]] == ["a"]
    # the control: nothing new in the window is no answer
    seen = Host(tmp_path / "..").watch(host.params("published", published_after=1,
                                                   published_total=3), 1.0)
    assert not seen["answered"] and "published" not in seen


@pytest.mark.parametrize("until", ["finished", "published", "complete"])
def test_a_job_that_ends_answers_whatever_is_waited_for(tmp_path, until):
    host = Host(tmp_path)
    host.write_progress(complete=False)
    host.at(0.2, host.end_job)
    seen = host.watch(host.params(until, published_total=2), 10)
    assert seen["answered"] and seen["ended"] and "published" not in seen
    assert host.now == pytest.approx(100.2)


def test_a_running_job_is_no_answer_for_finished(tmp_path):
    host = Host(tmp_path)
    host.write_progress(complete=True)  # complete is not what until=finished waits for
    seen = host.watch(host.params("finished"), 0.5)
    assert not seen["answered"] and not seen["ended"] and seen["looks"] == 6


def test_until_is_checked():
    with pytest.raises(ValueError, match="until must be one of"):
        _model_watch.watch({"until": "done"}, 1)


@pytest.mark.parametrize("with_inbox", [True, False])
def test_each_run_with_an_inbox_touches_it(tmp_path, with_inbox):
    """Word from the controller for the swarm's lease: a run given the inbox creates it if
    missing and moves its mtime, appending nothing; a run without one (the control)
    leaves it alone."""
    import os
    host = Host(tmp_path)
    host.write_progress(complete=False)
    inbox = tmp_path / "inbox.jsonl"
    extra = {"inbox": str(inbox)} if with_inbox else {}
    host.watch(host.params("complete", **extra), 0.2)
    assert inbox.exists() is with_inbox
    if with_inbox:
        inbox.write_text('{"session": "s1"}\n')
        os.utime(str(inbox), (1000, 1000))
        host.watch(host.params("complete", **extra), 0.2)
        assert inbox.stat().st_mtime > 1000 and inbox.read_text() == '{"session": "s1"}\n'
