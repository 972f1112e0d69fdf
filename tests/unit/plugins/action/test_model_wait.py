"""The model wait's readiness predicate (the loop itself is _waiter.wait)."""
import pytest

from ansible_collections.gpufleet.sglang.plugins.action.model_wait import finished


@pytest.mark.parametrize("status,done", [
    ({"finished": 0, "started": 1}, False),
    ({"finished": 1, "rc": 0}, True),
    ({"failed": True, "msg": "could not find job"}, True),  # async_status failed outright
    ({"failed": True, "finished": 0}, False),  # the job itself is still running
])
def test_finished(status, done):
    assert finished(status) is done


class _Task(object):
    def __init__(self, args):
        self.args = args
        self.async_val = 0
        self.action = "gpufleet.sglang.model_wait"
        self.check_mode = False
        self.diff = False

    def get_validated_value(self, *args):  # pylint: disable=unused-argument
        return None


def _action(args, script):
    """The action with its host calls replaced: ``script`` says what the journal holds at
    each look; every call is counted."""
    from ansible_collections.gpufleet.sglang.plugins.action import model_wait
    from unittest import mock

    action = model_wait.ActionModule(_Task(args), mock.MagicMock(), mock.MagicMock(),
                                     mock.MagicMock(), mock.MagicMock(), mock.MagicMock())
    calls = {"status": 0, "published": 0, "progress": 0}

    def status(_jid, _vars):
        calls["status"] += 1
        return {"finished": 0, "started": 1}

    def published(_path, _session, _vars):
        calls["published"] += 1
        return script[min(calls["published"], len(script)) - 1]

    def progress(_path, _vars):
        calls["progress"] += 1
        return {"session": "s", "line": "x", "complete": False}

    action._status, action._published, action._progress = status, published, progress
    action._async_dir = "/root/.ansible_async"
    # a clock that only the loop's sleeps move, so the counts do not depend on the load
    now = [1000.0]

    def sleep(seconds):
        calls["sleeps"] += 1
        now[0] += seconds

    calls["sleeps"] = 0
    action._clock = lambda: now[0]
    action._sleep = sleep
    return action, calls


def test_the_relay_looks_at_the_journal_and_seldom_at_the_job(monkeypatch):
    """Waiting for the feeder's records (on the swarm's critical path), a poll is one look
    at the journal: the job every STATUS_EVERY seconds, the progress when a line is due."""
    from ansible_collections.gpufleet.sglang.plugins.action import model_wait
    monkeypatch.setattr(model_wait.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    script = [[]] * 6 + [[{"path": "a"}, {"path": "b"}]]
    action, calls = _action({"jid": "1", "progress_path": "/p", "interval": 30, "until": "published",
                             "published_path": "/j", "published_total": 2, "session": "s"}, script)
    res = action.run(task_vars={"inventory_hostname": "h"})
    assert res["published"] == [{"path": "a"}, {"path": "b"}] and res["all_published"]
    # seven polls 0.3 s apart: 1.8 s, under STATUS_EVERY; the first poll's line was due
    assert calls["published"] == 7 and calls["sleeps"] == 6
    assert calls["status"] == 1 and calls["progress"] == 1, calls


def test_waiting_for_a_complete_copy_reads_the_progress_and_seldom_the_job(monkeypatch):
    from ansible_collections.gpufleet.sglang.plugins.action import model_wait
    monkeypatch.setattr(model_wait.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action, calls = _action({"jid": "1", "progress_path": "/p", "interval": 30, "until": "complete",
                             "session": "s", "timeout": 1.0}, [[]])
    res = action.run(task_vars={"inventory_hostname": "h"})
    assert res["failed"]  # never complete: the timeout
    # polls at 0, 0.3, 0.6, 0.9 and 1.0 s: the progress at each, the job at the first only
    assert calls["progress"] == 5 and calls["status"] == 1 and calls["published"] == 0, calls


def test_waiting_for_the_end_looks_at_the_job_every_time(monkeypatch):
    """The control: until=finished is the job's end, so every poll reads the job."""
    from ansible_collections.gpufleet.sglang.plugins.action import model_wait
    monkeypatch.setattr(model_wait.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action, calls = _action({"jid": "1", "progress_path": "/p", "interval": 0.1, "until": "finished",
                             "session": "s", "timeout": 1.0}, [[]])
    res = action.run(task_vars={"inventory_hostname": "h"})
    assert res["failed"]
    # a poll every 0.1 s for 1 s: the job at each of them
    assert calls["status"] == calls["sleeps"] + 1 >= 10 and calls["published"] == 0, calls
