"""The model wait's readiness predicate (the loop itself is _waiter.wait)."""
import pytest

from ansible_collections.gpufleet.sglang.plugins.action.model_wait import finished
from ansible_collections.gpufleet.sglang.tests.doubles import ActionTask


@pytest.mark.parametrize("status,done", [
    ({"finished": 0, "started": 1}, False),
    ({"finished": 1, "rc": 0}, True),
    ({"failed": True, "msg": "could not find job"}, True),  # async_status failed outright
    ({"failed": True, "finished": 0}, False),  # the job itself is still running
])
def test_finished(status, done):
    assert finished(status) is done


def _action(args, answers, status=None):
    """The action with its host calls replaced: ``answers`` are what model_watch says at
    each run (the last one repeats); a run that is no answer takes its whole window on a
    clock only the runs move. Every call is counted, every window kept."""
    from ansible_collections.gpufleet.sglang.plugins.action import model_wait
    from unittest import mock

    action = model_wait.ActionModule(ActionTask(args, 'gpufleet.sglang.model_wait'), mock.MagicMock(), mock.MagicMock(),
                                     mock.MagicMock(), mock.MagicMock(), mock.MagicMock())
    calls = {"status": 0, "watch": 0, "windows": [], "sleeps": 0}
    now = [1000.0]

    def watch(module_args, _vars):
        calls["watch"] += 1
        calls["windows"].append(module_args["window"])
        calls["args"] = module_args
        seen = dict(answers[min(calls["watch"], len(answers)) - 1])
        if not seen.get("answered"):
            now[0] += module_args["window"]
        return seen

    def job_status(_jid, _vars):
        calls["status"] += 1
        return dict(status or {"finished": True, "changed": True, "rc": 0})

    def sleep(seconds):
        calls["sleeps"] += 1
        now[0] += seconds

    action._watch, action._status = watch, job_status
    action._async_dir = "/root/.ansible_async"
    action._clock = lambda: now[0]
    action._sleep = sleep
    return action, calls


def _run(monkeypatch, args, answers, status=None):
    from ansible_collections.gpufleet.sglang.plugins.action import model_wait
    monkeypatch.setattr(model_wait.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})
    action, calls = _action(args, answers, status)
    return action.run(task_vars={"inventory_hostname": "h"}), calls


RUNNING = {"answered": False, "ended": False, "progress": {"line": "1/2 files"}}


def test_the_relay_is_one_host_run_per_interval_until_the_records_are_there(monkeypatch):
    """Waiting for the feeder's records (on the swarm's critical path): the host watches;
    the controller runs one module per interval (a progress line each) and none for the
    job while it runs."""
    records = [{"path": "a"}, {"path": "b"}]
    res, calls = _run(monkeypatch, {"jid": "1", "progress_path": "/p", "interval": 30,
                                    "until": "published", "published_path": "/j",
                                    "published_after": 1, "published_total": 3,
                                    "session": "s"},
                      [RUNNING, RUNNING, dict(RUNNING, answered=True, published=records,
                                              count=3, all_published=True)])
    assert res["published"] == records and res["all_published"] and res["count"] == 3
    assert res["progress"] == ["h: 1/2 files"] * 2 and not res.get("failed")
    assert calls["watch"] == 3 and calls["status"] == 0 and calls["sleeps"] == 2
    assert calls["windows"] == [30, 30, 30]
    assert calls["args"]["job_path"] == "/root/.ansible_async/1"
    assert (calls["args"]["published_after"], calls["args"]["published_total"]) == (1, 3)


def test_a_copy_never_complete_runs_out_of_time_in_windows_of_the_interval(monkeypatch):
    res, calls = _run(monkeypatch, {"jid": "1", "progress_path": "/p", "interval": 0.3,
                                    "until": "complete", "session": "s", "timeout": 1.0},
                      [RUNNING])
    assert res["failed"] and "ran longer than 1s" in res["msg"]
    assert calls["windows"] == pytest.approx([0.3, 0.3, 0.3, 0.1]) and calls["status"] == 0


def test_a_complete_copy_returns_its_line(monkeypatch):
    res, calls = _run(monkeypatch, {"jid": "1", "progress_path": "/p", "interval": 5,
                                    "until": "complete", "session": "s"},
                      [RUNNING, {"answered": True, "ended": False, "complete": True,
                                 "progress": {"line": "2/2 files"}}])
    assert not res.get("failed") and res["progress"] == ["h: 1/2 files", "2/2 files"]
    assert calls["watch"] == 2 and calls["status"] == 0


