# -*- coding: utf-8 -*-
"""The safety and gate scenarios' check script (tests/testbed/observe.py,
called through tests/testbed/tasks/observe_fleet.yml), which replaced tests/testbed/tasks/observe.yml's
three tasks per host and the ``wc -l``, the slurped deployment record and the Jinja that
parsed what they read (issue 47).

The inputs are shaped as the scenarios get them: the emulator's start and ``--help`` records
written by the emulator's own writer, ``systemctl show -p MainPID -p NRestarts`` as it
prints, a /server_info answer from an HTTP server with the emulator's layout, a deployment
record written by the server role's writers with the gate's summary, and a deploy run's
output as tests/testbed/tasks/deploy_run.yml registers it (the default callback with JSON
results). Each check has a control: the bad input it exists to catch."""

import importlib.util
import io
import json
import os
import stat
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _capacity, _server_args_gate
from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout import _server_unit
from ansible_collections.gpufleet.sglang.tests.paths import ROOT

SCRIPT = os.path.join(ROOT, "tests", "testbed", "observe.py")
_SPEC = importlib.util.spec_from_file_location("safety_observe", SCRIPT)
observe = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(observe)

EMULATOR_SRC = os.path.join(ROOT, "tests", "emulator", "src")
HOSTS = ["gpufleet-mol-1", "gpufleet-mol-2", "gpufleet-mol-3"]
UNIT = "sglang.service"


# --- inputs as the scenarios read them ---------------------------------------------------------

def emulator_records(tmp_path, monkeypatch, name, count):
    """``count`` records appended by the emulator's own writer (state.append_record)."""
    monkeypatch.setenv("SGLANG_EMULATOR_STATE_DIR", str(tmp_path))
    monkeypatch.syspath_prepend(EMULATOR_SRC)
    from sglang._emulator import state  # pylint: disable=import-outside-toplevel
    for i in range(count):
        state.append_record(name, {"time": 1765000000.0 + i, "pid": 4000 + i, "argv": ["--pp-size", "8"]})
    return str(tmp_path / name)


def server_info(**layout_args):
    """A /server_info answer: the emulator's resolved layout (its own resolver) and the keys
    its server adds (tests/emulator/src/sglang/_emulator/server.py State.server_info)."""
    sys.path.insert(0, EMULATOR_SRC)
    try:
        from sglang._emulator import layout  # pylint: disable=import-outside-toplevel
    finally:
        sys.path.remove(EMULATOR_SRC)
    lay, _warnings = layout.resolve("0.5.9", layout_args)
    info = {"model_path": "/models/kimi-k2.5", "port": 30000, "host": "0.0.0.0"}
    info.update((key, lay[key]) for key in ("tp_size", "pp_size", "ep_size", "dp_size", "nnodes", "node_rank"))
    info.update(enable_dp_attention=lay["enable_dp_attention"], served_model_name="kimi-k2.5",
                version="0.5.9", frontend="python", emulator=True, emulator_layout=lay["name"])
    return info


def show(main_pid, restarts=0):
    """``systemctl show -p MainPID -p NRestarts sglang.service``."""
    return "MainPID=%d\nNRestarts=%d\n" % (main_pid, restarts)


class _Answer(BaseHTTPRequestHandler):
    answers = {}

    def do_GET(self):  # noqa: N802 (http.server's name)
        status, body, ctype = self.answers[self.path]
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # quiet
        pass


