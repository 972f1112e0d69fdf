"""The one-task relay (gpufleet.sglang.model_relay): the feeder's instance appends what the
seed published, the peers' instances hand it to their inboxes as it comes, failures travel
from the feeder to the peers. Host calls are replaced; the relay file is real."""
import threading
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _relay
from ansible_collections.gpufleet.sglang.tests.doubles import ActionTask


def _action(args, answers=(), status=None, clock=None, sleep=None):
    """The action with its host calls replaced: ``answers`` are what model_watch says on the
    feeder at each run (the last repeats); every inbox append is kept."""
    from unittest import mock
    from ansible_collections.gpufleet.sglang.plugins.action import model_relay

    action = model_relay.ActionModule(ActionTask(args, 'gpufleet.sglang.model_relay'), mock.MagicMock(), mock.MagicMock(),
                                      mock.MagicMock(), mock.MagicMock(), mock.MagicMock())
    calls = {"watch": [], "added": [], "status": 0, "touched": []}

    def watch(module_args, _vars):
        calls["watch"].append(dict(module_args))
        return dict(answers[min(len(calls["watch"]), len(answers)) - 1])

    def job_status(_jid, _vars):
        calls["status"] += 1
        return dict(status or {"finished": True, "failed": True, "msg": "Hub said 500"})

    def add(inbox, session, records, _vars):
        calls["added"].append((inbox, session, [r["path"] for r in records]))
        return {"changed": True}

    def touch(inbox, session, _vars):
        calls["touched"].append((inbox, session, action._clock()))
        return {"changed": False, "added": 0}

    action._watch, action._status, action._swarm_add = watch, job_status, add
    action._swarm_touch = touch
    action._async_dir = "/root/.ansible_async"
    if clock:
        action._clock = clock
    if sleep:
        action._sleep = sleep
    return action, calls


@pytest.fixture(autouse=True)
def _no_base_run(monkeypatch):
    from ansible_collections.gpufleet.sglang.plugins.action import model_wait
    monkeypatch.setattr(model_wait.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})


def _args(tmp_path, role, **extra):
    args = {"role": role, "feeder": "seed", "relay_dir": str(tmp_path / "relay"),
            "session": "s1", "published_total": 3, "jid": "7", "published_path": "/pub",
            "inbox": "/inbox", "interval": 5, "timeout": 60}
    args.update(extra)
    return args


RUNNING = {"answered": False, "ended": False, "progress": {"line": "1/3 files"}}


def test_the_feeder_appends_each_batch_until_every_record_is_out(tmp_path):
    answers = [RUNNING,
               {"answered": True, "ended": False, "published": [{"path": "a"}, {"path": "b"}],
                "count": 2},
               {"answered": True, "ended": False, "published": [{"path": "c"}], "count": 3}]
    action, calls = _action(_args(tmp_path, "feeder"), answers)
    res = action.run(task_vars={"inventory_hostname": "seed"})
    assert res == {"changed": False, "published": 3, "batches": 2}
    # each look asks for what came after the records already relayed
    assert [c["published_after"] for c in calls["watch"]] == [0, 0, 2]
    assert calls["watch"][0]["job_path"] == "/root/.ansible_async/7"
    records, failed, seen = _relay.read(_relay.path(str(tmp_path / "relay"), "seed"), "s1", 0)
    assert [r["path"] for r in records] == ["a", "b", "c"] and failed is None and seen == 2
    assert calls["added"] == [] and calls["status"] == 0


def test_a_transfer_that_ends_first_fails_the_feeder_and_tells_the_peers(tmp_path):
    answers = [{"answered": True, "ended": False, "published": [{"path": "a"}], "count": 1},
               {"answered": True, "ended": True}]
    action, calls = _action(_args(tmp_path, "feeder"), answers)
    res = action.run(task_vars={"inventory_hostname": "seed"})
    assert res["failed"] and "ended after 1 of 3 files: Hub said 500" in res["msg"]
    assert calls["status"] == 1
    peer, peer_calls = _action(_args(tmp_path, "peer"))
    res = peer.run(task_vars={"inventory_hostname": "p1"})
    # the peer hands out what came before the failure, then fails with the feeder's words
    assert peer_calls["added"] == [("/inbox", "s1", ["a"])]
    assert res["failed"] and res["handed"] == 1
    assert "the site's feeder seed: the transfer on seed ended after 1 of 3" in res["msg"]


def test_a_peer_that_gets_nothing_fails_at_its_timeout(tmp_path):
    _relay.create(str(tmp_path / "relay"))
    now = [0.0]

    def sleep(seconds):
        now[0] += seconds

    action, calls = _action(_args(tmp_path, "peer", timeout=3), clock=lambda: now[0],
                            sleep=sleep)
    res = action.run(task_vars={"inventory_hostname": "p1"})
    assert res["failed"] and res["msg"] == "0 of 3 records from seed in 3s"
    assert calls["added"] == [] and now[0] == pytest.approx(3.0)


