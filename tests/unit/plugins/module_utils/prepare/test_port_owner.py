# -*- coding: utf-8 -*-
"""Who holds the server port, read from /proc (a fake /proc tree here)."""

import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _port_owner as po

HEADER = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
          "timeout inode\n")
# 0x7530 = 30000 listening (0A) with inode 111; 0x7A69 = 31337 established (01)
TCP = HEADER + (
    "   0: 00000000:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000   999        0 111 1 0 100 0 0 10 0\n"
    "   1: 0100007F:7A69 0100007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1\n"
)
TCP6 = HEADER + (
    "   0: 00000000000000000000000000000000:7B0C 00000000000000000000000000000000:0000 0A "
    "00000000:00000000 00:00000000 00000000     0        0 333 1 0 100 0 0 10 0\n"
)


def test_listen_sockets_are_parsed_with_port_and_inode():
    assert po.parse_proc_net_tcp(TCP) == [(30000, "111")]
    assert po.parse_proc_net_tcp(TCP6) == [(31500, "333")]
    assert po.listening_inodes(30000, [TCP, TCP6]) == {"111"}
    assert po.listening_inodes(31337, [TCP, TCP6]) == set()


@pytest.mark.parametrize("text, unit", [
    ("0::/system.slice/sglang.service\n", "sglang.service"),
    ("12:pids:/system.slice/sglang.service\n1:name=systemd:/system.slice/sglang.service\n", "sglang.service"),
    ("0::/user.slice/user-0.slice/session-3.scope\n", "session-3.scope"),
    ("0::/\n", None),
])
def test_unit_of_a_process(text, unit):
    assert po.unit_of(text) == unit


def _proc(tmp_path, processes):
    root = tmp_path / "proc"
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text(TCP)
    (root / "net" / "tcp6").write_text(TCP6)
    for pid, (comm, cgroup, inode) in processes.items():
        base = root / str(pid)
        (base / "fd").mkdir(parents=True)
        (base / "comm").write_text(comm + "\n")
        (base / "cgroup").write_text(cgroup)
        os.symlink("socket:[%s]" % inode, str(base / "fd" / "3"))
        os.symlink("/dev/null", str(base / "fd" / "0"))
    return str(root)


def test_our_unit_holds_the_port(tmp_path):
    root = _proc(tmp_path, {42: ("python3", "0::/system.slice/sglang.service\n", "111")})
    verdict = po.inspect(30000, "sglang", False, None, proc_root=root)
    assert verdict["owner"] == "ours" and verdict["pids"] == [42]


def test_another_process_holds_the_port(tmp_path):
    root = _proc(tmp_path, {77: ("python3", "0::/user.slice/session-1.scope\n", "111")})
    verdict = po.inspect(30000, "sglang", True, 30000, proc_root=root)
    assert verdict == {"port": 30000, "owner": "other", "programs": ["python3"], "pids": [77]}
    msg = po.message(verdict, "gpu-1", "sglang")
    assert msg.startswith("server_port 30000: port 30000 is already in use on gpu-1 by python3 (pid 77)")


def test_free_port(tmp_path):
    root = _proc(tmp_path, {})
    assert po.inspect(31337, "sglang", False, None, proc_root=root)["owner"] == "free"


@pytest.mark.parametrize("active, record_port, owner", [
    (True, 30000, "ours"),
    (True, 30001, "other"),
    (False, 30000, "other"),
    (True, None, "other"),
])
def test_invisible_holder_counts_as_ours_only_with_our_unit_on_that_port(tmp_path, active, record_port, owner):
    # no process's fd table is readable (no CAP_SYS_PTRACE): decided by unit and record
    root = _proc(tmp_path, {})
    assert po.inspect(30000, "sglang", active, record_port, proc_root=root)["owner"] == owner