@pytest.fixture(scope="module")
def http():
    """A server answering ``_Answer.answers[path]`` (status, body, content type); its base URL."""
    server = HTTPServer(("127.0.0.1", 0), _Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def deployment_record(argv, asked, derived):
    """/etc/ansible/facts.d/sglang.fact as the server role writes it: _server_unit.record with
    the gate's summary (_server_args_gate.summary) as ``server_args``."""
    answer = {"verdict": "ok", "checks": ["check_server_args"], "argv": argv, "asked": asked,
              "derived": derived, "warnings": []}
    params = {"strategy": "pp8", "layout": {"tp": 1, "pp": 8, "ep": 1, "dp": 1}, "release": "0.5.9",
              "argv": argv, "service_name": "sglang", "port": 30000,
              "server_args": _server_args_gate.summary(answer, "0.5.9")}
    return json.loads(_server_unit.record_text(_server_unit.record({}, params, "a" * 40, "2026-12-08T10:00:00Z", True)))


PP8 = {"tp_size": 1, "pp_size": 8, "ep_size": 1, "dp_size": 1, "disable_overlap_schedule": False}
PP8_ARGV = ["--model-path", "/models/kimi-k2.5", "--pp-size", "8", "--port", "30000"]


def deploy_output(msg, host="gpufleet-gate-1"):
    """A failed deploy's stdout: the default callback with ANSIBLE_CALLBACK_RESULT_FORMAT=json."""
    return ("PLAY [Deploy SGLang] ***\n\nTASK [gpufleet.sglang.server : Check the plan] ***\n"
            "fatal: [%s]: FAILED! => %s\n\nPLAY RECAP ***\n%s : ok=12 changed=0 unreachable=0 failed=1"
            % (host, json.dumps({"changed": False, "msg": msg}), host))


def unfit(strategy="tp8-dp8"):
    """The capacity planner's refusal, through its own formatter (_capacity.unfit_message)."""
    return _capacity.unfit_message({
        "name": strategy, "gpus": 8, "gpu_memory_mib": 97887, "weights_per_gpu_min_gib": 71.2,
        "weights_per_gpu_max_gib": 73.9, "budget_gib": 78.4, "mem_fraction_static": 0.836,
        "fraction_from": None, "margin_gib": -2.5, "kv_tokens": 0, "context_length": None,
        "recommended_mem_fraction_static": None}, "gpufleet-gate-1")


# --- inside a container: the start records, the unit, /server_info, wc -l, the record -----------

def test_inside_reads_starts_unit_info_help_calls_and_record(tmp_path, monkeypatch, http):
    starts = emulator_records(tmp_path, monkeypatch, "starts.jsonl", 2)
    helps = emulator_records(tmp_path, monkeypatch, "help-calls.jsonl", 2)
    record_path = tmp_path / "sglang.fact"
    rec = deployment_record(PP8_ARGV, PP8, dict(PP8, disable_overlap_schedule=True))
    record_path.write_text(_server_unit.record_text(rec))
    _Answer.answers["/server_info"] = (200, json.dumps(server_info(pp_size=8)), "application/json")
    got = observe.inside(UNIT, starts, http + "/server_info", helps, str(record_path),
                         show=lambda unit: show(4242, 0))
    assert got["starts"] == 2 and got["lines"] == 2
    assert got["main_pid"] == 4242 and got["n_restarts"] == 0
    assert got["server_status"] == 200 and got["server_info"]["pp_size"] == 8
    assert got["record"] == rec


def test_inside_controls_no_starts_a_dead_server_and_what_must_be_read(tmp_path, monkeypatch, http):
    # no start record yet: 0 (cat failed, the task did not); nothing answers: -1 and {}
    got = observe.inside(UNIT, str(tmp_path / "absent.jsonl"), "http://127.0.0.1:1/server_info",
                         show=lambda unit: show(0, 0))
    assert got["starts"] == 0 and got["main_pid"] == 0
    assert got["server_status"] == -1 and got["server_info"] == {}
    # a server that answers 503 with no JSON: its status, no info
    _Answer.answers["/starting"] = (503, "starting", "text/plain")
    assert observe.fetch_json(http + "/starting") == (503, {})
    # wc -l of a missing file, a missing record, a unit without MainPID fail the reading
    with pytest.raises(observe.Unreadable, match="wc -l"):
        observe.inside(UNIT, str(tmp_path / "absent.jsonl"), "http://127.0.0.1:1/", str(tmp_path / "nope"),
                       show=lambda unit: show(1))
    with pytest.raises(observe.Unreadable, match="sglang.fact"):
        observe.inside(UNIT, str(tmp_path / "absent.jsonl"), "http://127.0.0.1:1/", None,
                       str(tmp_path / "sglang.fact"), show=lambda unit: show(1))
    with pytest.raises(observe.Unreadable, match="MainPID"):
        observe.unit_figures("LoadState=not-found\n", UNIT)


def test_counts_are_those_of_cat_s_stdout_lines_and_wc(tmp_path):
    # the test bed's readings: cat's stdout_lines (trailing newlines stripped), wc -l (newlines)
    assert observe.stdout_lines('{"a": 1}\n{"a": 2}\n') == 2
    assert observe.stdout_lines("") == 0
    path = tmp_path / "calls.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a": 3}')  # a last line without its newline: wc says 2
    assert observe.count_lines(str(path)) == 2


# --- on the controller: the record's figures, the deploy's output ---------------------------------