def test_a_feeder_whose_seed_publishes_too_little_fails_at_its_timeout_and_tells_the_peers(
        tmp_path):
    now = [0.0]
    answers = [{"answered": True, "ended": False, "published": [{"path": "a"}], "count": 1},
               RUNNING]
    action, calls = _action(_args(tmp_path, "feeder", timeout=12), answers,
                            clock=lambda: now[0], sleep=lambda s: None)
    watch = action._watch

    def watch_a_window(module_args, task_vars):  # each look on the host lasts its window
        now[0] += module_args["window"]
        return watch(module_args, task_vars)

    action._watch = watch_a_window
    res = action.run(task_vars={"inventory_hostname": "seed"})
    assert res["failed"] and res["msg"] == "the transfer on seed published 1 of 3 files in 12s"
    # windows of 5, 5 and the 2 s left: never a look past the timeout
    assert [c["window"] for c in calls["watch"]] == [5, 5, 2] and now[0] == 12
    records, failed, _seen = _relay.read(_relay.path(str(tmp_path / "relay"), "seed"), "s1", 0)
    assert [r["path"] for r in records] == ["a"] and failed == res["msg"]


def test_holders_hand_nothing_until_every_record_is_out_and_a_bad_role_is_named(tmp_path):
    relay_dir = str(tmp_path / "relay")
    _relay.create(relay_dir)
    _relay.append(_relay.path(relay_dir, "seed"), "s1", records=[{"path": "a"}, {"path": "b"}])
    now = [0.0]
    action, calls = _action(_args(tmp_path, "holder", timeout=2), clock=lambda: now[0],
                            sleep=lambda s: now.__setitem__(0, now[0] + s))
    res = action.run(task_vars={})  # 2 of 3 records out: it waits, then fails at its timeout
    assert res["failed"] and res["msg"] == "2 of 3 records from seed in 2s"
    _relay.append(_relay.path(relay_dir, "seed"), "s1", records=[{"path": "c"}])
    action, calls = _action(_args(tmp_path, "holder"))
    assert action.run(task_vars={}) == {"changed": False, "handed": 0, "batches": 0, "touches": 0}
    assert not calls["watch"] and not calls["added"]
    action, _calls = _action(_args(tmp_path, "leech"))
    assert "role is 'leech'" in action.run(task_vars={})["msg"]


@pytest.mark.parametrize("role", ["peer", "holder", "seed"])
@pytest.mark.parametrize("lease", [40, 0])
def test_a_host_handed_nothing_has_its_inbox_touched_every_quarter_of_the_lease(
        tmp_path, role, lease):
    """The swarm's lease: while the relay runs, a host that was handed nothing for a quarter
    of the lease (10 s of 40) has its inbox touched; records handed to a peer are word
    enough. The relay's records come at 25 s (a, b) and 50 s (c). Without a lease (the
    control) nothing is touched."""
    relay_dir = str(tmp_path / "relay")
    relay_file = _relay.path(relay_dir, "seed")
    _relay.create(relay_dir)
    now = [0.0]
    due = [(25.0, [{"path": "a"}, {"path": "b"}]), (50.0, [{"path": "c"}])]

    def sleep(seconds):
        now[0] = round(now[0] + seconds, 3)
        while due and now[0] >= due[0][0]:
            _relay.append(relay_file, "s1", records=due.pop(0)[1])

    action, calls = _action(_args(tmp_path, role, lease=lease), clock=lambda: now[0],
                            sleep=sleep)
    res = action.run(task_vars={})
    assert not res.get("failed"), res
    touched_at = [t for _inbox, _s, t in calls["touched"]]
    assert all(inbox == "/inbox" and s == "s1" for inbox, s, _t in calls["touched"])
    if not lease:
        assert touched_at == [] and res["touches"] == 0
    elif role == "peer":  # handed at 25 s (word): touched at 10, 20, then 35, 45
        assert touched_at == pytest.approx([10, 20, 35, 45], abs=0.2)
        assert [paths for _i, _s, paths in calls["added"]] == [["a", "b"], ["c"]]
    else:  # handed nothing: touched every 10 s until the last record is out
        assert touched_at == pytest.approx([10, 20, 30, 40], abs=0.2)
        assert calls["added"] == []
    assert res["touches"] == len(touched_at) and res["handed"] == (3 if role == "peer" else 0)


def test_a_failed_touch_fails_the_instance_with_the_host_s_name(tmp_path):
    _relay.create(str(tmp_path / "relay"))
    now = [0.0]
    action, _calls = _action(_args(tmp_path, "holder", lease=4), clock=lambda: now[0],
                             sleep=lambda s: now.__setitem__(0, now[0] + s))
    action._swarm_touch = lambda inbox, session, _vars: {"failed": True, "msg": "rc 1: no"}
    res = action.run(task_vars={"inventory_hostname": "h2"})
    assert res["failed"] and res["msg"] == "touching the inbox of h2 failed: rc 1: no"
    assert now[0] == pytest.approx(1.0, abs=0.15)


