# -*- coding: utf-8 -*-
"""gpufleet.sglang.pd_reach on loopback: one host listens (in a thread), another connects;
a closed port is one problem line; check mode neither listens nor fails."""

import socket
import threading
import time

from ansible_collections.gpufleet.sglang.plugins.modules import pd_reach
from ansible_collections.gpufleet.sglang.tests.ports import free_port, port_open

PREFILL, DECODE = "gpufleet-router-1", "gpufleet-router-2"
SERVERS = [{"name": "prefill-0", "role": "prefill", "hosts": [PREFILL], "base_gpu_id": 0, "gpus": 8},
           {"name": "decode-0", "role": "decode", "hosts": [DECODE], "base_gpu_id": 0, "gpus": 8}]


def layout():
    """Both hosts on loopback, each port free: (hosts, bootstrap port)."""
    ports = set()
    while len(ports) < 3:
        ports.add(free_port())
    bootstrap, kv_prefill, kv_decode = sorted(ports)
    hosts = {PREFILL: {"address": "127.0.0.1", "kv_port": kv_prefill},
             DECODE: {"address": "127.0.0.1", "kv_port": kv_decode}}
    return hosts, bootstrap


def args(mode, me, hosts, bootstrap, **extra):
    out = {"mode": mode, "me": me, "placements": SERVERS, "hosts": hosts, "bootstrap_port": bootstrap,
           "listen_address": "127.0.0.1", "connect_timeout": 1}
    out.update(extra)
    return out


class Listener(object):
    """The module in listen mode in a thread, until its ports are open."""

    def __init__(self, run_module, module_args, ports):
        self.outcome = {}
        self.thread = threading.Thread(target=self._run, args=(run_module, module_args), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not all(port_open("127.0.0.1", p) for p in ports):
            assert time.monotonic() < deadline, "the listener never opened %s" % (ports,)
            assert self.thread.is_alive(), self.outcome
            time.sleep(0.05)

    def _run(self, run_module, module_args):
        self.outcome["result"], self.outcome["failed"] = run_module(pd_reach, module_args)

    def join(self):
        self.thread.join(30)
        assert not self.thread.is_alive()
        return self.outcome["result"], self.outcome["failed"]


def test_a_decode_reaches_a_listening_prefill(run_module):
    hosts, bootstrap = layout()
    listener = Listener(run_module, args("listen", PREFILL, hosts, bootstrap, listen_seconds=1.5),
                        [bootstrap, hosts[PREFILL]["kv_port"]])
    result, failed = run_module(pd_reach, args("connect", DECODE, hosts, bootstrap))
    listened, listen_failed = listener.join()
    assert not failed, result
    assert result["problems"] == [] and result["changed"] is False
    assert [(r["what"], r["port"], r["ok"], r["error"]) for r in result["results"]] == [
        ("bootstrap", bootstrap, True, None), ("kv", hosts[PREFILL]["kv_port"], True, None)]
    assert not listen_failed, listened
    assert [(e["port"], e["what"], e["state"]) for e in listened["listening"]] == [
        (bootstrap, "bootstrap", "listening"), (hosts[PREFILL]["kv_port"], "kv", "listening")]
    # the module's probes and the connect, each seen
    assert all(entry["from"] and set(entry["from"]) == {"127.0.0.1"} for entry in listened["accepted"])
    # the ports are closed again once it returned
    assert not port_open("127.0.0.1", bootstrap)


def test_a_closed_port_is_one_problem_line_and_fails(run_module):
    hosts, bootstrap = layout()
    # only the decode listens: the prefill's bootstrap and KV ports are closed
    listener = Listener(run_module, args("listen", DECODE, hosts, bootstrap, listen_seconds=1.5),
                        [hosts[DECODE]["kv_port"]])
    result, failed = run_module(pd_reach, args("connect", DECODE, hosts, bootstrap))
    prefill_result, prefill_failed = run_module(pd_reach, args("connect", PREFILL, hosts, bootstrap))
    listener.join()
    assert failed
    assert result["problems"] == [
        "gpufleet-router-2 (decode-0) cannot reach gpufleet-router-1 (prefill-0) at 127.0.0.1:%d, the "
        "bootstrap port: %s" % (bootstrap, result["results"][0]["error"]),
        "gpufleet-router-2 (decode-0) cannot reach gpufleet-router-1 (prefill-0) at 127.0.0.1:%d, the "
        "KV port: %s" % (hosts[PREFILL]["kv_port"], result["results"][1]["error"])]
    assert result["results"][0]["error"].startswith("refused or unreachable after")
    assert result["msg"] == "; ".join(result["problems"])
    # control: the prefill reaches the listening decode
    assert not prefill_failed and prefill_result["problems"] == [], prefill_result


def test_check_mode_neither_listens_nor_fails(run_module):
    hosts, bootstrap = layout()
    result, failed = run_module(pd_reach, args("listen", PREFILL, hosts, bootstrap, _ansible_check_mode=True))
    assert not failed
    assert [e["state"] for e in result["listening"]] == ["would listen", "would listen"]
    assert not port_open("127.0.0.1", bootstrap)
    result, failed = run_module(pd_reach, args("connect", DECODE, hosts, bootstrap, _ansible_check_mode=True))
    assert not failed and len(result["problems"]) == 2


def test_a_port_a_running_process_answers_on_counts_as_listening(run_module):
    hosts, bootstrap = layout()
    running = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        running.bind(("127.0.0.1", bootstrap))
        running.listen(8)
        result, failed = run_module(pd_reach, args("listen", PREFILL, hosts, bootstrap, listen_seconds=0))
    finally:
        running.close()
    assert not failed, result
    assert [(e["port"], e["state"]) for e in result["listening"]] == [
        (bootstrap, "answered by a running process"), (hosts[PREFILL]["kv_port"], "listening")]
    assert "a running process answers on %d (bootstrap)" % bootstrap in result["msg"]


def test_a_port_held_by_a_process_that_does_not_answer_fails_the_listener(run_module):
    hosts, bootstrap = layout()
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        held.bind(("127.0.0.1", hosts[PREFILL]["kv_port"]))  # bound, not listening
        result, failed = run_module(pd_reach, args("listen", PREFILL, hosts, bootstrap, listen_seconds=0))
    finally:
        held.close()
    assert failed
    assert result["problems"] == [result["msg"]]
    assert "cannot listen on 127.0.0.1:%d for the KV port (prefill-0)" % hosts[PREFILL]["kv_port"] in result["msg"]
    # control: the bootstrap port it could bind was served
    assert [e["state"] for e in result["listening"]] == ["listening", "not listening"]


def test_a_host_without_its_kv_port_is_refused_with_the_hosts_named(run_module):
    hosts, bootstrap = layout()
    del hosts[PREFILL]["kv_port"]
    result, failed = run_module(pd_reach, args("connect", DECODE, hosts, bootstrap))
    assert failed and "gpufleet-router-1 has no kv_port" in result["msg"]
