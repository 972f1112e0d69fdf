"""The emulator wheel ships each release's bench_serving client (a TEST DOUBLE) at that
release's module path, with that release's CLI; the collection's benchmark path (the
module filter, the argv built from ``--help``, the JSONL parser) works against it.

Each release's wheel is built and unpacked into a directory of its own (an installed
tree); the client runs from there against the emulator's HTTP server."""

import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_tool
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _sglang_help
from ansible_collections.gpufleet.sglang.tests.paths import SGLANG_HELP as HELP
from test_emulator import EMU, MODEL, RELEASES, emus  # noqa: F401  pylint: disable=unused-import

sys.path.insert(0, EMU)
import build_wheel  # noqa: E402  pylint: disable=wrong-import-position
from sglang._emulator import bench_client  # noqa: E402  pylint: disable=wrong-import-position

BENCH_DATA = os.path.join(EMU, "bench")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """release -> the directory its wheel was unpacked into."""
    root = tmp_path_factory.mktemp("bench-wheels")
    trees = {}
    for release in RELEASES:
        wheel = build_wheel.build(release, str(root / "dist"))
        tree = root / release
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(str(tree))
        trees[release] = str(tree)
    return trees


def client_env(tree, tmp_path, **extra):
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": tree, "COLUMNS": "200",
           "SGLANG_EMULATOR_STATE_DIR": str(tmp_path / "client-state")}
    env.update(extra)
    return env


def run_module(tree, tmp_path, module, args, **extra):
    return subprocess.run([sys.executable, "-m", module] + list(args), cwd=str(tmp_path),
                          env=client_env(tree, tmp_path, **extra), capture_output=True,
                          text=True, timeout=120, check=False)


def spec(release):
    with open(os.path.join(BENCH_DATA, "bench_serving-%s.json" % release), encoding="utf-8") as fh:
        return json.load(fh)


def tokenizer_dir(tmp_path):
    """A model directory as the Hub double's test model has it: a config, shards, no tokenizer."""
    model = tmp_path / "tiny-model"
    model.mkdir()
    shutil.copy(os.path.join(MODEL, "config.json"), str(model / "config.json"))
    (model / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 64)
    return str(model)


# ------------------------------------------------------------------ module and --help

def test_the_80_column_help_of_0_5_23_is_the_real_one_byte_for_byte(installed, tmp_path):
    res = run_module(installed["0.5.23"], tmp_path, "sglang.benchmark.serving", ["--help"],
                     COLUMNS="80", PYTHONHASHSEED="0")
    assert res.returncode == 0, res.stderr
    with open(os.path.join(HELP, "bench", "bench_serving-0.5.23.txt"), encoding="utf-8") as fh:
        assert res.stdout == fh.read()
    assert res.stderr == ""


def test_0_5_23_argparse_matches_the_real_actions():
    """The rebuilt parser's actions have the real dests, defaults, types, choices and nargs
    (``bench/bench_serving-0.5.23.actions.json``, dumped from the real parser)."""
    with open(os.path.join(HELP, "bench", "bench_serving-0.5.23.actions.json"), encoding="utf-8") as fh:
        real = json.load(fh)
    parser = bench_client.build_parser(spec("0.5.23"))
    ours = []
    for action in parser._actions:  # pylint: disable=protected-access
        typ = action.type
        ours.append({"option_strings": action.option_strings, "dest": action.dest,
                     "default": action.default,
                     "type": getattr(typ, "__name__", None) if typ is not None else None,
                     "choices": list(action.choices) if action.choices is not None else None,
                     "nargs": action.nargs})
    assert len(ours) == len(real) == 88
    for mine, theirs in zip(ours, real):
        theirs = dict(theirs, choices=list(theirs["choices"]) if theirs["choices"] is not None else None)
        assert mine == theirs


@pytest.mark.parametrize("release", RELEASES)
def test_the_module_the_collection_picks_answers_help(installed, tmp_path, release):
    module = _bench_tool.bench_serving_module(release)
    res = run_module(installed[release], tmp_path, module, ["--help"])
    assert res.returncode == 0, res.stderr
    flags = _sglang_help.parse_help(res.stdout)["flags"]
    real = set(n for arg in spec(release)["arguments"] for n in arg["names"])
    assert set(_bench_tool._flag_set(flags)) >= real  # pylint: disable=protected-access
    assert res.stdout.startswith("usage: %s.py [-h]" % module.rsplit(".", 1)[1])
    # the flags the collection passes: --ready-check-timeout-sec is 0.5.23's only
    assert ("--ready-check-timeout-sec" in real) == (release == "0.5.23")
    assert {"--warmup-requests", "--disable-tqdm", "--tokenizer", "--output-file"} <= real


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_has_its_own_module_paths(installed, tmp_path, release):
    new = run_module(installed[release], tmp_path, "sglang.benchmark.serving", ["--help"])
    old = run_module(installed[release], tmp_path, "sglang.bench_serving", ["--help"])
    assert old.returncode == 0, old.stderr
    if release == "0.5.23":
        assert new.returncode == 0
        # the deprecated shim: same CLI, prog of its own file, a FutureWarning
        assert old.stdout.startswith("usage: bench_serving.py [-h]")
        assert old.stdout.split("\n\n", 1)[1] == new.stdout.split("\n\n", 1)[1]
        assert "FutureWarning: `sglang.bench_serving` is deprecated" in old.stderr
    else:
        assert new.returncode == 1 and "No module named 'sglang.benchmark'" in new.stderr
        assert "FutureWarning" not in old.stderr


