"""The inbox append (gpufleet.sglang.model_swarm's action, and the relay's peers through it):
one shell command fed through the connection's pipelining, else the module."""
from unittest import mock

import pytest

from ansible_collections.gpufleet.sglang.plugins.action import model_swarm
from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _relay
from ansible_collections.gpufleet.sglang.tests.doubles import ActionTask


def _action(args=None, pipelining=True, check_mode=False, rc=0):
    act = model_swarm.ActionModule(ActionTask(args or {}, "gpufleet.sglang.model_swarm"),
                                   mock.MagicMock(), mock.MagicMock(), mock.MagicMock(),
                                   mock.MagicMock(), mock.MagicMock())
    act._play_context.check_mode = check_mode
    act._connection.is_pipelining_enabled.return_value = pipelining
    act._low_level_execute_command = mock.MagicMock(
        return_value={"rc": rc, "stderr": "No space left\n" if rc else ""})
    act._execute_module = mock.MagicMock(return_value={"changed": True, "added": 1})
    return act


@pytest.fixture(autouse=True)
def _no_base_run(monkeypatch):
    monkeypatch.setattr(model_swarm.ActionBase, "run", lambda self, tmp=None, task_vars=None: {})


RECORDS = [{"path": "a"}]


@pytest.mark.parametrize("records, stop", [(RECORDS, False), ([], True)])
def test_the_lines_go_through_the_connection_with_pipelining(records, stop):
    act = _action()
    assert model_swarm.append(act, "/m/inbox", "s1", records, stop) == {
        "changed": True, "added": len(records)}
    (cmd,), kwargs = act._low_level_execute_command.call_args
    assert cmd == _relay.inbox_append_command("/m/inbox")
    assert kwargs["in_data"] == _relay.inbox_lines("s1", records, stop) and kwargs["sudoable"]
    assert not act._execute_module.called


@pytest.mark.parametrize("pipelining, check_mode, inbox", [
    (False, False, "/m/inbox"), (True, True, "/m/inbox"), (True, False, "m/inbox")])
def test_the_module_appends_without_pipelining_in_check_mode_or_for_a_relative_path(
        pipelining, check_mode, inbox):
    act = _action(pipelining=pipelining, check_mode=check_mode)
    assert model_swarm.append(act, inbox, "s1", RECORDS, task_vars={}) == {
        "changed": True, "added": 1}
    assert not act._low_level_execute_command.called
    assert act._execute_module.call_args[1]["module_args"] == {
        "inbox": inbox, "session": "s1", "add": RECORDS, "stop": False}


def test_a_failed_append_names_the_inbox_and_the_shell_s_message():
    res = model_swarm.append(_action(rc=1), "/m/inbox", "s1", RECORDS)
    assert res == {"failed": True, "msg": "appending to /m/inbox: rc 1: No space left"}


def test_the_task_appends_the_stop_and_nothing_without_records_or_stop():
    act = _action({"inbox": "/m/inbox", "session": "s1", "stop": True})
    assert act.run(task_vars={}) == {"changed": True, "added": 0}
    assert act._low_level_execute_command.call_args[1]["in_data"] == \
        '{"session": "s1", "stop": true}\n'
    idle = _action({"inbox": "/m/inbox", "session": "s1"})
    assert idle.run(task_vars={}) == {"changed": False, "added": 0}
    assert not idle._low_level_execute_command.called and not idle._execute_module.called


def test_keepalive_with_nothing_to_add_touches_the_inbox_and_never_appends():
    act = _action({"inbox": "/m/inbox", "session": "s1", "keepalive": True})
    assert act.run(task_vars={}) == {"changed": False, "added": 0}
    (cmd,), kwargs = act._low_level_execute_command.call_args
    assert cmd == _relay.inbox_touch_command("/m/inbox") and "in_data" not in kwargs
    # with records the keepalive adds nothing of its own: the records are the word
    act = _action({"inbox": "/m/inbox", "session": "s1", "keepalive": True, "add": RECORDS})
    assert act.run(task_vars={}) == {"changed": True, "added": 1}
    (cmd,), _kwargs = act._low_level_execute_command.call_args
    assert cmd == _relay.inbox_append_command("/m/inbox")
    # without pipelining: the module touches it
    act = _action({"inbox": "/m/inbox", "session": "s1", "keepalive": True}, pipelining=False)
    assert act.run(task_vars={}) == {"changed": False, "added": 0}
    assert act._execute_module.call_args[1]["module_args"] == {
        "inbox": "/m/inbox", "session": "s1", "keepalive": True}
    assert model_swarm.touch(_action(rc=1), "/m/inbox", "s1") == {
        "failed": True, "msg": "touching /m/inbox: rc 1: No space left"}


def test_the_touch_command_creates_the_inbox_and_moves_its_mtime(tmp_path):
    import os
    import subprocess
    inbox = str(tmp_path / "it's a dir" / "inbox.jsonl")
    subprocess.run(["/bin/sh", "-c", _relay.inbox_touch_command(inbox)], check=True)
    assert os.path.getsize(inbox) == 0
    with open(inbox, "w") as handle:
        handle.write('{"session": "s1"}\n')
    os.utime(inbox, (1000, 1000))
    subprocess.run(["/bin/sh", "-c", _relay.inbox_touch_command(inbox)], check=True)
    assert os.stat(inbox).st_mtime > 1000 and os.path.getsize(inbox) == 18