def test_record_pp8_changed_only_the_release_s_own_default():
    rec = deployment_record(PP8_ARGV, PP8, dict(PP8, disable_overlap_schedule=True))
    got = observe.record_figures(rec)
    assert got["verdict"] == "ok" and got["disable_overlap_schedule"] is True
    assert got["changes"] == ["overlap schedule"] and got["explicit"] == {}
    assert got["document"] == rec


def test_record_dp_attention_asked_and_dropped_counts_one_explicit_change():
    argv = PP8_ARGV + ["--enable-dp-attention"]
    asked = dict(PP8, enable_dp_attention=True)
    rec = deployment_record(argv, asked, dict(PP8, disable_overlap_schedule=True, enable_dp_attention=False))
    got = observe.record_figures(rec)
    assert "--enable-dp-attention" in got["argv"]
    assert got["explicit"] == {"DP attention": 1}
    assert "overlap schedule" in got["changes"]


def test_record_controls_no_change_an_explicit_overlap_no_server_args():
    same = observe.record_figures(deployment_record(PP8_ARGV, PP8, PP8))
    assert same["changes"] == [] and same["disable_overlap_schedule"] is False
    # the overlap schedule turned off by the launch flags: explicit, not the release's own default
    asked = dict(PP8, disable_overlap_schedule=False)
    explicit = observe.record_figures(deployment_record(PP8_ARGV + ["--disable-overlap-schedule"], asked,
                                                        dict(PP8, disable_overlap_schedule=True)))
    assert explicit["explicit"] == {"overlap schedule": 1}
    bare = observe.record_figures({"argv": PP8_ARGV})
    assert bare["verdict"] is None and bare["changes"] == [] and bare["disable_overlap_schedule"] is None
    with pytest.raises(observe.Unreadable):
        observe.record_figures(["not", "a", "record"])


def test_deploy_gpu_needs_of_the_refusal_name_no_64():
    out = deploy_output(unfit())
    assert "strategy tp8-dp8 does not fit 8 x 97887 MiB" in out
    got = observe.deploy_figures({"rc": 2, "stdout": out, "stderr": ""}, "64")
    assert got["rc"] == 2 and got["gpu_needs_forbidden"] == []


def test_deploy_controls_64_gpus_as_the_planner_or_the_strategy_check_counts_them():
    planner = "cannot plan: layout tp8-pp1-ep1-dp8 needs 64 GPUs, the server has 8"
    got = observe.deploy_figures({"rc": 2, "stdout": deploy_output(planner)}, "64")
    assert got["gpu_needs"] == ["64"] and got["gpu_needs_forbidden"] == ["64"]
    # the strategy check's count, a formula: the gate's regex (needs [^ ]+ GPUs) missed it
    check = "strategy tp8-dp8 needs tp*pp*dp = 8*1*8 = 64 GPUs, but the server has 8 (1 node(s) x 8 GPUs)"
    got = observe.deploy_figures({"rc": 2, "stdout": deploy_output(check)}, "64")
    assert got["gpu_needs_forbidden"] == ["tp*pp*dp = 8*1*8 = 64"]
    fine = observe.deploy_figures({"rc": 2, "stdout": deploy_output("needs tp*pp = 8*1 = 8 GPUs")}, "64")
    assert fine["gpu_needs"] == ["tp*pp = 8*1 = 8"] and fine["gpu_needs_forbidden"] == []


def test_deploy_rolled_back_lines():
    msg = ("The new server (ep8, SGLang 0.5.9) did not become ready on gpufleet-mol-1: rolled back to the "
           "last known good server (pp8, SGLang 0.5.9), which is ready again after 7.2 s.")
    got = observe.deploy_figures({"rc": 2, "stdout": deploy_output(msg, "gpufleet-mol-1")})
    assert len(got["rolled_back"]) == 1 and got["rolled_back"][0].startswith("fatal: [gpufleet-mol-1]")
    assert observe.deploy_figures({"rc": 0, "stdout": "PLAY RECAP"})["rolled_back"] == []


# --- the command line: every host at once, an unreadable host, the published ports ---------------