def test_unknown_flags_and_bad_values_fail_as_argparse_does(installed, tmp_path):
    res = run_module(installed["0.5.9"], tmp_path, "sglang.bench_serving",
                     ["--ready-check-timeout-sec", "5"])
    assert res.returncode == 2 and "unrecognized arguments: --ready-check-timeout-sec 5" in res.stderr
    res = run_module(installed["0.5.23"], tmp_path, "sglang.benchmark.serving",
                     ["--flush-cache-timeout", "0"])
    assert res.returncode == 2
    assert "argument --flush-cache-timeout: expected a finite float > 0, got '0'" in res.stderr


# ------------------------------------------------------------------ runs

def collection_argv(installed, tmp_path, release, port, tokenizer, out, concurrency=4, prompts=8):
    """The argv the benchmark role builds: the module filter, then bench_serving_argv checked
    against the installed client's --help (as roles/benchmark/tasks/run_bench_serving.yml)."""
    module = _bench_tool.bench_serving_module(release)
    help_text = run_module(installed[release], tmp_path, module, ["--help"]).stdout
    return _bench_tool.bench_serving_argv(
        python=sys.executable, release=release, base_url="http://127.0.0.1:%d" % port,
        tokenizer=tokenizer, concurrency=concurrency, num_prompts=prompts, input_len=32,
        output_len=6, output_file=out, seed=7, warmup_requests=1, ready_timeout=30,
        available_flags=_sglang_help.parse_help(help_text)["flags"])


