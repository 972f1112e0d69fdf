"""router_preflight in PD mode: a stand-in venv whose ``smg launch --help`` prints smg
1.13.0's real help (tests/fixtures/router-help/), the command line it builds, and its
refusals (the logic: module_utils/router/test_router_pd.py; the real binary: roles/router/README.md,
"PD mode")."""
import os
import stat

from ansible_collections.gpufleet.sglang.plugins.modules import router_preflight
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES

SETTINGS = {
    "host": "0.0.0.0", "port": 30000, "policy": "cache_aware", "prometheus_host": "127.0.0.1",
    "prometheus_port": 29000, "health_check_interval": 10, "health_check_timeout": 5,
    "health_failure_threshold": 3, "health_success_threshold": 2,
    "health_check_endpoint": "/health", "circuit_breaker": True, "cb_failure_threshold": 10,
    "cb_success_threshold": 3, "cb_timeout": 60, "cb_window": 120, "retries": 5,
    "request_timeout": 1800, "worker_startup_timeout": 600, "api_key": False,
    "secret_exec": "/usr/local/libexec/gpufleet-sglang/secret_exec.py", "hf_endpoint": "",
    "extra_args": [], "own_key_urls": [],
    "worker_urls": ["http://10.0.0.1:30000", "http://10.0.0.2:30000", "http://10.0.0.3:30000"],
    "prefill_policy": "auto", "decode_policy": "auto", "prefill_max_inflight": 0,
    "prefill_queue_size": 100, "prefill_queue_timeout": 60,
}

PD = [{"host": "p1", "url": "http://10.0.0.1:30000", "role": "prefill", "bootstrap_port": 8998},
      {"host": "d1", "url": "http://10.0.0.2:30000", "role": "decode", "bootstrap_port": None},
      {"host": "d2", "url": "http://10.0.0.3:30000", "role": "decode", "bootstrap_port": None}]


def venv(tmp_path, package="smg", version="1.13.0"):
    """A venv whose python prints the version and whose launcher prints the real help."""
    root = tmp_path / "venv"
    (root / "bin").mkdir(parents=True)
    help_file = os.path.join(FIXTURES, "router-help", "%s-%s.txt" % (
        package, "1.13.0" if package == "smg" else "0.3.2"))
    scripts = {"python": '#!/bin/sh\nif [ "$1" = "-c" ]; then echo %s; else cat %s; fi\n'
                         % (version, help_file),
               "smg": "#!/bin/sh\ncat %s\n" % help_file}
    for name, text in scripts.items():
        path = root / "bin" / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(root)


def test_pd_mode_command_line(run_module, tmp_path):
    res, failed = run_module(router_preflight, {
        "package": "smg", "venv": venv(tmp_path), "version": "1.13.0",
        "settings": dict(SETTINGS, pd_workers=PD, prefill_max_inflight=32)})
    assert not failed, res
    argv = res["argv"]
    assert res["mode"] == "pd" and [w["role"] for w in res["pd_workers"]] == [
        "prefill", "decode", "decode"]
    assert "--worker-urls" not in argv and "--policy" not in argv
    i = argv.index("--pd-disaggregation")
    assert argv[i:i + 8] == ["--pd-disaggregation", "--prefill", "http://10.0.0.1:30000", "8998",
                             "--decode", "http://10.0.0.2:30000",
                             "--decode", "http://10.0.0.3:30000"]
    assert argv[argv.index("--decode-policy") + 1] == "power_of_two"
    assert argv[argv.index("--prefill-max-inflight-requests-per-worker") + 1] == "32"
    assert "--disable-tokenizer-autoload" in argv


def test_regular_mode_is_unchanged(run_module, tmp_path):
    res, failed = run_module(router_preflight, {
        "package": "smg", "venv": venv(tmp_path), "version": "1.13.0",
        "settings": dict(SETTINGS, pd_workers=[])})
    assert not failed, res
    assert res["mode"] == "regular" and res["pd_workers"] == []
    assert "--worker-urls" in res["argv"] and "--pd-disaggregation" not in res["argv"]


def test_a_router_that_cannot_route_pd_is_refused(run_module, tmp_path):
    res, failed = run_module(router_preflight, {
        "package": "sglang-router", "venv": venv(tmp_path, "sglang-router", "0.2.1"),
        "version": "0.2.1", "settings": dict(SETTINGS, pd_workers=PD)})
    assert failed and "sglang-router 0.2.1 cannot front PD servers" in res["msg"]
    res, failed = run_module(router_preflight, {
        "package": "sglang-router", "venv": venv(tmp_path / "b", "sglang-router", "0.3.2"),
        "version": "0.3.2", "settings": dict(SETTINGS, pd_workers=PD, prefill_max_inflight=4)})
    assert failed and "has no prefill admission flags" in res["msg"]


def test_a_bad_worker_list_is_refused(run_module, tmp_path):
    res, failed = run_module(router_preflight, {
        "package": "smg", "venv": venv(tmp_path), "version": "1.13.0",
        "settings": dict(SETTINGS, pd_workers=PD[:1])})
    assert failed and "have no decode server" in res["msg"]