def test_the_end_of_the_job_is_asked_of_async_status_once(monkeypatch):
    res, calls = _run(monkeypatch, {"jid": "1", "progress_path": "/p", "interval": 5},
                      [RUNNING, {"answered": True, "ended": True, "progress": None}],
                      status={"finished": True, "changed": True, "rc": 0, "files": 3,
                              "ansible_job_id": "1", "started": True})
    assert res == {"changed": True, "rc": 0, "files": 3, "progress": ["h: 1/2 files"]}
    assert calls["watch"] == 2 and calls["status"] == 1


def test_a_job_that_ends_before_its_records_fails_with_its_message(monkeypatch):
    res, calls = _run(monkeypatch, {"jid": "1", "progress_path": "/p", "until": "published",
                                    "published_path": "/j", "session": "s"},
                      [{"answered": True, "ended": True}],
                      status={"finished": True, "changed": False, "msg": "stopped"})
    assert res["failed"] and res["msg"] == "the transfer on h ended: stopped"
    # the job's own failure is returned as it is
    res, _calls = _run(monkeypatch, {"jid": "1", "until": "complete", "session": "s"},
                       [{"answered": True, "ended": True}],
                       status={"finished": True, "failed": True, "msg": "sha256 mismatch"})
    assert res["failed"] and res["msg"] == "sha256 mismatch"


def test_a_failed_watch_fails_the_wait_with_its_message(monkeypatch):
    res, calls = _run(monkeypatch, {"jid": "1", "until": "complete", "session": "s"},
                      [{"failed": True, "msg": "MODULE FAILURE"}])
    assert res["failed"] and "MODULE FAILURE" in res["msg"] and calls["watch"] == 1


def test_an_end_that_async_status_does_not_confirm_is_no_result(monkeypatch):
    """The watch reads a missing job file as ended; if async_status still sees the job
    running (the two disagree on where it is), the wait fails naming both, never returning
    a running job as its result. The control: the same end confirmed is the result."""
    args = {"jid": "7", "progress_path": "/p", "interval": 5}
    res, calls = _run(monkeypatch, args, [{"answered": True, "ended": True}],
                      status={"finished": 0, "started": 1, "ansible_job_id": "7"})
    assert res["failed"] and "no job file at /root/.ansible_async/7" in res["msg"]
    assert "job 7 still runs" in res["msg"] and calls["status"] == 1
    res, _calls = _run(monkeypatch, args, [{"answered": True, "ended": True}],
                       status={"finished": 1, "started": 1, "changed": True})
    assert not res.get("failed") and res["changed"]


@pytest.mark.parametrize("lease, windows, empty", [
    (40, [4, 4, 2], True),  # a quarter of the lease (10 s) passes: an empty wave
    (0, [4] * 9, False),  # control: no lease, the wait goes on until the records come
])
def test_a_wave_with_a_lease_ends_empty_after_a_quarter_of_it(monkeypatch, lease, windows,
                                                              empty):
    """The model role's waves touch every host between two waves (the swarm's lease): the
    feeder's wait returns after a quarter of the lease with no record, and each of its
    looks carries the inbox (model_watch touches it)."""
    records = [{"path": "c"}]
    res, calls = _run(monkeypatch, {"jid": "1", "progress_path": "/p", "interval": 4,
                                    "until": "published", "published_path": "/j",
                                    "published_after": 2, "published_total": 3,
                                    "session": "s", "inbox": "/m/inbox", "lease": lease},
                      [RUNNING] * 8 + [dict(RUNNING, answered=True, published=records,
                                            count=3, all_published=True)])
    assert not res.get("failed") and calls["windows"] == windows
    assert calls["args"]["inbox"] == "/m/inbox"
    if empty:
        assert (res["published"], res["count"], res["all_published"]) == ([], 2, False)
    else:
        assert res["published"] == records and res["count"] == 3


def test_a_lease_does_not_cut_a_wait_for_a_complete_copy(monkeypatch):
    res, calls = _run(monkeypatch, {"jid": "1", "progress_path": "/p", "interval": 4,
                                    "until": "complete", "session": "s", "timeout": 20,
                                    "inbox": "/m/inbox", "lease": 8}, [RUNNING])
    assert res["failed"] and "ran longer than 20s" in res["msg"]
    assert calls["windows"] == [4] * 5 and calls["args"]["inbox"] == "/m/inbox"
