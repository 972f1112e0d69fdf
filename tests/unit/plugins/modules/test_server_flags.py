# -*- coding: utf-8 -*-
"""Unit tests of gpufleet.sglang.server_flags, driven through main() with a fake venv python."""

import json
import os
import shutil
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.modules import server_flags
from ansible_collections.gpufleet.sglang.tests.doubles import install_venv_python
from ansible_collections.gpufleet.sglang.tests.paths import SGLANG_HELP as FIXTURES


class Fake:
    def __init__(self, tmp_path, version="0.5.9", help_file=None):
        self.dir = tmp_path / "venv" / "bin"
        self.dir.mkdir(parents=True)
        self.python = self.dir / "python"
        install_venv_python(self.dir)
        self.counter = self.dir / "help-count.txt"
        self.cache_dir = tmp_path / "cache"
        self.state = {
            "version": version,
            "dist_info": "sglang-%s.dist-info" % version,
            "record_sha256": "a" * 64,
            "help_file": help_file or os.path.join(FIXTURES, "sglang-%s.txt" % version),
            "help_stderr": "UserWarning: noise on stderr\n",
        }
        self.save()

    def save(self):
        (self.dir / "state.json").write_text(json.dumps(self.state))

    def set(self, **kwargs):
        self.state.update(kwargs)
        self.save()

    @property
    def help_runs(self):
        if not self.counter.exists():
            return 0
        return len(self.counter.read_text().splitlines())

    def args(self, **kwargs):
        args = {"python": str(self.python), "cache_dir": str(self.cache_dir)}
        args.update(kwargs)
        return args


BASE = {"--model-path": "/models/k", "--host": "0.0.0.0", "--port": 30000,
        "--served-model-name": "kimi"}


def test_first_run_probes_second_run_is_cached(tmp_path, run_module):
    fake = Fake(tmp_path, "0.5.9")
    first, failed = run_module(server_flags, fake.args())
    assert not failed, first
    assert fake.help_runs == 1
    assert first["cached"] is False
    assert first["changed"] is False
    assert first["version"] == "0.5.9"
    assert first["prog"] == "launch_server.py"
    assert first["flags"]["--tensor-parallel-size"]["names"] == ["--tensor-parallel-size", "--tp-size"]
    assert os.path.exists(first["cache_file"])
    # COLUMNS default is 200
    assert fake.counter.read_text().splitlines() == ["COLUMNS=200"]

    second, failed = run_module(server_flags, fake.args())
    assert not failed, second
    assert fake.help_runs == 1, "the cached run must not execute --help"
    assert second["cached"] is True
    assert second["flags"] == first["flags"]
    assert second["fingerprint"] == first["fingerprint"]


def test_changed_fingerprint_invalidates_cache(tmp_path, run_module):
    fake = Fake(tmp_path, "0.5.9")
    run_module(server_flags, fake.args())
    run_module(server_flags, fake.args())
    assert fake.help_runs == 1
    fake.set(record_sha256="b" * 64)  # same release, reinstalled/changed package
    result, failed = run_module(server_flags, fake.args())
    assert not failed
    assert result["cached"] is False
    assert fake.help_runs == 2
    fake.set(version="0.5.23", dist_info="sglang-0.5.23.dist-info",
             help_file=os.path.join(FIXTURES, "sglang-0.5.23.txt"))
    result, failed = run_module(server_flags, fake.args())
    assert not failed
    assert result["cached"] is False and fake.help_runs == 3
    assert result["prog"] == "sglang serve"
    result, failed = run_module(server_flags, fake.args())
    assert result["cached"] is True and fake.help_runs == 3


def test_cache_disabled_always_probes(tmp_path, run_module):
    fake = Fake(tmp_path, "0.5.4.post3")
    for _attempt in range(2):
        result, failed = run_module(server_flags, fake.args(cache=False))
        assert not failed and result["cached"] is False
    assert fake.help_runs == 2
    assert not fake.cache_dir.exists()


def test_check_mode_does_not_write_cache(tmp_path, run_module):
    fake = Fake(tmp_path, "0.5.4.post3")
    result, failed = run_module(server_flags, fake.args(_ansible_check_mode=True))
    assert not failed and result["cached"] is False
    assert not os.path.exists(result["cache_file"])


def test_corrupt_cache_is_ignored(tmp_path, run_module):
    fake = Fake(tmp_path, "0.5.9")
    result, _failed = run_module(server_flags, fake.args())
    with open(result["cache_file"], "w") as handle:
        handle.write("{not json")
    result, failed = run_module(server_flags, fake.args())
    assert not failed and result["cached"] is False and fake.help_runs == 2


def test_require_names_missing_flags_and_release(tmp_path, run_module):
    fake = Fake(tmp_path, "0.4.6.post5")
    result, failed = run_module(server_flags, fake.args(require=["--tp-size", "--pp-max-micro-batch-size", "--moe-a2a-backend", "--ep-size"]))
    assert failed
    assert result["missing"] == ["--pp-max-micro-batch-size", "--moe-a2a-backend"]
    assert "--pp-max-micro-batch-size" in result["msg"]
    assert "--moe-a2a-backend" in result["msg"]
    assert "0.4.6.post5" in result["msg"]


