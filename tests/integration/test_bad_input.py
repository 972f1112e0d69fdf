# -*- coding: utf-8 -*-
"""Integration: bad input to ``playbooks/deploy.yml`` (and ``playbooks/tune.yml``) is refused,
clearly, and leaves the server that already runs untouched.

A session fixture creates one systemd container of the test bed (its own inventory,
``tests/integration/bad_input_inventory/``: container gpufleet-bad-1, HTTP on 127.0.0.1:39701,
SSH on 127.0.0.1:22701), prepares it, deploys strategy pp8 once and destroys the container
at the end. Each case is then one ``ansible-playbook playbooks/deploy.yml -e ...`` run (or
``playbooks/tune.yml``, or another inventory, where the case says so) that must fail (rc != 0) with a message naming the input, while the unit's main PID, the
emulator's start count, the unit and environment files and ``/health`` stay as they were.
Two inputs that look dangerous but are valid (an API key with shell metacharacters, a
non-ASCII served model name) must be accepted instead, restart the server exactly once,
and are restored afterwards.

The results become docs/bad-input.md (tests/integration/bad_input_report.py) when every
case ran. Runs only with GPUFLEET_INTEGRATION=1 (about 6 minutes on 2 cores).
"""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

import _testbed
from bad_input_report import write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

pytestmark = _testbed.MARKS

INVENTORY = os.path.join(HERE, "bad_input_inventory")
HOST = "gpufleet-bad-1"
HTTP_PORT = 39701
RELEASE = "0.5.9"
VENV_PYTHON = "/opt/sglang/%s/bin/python" % RELEASE
REPORT = os.path.join(ROOT, "docs", "bad-input.md")
BIN = os.path.dirname(sys.executable)

# A key a shell would love to interpret: quotes, $(), backticks, ;, |, &, <, >, \, %, spaces.
SHELL_KEY = "k3y'\"$(touch /tmp/pwned);`id`|&<>\\ %n ${HOME} #"
UNICODE_NAME = "Kimi-K2.5-日本語"

# --- in-container helpers the cases need -------------------------------------------------
JUNK_PYTHON = "#!/bin/sh\necho '@@@ this is not python @@@'\necho 'usage: ??? {garbage'\nexit 0\n"
JUNK_HELP_PYTHON = (
    "#!/bin/sh\n"
    "# the real venv interpreter, except that launch_server --help prints junk\n"
    "if [ \"$1\" = -m ]; then printf '\\033[31m%%%% no argparse here %%%%\\033[0m\\n"
    "<html>500 Internal Server Error</html>\\n'; exit 0; fi\n"
    "exec " + VENV_PYTHON + " \"$@\"\n"
)
HTTP_SERVER_PIDFILE = "/run/gpufleet-bad-http.pid"


def podman_exec(*cmd, check=True, detach=False):
    return _testbed.podman_exec(HOST, *cmd, check=check, detach=detach)


def playbook(path, *args, json_out=False, timeout=300):
    return _testbed.playbook(INVENTORY, path, *args, json_out=json_out, timeout=timeout)


def health():
    return _testbed.http_status(HTTP_PORT)


def observe():
    """Main PID, start count and file checksums of the server, and /health."""
    script = (
        "systemctl show -p MainPID --value sglang; "
        "wc -l < /var/lib/sglang/emulator/starts.jsonl; "
        "sha1sum /etc/systemd/system/sglang.service /etc/sglang/sglang.env | cut -d' ' -f1"
    )
    lines = podman_exec("sh", "-c", script).stdout.split()
    return {"main_pid": int(lines[0]), "starts": int(lines[1]), "unit_sha1": lines[2],
            "env_sha1": lines[3], "health": health()}


failure = _testbed.failure


# --- the cases ------------------------------------------------------------------------------
# id, input as written in the table, extra vars, expected substring(s) of the message,
# optional setup (run in the container before the deploy).
def _case(cid, shown, extra, expect, setup=None, playbook="playbooks/deploy.yml", inventory=None):
    return pytest.param({"id": cid, "shown": shown, "extra": extra, "expect": expect,
                         "setup": setup, "playbook": playbook, "inventory": inventory}, id=cid)