def test_remove_takes_the_directory_away(tmp_path):
    _relay.create(str(tmp_path / "relay"))
    action, _calls = _action({"relay_dir": str(tmp_path / "relay"), "remove": True})
    assert action.run(task_vars={}) == {"changed": True}
    assert not (tmp_path / "relay").exists()
    assert action.run(task_vars={}) == {"changed": False}


def test_feeder_and_peers_side_by_side_hand_out_every_record_as_it_comes(tmp_path):
    """What the role runs: the feeder's and two peers' instances at once (threads here,
    forks there). Each batch reaches both peers while the feeder still waits for the next;
    the control: the same peers without a feeder get nothing."""
    published = []
    batches = [[{"path": "a"}], [{"path": "b"}, {"path": "c"}]]

    class SlowSeed(object):
        """model_watch on the feeder: each look takes 0.3 s and returns the next batch."""
        def __init__(self):
            self.count = 0

        def __call__(self, module_args, _vars):
            time.sleep(0.3)
            if not batches:
                return {"answered": False, "ended": False, "progress": {}}
            batch = batches.pop(0)
            published.append(time.monotonic())
            self.count += len(batch)
            return {"answered": True, "ended": False, "published": batch, "count": self.count}

    feeder, _calls = _action(_args(tmp_path, "feeder"))
    feeder._watch = SlowSeed()
    peers = [_action(_args(tmp_path, "peer", inbox="/inbox-%d" % i)) for i in (1, 2)]
    handed_at = []

    def stamp(calls_list):
        def add(inbox, session, records, _vars):
            calls_list.append((inbox, session, [r["path"] for r in records]))
            handed_at.append(time.monotonic())
            return {"changed": True}
        return add

    for peer, calls in peers:
        peer._swarm_add = stamp(calls["added"])
    out = {}
    threads = [threading.Thread(target=lambda: out.update(feeder=feeder.run(task_vars={})))]
    threads += [threading.Thread(target=lambda p=p, i=i: out.update({i: p[0].run(task_vars={})}))
                for i, p in enumerate(peers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert out["feeder"]["published"] == 3
    for i, (_peer, calls) in enumerate(peers):
        assert out[i] == {"changed": False, "handed": 3, "batches": len(calls["added"]),
                          "touches": 0}
        assert [p for _inbox, _s, paths in calls["added"] for p in paths] == ["a", "b", "c"]
    # the first batch was handed out before the second was published
    assert min(handed_at) < published[1]
    # control: peers of another session's directory, with no feeder, hand out nothing
    _relay.create(str(tmp_path / "other"))
    now = [0.0]
    lonely, lonely_calls = _action(_args(tmp_path, "peer", relay_dir=str(tmp_path / "other"),
                                         timeout=1), clock=lambda: now[0],
                                   sleep=lambda s: now.__setitem__(0, now[0] + s))
    assert lonely.run(task_vars={})["failed"] and lonely_calls["added"] == []


def _append_with_the_shell(inbox, data, command):
    import subprocess
    subprocess.run(["/bin/sh", "-c", command], input=data.encode("utf-8"), check=True)


@pytest.mark.parametrize("torn", [False, True])
def test_the_shell_append_writes_the_module_s_lines_after_a_torn_one(tmp_path, torn):
    """What a peer's instance runs through the connection: the records come back as the
    model_swarm module's lines, a path with a quote and a space included; after a torn last
    line (a writer killed mid-line) the new line starts on its own. The control: a plain
    ``cat >>`` glues the record to the torn line, and the reader loses it."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
    inbox = str(tmp_path / "it's here" / "inbox.jsonl")
    records = [{"path": "a'b c.safetensors", "pieces": "ab" * 20, "size": 3},
               {"path": "$(x)`y`\\z", "pieces": "cd" * 20, "size": 4}]
    lines = _relay.inbox_lines("s1", records)
    if torn:
        import os
        os.makedirs(os.path.dirname(inbox))
        with open(inbox, "w") as handle:
            handle.write('{"session": "s1", "add": [{"path": "half')
    _append_with_the_shell(inbox, lines, _relay.inbox_append_command(inbox))
    got = [r for line in _files.read_lines(inbox) for r in line.get("add") or []]
    assert got == records
    if torn:
        control = str(tmp_path / "control.jsonl")
        with open(control, "w") as handle:
            handle.write('{"session": "s1", "add": [{"path": "half')
        _append_with_the_shell(control, lines, "cat >> '%s'" % control)
        assert [r for line in _files.read_lines(control) for r in line.get("add") or []] \
            == records[1:]