def test_require_met_by_alias(tmp_path, run_module):
    fake = Fake(tmp_path, "0.5.23")
    result, failed = run_module(server_flags, fake.args(require=["--tensor-parallel-size", "--tp-size", "--attn-dp-size"], return_flags=False))
    assert not failed, result
    assert result["missing"] == []
    assert "flags" not in result


def test_render_argv(tmp_path, run_module):
    fake = Fake(tmp_path, "0.5.4.post3")
    result, failed = run_module(server_flags, fake.args(
        layout={"tp": 8, "ep": 8, "pp": 1, "dp": 1, "nnodes": 1, "node_rank": 0, "dist_init_addr": None},
        server_args=BASE,
        extra_args={"--enable-deepep-moe": True, "--max-micro-batch-size": 4},
        return_flags=False))
    assert not failed, result
    assert result["argv"] == [
        "--model-path", "/models/k", "--host", "0.0.0.0", "--port", "30000",
        "--served-model-name", "kimi", "--tensor-parallel-size", "8", "--ep-size", "8",
        "--moe-a2a-backend", "deepep", "--pp-max-micro-batch-size", "4"]
    assert len(result["translations"]) == 2


def test_render_failure_lists_every_problem(tmp_path, run_module):
    fake = Fake(tmp_path, "0.4.6.post5")
    result, failed = run_module(server_flags, fake.args(
        layout={"tp": 8}, server_args=BASE,
        extra_args={"--tool-call-parser": "kimi_k2", "--no-such-flag": 1}))
    assert failed
    assert "--tool-call-parser" in result["msg"] and "kimi_k2" in result["msg"]
    assert "0.4.6.post5" in result["msg"]
    assert "--no-such-flag" in result["msg"]
    assert len(result["problems"]) == 2


def test_garbled_help_fails_cleanly(tmp_path, run_module):
    garbled = tmp_path / "garbled.txt"
    garbled.write_text("Segmentation fault? \x00\x01 nothing here\nreally nothing\n")
    fake = Fake(tmp_path, "0.5.9", help_file=str(garbled))
    result, failed = run_module(server_flags, fake.args())
    assert failed
    assert "could not parse" in result["msg"]
    assert "Traceback" not in result["msg"]
    assert result["rc"] == 0 and "cmd" in result and "stdout" in result
    assert not fake.cache_dir.exists() or not os.listdir(str(fake.cache_dir))


def _failing(tmp_path, run_module, **fault):
    """The module on a 0.5.9 fake with ``fault`` set: it must fail with rc 1."""
    fake = Fake(tmp_path, "0.5.9")
    fake.set(**fault)
    result, failed = run_module(server_flags, fake.args())
    assert failed
    assert result["rc"] == 1
    return fake, result


def test_failing_help_reports_cmd_rc_stderr(tmp_path, run_module):
    _fake, result = _failing(tmp_path, run_module, help_rc=1)
    assert "ImportError: boom" in result["stderr"]
    assert "--help" in result["cmd"]
    assert "0.5.9" in result["msg"]
    assert result["timed_out"] is False  # the uniform payload of _command.fail


@pytest.mark.skipif(not shutil.which("timeout"), reason="no timeout binary")
def test_help_timeout(tmp_path, run_module):
    fake = Fake(tmp_path, "0.5.9")
    fake.set(help_sleep=30)
    started = time.monotonic()
    result, failed = run_module(server_flags, fake.args(timeout=1))
    assert time.monotonic() - started < 20
    assert failed and "timed out" in result["msg"] and "0.5.9" in result["msg"]
    assert result["rc"] == 124 and "cmd" in result
    assert result["timed_out"] is True and result["cmd"][0].endswith("timeout")


def test_failing_release_query_reports_cmd_rc_stderr(tmp_path, run_module):
    fake, result = _failing(tmp_path, run_module, query_rc=1)
    assert "No module named 'sglang'" in result["stderr"]
    assert "cmd" in result
    assert fake.help_runs == 0


def test_missing_interpreter(tmp_path, run_module):
    result, failed = run_module(server_flags, {"python": str(tmp_path / "nope" / "python"),
                                               "cache_dir": str(tmp_path / "c")})
    assert failed and "does not exist" in result["msg"]


def test_probe_timing_cached_vs_uncached(tmp_path, run_module):
    """Measures the probe (reported by the test run); cached must be cheaper."""
    fake = Fake(tmp_path, "0.5.23")
    started = time.perf_counter()
    run_module(server_flags, fake.args(return_flags=False))
    uncached = time.perf_counter() - started
    started = time.perf_counter()
    result, _failed = run_module(server_flags, fake.args(return_flags=False))
    cached = time.perf_counter() - started
    assert result["cached"] is True
    assert fake.help_runs == 1
    print("probe uncached %.1f ms, cached %.1f ms" % (uncached * 1000, cached * 1000))