# playbooks/tune.yml on the same host: every bad input is refused before any candidate is
# loaded (the server keeps its PID); the journal goes to .cache, not to reports/
TUNE_JOURNAL = os.path.join(ROOT, ".cache", "bad-input-tune-journal.jsonl")
TUNE_SPACE = {"strategies": ["pp8"], "knobs": {"--cuda-graph-max-bs": [None, 16]}}


def _tune(cid, shown, extra, expect):
    extra = dict({"tune_space": TUNE_SPACE, "tune_load": {"concurrencies": [1], "num_prompts": 4},
                  "tune_journal": TUNE_JOURNAL}, **extra)
    return _case(cid, "tune.yml: " + shown, extra, expect, playbook="playbooks/tune.yml")


def _setup_http_server():
    podman_exec("sh", "-c", "echo $$ > %s; exec python3 -m http.server 31555" % HTTP_SERVER_PIDFILE,
                detach=True)
    for _attempt in range(50):
        if podman_exec("python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 31555), 1)",
                       check=False).returncode == 0:
            return
        time.sleep(0.2)
    raise AssertionError("http.server did not listen on 31555 in the container")


def _setup_broken_model():
    podman_exec("sh", "-c", "mkdir -p /models/broken && printf '{\"architectures\": [\"Kimi\"], "
                "\"num_hidden_layers\": 61,' > /models/broken/config.json")