@pytest.mark.parametrize("release", RELEASES)
def test_a_run_writes_the_jsonl_the_collection_reads(installed, tmp_path, emus, release):  # noqa: F811
    server = emus(["--model-path", MODEL, "--tp-size", "8"], release)
    server.wait_ready("/health_generate")
    out = str(tmp_path / "run.jsonl")
    argv = collection_argv(installed, tmp_path, release, server.port, tokenizer_dir(tmp_path), out)
    assert ("--ready-check-timeout-sec" in argv) == (release == "0.5.23")
    res = subprocess.run(argv, cwd=str(tmp_path), env=client_env(installed[release], tmp_path),
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    with open(out, encoding="utf-8") as fh:
        text = fh.read()
    line = _bench_tool.last_json_line(text)
    assert list(line) == spec(release)["result_keys"]  # the release's own key set, in order
    result = _bench_tool.parse_bench_serving(text, concurrency=4, num_prompts=8)
    assert result["completed"] == 8 and result["failed"] == 0
    assert result["input_len"] == 32 and result["output_len"] == 6
    assert line["total_input_tokens"] == 8 * 32 and line["total_output_tokens"] == 8 * 6
    assert result["output_tok_s"] == pytest.approx(48 / line["duration"])
    assert result["mean_ttft_ms"] > 0 and result["mean_tpot_ms"] > 0
    # the server saw the prompts as the client counted them (one word is one token)
    starts = server.json("/get_server_info")
    assert starts["tp_size"] == 8
    if "server_info" in line:
        assert line["server_info"]["tp_size"] == 8
    # append mode: a second run adds a line, the parser reads the newest
    res = subprocess.run(argv, cwd=str(tmp_path), env=client_env(installed[release], tmp_path),
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0
    with open(out, encoding="utf-8") as fh:
        assert len(fh.read().splitlines()) == 2


def test_the_concurrency_reaches_the_server(installed, tmp_path, emus):  # noqa: F811
    """--max-concurrency is what the server runs at once: 1 in flight is slower than 8."""
    server = emus(["--model-path", MODEL, "--tp-size", "8"], "0.5.23", SGLANG_EMULATOR_TTFT_MS="5")
    server.wait_ready("/health_generate")
    tok = tokenizer_dir(tmp_path)
    results = {}
    for conc in (1, 8):
        out = str(tmp_path / ("c%d.jsonl" % conc))
        argv = collection_argv(installed, tmp_path, "0.5.23", server.port, tok, out,
                               concurrency=conc, prompts=8)
        res = subprocess.run(argv, cwd=str(tmp_path), env=client_env(installed["0.5.23"], tmp_path),
                             capture_output=True, text=True, timeout=120, check=False)
        assert res.returncode == 0, res.stdout + res.stderr
        with open(out, encoding="utf-8") as fh:
            results[conc] = _bench_tool.parse_bench_serving(fh.read(), concurrency=conc, num_prompts=8)
    assert results[8]["output_tok_s"] > 3 * results[1]["output_tok_s"]
    line = _bench_tool.last_json_line(open(str(tmp_path / "c8.jsonl"), encoding="utf-8").read())
    assert line["max_concurrent_requests"] > 1


def test_the_api_key_comes_from_openai_api_key(installed, tmp_path, emus):  # noqa: F811
    server = emus(["--model-path", MODEL, "--tp-size", "8", "--api-key", "sekrit"], "0.5.23")
    server.wait_ready("/health_generate")
    out = str(tmp_path / "auth.jsonl")
    argv = collection_argv(installed, tmp_path, "0.5.23", server.port, tokenizer_dir(tmp_path), out)
    argv[argv.index("--ready-check-timeout-sec") + 1] = "1"
    refused = subprocess.run(argv, cwd=str(tmp_path), env=client_env(installed["0.5.23"], tmp_path),
                             capture_output=True, text=True, timeout=120, check=False)
    # /v1/models answers 401 without the key: the ready check never passes
    assert refused.returncode == 1 and "is not ready. Exiting." in refused.stdout
    ok = subprocess.run(argv, cwd=str(tmp_path),
                        env=client_env(installed["0.5.23"], tmp_path, OPENAI_API_KEY="sekrit"),
                        capture_output=True, text=True, timeout=120, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert _bench_tool.parse_bench_serving(open(out, encoding="utf-8").read())["completed"] == 8


def test_a_warmup_that_fails_stops_the_run(installed, tmp_path, emus):  # noqa: F811
    """0.5.9 has no ready check: against a server whose /generate refuses (the wrong key) the
    warmup fails and the tool dies of the real ValueError, writing nothing."""
    server = emus(["--model-path", MODEL, "--tp-size", "8", "--api-key", "sekrit"], "0.5.9")
    server.wait_ready("/health_generate")
    out = tmp_path / "warm.jsonl"
    argv = collection_argv(installed, tmp_path, "0.5.9", server.port, tokenizer_dir(tmp_path), str(out))
    res = subprocess.run(argv + ["--model", "m"], cwd=str(tmp_path),
                         env=client_env(installed["0.5.9"], tmp_path, OPENAI_API_KEY="wrong"),
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1
    assert "ValueError: Warmup failed - Please make sure benchmark arguments are correctly" in res.stderr
    assert not out.exists()


def test_the_tokenizer_is_the_model_directory(tmp_path):
    """No tokenizer files needed: token ids below the config's vocab_size, one word each;
    a path that does not exist fails as from_pretrained does."""
    tok = bench_client.WordTokenizer(tokenizer_dir(tmp_path))
    with open(os.path.join(MODEL, "config.json"), encoding="utf-8") as fh:
        config = json.load(fh)
    vocab = (config.get("text_config") or config)["vocab_size"]
    assert tok.vocab_size == vocab != bench_client.DEFAULT_VOCAB
    args = bench_client.build_parser(spec("0.5.23")).parse_args(
        ["--dataset-name", "random", "--random-input-len", "50", "--random-output-len", "9",
         "--random-range-ratio", "1", "--num-prompts", "5", "--seed", "3"])
    reqs = bench_client.sample_random_requests(args, tok)
    assert [(len(p.split()), i, o) for p, i, o in reqs] == [(50, 50, 9)] * 5
    assert max(int(w[1:]) for p, _i, _o in reqs for w in p.split()) < vocab
    args.random_range_ratio = 0.5
    lens = [i for _p, i, _o in bench_client.sample_random_requests(args, tok)]
    assert min(lens) >= 25 and max(lens) <= 50 and len(set(lens)) > 1
    with pytest.raises(OSError, match="Can't load tokenizer"):
        bench_client.WordTokenizer(str(tmp_path / "missing"))


def test_the_captured_cli_data_is_the_real_releases():
    """The data files hold what bench_capture.py read from each real wheel: the module
    paths and the result keys the reference lists (sglang.md section 5.3)."""
    keys = dict((r, spec(r)["result_keys"]) for r in RELEASES)
    assert spec("0.5.23")["module"] == "sglang.benchmark.serving"
    assert spec("0.5.23")["shim"] == "sglang.bench_serving"
    assert all(spec(r)["module"] == "sglang.bench_serving" and spec(r)["shim"] is None
               for r in RELEASES[:-1])
    assert len(keys["0.4.6.post5"]) == 35 and len(keys["0.5.23"]) == 49
    assert not {"tag", "server_info", "total_throughput"} & set(keys["0.4.6.post5"])
    assert {"tag", "server_info"} <= set(keys["0.5.4.post3"]) and "total_throughput" not in keys["0.5.4.post3"]
    assert {"total_throughput", "max_concurrent_requests"} <= set(keys["0.5.9"])
    for release in RELEASES:
        assert set(_bench_tool.BENCH_SERVING_REQUIRED) <= set(keys[release])
