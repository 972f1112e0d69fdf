# -*- coding: utf-8 -*-
"""Tests of strategy -> argv rendering over the four real SGLang releases.

The strongest check: every rendered argv is parsed by a real argparse parser rebuilt
from that release's actions.json (rebuild_sglang_help.build_parser reproduces the
fixtures' --help byte for byte), with abbreviations disabled so that only exact option
strings are accepted.
"""

import argparse
import contextlib
import io
import json
import os

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_argv import (
    TRANSLATIONS,
    ArgvError,
    known_translations,
    missing,
    normalize_flag,
    render_argv,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import parse_help

import rebuild_sglang_help
from ansible_collections.gpufleet.sglang.tests.paths import SGLANG_HELP as FIXTURES
from ansible_collections.gpufleet.sglang.tests.paths import SGLANG_RELEASES as RELEASES

BASE = {"--model-path": "/models/k", "--host": "0.0.0.0", "--port": 30000,
        "--served-model-name": "kimi"}

_CACHE = {}


def flags_of(release):
    key = ("flags", release)
    if key not in _CACHE:
        with open(os.path.join(FIXTURES, "sglang-%s.txt" % release)) as handle:
            _CACHE[key] = parse_help(handle.read())["flags"]
    return _CACHE[key]


def actions_of(release):
    key = ("actions", release)
    if key not in _CACHE:
        with open(os.path.join(FIXTURES, "argparse", "sglang-%s.actions.json" % release)) as handle:
            _CACHE[key] = json.load(handle)["actions"]
    return _CACHE[key]


class _ParseFailed(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _ParseFailed(message)


def parser_of(release):
    key = ("parser", release)
    if key not in _CACHE:
        parser = _Parser(prog="launch_server.py", allow_abbrev=False)
        for action in actions_of(release):
            rebuild_sglang_help.add_action(parser, action)
        _CACHE[key] = parser
    return _CACHE[key]


def option_strings(release):
    return {n for a in actions_of(release) for n in a["option_strings"]}


def parse_ok(release, argv):
    """Parse ``argv`` with the release's real parser; return the namespace."""
    tokens = [t for t in argv if t.startswith("--")]
    unknown = [t for t in tokens if t not in option_strings(release)]
    assert not unknown, "%s: not exact option strings of sglang %s" % (unknown, release)
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            return parser_of(release).parse_args(argv)
        except _ParseFailed as exc:
            raise AssertionError("sglang %s rejects %s: %s" % (release, argv, exc))


def val(release, ns, flag):
    """Parsed value of ``flag`` (any alias): dests differ between releases."""
    for action in actions_of(release):
        if flag in action["option_strings"]:
            return getattr(ns, action["dest"])
    raise KeyError(flag)


def render(release, layout=None, extra=None, base=None):
    base = BASE if base is None else base
    return render_argv(flags_of(release), release, layout=layout, server_args=base, extra_args=extra or {})


# --- the parser used as oracle must itself reject what SGLang rejects -------------

def test_oracle_rejects_what_sglang_rejects():
    # with abbreviations on, as in SGLang: --ep is ambiguous on 0.4.6.post5
    real = rebuild_sglang_help.build_parser(actions_of("0.4.6.post5"))
    with contextlib.redirect_stderr(io.StringIO()) as err:
        with pytest.raises(SystemExit):
            real.parse_args(["--model-path", "x", "--ep", "4"])
    assert "ambiguous option: --ep" in err.getvalue()
    for release, argv in [("0.5.4.post3", ["--model-path", "x", "--enable-ep-moe"]),
                          ("0.5.4.post3", ["--model-path", "x", "--max-micro-batch-size", "4"]),
                          ("0.5.23", ["--model-path", "x", "--attention-backend", "cutlass_mla"]),
                          ("0.4.6.post5", ["--model-path", "x", "--tool-call-parser", "kimi_k2"])]:
        with pytest.raises(AssertionError):
            parse_ok(release, argv)


# --- strategies --------------------------------------------------------------------

@pytest.mark.parametrize("release", RELEASES)
def test_ep8_renders_ep_size_everywhere(release):
    argv, _tr = render(release, {"tp": 8, "ep": 8})
    assert argv[argv.index("--ep-size") + 1] == "8"
    assert "--ep" not in argv and "--expert-parallel-size" not in argv
    ns = parse_ok(release, argv)
    assert val(release, ns, "--ep-size") == "8"
    assert val(release, ns, "--tp-size") == "8"
    if release == "0.4.6.post5":
        # before --moe-a2a-backend, EP MoE needs the switch ("ep size is equal to tp size")
        assert "--enable-ep-moe" in argv
        assert val(release, ns, "--enable-ep-moe") is True
    else:
        assert "--enable-ep-moe" not in argv


@pytest.mark.parametrize("release", RELEASES)
def test_tp_always_rendered_and_ones_omitted(release):
    argv, tr = render(release, {"tp": 1, "pp": 1, "ep": 1, "dp": 1, "nnodes": 1, "node_rank": 0,
                                "dist_init_addr": None})
    tp_flag = "--tp-size" if release == "0.5.23" else "--tensor-parallel-size"
    assert argv == ["--model-path", "/models/k", "--host", "0.0.0.0", "--port", "30000",
                    "--served-model-name", "kimi", tp_flag, "1"]
    assert tr == []
    parse_ok(release, argv)


@pytest.mark.parametrize("release,flag", [("0.4.6.post5", "--max-micro-batch-size"),
                                          ("0.5.4.post3", "--pp-max-micro-batch-size"),
                                          ("0.5.9", "--pp-max-micro-batch-size"),
                                          ("0.5.23", "--pp-max-micro-batch-size")])
@pytest.mark.parametrize("given", ["--max-micro-batch-size", "--pp-max-micro-batch-size"])
def test_pp_micro_batch_spelling(release, flag, given):
    argv, tr = render(release, {"tp": 1, "pp": 8}, {given: 4})
    assert argv[-2:] == [flag, "4"]
    assert bool(tr) == (given != flag)
    if tr:
        assert given in tr[0] and flag in tr[0] and release in tr[0]
    ns = parse_ok(release, argv)
    assert val(release, ns, "--pp-size") == "8"


@pytest.mark.parametrize("release", RELEASES)
def test_ep_alias_never_rendered(release):
    argv, _tr = render(release, {"tp": 4}, {"--ep": 4})
    assert "--ep" not in argv and argv[argv.index("--ep-size") + 1] == "4"
    parse_ok(release, argv)


@pytest.mark.parametrize("release", ["0.5.4.post3", "0.5.9", "0.5.23"])
def test_enable_ep_moe_translated_on_new_releases(release):
    argv, tr = render(release, {"tp": 8}, {"--enable-ep-moe": True})
    assert "--enable-ep-moe" not in argv
    assert argv[argv.index("--ep-size") + 1] == "8"
    assert any("--enable-ep-moe" in t and release in t for t in tr)
    parse_ok(release, argv)
    argv, tr = render(release, {"tp": 8, "ep": 8}, {"--enable-deepep-moe": True})
    assert argv[-4:] == ["--ep-size", "8", "--moe-a2a-backend", "deepep"]
    assert any("--enable-deepep-moe" in t for t in tr)
    parse_ok(release, argv)


def test_moe_a2a_backend_back_translated_on_0_4_6():
    argv, tr = render("0.4.6.post5", {"tp": 8, "ep": 8}, {"--moe-a2a-backend": "deepep"})
    assert "--enable-deepep-moe" in argv and "--moe-a2a-backend" not in argv
    assert tr
    ns = parse_ok("0.4.6.post5", argv)
    release = "0.4.6.post5"
    assert val(release, ns, "--enable-deepep-moe") is True and val(release, ns, "--enable-ep-moe") is True


@pytest.mark.parametrize("release", RELEASES)
def test_dp_attention(release):
    argv, tr = render(release, {"tp": 8, "dp": 8}, {"--enable-dp-attention": True})
    ns = parse_ok(release, argv)
    if release == "0.5.23":
        assert argv[-2:] == ["--attn-dp-size", "8"]
        assert "--dp-size" not in argv and "--enable-dp-attention" not in argv
        assert val(release, ns, "--attn-dp-size") == "8"
        assert tr and "--attn-dp-size" in tr[0]
    else:
        assert "--enable-dp-attention" in argv
        assert argv[argv.index("--data-parallel-size") + 1] == "8"
        assert tr == []
    # and back: --attn-dp-size on releases without it
    argv, tr = render(release, {"tp": 8}, {"--attn-dp-size": 8})
    ns = parse_ok(release, argv)
    if release == "0.5.23":
        assert tr == [] and val(release, ns, "--attn-dp-size") == "8"
    else:
        assert val(release, ns, "--enable-dp-attention") is True and val(release, ns, "--dp-size") == "8"
        assert tr


@pytest.mark.parametrize("release", RELEASES)
def test_a_strategys_dp_is_dp_attention_in_each_releases_spelling(release):
    argv, tr = render(release, {"tp": 8, "dp": 2})
    ns = parse_ok(release, argv)
    if release == "0.5.23":
        assert argv[-2:] == ["--attn-dp-size", "2"] and tr and "--dp-size" not in argv
        assert val(release, ns, "--dp-size") in (None, 1)
    else:
        assert argv[-3:] == ["--data-parallel-size", "2", "--enable-dp-attention"] and tr == []
        assert val(release, ns, "--enable-dp-attention") is True


@pytest.mark.parametrize("release", RELEASES)
def test_multinode(release):
    argv, _tr = render(release, {"tp": 16, "nnodes": 2, "node_rank": 1,
                                 "dist_init_addr": "10.0.0.1:5000"})
    ns = parse_ok(release, argv)
    assert val(release, ns, "--nnodes") == "2" and val(release, ns, "--node-rank") == "1" and val(release, ns, "--dist-init-addr") == "10.0.0.1:5000"
    assert "--nccl-init-addr" not in argv


def test_deprecated_switch_replaced_on_0_5_23_only():
    argv, tr = render("0.5.23", {"tp": 1}, {"--disable-cuda-graph": True})
    assert argv[-4:] == ["--cuda-graph-backend-decode", "disabled",
                         "--cuda-graph-backend-prefill", "disabled"]
    assert tr
    parse_ok("0.5.23", argv)
    argv, tr = render("0.5.9", {"tp": 1}, {"--disable-cuda-graph": True})
    assert argv[-1] == "--disable-cuda-graph" and tr == []
    argv, tr = render("0.5.9", {"tp": 1}, {"--cuda-graph-backend-decode": "disabled",
                                           "--cuda-graph-backend-prefill": "disabled"})
    assert argv[-1] == "--disable-cuda-graph" and tr
    parse_ok("0.5.9", argv)


def test_deprecated_flag_without_replacement_warns():
    argv, tr = render("0.5.23", {"tp": 8}, {"--enable-dp-attention": True})  # dp 1
    assert "--enable-dp-attention" in argv
    assert any(t.startswith("warning:") and "--enable-dp-attention" in t for t in tr)
    parse_ok("0.5.23", argv)


# --- refusals --------------------------------------------------------------------

@pytest.mark.parametrize("flag, value, refused_on", [
    ("--tool-call-parser", "kimi_k2", "0.4.6.post5"),
    ("--attention-backend", "cutlass_mla", "0.5.23"),
], ids=["tool_call_parser_refused_on_0_4_6", "attention_backend_cutlass_mla_refused_on_0_5_23"])
def test_value_refused_on_one_release(flag, value, refused_on):
    with pytest.raises(ArgvError) as exc:
        render(refused_on, {"tp": 8}, {flag: value})
    msg = str(exc.value)
    assert flag in msg and value in msg and refused_on in msg
    for release in RELEASES:
        if release != refused_on:
            argv, _tr = render(release, {"tp": 8}, {flag: value})
            assert val(release, parse_ok(release, argv), flag) == value


@pytest.mark.parametrize("release", RELEASES)
def test_unknown_flag_refused(release):
    with pytest.raises(ArgvError) as exc:
        render(release, {"tp": 8}, {"--no-such-flag": 3})
    assert "--no-such-flag" in str(exc.value) and release in str(exc.value)


def test_old_names_refused_when_no_translation():
    with pytest.raises(ArgvError) as exc:
        render("0.5.23", {"tp": 8}, {"--cuda-graph-max-bs": 64})  # removed in 0.5.23
    assert "--cuda-graph-max-bs" in str(exc.value)


def test_all_problems_collected():
    with pytest.raises(ArgvError) as exc:
        render("0.4.6.post5", {"tp": 8, "bogus": 2},
               {"--tool-call-parser": "kimi_k2", "--attention-backend": "nsa",
                "--no-such-flag": 1, "--trust-remote-code": "yes", "--port": True})
    problems = exc.value.problems
    assert len(problems) == 6, problems
    text = str(exc.value)
    for needle in ("bogus", "kimi_k2", "nsa", "--no-such-flag", "--trust-remote-code", "--port"):
        assert needle in text
    assert exc.value.version == "0.4.6.post5"


def test_conflicting_values_refused():
    with pytest.raises(ArgvError) as exc:
        render("0.5.9", {"tp": 8}, {"--tp-size": 4})
    assert "given twice" in str(exc.value)
    # the same value twice is fine (any alias)
    argv, _tr = render("0.5.9", {"tp": 8}, {"--tp-size": 8})
    assert argv.count("8") == 1


def test_values_lists_dicts_and_booleans():
    argv, _tr = render("0.5.23", {"tp": 2}, {
        "--lora-target-modules": ["q_proj", "v_proj"],
        "--enable-tf32-matmul": False,
        "--dcp-replicate-q-proj": True,
        "--trust-remote-code": True,
        "--enable-metrics": False,
        "--json-model-override-args": {"b": 1, "a": "x"},
        "--mem-fraction-static": 0.85,
    })
    release = "0.5.23"
    ns = parse_ok(release, argv)
    assert val(release, ns, "--lora-target-modules") == ["q_proj", "v_proj"]
    assert val(release, ns, "--enable-tf32-matmul") is False and "--no-enable-tf32-matmul" in argv
    assert val(release, ns, "--dcp-replicate-q-proj") is True
    assert val(release, ns, "--trust-remote-code") is True
    assert "--enable-metrics" not in argv
    assert json.loads(val(release, ns, "--json-model-override-args")) == {"b": 1, "a": "x"}
    assert val(release, ns, "--mem-fraction-static") == "0.85"
    with pytest.raises(ArgvError) as exc:
        render("0.5.23", {"tp": 2}, {"--lora-target-modules": ["q_proj", "nope"],
                                     "--port": [1, 2]})
    assert "nope" in str(exc.value) and "--port" in str(exc.value)


def test_flag_name_normalisation():
    assert normalize_flag("tool_call_parser") == "--tool-call-parser"
    assert normalize_flag("--tp-size") == "--tp-size"
    argv, _tr = render("0.5.9", {"tp": 2}, {"trust_remote_code": True})
    assert argv[-1] == "--trust-remote-code"


def test_stable_order_base_layout_extras():
    argv, _tr = render("0.5.9", {"tp": 8, "pp": 2, "ep": 8},
                       {"--trust-remote-code": True, "--context-length": 8192})
    assert argv == ["--model-path", "/models/k", "--host", "0.0.0.0", "--port", "30000",
                    "--served-model-name", "kimi", "--tensor-parallel-size", "8",
                    "--pipeline-parallel-size", "2", "--ep-size", "8", "--trust-remote-code",
                    "--context-length", "8192"]
    again, _tr = render("0.5.9", {"ep": 8, "pp": 2, "tp": 8},
                        {"--trust-remote-code": True, "--context-length": 8192})
    assert again == argv


# --- every flag of every release, one at a time, through the real parser ------------

def _sample_values(entry):
    if not entry["takes_value"]:
        return [True]
    choices = entry["choices"]
    nargs = entry["nargs"]
    if choices:
        picks = [choices[0], choices[-1]]
        if nargs in ("+", "*"):
            return [picks]
        return picks
    if nargs in ("+", "*"):
        return [["1", "2"]]
    if isinstance(nargs, int):
        return [["1"] * nargs]
    return ["1"]


@pytest.mark.parametrize("release", RELEASES)
def test_every_flag_renders_to_parseable_argv(release):
    flags = flags_of(release)
    dests = {a["option_strings"][0]: a["dest"] for a in actions_of(release)}
    checked = 0
    for key, entry in flags.items():
        if key == "--help":
            continue
        for name in entry["names"]:
            if name.startswith("--no-"):
                continue
            for value in _sample_values(entry):
                if key == "--model-path":  # required: the base must not carry it as well
                    base, value = {"--host": "::"}, "/m"
                else:
                    base = BASE
                extra = {name: value}
                try:
                    argv, tr = render(release, {"tp": 2}, extra, base=base)
                except ArgvError as exc:
                    # only conflicts with the layout/base (e.g. --tp-size 1 vs tp 2) may fail
                    assert "given twice" in str(exc), exc
                    continue
                ns = parse_ok(release, argv)
                if not tr:
                    dest = dests[entry["names"][0]]
                    expected = value
                    if value is True:
                        assert getattr(ns, dest) not in (None, False), (name, argv)
                    else:
                        assert getattr(ns, dest) == expected, (name, argv, getattr(ns, dest))
                checked += 1
    assert checked >= len(flags) - 1


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("layout", [
    {"tp": 8},
    {"tp": 8, "ep": 8},
    {"tp": 4, "ep": 4},
    {"tp": 1, "pp": 8},
    {"tp": 2, "pp": 4},
    {"tp": 8, "dp": 8},
    {"tp": 8, "dp": 2},
    {"tp": 8, "ep": 8, "dp": 8},
    {"tp": 16, "ep": 16, "nnodes": 2, "node_rank": 0, "dist_init_addr": "h0:5000"},
    {"tp": 8, "pp": 2, "nnodes": 2, "node_rank": 1, "dist_init_addr": "h0:5000"},
])
@pytest.mark.parametrize("extra", [
    {},
    {"--enable-dp-attention": True},
    {"--enable-ep-moe": True},
    {"--enable-deepep-moe": True},
    {"--moe-a2a-backend": "deepep"},
    {"--max-micro-batch-size": 4},
    {"--pp-max-micro-batch-size": 4},
    {"--attn-dp-size": 4},
    {"--ep": 8},
    {"--disable-cuda-graph": True, "--trust-remote-code": True},
    {"--attention-backend": "flashinfer", "--mem-fraction-static": 0.8},
    {"--model": "/models/alt"},
])
def test_strategy_matrix_parses(release, layout, extra):
    base = dict(BASE)
    if "--model" in extra:
        base.pop("--model-path")
    try:
        argv, _tr = render(release, layout, extra, base=base)
    except ArgvError as exc:
        # the only expected refusal: an explicit value that conflicts with the layout
        assert "given twice" in str(exc), exc
        return
    ns = parse_ok(release, argv)
    assert val(release, ns, "--tp-size") == str(layout["tp"])
    if layout.get("ep", 1) > 1:
        assert val(release, ns, "--ep-size") == str(layout["ep"])
    if "--model" in extra:
        assert val(release, ns, "--model-path") == "/models/alt"
    if layout.get("pp", 1) > 1:
        assert val(release, ns, "--pp-size") == str(layout["pp"])


# --- missing() and the translation table ---------------------------------------------

def test_missing():
    old = flags_of("0.4.6.post5")
    assert missing(old, ["--tp-size", "tensor_parallel_size", "--pp-max-micro-batch-size",
                         "--moe-a2a-backend", "--ep"]) == \
        ["--pp-max-micro-batch-size", "--moe-a2a-backend", "--ep"]
    assert missing(flags_of("0.5.23"), ["--tensor-parallel-size", "--attn-dp-size"]) == []
    assert missing(old, []) == []


def test_known_translations_listed():
    listed = known_translations()
    assert len(listed) == len(TRANSLATIONS)
    ids = [t["id"] for t in listed]
    assert len(set(ids)) == len(ids)
    for needed in ("pp-micro-batch", "ep-moe-switch", "deepep-moe", "dp-attention"):
        assert needed in ids
    for item in listed:
        assert item["old"].startswith("--") and item["note"]
    print("\n".join("%s: %s -> %s" % (t["id"], t["old"], t["new"]) for t in listed))


def test_every_translation_target_exists_in_some_release():
    names = set()
    for release in RELEASES:
        names.update(n for a in actions_of(release) for n in a["option_strings"])
    for entry in TRANSLATIONS:
        for flag, _value in entry["old"] + entry["new"]:
            assert flag in names, (entry["id"], flag)