def _write_script(path, content):
    proc = subprocess.run(["podman", "exec", "-i", HOST, "sh", "-c",
                           "cat > %s && chmod 0755 %s" % (path, path)],
                          input=content, env=_testbed.env(), universal_newlines=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr


LONG_NAME = "k" * 10000

CASES = [
    _case("strategy-unknown", "strategy=tp7x", {"strategy": "tp7x"},
          ["unknown strategy 'tp7x'", "valid forms"]),
    _case("strategy-gpus", "strategy=tp4", {"strategy": "tp4"},
          ["strategy 'tp4' needs tp*pp = 4*1 = 4 GPUs, but the server has 8"]),
    _case("strategy-ep-divides", "strategy=tp8-ep3", {"strategy": "tp8-ep3"},
          ["ep 3 does not divide tp 8"]),
    _case("gpu-count-word", "sglang_gpu_count=eight", {"sglang_gpu_count": "eight"},
          ['sglang_gpu_count must be a positive integer (got "eight")']),
    # the GPU variables are checked against the host's GPUs (the stand-in nvidia-smi: 8 x
    # 97887 MiB); tp4 fits a count of 4, so the controller lets it through to the host
    _case("gpu-count-host", "sglang_gpu_count=4 with strategy=tp4 (the host has 8 GPUs)",
          {"sglang_gpu_count": 4, "strategy": "tp4"}, ["sglang_gpu_count is 4", "has 8 GPUs"]),
    _case("gpu-memory-host", "sglang_gpu_memory_mib=143771 (the host's GPUs have 97887 MiB)",
          {"sglang_gpu_memory_mib": 143771},
          ["sglang_gpu_memory_mib is 143771", "has 97887 MiB per GPU"]),
    _case("nnodes-single-host", "sglang_nnodes=2 (a group of one host, no rank 0 peer)",
          {"sglang_nnodes": 2}, ["sglang_nnodes=2"]),
    _case("rollout-batch-zero", "sglang_rollout_batch=0", {"sglang_rollout_batch": 0},
          ["sglang_rollout_batch", "got 0"]),
    _case("release-shell", "sglang_release='0.5.9;touch /tmp/pwned'",
          {"sglang_release": "0.5.9;touch /tmp/pwned"},
          ["sglang_release must be a version", "0.5.9;touch /tmp/pwned"]),
    # a filter in a task's arguments used to raise before any check ran (ansible-core's
    # "Finalization of task args ... The filter plugin ... failed")
    _case("model-repo-no-org", "sglang_model_repo=not (no <org>/)", {"sglang_model_repo": "not"},
          ['sglang_model_repo must be a Hugging Face repo id <org>/<name> (got "not")']),
    _case("release-no-wheel", "sglang_release=0.5.99 (no wheel of it on the controller)",
          {"sglang_release": "0.5.99"},
          ["venv_wheels:", "sglang-0.5.99-py3-none-any.whl is not a readable file on the controller",
           "sglang_release 0.5.99"]),
    _case("venv-release-shell", "venv_release='0.5.9 $(id)'", {"venv_release": "0.5.9 $(id)"},
          ["venv_release must be a version", "0.5.9 $(id)"]),
    _case("capacity-mem-fraction", "capacity_mem_fraction_static=1.5",
          {"capacity_mem_fraction_static": 1.5}, ["capacity_mem_fraction_static (1.5)"]),
    _case("capacity-mem-fraction-word", "capacity_mem_fraction_static=most",
          {"capacity_mem_fraction_static": "most"},
          ['capacity_mem_fraction_static must be a number', '(got "most")']),
    _case("extra-mem-fraction", "server_extra_args={--mem-fraction-static: 1.5}",
          {"server_extra_args": {"--mem-fraction-static": 1.5}},
          ["--mem-fraction-static", "(0, 1]", "1.5"]),
    _case("extra-mem-fraction-zero", "server_extra_args={mem_fraction_static: 0}",
          {"server_extra_args": {"mem_fraction_static": 0}},
          ["server_extra_args mem_fraction_static must be a number in (0, 1]", "got 0"]),
    _case("port-range", "server_port=70000", {"server_port": 70000},
          ["server_port must be 1-65535 (got 70000)"]),
    _case("port-word", "server_port=http", {"server_port": "http"},
          ["server_port must be 1-65535 (got http)"]),
    _case("port-taken", "server_port=31555 (python3 -m http.server 31555 listens there)",
          {"server_port": 31555}, ["port 31555", "python3", "server_port"],
          setup=_setup_http_server),
    _case("health-timeout-negative", "server_health_timeout=-5", {"server_health_timeout": -5},
          ["server_health_timeout must be positive (got -5)"]),
    _case("model-missing", "sglang_model_path=/models/missing",
          {"sglang_model_path": "/models/missing"},
          ["/models/missing has no config.json"]),
    _case("server-model-missing", "server_model_path=/models/missing (fleet path valid)",
          {"server_model_path": "/models/missing"},
          ["server_model_path", "/models/missing has no config.json"]),
    _case("config-json-broken", "sglang_model_path=/models/broken (config.json cut short)",
          {"sglang_model_path": "/models/broken"},
          ["/models/broken/config.json"], setup=_setup_broken_model),
    _case("python-junk", "server_python=/usr/local/bin/junk-python (prints junk for anything)",
          {"server_python": "/usr/local/bin/junk-python"},
          ["server_python /usr/local/bin/junk-python", "unexpected output"],
          setup=lambda: _write_script("/usr/local/bin/junk-python", JUNK_PYTHON)),
    _case("help-garbled", "server_python=<venv python whose --help prints junk>, empty flags cache",
          {"server_python": "/usr/local/bin/junkhelp-python",
           "server_flags_cache_dir": "/tmp/gpufleet-bad-empty-cache"},
          ["server_python /usr/local/bin/junkhelp-python", "could not parse the '--help' output"],
          setup=lambda: _write_script("/usr/local/bin/junkhelp-python", JUNK_HELP_PYTHON)),
    _case("python-missing", "server_python=/opt/sglang/9.9.9/bin/python",
          {"server_python": "/opt/sglang/9.9.9/bin/python"},
          ["/opt/sglang/9.9.9/bin/python does not exist"]),
    _case("flag-missing", "server_extra_args={--allowed-media-domains: example.com} (0.5.23 only)",
          {"server_extra_args": {"--allowed-media-domains": "example.com"}},
          ["--allowed-media-domains does not exist in sglang 0.5.9"]),
    _case("choice-attention", "server_extra_args={--attention-backend: nonexistent}",
          {"server_extra_args": {"--attention-backend": "nonexistent"}},
          ["--attention-backend: value 'nonexistent' is not accepted by sglang 0.5.9"]),
    _case("choice-parser", "server_extra_args={--tool-call-parser: kimi_k3}",
          {"server_extra_args": {"--tool-call-parser": "kimi_k3"}},
          ["--tool-call-parser: value 'kimi_k3' is not accepted by sglang 0.5.9"]),
    # issue 43: a PD flag outside a PD layout (accepted before: every server restarted as a
    # prefill-only server with no decode peer, /health 200, no warning)
    _case("pd-flag-outside-layout", "server_extra_args={--disaggregation-mode: prefill}",
          {"server_extra_args": {"--disaggregation-mode": "prefill"}},
          ["server_extra_args --disaggregation-mode", 'strategy "pp8" is no PD layout']),
    _case("pd-backend-release", "sglang_strategy=prefill:pp8+decode:pp8 sglang_pd_transfer_backend=mooncake_tcp (0.5.23 only)",
          {"sglang_strategy": "prefill:pp8+decode:pp8", "sglang_pd_transfer_backend": "mooncake_tcp"},
          ["sglang_pd_transfer_backend is mooncake_tcp, but sglang 0.5.9 has no such transfer backend"]),
    _case("extra-list-for-scalar", "server_extra_args={--context-length: [4096, 8192]}",
          {"server_extra_args": {"--context-length": [4096, 8192]}},
          ["--context-length takes a single value in sglang 0.5.9"]),
    _case("extra-dict-for-int", "server_extra_args={--max-running-requests: {a: 1}}",
          {"server_extra_args": {"--max-running-requests": {"a": 1}}},
          ["--max-running-requests", "invalid int value"]),
    _case("extra-args-string", "server_extra_args='--trust-remote-code' (a string, not a mapping)",
          {"server_extra_args": "--trust-remote-code"},
          ["server_extra_args must be a mapping"]),
    _case("api-key-newline", "server_api_key='abc\\ndef'", {"server_api_key": "abc\ndef"},
          ["server_api_key", "newline"]),
    _case("hf-token-control", "server_hf_token='hf_\\x07bell'", {"server_hf_token": "hf_\x07bell"},
          ["server_hf_token", "control characters"]),
    _case("name-10000", "server_served_model_name=<10,000 x 'k'>",
          {"server_served_model_name": LONG_NAME},
          ["server_served_model_name", "10000 characters"]),
    _case("name-newline", "server_served_model_name='kimi\\nk2'",
          {"server_served_model_name": "kimi\nk2"},
          ["server_served_model_name", "control characters"]),
    # issue 42: the inventory's count disagrees with the host's GPUs and the strategy fits
    # the host: the host's GPUs are named, not "the server has 16"
    _case("gpu-count-16", "sglang_gpu_count=16 (the host has 8 GPUs; strategy pp8)",
          {"sglang_gpu_count": 16},
          ["sglang_gpu_count is 16, but gpufleet-bad-1 has 8 GPUs (NVIDIA"]),
    _case("empty-server-group", "an inventory whose sglang_servers is empty (-i bad_input_empty_inventory)",
          {}, ["nothing to deploy: group sglang_servers of the inventory", "has no host"],
          inventory=os.path.join(HERE, "bad_input_empty_inventory")),
    # the tune: refused in its first task (on localhost), or before any candidate is gated
    _tune("tune-concurrency-zero", "tune_load={concurrencies: [0]}", {"tune_load": {"concurrencies": [0]}},
          ["tune_load.concurrencies must be a non-empty list of positive integers, got [0]"]),
    _tune("tune-hosts-unknown", "tune_hosts=gpu-9 (no such host or group)", {"tune_hosts": "gpu-9"},
          ['tune_hosts "gpu-9": "gpu-9" is neither a host nor a group of the inventory']),
    _tune("tune-inputs-at-once", "keep=worst, tune_budget=abc, tune_method=grid, tune_slo={ttft_p99_ms: -1}",
          {"keep": "worst", "tune_budget": "abc", "tune_method": "grid", "tune_slo": {"ttft_p99_ms": -1}},
          ["4 problems with the tune's inputs", 'keep must be best or original, got "worst"',
           'tune_budget must be a number of trials (0 for no limit), got "abc"',
           'tune_method must be one of auto, exhaustive, coordinate, got "grid"',
           "tune_slo.ttft_p99_ms must be a positive number of milliseconds"]),
    # before the gate: the release's own argparse over every knob value
    _tune("tune-knob-value", "tune_space.knobs={--max-running-requests: [null, abc]}",
          {"tune_space": {"strategies": ["pp8"], "knobs": {"--max-running-requests": [None, "abc"]}}},
          ["tune_space.knobs --max-running-requests: sglang 0.5.9 refuses the value \"abc\"",
           "invalid int value"]),
    # every candidate refused by the gate (7 GPUs on a host of 8): the tune fails before the
    # router hold or any load
    _tune("tune-strategy-tp7", "tune_space.strategies=[tp7] (the host has 8 GPUs)",
          {"tune_space": {"strategies": ["tp7"], "knobs": {}}},
          ["every candidate of tune_space is refused before any load (sglang 0.5.9)",
           "c01-tp7 (refused)", "7 GPUs"]),
]

RESULTS = []
RESULT_IDS = set()


@pytest.fixture(scope="session")
def fleet():
    started = time.monotonic()
    with _testbed.fleet_up(INVENTORY):
        try:
            proc = playbook("playbooks/deploy.yml", "-e", "strategy=pp8")
            assert proc.returncode == 0, proc.stdout[-4000:]
            baseline = observe()
            assert baseline["health"] == 200 and baseline["main_pid"] > 0, baseline
            yield {"baseline": baseline}
        finally:
            wall = time.monotonic() - started
            expected = set(p.values[0]["id"] for p in CASES) | {"accepted"}
            if RESULT_IDS >= expected:
                write_report(REPORT, RESULTS, RELEASE, wall, HOST)
            elif RESULTS:
                write_report(os.path.join(ROOT, ".cache", "bad-input-partial.md"), RESULTS,
                             RELEASE, wall, HOST)


def _deploy(extra, path="playbooks/deploy.yml", inventory=None):
    return _testbed.playbook(inventory or INVENTORY, path, "-e", json.dumps(extra, ensure_ascii=False),
                             json_out=True, timeout=300)


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_refused_and_server_untouched(fleet, case):
    before = observe()
    assert before["health"] == 200, before
    if case["setup"]:
        case["setup"]()
    try:
        proc = _deploy(case["extra"], case["playbook"], case["inventory"])
    finally:
        if case["id"] == "port-taken":
            podman_exec("sh", "-c", "kill $(cat %s)" % HTTP_SERVER_PIDFILE, check=False)
        if os.path.exists(TUNE_JOURNAL):
            os.remove(TUNE_JOURNAL)
    task, msg = failure(proc)
    after = observe()
    flat = " ".join(str(msg).split())
    untouched = after == before
    named = all(s in flat for s in case["expect"])
    RESULTS.append({"id": case["id"], "input": case["shown"], "rc": proc.returncode,
                    "task": task, "message": flat, "untouched": untouched, "expect": "refused",
                    "as_expected": proc.returncode != 0 and untouched and named})
    RESULT_IDS.add(case["id"])
    assert proc.returncode != 0, "accepted: %s" % proc.stdout[-3000:]
    assert named, "message does not name the input (%s): %s" % (case["expect"], flat)
    assert untouched, "server touched: before %s after %s" % (before, after)
    assert "Traceback" not in flat, flat
    # the collection's own words, not ansible-core's wrapper around them
    for wrapper in ("Task failed", "Finalization of task args", "Error while resolving",
                    "The filter plugin"):
        assert wrapper not in flat, flat


def _unit_and_env():
    proc = podman_exec("sh", "-c", "cat /etc/systemd/system/sglang.service; echo '@@@'; "
                       "stat -c %a /etc/sglang/sglang.env; cat /etc/sglang/sglang.env")
    unit, rest = proc.stdout.split("@@@\n", 1)
    mode, env = rest.split("\n", 1)
    return unit, mode, env


LAUNCHED = "secret_exec.py --api-key=SGLANG_API_KEY --"  # the unit starts through the launcher


def _main_cmdline():
    """What the kernel shows every local user of the server's command line."""
    return podman_exec("sh", "-c", "tr '\\0' ' ' < /proc/$(systemctl show -p MainPID --value sglang)"
                       "/cmdline").stdout


def _models(key=None):
    req = urllib.request.Request("http://127.0.0.1:%d/v1/models" % HTTP_PORT)
    if key is not None:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        return exc.code, None


def test_valid_but_hostile_looking_input_is_accepted(fleet):
    """API key with shell metacharacters + non-ASCII served name: deployed, then restored."""
    before = observe()
    proc = _deploy({"server_api_key": SHELL_KEY, "server_served_model_name": UNICODE_NAME})
    after = observe()
    unit, mode, env = _unit_and_env()
    cmdline = _main_cmdline()
    status_key, models = _models(SHELL_KEY)
    status_nokey, _unused = _models()
    pwned = podman_exec("test", "-e", "/tmp/pwned", check=False).returncode == 0
    ok = (proc.returncode == 0 and after["starts"] == before["starts"] + 1
          and after["main_pid"] != before["main_pid"] and after["health"] == 200
          and SHELL_KEY not in unit and LAUNCHED in unit and mode == "600"
          and SHELL_KEY not in cmdline and LAUNCHED in cmdline
          and status_key == 200 and status_nokey == 401 and not pwned
          and [m["id"] for m in models["data"]] == [UNICODE_NAME])
    # restore the inventory's values: one more restart, the key gone
    restore = _deploy({})
    restored = observe()
    unit2, _mode2, env2 = _unit_and_env()
    ok_restore = (restore.returncode == 0 and restored["starts"] == after["starts"] + 1
                  and restored["unit_sha1"] == before["unit_sha1"]
                  and restored["env_sha1"] == before["env_sha1"] and restored["health"] == 200
                  and "SGLANG_API_KEY" not in env2 and "api-key" not in unit2)
    for cid, shown in (("accepted-api-key", "server_api_key=%s" % SHELL_KEY),
                       ("accepted-unicode", "server_served_model_name=%s" % UNICODE_NAME)):
        RESULTS.append({"id": cid, "input": shown, "rc": proc.returncode, "runs": 1,
                        "task": "(deployed; restored by a second run, rc %d)" % restore.returncode,
                        "message": "accepted: restarts %d -> %d, /v1/models %s with the key, %s "
                                   "without; env file mode %s; key in unit: %s"
                                   % (before["starts"], after["starts"], status_key, status_nokey,
                                      mode, SHELL_KEY in unit),
                        "untouched": False, "expect": "accepted", "as_expected": ok and ok_restore})
    RESULT_IDS.add("accepted")
    assert proc.returncode == 0, failure(proc)
    assert SHELL_KEY not in unit and LAUNCHED in unit, unit
    assert SHELL_KEY not in cmdline and LAUNCHED in cmdline, cmdline
    assert mode == "600" and SHELL_KEY.replace("\\", "\\\\").replace('"', '\\"') in env
    assert after["starts"] == before["starts"] + 1, (before, after)
    assert after["main_pid"] != before["main_pid"] and after["health"] == 200, after
    assert (status_key, status_nokey) == (200, 401)
    assert not pwned
    assert [m["id"] for m in models["data"]] == [UNICODE_NAME], models
    assert restore.returncode == 0, failure(restore)
    assert restored["starts"] == after["starts"] + 1, (after, restored)
    assert restored["health"] == 200, restored
    assert "SGLANG_API_KEY" not in env2 and "api-key" not in unit2, (env2, unit2)
    assert restored["env_sha1"] == before["env_sha1"], (before, restored)
    assert restored["unit_sha1"] == before["unit_sha1"], (before, restored)