def test_hosts_prints_every_host_and_the_deploy(tmp_path, monkeypatch, capsys):
    rec = deployment_record(PP8_ARGV, PP8, dict(PP8, disable_overlap_schedule=True))
    asked = []

    def read(host, args):
        asked.append((host, args))
        return {"starts": 1, "main_pid": 100 + HOSTS.index(host), "n_restarts": 0, "server_status": 200,
                "server_info": server_info(pp_size=8), "record": rec}
    stdin = io.StringIO(json.dumps({"rc": 2, "stdout": deploy_output(unfit()), "stderr": ""}))
    rc = observe.main(["hosts", "--hosts", ",".join(HOSTS), "--unit", UNIT, "--starts", "/s.jsonl",
                       "--info-url", "http://127.0.0.1:30000/server_info", "--record", "/r.fact",
                       "--deploy", "--forbid-gpu-need", "64"], stdin=stdin, read=read)
    got = json.loads(capsys.readouterr().out)
    assert rc == 0 and got["errors"] == {}
    assert sorted(got["hosts"]) == sorted(HOSTS) and got["hosts"][HOSTS[2]]["main_pid"] == 102
    assert got["hosts"][HOSTS[0]]["record"]["changes"] == ["overlap schedule"]
    assert got["deploy"]["gpu_needs_forbidden"] == []
    assert sorted(h for h, _a in asked) == sorted(HOSTS)
    assert asked[0][1] == ["--unit", UNIT, "--starts", "/s.jsonl", "--info-url",
                           "http://127.0.0.1:30000/server_info", "--record", "/r.fact"]


def test_hosts_control_an_unreadable_host_fails_the_step(capsys):
    def read(host, _args):
        if host == HOSTS[1]:
            raise observe.Unreadable("podman exec %s: rc 125: no such container" % host)
        return {"starts": 1, "main_pid": 7, "n_restarts": 0, "server_status": 200, "server_info": {}}
    rc = observe.main(["hosts", "--hosts", ",".join(HOSTS), "--unit", UNIT, "--starts", "/s",
                       "--info-url", "http://x/"], read=read)
    out = capsys.readouterr()
    got = json.loads(out.out)
    assert rc == 1 and list(got["errors"]) == [HOSTS[1]] and HOSTS[1] not in got["hosts"]
    assert "no such container" in out.err


def _executable(path, text):
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_hosts_runs_itself_inside_each_container_through_podman(tmp_path, monkeypatch):
    """The script's own text runs as ``python3 -c`` in the container: here a podman that
    drops ``exec HOST`` and a systemctl that prints a unit's properties."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "podman", '#!/bin/sh\n[ "$1" = exec ] || exit 125\nshift 2\nexec "$@"\n')
    _executable(bin_dir / "systemctl", "#!/bin/sh\nprintf 'MainPID=4242\\nNRestarts=1\\n'\n")
    _executable(bin_dir / "python3", '#!/bin/sh\nexec "%s" "$@"\n' % sys.executable)
    starts = emulator_records(tmp_path, monkeypatch, "starts.jsonl", 3)
    env = dict(os.environ, PATH="%s:%s" % (bin_dir, os.environ.get("PATH", "")))
    done = subprocess.run([sys.executable, SCRIPT, "hosts", "--hosts", "a,b", "--unit", UNIT, "--starts", starts,
                           "--info-url", "http://127.0.0.1:1/server_info"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["hosts"]["a"] == got["hosts"]["b"] == {
        "starts": 3, "main_pid": 4242, "n_restarts": 1, "server_status": -1, "server_info": {}}
    # control: a container podman does not know
    _executable(bin_dir / "podman", "#!/bin/sh\necho 'Error: no container with name or ID' >&2\nexit 125\n")
    done = subprocess.run([sys.executable, SCRIPT, "hosts", "--hosts", "a", "--unit", UNIT, "--starts", starts,
                           "--info-url", "http://127.0.0.1:1/server_info"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1 and "rc 125" in json.loads(done.stdout)["errors"]["a"]


def test_serving_the_published_ports_answer_ep8(http, capsys):
    port = http.rsplit(":", 1)[1]
    _Answer.answers["/server_info"] = (200, json.dumps(server_info(tp_size=8, ep_size=8)), "application/json")
    assert observe.main(["serving", "--ports", "%s,%s" % (port, port)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["statuses"] == [200] and got["ep_sizes"] == [8]
    assert got["answers"][port] == {"status": 200, "ep_size": 8}


def test_serving_controls_a_lost_host_and_another_layout(http):
    port = http.rsplit(":", 1)[1]
    _Answer.answers["/server_info"] = (200, json.dumps(server_info(tp_size=8, ep_size=8)), "application/json")
    lost = observe.serving([port, "1"])
    assert lost["statuses"] == [200, -1] and lost["ep_sizes"] == [8, None]
    _Answer.answers["/server_info"] = (200, json.dumps(server_info(pp_size=8)), "application/json")
    assert observe.serving([port])["ep_sizes"] == [1]
