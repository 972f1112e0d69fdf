"""Tests of the SGLang emulator (tests/emulator), a TEST DOUBLE for the GPU server.

The emulator runs as a subprocess from the source tree (PYTHONPATH=tests/emulator/src)
on 127.0.0.1 with free ports and short load / warmup times.
"""

import hashlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES, ROOT, SGLANG_HELP as HELP
from ansible_collections.gpufleet.sglang.tests.ports import free_port, port_open

EMU = os.path.join(ROOT, "tests", "emulator")
SRC = os.path.join(EMU, "src")
RELEASES = ("0.4.6.post5", "0.5.4.post3", "0.5.9", "0.5.23")
MODEL = os.path.join(FIXTURES, "models", "moonshotai__Kimi-K2.5")

sys.path.insert(0, SRC)
from sglang._emulator import cli, layout as emu_layout, release as emu_release  # noqa: E402


def emu_env(tmp_path, release="0.5.23", **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env.update({
        "PYTHONPATH": SRC, "SGLANG_EMULATOR_RELEASE": release,
        "SGLANG_EMULATOR_STATE_DIR": str(tmp_path / "state"),
        "SGLANG_EMULATOR_LOAD_SECONDS": "0.3", "SGLANG_EMULATOR_WARMUP_SECONDS": "0.3",
        "SGLANG_EMULATOR_TTFT_MS": "20", "COLUMNS": "80",
        "SGLANG_EMULATOR_SIGTERM_POLL_SECONDS": "0.2",
    })
    env.pop("STATE_DIRECTORY", None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_cli(tmp_path, args, release="0.5.23", timeout=20, **extra):
    return subprocess.run([sys.executable, "-m", "sglang.launch_server"] + list(args),
                          env=emu_env(tmp_path, release, **extra), capture_output=True,
                          timeout=timeout, check=False)


class Emu:
    """A running emulator subprocess."""

    def __init__(self, tmp_path, args, release="0.5.23", port=None, **extra):
        self.port = port or free_port()
        self.log_path = tmp_path / ("emu-%d.log" % self.port)
        self.log = open(self.log_path, "wb")  # pylint: disable=consider-using-with
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-m", "sglang.launch_server", "--host", "127.0.0.1",
             "--port", str(self.port)] + list(args),
            env=emu_env(tmp_path, release, **extra), stdout=self.log,
            stderr=subprocess.STDOUT)

    def stderr(self):
        self.log.flush()
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def port_open(self):
        return port_open("127.0.0.1", self.port)

    def wait_port(self, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.port_open():
                return
            assert self.proc.poll() is None, self.stderr()
            time.sleep(0.01)
        raise AssertionError("port never opened:\n" + self.stderr())

    def request(self, method, path, body=None, headers=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = dict(headers or {})
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        payload = resp.read()
        conn.close()
        return resp.status, payload

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def json(self, path, body=None, **kw):
        status, payload = self.request("POST" if body is not None else "GET", path, body, **kw)
        assert status == 200, (status, payload)
        return json.loads(payload)

    def wait_ready(self, path="/health_generate", timeout=15):
        self.wait_port(timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.get(path)[0] == 200:
                return
            time.sleep(0.02)
        raise AssertionError("never ready:\n" + self.stderr())

    def stream(self, path, body, headers=None):
        """POST a streaming request; returns [(t, event-dict)] and the [DONE] flag."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        hdrs = {"Content-Type": "application/json"}
        hdrs.update(headers or {})
        conn.request("POST", path, body=json.dumps(body).encode(), headers=hdrs)
        resp = conn.getresponse()
        assert resp.status == 200, resp.read()
        assert resp.getheader("Content-Type").startswith("text/event-stream")
        events, done = [], False
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if line.startswith(b"data: "):
                if line == b"data: [DONE]":
                    done = True
                    continue
                events.append((time.monotonic(), json.loads(line[6:])))
        conn.close()
        return events, done

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


@pytest.fixture
def emus(tmp_path):
    started = []

    def start(args, release="0.5.23", **kw):
        e = Emu(tmp_path, args, release, **kw)
        started.append(e)
        return e

    yield start
    for e in started:
        e.stop()


# ---------------------------------------------------------------- CLI and help

@pytest.mark.parametrize("release,columns,fixture", [
    (r, "80", "sglang-%s.txt" % r) for r in RELEASES] + [
    ("0.5.23", "200", "sglang-0.5.23-cols200.txt"),
    ("0.5.9", "200", "sglang-0.5.9.txt")])  # no wide capture: falls back to 80 columns
def test_help_is_byte_identical(tmp_path, release, columns, fixture):
    res = run_cli(tmp_path, ["--help"], release, COLUMNS=columns)
    assert res.returncode == 0
    with open(os.path.join(HELP, fixture), "rb") as fh:
        assert res.stdout == fh.read()
    if release == "0.5.23":
        assert b"UserWarning: 'python -m sglang.launch_server' is still supported" in res.stderr
    else:
        assert b"UserWarning" not in res.stderr
    calls = (tmp_path / "state" / "help-calls.jsonl").read_text().splitlines()
    rec = json.loads(calls[-1])
    assert rec["release"] == release and rec["COLUMNS"] == columns and rec["pid"] > 0


@pytest.mark.parametrize("release", RELEASES)
def test_rebuilt_parser_reproduces_real_help(release, monkeypatch):
    """The parser built from actions.json formats the captured help exactly, so its
    usage/error messages are the real ones too."""
    monkeypatch.setenv("COLUMNS", "80")
    parser = cli.build_parser(release)[0]
    with open(emu_release.help_path(release), encoding="utf-8") as fh:
        assert parser.format_help() == fh.read()


def test_unknown_flag_rejected_like_argparse(tmp_path):
    res = run_cli(tmp_path, ["--model-path", "m", "--enable-ep-moe"], "0.5.4.post3")
    assert res.returncode == 2
    err = res.stderr.decode()
    assert err.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH")
    assert err.rstrip().endswith(
        "launch_server.py: error: unrecognized arguments: --enable-ep-moe")
    res = run_cli(tmp_path, ["--model-path", "m", "--max-micro-batch-size", "4"], "0.5.9")
    assert res.returncode == 2 and b"unrecognized arguments: --max-micro-batch-size 4" in res.stderr
    res = run_cli(tmp_path, ["--model-path", "m", "--tp", "8", "--enable-ep-moe"],
                  "0.4.6.post5", SGLANG_EMULATOR_FAULT="crash-on-start")
    assert res.returncode == 1  # parsed fine; the fault stops it right after parsing
    assert b"EP MoE is enabled. The expert parallel size is adjusted" in res.stderr
    rec = json.loads((tmp_path / "state" / "starts.jsonl").read_text().splitlines()[-1])
    assert rec["layout"]["ep_size"] == 8 and rec["release"] == "0.4.6.post5"


def test_the_key_is_logged_as_the_real_server_does_and_never_recorded(tmp_path):
    """0.5.9 logs its ServerArgs, key included, once the arguments are checked (the
    collection's launcher redacts it); the emulator's own start record never holds it."""
    res = run_cli(tmp_path, ["--model-path", "m", "--api-key", "sk-Q7yZ", "--admin-api-key", "ak-X2"],
                  "0.5.9", SGLANG_EMULATOR_FAULT="crash-on-start")
    assert res.returncode == 1
    assert b"server_args=ServerArgs(" in res.stderr and b"api_key='sk-Q7yZ'" in res.stderr
    text = (tmp_path / "state" / "starts.jsonl").read_text()
    assert "sk-Q7yZ" not in text and "ak-X2" not in text
    assert json.loads(text.splitlines()[-1])["argv"] == [
        "--model-path", "m", "--api-key", "<redacted>", "--admin-api-key", "<redacted>"]


def test_choice_ambiguity_and_required(tmp_path):
    res = run_cli(tmp_path, ["--model-path", "m", "--ep", "4"], "0.4.6.post5")
    assert res.returncode == 2
    assert b"error: ambiguous option: --ep could match --ep-size, --ep-num-redundant-experts" \
        in res.stderr
    res = run_cli(tmp_path, ["--model-path", "m", "--attention-backend", "nope"], "0.5.23")
    assert res.returncode == 2
    assert b"sglang serve: error: argument --attention-backend: invalid choice: 'nope'" \
        in res.stderr
    res = run_cli(tmp_path, ["--tp-size", "2"], "0.5.9")
    assert res.returncode == 2
    assert b"the following arguments are required: --model-path/--model" in res.stderr


@pytest.mark.parametrize("args,needle", [
    (["--tp", "16"], "RuntimeError: CUDA error: invalid device ordinal"),
    (["--tp", "4", "--pp-size", "4"], "needs 16 GPUs, the machine has 8 GPU(s) per node"),
    (["--tp", "8", "--ep-size", "3"], "AssertionError: tp_size (8) must be divisible by ep_size (3)"),
    (["--tp", "8", "--dp-size", "3", "--enable-dp-attention"],
     "AssertionError: tp_size (8) must be divisible by dp_size (3)"),
])
def test_layout_the_machine_cannot_hold(tmp_path, args, needle):
    res = run_cli(tmp_path, ["--model-path", "m"] + args, "0.5.9")
    assert res.returncode == 1
    err = res.stderr.decode()
    assert "Traceback (most recent call last)" in err and needle in err


def test_machine_size_from_env(tmp_path):
    res = run_cli(tmp_path, ["--model-path", "m", "--tp", "4"], "0.5.9",
                  SGLANG_EMULATOR_GPUS="2")
    assert res.returncode == 1 and b"needs 4 GPUs, the machine has 2 GPU(s)" in res.stderr


def test_layout_names_and_rates(monkeypatch):
    def name(**kw):
        args = {"tp_size": 1, "pp_size": 1, "ep_size": 1, "dp_size": 1}
        args.update(kw)
        return emu_layout.resolve("0.5.9", args)[0]["name"]

    monkeypatch.delenv("SGLANG_EMULATOR_RATES", raising=False)
    assert emu_layout.rates_for(name(tp_size=8))[:2] == (26.0, 700.0)
    assert emu_layout.rates_for(name(pp_size=8))[:2] == (30.0, 900.0)
    assert emu_layout.rates_for(name(tp_size=8, ep_size=4))[:2] == (45.0, 1150.0)
    assert emu_layout.rates_for(name(tp_size=8, ep_size=8))[:2] == (65.0, 1531.0)
    assert emu_layout.rates_for(name(tp_size=8, moe_a2a_backend="deepep"))[:2] == (65.0, 1531.0)
    assert emu_layout.rates_for(name(tp_size=2))[:2] == (20.0, 500.0)
    monkeypatch.setenv("SGLANG_EMULATOR_RATES", json.dumps(
        {"ep8": {"single": 1, "ceiling": 2}, "tp2": {"single": 3, "ceiling": 4}}))
    assert emu_layout.rates_for("tp8-ep8")[:2] == (1.0, 2.0)
    assert emu_layout.rates_for("tp2")[:2] == (3.0, 4.0)


# ---------------------------------------------------------------- lifecycle

@pytest.mark.parametrize("release", RELEASES)
def test_lifecycle_per_release(tmp_path, emus, release):
    e = emus(["--model-path", MODEL, "--tp", "8"], release,
             SGLANG_EMULATOR_LOAD_SECONDS="0.8", SGLANG_EMULATOR_WARMUP_SECONDS="1.2")
    time.sleep(0.3)
    assert not e.port_open(), "port must be closed while weights load"
    e.wait_port()
    old = release in ("0.4.6.post5", "0.5.4.post3")
    # warming up
    assert e.get("/health")[0] == (200 if release == "0.4.6.post5" else 503)
    assert e.get("/health_generate")[0] == 503
    assert e.get("/ready")[0] == (503 if release == "0.5.23" else 404)
    assert e.get("/get_model_info")[0] == 200
    assert e.get("/v1/models")[0] == 200
    e.wait_ready()
    assert e.get("/health")[0] == 200
    assert e.get("/ready")[0] == (200 if release == "0.5.23" else 404)
    assert e.get("/ping")[0] == (200 if release == "0.5.23" else 404)
    assert e.get("/model_info")[0] == (404 if old else 200)
    assert e.get("/server_info")[0] == (404 if old else 200)
    info = e.json("/get_server_info")
    assert (info["tp_size"], info["pp_size"], info["ep_size"], info["dp_size"]) == (8, 1, 1, 1)
    assert info["version"] == release and info["emulator"] is True
    assert info["port"] == e.port and info["host"] == "127.0.0.1"
    status, body = e.get("/")
    assert status == 200 and body == b"SGLang is running"
    assert "The server is fired up and ready to roll!" in e.stderr()
    rec = json.loads((tmp_path / "state" / "starts.jsonl").read_text().splitlines()[-1])
    assert rec["release"] == release and rec["pid"] == e.proc.pid
    assert rec["layout"]["name"] == "tp8" and rec["node_rank"] == 0
    assert e.stop() == 0  # SIGTERM: prompt, clean exit


def test_server_info_layout_and_generation(emus):
    e = emus(["--model-path", MODEL, "--tp-size", "8", "--ep-size", "4",
              "--served-model-name", "kimi"], "0.5.23")
    e.wait_ready("/ready")
    info = e.json("/server_info")
    assert (info["tp_size"], info["ep_size"], info["pp_size"]) == (8, 4, 1)
    assert info["served_model_name"] == "kimi" and info["model_path"] == MODEL
    assert info["emulator_layout"] == "tp8-ep4"
    assert info["emulator_rates"]["single"] == 45.0
    minfo = e.json("/model_info")
    assert minfo["served_model_name"] == "kimi" and minfo["is_generation"] is True
    assert minfo["model_type"] == "kimi_k25"
    models = e.json("/v1/models")
    assert models["object"] == "list" and models["data"][0]["id"] == "kimi"

    out = e.json("/generate", {"text": "one two three", "sampling_params": {"max_new_tokens": 5}})
    assert len(out["text"].split()) == 5
    assert out["meta_info"]["prompt_tokens"] == 3 and out["meta_info"]["completion_tokens"] == 5

    events, done = e.stream("/generate", {"text": "hi there", "stream": True,
                                          "sampling_params": {"max_new_tokens": 6}})
    assert done and len(events) == 6
    last = events[-1][1]
    assert len(last["text"].split()) == 6 and last["meta_info"]["completion_tokens"] == 6
    assert last["meta_info"]["finish_reason"]["type"] == "length"

    chat = e.json("/v1/chat/completions", {"model": "kimi", "max_tokens": 4, "messages": [
        {"role": "user", "content": "say four words"}]})
    assert chat["object"] == "chat.completion"
    assert len(chat["choices"][0]["message"]["content"].split()) == 4
    assert chat["usage"] == {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7,
                             "prompt_tokens_details": None}

    events, done = e.stream("/v1/chat/completions", {
        "model": "kimi", "max_tokens": 7, "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "a b"}]})
    assert done
    chunks = [ev for _t, ev in events]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert len(text.split()) == 7
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 7

    events, done = e.stream("/v1/completions", {"model": "kimi", "prompt": "x y z",
                                                "max_tokens": 3, "stream": True})
    assert done
    assert len("".join(ev["choices"][0]["text"] for _t, ev in events).split()) == 3
    assert e.request("POST", "/flush_cache")[0] == 200
    assert e.get("/nope")[0] == 404


def test_api_key(emus):
    e = emus(["--model-path", "m", "--api-key", "sekret"], "0.5.23")
    e.wait_ready("/ready")
    assert e.get("/health")[0] == 200 and e.get("/ready")[0] == 200
    assert e.get("/v1/models")[0] == 401
    assert e.get("/v1/models", headers={"Authorization": "sekret"})[0] == 401
    assert e.get("/v1/models", headers={"Authorization": "Bearer wrong"})[0] == 401
    assert e.get("/v1/models", headers={"Authorization": "Bearer sekret"})[0] == 200
    assert e.get("/server_info", headers={"Authorization": "Bearer sekret"})[0] == 200
    assert "sekret" not in e.get("/server_info",
                                 headers={"Authorization": "Bearer sekret"})[1].decode()


@pytest.mark.parametrize("release", RELEASES)
def test_log_lines_tell_the_load_phases(emus, release):
    """The emulator prints the release's own phase lines at the same points, and the
    collection's phase reader follows them."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._load_phases import LoadProgress
    e = emus(["--model-path", MODEL, "--tp", "8"], release,
             SGLANG_EMULATOR_LOAD_SECONDS="0.4", SGLANG_EMULATOR_CAPTURE_SECONDS="0.2")
    e.wait_ready()
    e.stderr()
    text = e.log_path.read_bytes().decode()  # read_text() would turn \r into \n
    e.stop()
    progress = LoadProgress(0)
    seen = []
    for line in text.split("\n"):
        progress.feed(1, line)
        if not seen or seen[-1] != progress.phase:
            seen.append(progress.phase)
    assert seen == ["starting", "loading", "kv_cache", "cuda_graphs", "warmup", "ready"], text
    assert progress.shards == {"done": 64, "total": 64, "percent": 100}
    bars = [line for line in text.split("\n") if "checkpoint shards" in line]
    if release == "0.5.23":  # no newline in the bar format: one line of \r-joined updates
        assert len(bars) == 1 and bars[0].count("\r") == 9
    else:
        assert len(bars) == 9 and all(b.startswith("\r") for b in bars)


@pytest.mark.parametrize("fault, phase", [("hang-during-load", "loading"),
                                          ("hang-during-capture", "cuda_graphs")])
def test_hang_faults_stop_in_their_phase(emus, fault, phase):
    from ansible_collections.gpufleet.sglang.plugins.module_utils.rollout._load_phases import LoadProgress
    e = emus(["--model-path", MODEL, "--tp", "8"], "0.5.9", SGLANG_EMULATOR_FAULT=fault,
             SGLANG_EMULATOR_LOAD_SECONDS="0.2")
    time.sleep(1.5)
    assert not e.port_open()
    progress = LoadProgress(0)
    for line in e.stderr().split("\n"):
        progress.feed(1, line)
    assert e.stop() == 0
    assert progress.phase == phase


def test_crash_during_load(tmp_path):
    res = run_cli(tmp_path, ["--model-path", "m"], "0.5.9",
                  SGLANG_EMULATOR_FAULT="crash-during-load", SGLANG_EMULATOR_LOAD_SECONDS="0.4")
    assert res.returncode == 1
    assert b"Loading safetensors checkpoint shards" in res.stderr
    assert b"torch.OutOfMemoryError: CUDA out of memory" in res.stderr
    assert json.loads((tmp_path / "state" / "starts.jsonl").read_text())["fault"] == \
        "crash-during-load"


def test_hang_after_listen(emus):
    e = emus(["--model-path", "m"], "0.5.23", SGLANG_EMULATOR_FAULT="hang-after-listen",
             SGLANG_EMULATOR_WARMUP_SECONDS="0.1")
    e.wait_port()
    time.sleep(0.4)
    assert e.get("/health")[0] == 503 and e.get("/ready")[0] == 503
    assert e.stop() == 0


# ---------------------------------------------------------------- pacing

def test_token_rates(emus):
    e = emus(["--model-path", "m", "--tp", "8", "--ep", "8"], "0.5.23")
    e.wait_ready("/ready")
    single, ceiling = 65.0, 1531.0
    events = e.stream("/generate", {"text": "x", "stream": True,
                                    "sampling_params": {"max_new_tokens": 160}})[0]
    measured = (len(events) - 1) / (events[-1][0] - events[0][0])
    assert abs(measured - single) / single < 0.05, measured

    n, tokens = 32, 96
    results = [None] * n

    def worker(i):
        results[i] = e.stream("/v1/completions", {"model": "m", "prompt": "p", "stream": True,
                                                  "max_tokens": tokens})[0]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    first = min(r[0][0] for r in results)
    last = max(r[-1][0] for r in results)
    total = sum(len(r) for r in results)
    assert total == n * tokens
    aggregate = (total - n) / (last - first)
    expected = min(n * single, ceiling)
    assert abs(aggregate - expected) / expected < 0.12, aggregate


# ---------------------------------------------------------------- multi-node

def test_two_nodes_serve_only_after_worker_joined(tmp_path, emus):
    dist = "127.0.0.1:%d" % free_port()
    common = ["--model-path", "m", "--tp", "16", "--nnodes", "2", "--dist-init-addr", dist]
    head = emus(common + ["--node-rank", "0"], "0.5.9", SGLANG_EMULATOR_LOAD_SECONDS="0.2")
    time.sleep(1.0)
    assert head.proc.poll() is None and not head.port_open()
    worker = emus(common + ["--node-rank", "1"], "0.5.9", SGLANG_EMULATOR_LOAD_SECONDS="0.2")
    head.wait_ready("/health")
    assert not worker.port_open(), "workers serve no HTTP"
    info = head.json("/server_info")
    assert (info["tp_size"], info["nnodes"], info["node_rank"]) == (16, 2, 0)
    starts = [json.loads(line) for line in
              (tmp_path / "state" / "starts.jsonl").read_text().splitlines()]
    assert sorted(s["node_rank"] for s in starts) == [0, 1]
    # rank 0 goes away -> the worker exits 1
    assert head.stop() == 0
    assert worker.proc.wait(10) == 1
    assert "rank 0 went away" in worker.stderr()


def test_multi_node_layout_mismatch_refused(emus):
    dist = "127.0.0.1:%d" % free_port()
    base = ["--model-path", "m", "--nnodes", "2", "--dist-init-addr", dist]
    head = emus(base + ["--tp", "16", "--node-rank", "0"], "0.5.9")
    worker = emus(base + ["--tp", "8", "--node-rank", "1"], "0.5.9")
    assert head.proc.wait(15) == 1 and worker.proc.wait(15) == 1
    assert "disagrees on tp_size" in head.stderr()


# ---------------------------------------------------------------- wheel

def test_wheel_is_deterministic_and_installs(tmp_path):
    build = [sys.executable, os.path.join(EMU, "build_wheel.py"), "--release", "0.5.4.post3"]
    w1 = subprocess.run(build + ["--out", str(tmp_path / "a")], capture_output=True, text=True,
                        check=True).stdout.strip()
    w2 = subprocess.run(build + ["--out", str(tmp_path / "b")], capture_output=True, text=True,
                        check=True).stdout.strip()
    assert os.path.basename(w1) == "sglang-0.5.4.post3-py3-none-any.whl"

    def digest(path):
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()

    assert digest(w1) == digest(w2)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                    "--disable-pip-version-check", w1], check=True)
    env = {"PATH": os.environ.get("PATH", ""), "COLUMNS": "80",
           "SGLANG_EMULATOR_STATE_DIR": str(tmp_path / "st")}
    res = subprocess.run([py, "-m", "sglang.launch_server", "--help"], env=env,
                         capture_output=True, cwd=str(tmp_path), check=False)
    assert res.returncode == 0
    with open(os.path.join(HELP, "sglang-0.5.4.post3.txt"), "rb") as fh:
        assert res.stdout == fh.read()
    res = subprocess.run([py, "-c", "import sglang; print(sglang.__version__, "
                          "sglang.__emulator__, 'TEST DOUBLE' in sglang.__doc__)"],
                         env=env, capture_output=True, text=True, cwd=str(tmp_path), check=True)
    assert res.stdout.split() == ["0.5.4.post3", "True", "True"]
    meta = subprocess.run([py, "-c", "import importlib.metadata as m; "
                           "print(m.metadata('sglang')['Summary'])"], env=env,
                          capture_output=True, text=True, cwd=str(tmp_path), check=True)
    assert meta.stdout.startswith("TEST DOUBLE: SGLang emulator")


def test_fault_limited_to_node_ranks(tmp_path):
    """SGLANG_EMULATOR_FAULT_NODE_RANKS keeps the fault away from the other ranks."""
    env = dict(os.environ, PYTHONPATH=SRC, SGLANG_EMULATOR_RELEASE="0.5.9",
               SGLANG_EMULATOR_FAULT="crash-on-start", SGLANG_EMULATOR_FAULT_NODE_RANKS="1",
               SGLANG_EMULATOR_STATE_DIR=str(tmp_path), SGLANG_EMULATOR_LOAD_SECONDS="0")
    crashed = subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "16",
         "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "127.0.0.1:9"],
        env=env, capture_output=True, text=True, timeout=30, check=False)
    assert crashed.returncode == 1 and "crash-on-start" in crashed.stderr
    records = [json.loads(line) for line in (tmp_path / "starts.jsonl").read_text().splitlines()]
    assert records[-1]["fault"] == "crash-on-start"
    env["SGLANG_EMULATOR_FAULT_NODE_RANKS"] = "0"
    spared = subprocess.Popen(
        [sys.executable, "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "16",
         "--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "127.0.0.1:9", "--dist-timeout", "2"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        spared.wait(timeout=30)
    finally:
        if spared.poll() is None:
            spared.kill()
    records = [json.loads(line) for line in (tmp_path / "starts.jsonl").read_text().splitlines()]
    assert records[-1]["fault"] is None


def test_missing_shard_named_by_the_index_refuses_to_start(tmp_path):
    """A shard the index names is missing: the scheduler dies before loading, naming it;
    with every shard present the same directory gets past the check (load begins)."""
    model = tmp_path / "model"
    model.mkdir()
    index = {"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
                                            "b": "model-00002-of-00002.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    (model / "model-00001-of-00002.safetensors").write_bytes(b"x")
    res = run_cli(tmp_path, ["--model-path", str(model), "--tp", "1"], "0.5.9",
                  SGLANG_EMULATOR_LOAD_SECONDS="0")
    err = res.stderr.decode()
    assert res.returncode == 1
    assert ("does not appear to have a file named model-00002-of-00002.safetensors which is "
            "required according to the checkpoint index.") in err
    assert "Load weight begin" not in err
    from sglang._emulator.main import missing_shards
    assert missing_shards(str(model)) == ["model-00002-of-00002.safetensors"]
    (model / "model-00002-of-00002.safetensors").write_bytes(b"x")
    assert missing_shards(str(model)) == []


def test_sigterm_drains_in_flight_requests_then_exits(emus):
    """SIGTERM as in SGLang 0.5.x: health 503, requests in flight and new ones finish,
    the process exits 0 at the first watchdog tick with no request left."""
    e = emus(["--model-path", "m"], "0.5.23",
             SGLANG_EMULATOR_RATES='{"default": {"single": 20, "ceiling": 200}}',
             SGLANG_EMULATOR_SIGTERM_POLL_SECONDS="0.3")
    e.wait_ready()
    result = {}

    def long_stream():
        result["events"], result["done"] = e.stream(
            "/generate", {"text": "hi", "stream": True,
                          "sampling_params": {"max_new_tokens": 30}})

    worker = threading.Thread(target=long_stream)
    worker.start()
    time.sleep(0.3)
    e.proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    assert e.get("/health")[0] == 503
    assert e.proc.poll() is None
    late = e.json("/generate", {"text": "x", "sampling_params": {"max_new_tokens": 2}})
    assert late["meta_info"]["completion_tokens"] == 2
    worker.join(10)
    assert result["done"] and len(result["events"]) == 30
    assert e.proc.wait(5) == 0
    assert "Gracefully exiting... Remaining number of requests 1." in e.stderr()


def test_sigterm_force_shutdown_does_not_wait(emus):
    e = emus(["--model-path", "m"], "0.5.23", SGL_FORCE_SHUTDOWN="1",
             SGLANG_EMULATOR_RATES='{"default": {"single": 5, "ceiling": 50}}')
    e.wait_ready()

    def cut_request():
        try:
            e.request("POST", "/generate",
                      {"text": "x", "sampling_params": {"max_new_tokens": 50}})
        except (OSError, http.client.HTTPException):
            pass  # cut by the forced exit: what this test expects

    worker = threading.Thread(target=cut_request, daemon=True)
    worker.start()
    time.sleep(0.3)
    e.proc.send_signal(signal.SIGTERM)
    assert e.proc.wait(5) == 0
    assert "force shutdown flag set" in e.stderr()


def test_sigterm_ready_and_ping_answer_503_on_0523(emus):
    """0.5.23: is_ready() and is_healthy() are false from SIGTERM on (/ready, /ping)."""
    e = emus(["--model-path", "m"], "0.5.23", SGLANG_EMULATOR_SIGTERM_POLL_SECONDS="5",
             SGLANG_EMULATOR_RATES='{"default": {"single": 10, "ceiling": 100}}')
    e.wait_ready()
    assert e.get("/ready")[0] == 200 and e.get("/ping")[0] == 200
    worker = threading.Thread(target=e.json, args=(
        "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 10}}))
    worker.start()
    time.sleep(0.2)
    e.proc.send_signal(signal.SIGTERM)
    time.sleep(0.1)
    assert [e.get(p)[0] for p in ("/ready", "/ping", "/health")] == [503, 503, 503]
    worker.join(10)
    assert e.proc.wait(10) == 0


def test_sigterm_waits_for_every_request_the_http_server_holds():
    """The watchdog counts what the tokenizer manager's rid_to_state holds, not only the
    scheduler's requests: a batch /generate between two prompts, say, has none in the
    scheduler but is still held."""
    from sglang._emulator import server as emu_server

    class FakeState:
        gracefully_exit = False
        held = 1

        class engine:  # pylint: disable=invalid-name
            in_flight = 0

    exits = []
    state = FakeState()
    emu_server.graceful_exit(state, exits.append, 0.02)
    time.sleep(0.2)
    assert exits == [] and state.gracefully_exit
    state.held = 0
    deadline = time.monotonic() + 5
    while not exits and time.monotonic() < deadline:
        time.sleep(0.01)
    assert exits == [0]


@pytest.mark.parametrize("stream", [True, False])
def test_sigterm_drops_running_fault(emus, stream):
    """SGLANG_EMULATOR_SIGTERM_DROPS_RUNNING=1, a test-only fault: SIGTERM drops the
    requests in flight at once (a stream is cut before [DONE], a plain request gets no
    answer) and the process exits 0 without the graceful wait."""
    e = emus(["--model-path", "m"], "0.5.9", SGLANG_EMULATOR_SIGTERM_DROPS_RUNNING="1",
             SGLANG_EMULATOR_SIGTERM_POLL_SECONDS="5",
             SGLANG_EMULATOR_RATES='{"default": {"single": 10, "ceiling": 100}}')
    e.wait_ready()
    result = {}

    def request():
        body = {"text": "hi", "stream": stream, "sampling_params": {"max_new_tokens": 50}}
        try:
            if stream:
                result["events"], result["done"] = e.stream("/generate", body)
            else:
                result["status"] = e.request("POST", "/generate", body)[0]
        except (OSError, http.client.HTTPException) as exc:
            result["error"] = exc

    worker = threading.Thread(target=request)
    worker.start()
    time.sleep(0.5)
    e.proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    assert e.proc.wait(5) == 0
    assert time.monotonic() - started < 2  # not the 5 s watchdog tick
    worker.join(5)
    if stream:
        # cut: an incomplete chunked body, or the events so far without [DONE]
        assert "error" in result or (not result["done"] and len(result["events"]) < 50), result
    else:
        assert "error" in result and "status" not in result, result
    assert "dropping 1 running and 0 queued request(s)" in e.stderr()


def test_abort_all_drops_running_and_queued():
    from sglang._emulator import engine as emu_engine
    eng = emu_engine.Engine(10, 10, 0.0, model=emu_engine.StepModel(
        10, 10, 0.0, max_running_requests=1))
    outcomes = []

    def run():
        got = []
        try:
            for tok in eng.generate(100, 2):
                got.append(tok)
            outcomes.append(("done", len(got)))
        except emu_engine.Aborted:
            outcomes.append(("aborted", len(got)))

    workers = [threading.Thread(target=run) for dummy in range(2)]
    for w in workers:
        w.start()
    time.sleep(0.35)
    assert (eng.active, eng.queued) == (1, 1)
    assert eng.abort_all() == (1, 1)
    for w in workers:
        w.join(5)
    assert sorted(o[0] for o in outcomes) == ["aborted", "aborted"]
    assert max(o[1] for o in outcomes) > 0 and min(o[1] for o in outcomes) == 0
    assert (eng.active, eng.queued, eng.in_flight) == (0, 0, 0)
