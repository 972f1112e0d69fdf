"""The swarm's lease (weights/_lease.py): a host ends on its own after ``seconds`` without
word from the controller and without a byte moving; the input check of model_swarm_lease."""
from unittest import mock

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _lease
from ansible_collections.gpufleet.sglang.tests.doubles import ActionTask

INBOX = (10, 1)  # (size, mtime) of the inbox at the first look
IDLE = (500, 0)  # (bytes done, bytes sent) at the first look


def _looks(seconds, looks):
    """Run ``looks`` [(t, inbox mark, movement mark)] through a lease made at t=0; return
    the first t at which it expired, or None."""
    lease = _lease.Lease(seconds, 0.0)
    for t, word, moved in looks:
        lease.look(t, word, moved)
        if lease.expired(t):
            return t, lease
    return None, lease


def _every(step, until, word=lambda t: INBOX, moved=lambda t: IDLE):
    t, out = 0.0, []
    while t <= until:
        out.append((t, word(t), moved(t)))
        t = round(t + step, 3)
    return out


CASES = [
    # id, lease, looks, expired at
    ("silent and idle: ends once the lease passed", 10,
     _every(1, 30), 11),
    ("no lease: never ends", 0,
     _every(1, 30), None),
    ("an inbox that is touched every 5 s keeps it", 10,
     _every(1, 60, word=lambda t: (10, int(t // 5))), None),
    ("touched every 12 s: a gap longer than the lease ends it", 10,
     _every(1, 60, word=lambda t: (10, int(t // 12))), 11),
    ("an inbox that grows is word too", 10,
     _every(1, 30, word=lambda t: (10 + int(t // 4), 1)), None),
    ("bytes moving keep a silent host", 10,
     _every(1, 60, moved=lambda t: (500, int(t))), None),
    ("bytes that stop moving at 20 s: ends 10 s later", 10,
     _every(1, 60, moved=lambda t: (500 + int(min(t, 20)), 0)), 31),
    ("word until 20 s, then silence: ends 10 s after the last word", 10,
     _every(1, 60, word=lambda t: (10, int(min(t, 20)))), 31),
    ("an inbox that appears is word", 20,
     _every(1, 60, word=lambda t: None if t < 15 else INBOX), 36),
    ("an inbox that goes away is word once", 20,
     _every(1, 60, word=lambda t: INBOX if t < 15 else None), 36),
]


@pytest.mark.parametrize("seconds, looks, expired_at", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_the_lease_ends_after_its_seconds_of_silence_and_idleness(seconds, looks, expired_at):
    at, _lease_seen = _looks(seconds, looks)
    assert at == expired_at


def test_the_report_and_the_message_say_how_long_it_was_silent_and_idle():
    lease = _lease.Lease(10, 0.0)
    lease.look(0.0, INBOX, IDLE)
    lease.look(3.0, (11, 1), IDLE)  # word at 3 s
    lease.look(5.0, (11, 1), (501, 0))  # a byte at 5 s
    assert not lease.expired(15.0) and lease.expired(15.5)
    assert lease.report(15.5) == {"lease_s": 10.0, "silent_s": 12.5, "idle_s": 10.5,
                                  "words": 1}
    assert lease.message(15.5).startswith(
        "no word from the controller for 12 s and no byte moved for 10 s (lease 10 s, "
        "model_swarm_lease)")


@pytest.mark.parametrize("lease, every", [(300, 75.0), (40, 10.0), (0, 0.0), (None, 0.0)])
def test_a_host_handed_nothing_is_touched_every_quarter_of_the_lease(lease, every):
    assert _lease.keepalive_every(lease) == every


@pytest.mark.parametrize("lease, interval, out", [
    (300, 10, 300.0), ("300", "10", 300.0), (0, 10, 0.0), (30, 10, 30.0),
    (29, 10, "model_swarm_lease is 29: expected 0 (no lease) or at least 3 x "
             "model_progress_interval (10 s) = 30 s"),
    (-1, 10, "model_swarm_lease is -1: expected 0"),
    ("soon", 10, "model_swarm_lease is 'soon': expected seconds (0 for no lease)"),
])
def test_the_lease_is_checked_against_the_progress_interval(lease, interval, out):
    if isinstance(out, float):
        assert _lease.checked(lease, interval) == out
    else:
        with pytest.raises(ValueError) as error:
            _lease.checked(lease, interval)
        assert str(error.value).startswith(out)


def test_the_plan_names_every_bad_input_at_once_and_carries_the_lease(monkeypatch):
    from ansible_collections.gpufleet.sglang.plugins.action import model_plan
    monkeypatch.setattr(model_plan.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})

    def plan(args):
        action = model_plan.ActionModule(ActionTask(args, "gpufleet.sglang.model_plan"),
                                         *[mock.MagicMock() for _i in range(5)])
        facts = {"__model_site": "a", "__model_address": "10.0.0.1", "__model_is_seed": True,
                 "__model_check": {"verified": False}, "__model_engine": "2.0.8"}
        return action.run(task_vars={"ansible_play_hosts": ["h1"], "hostvars": {"h1": facts}})

    res = plan({"engine": "bittorrent", "lease": 5, "interval": 10})
    assert res["failed"] and res["msg"] == (
        "model_engine is 'bittorrent': expected libtorrent or rsync; model_swarm_lease is 5: "
        "expected 0 (no lease) or at least 3 x model_progress_interval (10 s) = 30 s")
    res = plan({"engine": "libtorrent", "lease": "300", "interval": 10})
    assert not res.get("failed") and res["plan"]["lease"] == 300.0
