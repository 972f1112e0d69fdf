# -*- coding: utf-8 -*-
"""Tests of the argparse help-text parser against the real SGLang fixtures.

Ground truth: tests/fixtures/sglang-help/argparse/sglang-<V>.actions.json (the parser's
own ``_actions`` dumped from the same installs).
"""

import glob
import json
import os
import subprocess
import sys
import time

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import (
    HelpParseError,
    is_deprecated_help,
    parse_help,
    resolve,
)
from ansible_collections.gpufleet.sglang.tests.paths import SGLANG_HELP as FIXTURES

HERE = os.path.dirname(os.path.abspath(__file__))
REBUILD = os.path.join(HERE, "rebuild_sglang_help.py")

# (fixture text, release of its actions.json, expected prog)
TEXTS = [
    ("sglang-0.4.6.post5.txt", "0.4.6.post5", "launch_server.py"),
    ("sglang-0.5.4.post3.txt", "0.5.4.post3", "launch_server.py"),
    ("sglang-0.5.9.txt", "0.5.9", "launch_server.py"),
    ("sglang-0.5.23.txt", "0.5.23", "sglang serve"),
    ("sglang-0.5.23-cols200.txt", "0.5.23", "sglang serve"),
    ("sglang-0.5.23-sglang-serve.txt", "0.5.23", "sglang serve"),
]

# Options whose unwrapped help equals actions.json's help exactly, measured with this
# parser. At 80 columns 3 options of 0.5.23 lose a space inside a JSON example that
# textwrap split mid-token ('{"decode" :{...', '"next_prompt_esti' / 'mate"').
HELP_EXACT_FLOOR = {
    "sglang-0.4.6.post5.txt": 146,
    "sglang-0.5.4.post3.txt": 273,
    "sglang-0.5.9.txt": 332,
    "sglang-0.5.23.txt": 527,
    "sglang-0.5.23-cols200.txt": 530,
    "sglang-0.5.23-sglang-serve.txt": 527,
}


def _read(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return handle.read()


def _actions(release):
    with open(os.path.join(FIXTURES, "argparse", "sglang-%s.actions.json" % release)) as handle:
        return json.load(handle)


def _visible(release):
    return [a for a in _actions(release)["actions"] if not a["help_suppressed"]]


_PARSED = {}


def parsed(name):
    if name not in _PARSED:
        _PARSED[name] = parse_help(_read(name))
    return _PARSED[name]


def _by_names(result):
    return {tuple(entry["names"]): entry for entry in result["flags"].values()}


def _compare(result, release):
    """Every problem between parsed flags and the release's visible actions."""
    problems = []
    got = _by_names(result)
    expected = {tuple(a["option_strings"]): a for a in _visible(release)}
    for names, action in expected.items():
        entry = got.get(names)
        if entry is None:
            problems.append("missing %s" % (names,))
            continue
        want = action["choices"]
        if want is None:
            if entry["choices"] is not None:
                problems.append("%s: unexpected choices %s" % (names, entry["choices"]))
        else:
            want = [str(c) for c in want]
            if action["choices_is_set"]:
                if sorted(entry["choices"] or []) != sorted(want):
                    problems.append("%s: choices %s != %s" % (names, entry["choices"], want))
            elif entry["choices"] != want:
                problems.append("%s: choices %s != %s" % (names, entry["choices"], want))
        if entry["takes_value"] != (action["nargs"] != 0):
            problems.append("%s: takes_value %s but nargs %r" % (names, entry["takes_value"], action["nargs"]))
    for names in set(got) - set(expected):
        problems.append("extra parsed option %s" % (names,))
    return problems


@pytest.mark.parametrize("name,release,prog", TEXTS)
def test_names_and_choices_match_argparse_exactly(name, release, prog):
    result = parsed(name)
    assert result["prog"] == prog
    assert _compare(result, release) == []
    assert len(result["flags"]) == len(_visible(release))


@pytest.mark.parametrize("name,release,prog", TEXTS)
def test_keys_are_first_long_name_in_printed_order(name, release, prog):
    result = parsed(name)
    visible = list(_visible(release))
    expected_keys = [next(n for n in a["option_strings"] if n.startswith("--")) for a in visible]
    assert list(result["flags"]) == expected_keys
    assert "--help" in result["flags"]
    assert result["flags"]["--help"]["names"] == ["-h", "--help"]
    assert "-h" not in result["flags"]


@pytest.mark.parametrize("name,release,prog", TEXTS)
def test_nargs_and_takes_value(name, release, prog):
    got = _by_names(parsed(name))
    for action in _visible(release):
        entry = got[tuple(action["option_strings"])]
        nargs = action["nargs"]
        if nargs == 0:
            assert entry["takes_value"] is False and entry["nargs"] == 0, action["option_strings"]
        else:
            assert entry["takes_value"] is True, action["option_strings"]
            assert entry["nargs"] == nargs, (action["option_strings"], entry["nargs"], nargs)


@pytest.mark.parametrize("name,release,prog", TEXTS)
def test_unwrapped_help_matches_floor(name, release, prog):
    got = _by_names(parsed(name))
    exact = [a for a in _visible(release) if got[tuple(a["option_strings"])]["help"] == (a["help"] or "")]
    print("%s: %d/%d help strings exact" % (name, len(exact), len(_visible(release))))
    assert len(exact) >= HELP_EXACT_FLOOR[name]


def test_help_of_wrapped_flag_names_rejoined():
    flags = parsed("sglang-0.5.23.txt")["flags"]
    # wrapped at 80 columns as "--cuda-graph-" / "backend-{decode,prefill}=disabled"
    assert flags["--disable-cuda-graph"]["help"] == \
        "Deprecated. Use --cuda-graph-backend-{decode,prefill}=disabled instead."
    # "'--" / "attention-backend flashmla'" at 80 columns in 0.4.6.post5
    old = parsed("sglang-0.4.6.post5.txt")["flags"]
    assert old["--enable-flashmla"]["help"] == \
        "--enable-flashmla is deprecated. Please use '--attention-backend flashmla' instead."


def test_80_and_200_columns_agree_on_everything_but_help():
    narrow = parsed("sglang-0.5.23.txt")["flags"]
    wide = parsed("sglang-0.5.23-cols200.txt")["flags"]
    assert list(narrow) == list(wide)
    for key in narrow:
        for field in ("names", "takes_value", "choices", "nargs", "deprecated"):
            assert narrow[key][field] == wide[key][field], (key, field)


def test_serve_preamble_and_diffusion_section_ignored():
    serve = parsed("sglang-0.5.23-sglang-serve.txt")
    plain = parsed("sglang-0.5.23.txt")
    assert serve == plain


# --- deprecation ---------------------------------------------------------------

DEPRECATED = {
    "0.4.6.post5": {"--enable-flashinfer-mla", "--enable-flashmla"},
    "0.5.4.post3": set(),
    "0.5.9": {"--hybrid-kvcache-ratio", "--prefill-round-robin-balance"},
    "0.5.23": {"--grpc-mode", "--disable-fast-image-processor", "--disable-cuda-graph",
               "--enable-dp-attention", "--monokernel-backend",
               "--enable-flashinfer-allreduce-fusion"},
}


@pytest.mark.parametrize("name,release", [(t[0], t[1]) for t in TEXTS])
def test_deprecated_flags(name, release):
    flags = parsed(name)["flags"]
    got = {key for key, entry in flags.items() if entry["deprecated"]}
    assert got == DEPRECATED[release]
    # every Deprecated* action class of the release is detected from prose alone
    for action in _visible(release):
        if action["action"].startswith("Deprecated"):
            assert flags[action["option_strings"][0]]["deprecated"], action["option_strings"]


def test_enable_dp_attention_deprecated_only_in_0_5_23():
    assert parsed("sglang-0.5.23.txt")["flags"]["--enable-dp-attention"]["deprecated"] is True
    assert parsed("sglang-0.5.9.txt")["flags"]["--enable-dp-attention"]["deprecated"] is False
    # mentions of *other* deprecated things do not count
    new = parsed("sglang-0.5.23.txt")["flags"]
    assert new["--smg-grpc-mode"]["deprecated"] is False  # "Replaces the deprecated --grpc-mode"
    assert new["--fp8-gemm-backend"]["deprecated"] is False
    assert parsed("sglang-0.5.9.txt")["flags"]["--fp8-gemm-backend"]["deprecated"] is False


@pytest.mark.parametrize("text,names,expected", [
    ("Deprecated. Use --x instead.", (), True),
    ("(Deprecated, use --y) Legacy thing.", (), True),
    ("(Deprecated: use --z=auto) Enable it.", (), True),
    ("--old is deprecated. Please use '--new' instead.", ("--old",), True),
    ("Note: --old is deprecated now.", ("--old",), True),
    ("This flag is deprecated and will be removed.", (), True),
    ("Replaces the deprecated --grpc-mode.", ("--smg-grpc-mode",), False),
    ("NOTE: This replaces the deprecated environment variables X.", ("--a",), False),
    ("The fallback to that flag for external linkers is deprecated.", ("--b",), False),
])
def test_is_deprecated_help(text, names, expected):
    assert is_deprecated_help(text, names) is expected


# --- layout details ------------------------------------------------------------

def test_aliases_in_either_order_and_alias_resolution():
    old = parsed("sglang-0.5.9.txt")["flags"]
    new = parsed("sglang-0.5.23.txt")["flags"]
    assert old["--tensor-parallel-size"]["names"] == ["--tensor-parallel-size", "--tp-size"]
    assert new["--tp-size"]["names"] == ["--tp-size", "--tensor-parallel-size"]
    assert old["--expert-parallel-size"]["names"] == ["--expert-parallel-size", "--ep-size", "--ep"]
    assert new["--ep-size"]["names"] == ["--ep-size", "--expert-parallel-size", "--ep"]
    assert resolve(old, "--tp-size") == "--tensor-parallel-size"
    assert resolve(new, "--tensor-parallel-size") == "--tp-size"
    assert resolve(new, "--no-enable-tf32-matmul") == "--enable-tf32-matmul"
    assert resolve(old, "--nope") is None


def test_boolean_optional_and_nargs_choices():
    flags = parsed("sglang-0.5.23.txt")["flags"]
    tf32 = flags["--enable-tf32-matmul"]
    assert tf32["names"] == ["--enable-tf32-matmul", "--no-enable-tf32-matmul"]
    assert tf32["takes_value"] is False and tf32["choices"] is None
    lora = flags["--lora-target-modules"]
    assert lora["nargs"] == "*" and "all" in lora["choices"] and "q_proj" in lora["choices"]
    assert flags["--lora-paths"]["nargs"] == "*" and flags["--lora-paths"]["choices"] is None
    assert flags["--model-checksum"]["nargs"] == "?"
    assert flags["--numa-node"]["nargs"] == "+"
    assert flags["--monokernel-backend"]["choices"] == ["amd"]
    assert flags["--monokernel-backend"]["takes_value"] is True


@pytest.mark.parametrize("release,count", [("0.4.6.post5", 146), ("0.5.4.post3", 273),
                                           ("0.5.9", 332), ("0.5.23", 530)])
def test_option_counts_match_fixture_readme(release, count):
    assert len(parsed("sglang-%s.txt" % release)["flags"]) == count


# --- other Python versions (real argparse output of a rebuilt parser) ---------------

def _pythons():
    found = []
    for version in ("3.8", "3.9", "3.13"):
        candidates = sorted(glob.glob("/root/.pyenv/versions/%s*/bin/python" % version))
        for exe in ["python" + version] + candidates:
            try:
                out = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"],
                                     capture_output=True, text=True, timeout=30, check=False)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if out.returncode == 0:
                found.append((version, exe))
                break
    return found


PYTHONS = _pythons()


def _rebuilt_help(exe, release, columns, groups):
    env = dict(os.environ, COLUMNS=str(columns), PYTHONHASHSEED="0")
    path = os.path.join(FIXTURES, "argparse", "sglang-%s.actions.json" % release)
    out = subprocess.run([exe, REBUILD, path, "--groups", str(groups)], capture_output=True,
                         text=True, env=env, timeout=120, check=True)
    return out.stdout


def test_rebuilt_parser_reproduces_fixtures_byte_for_byte():
    """The rebuild helper used by these tests is faithful (set-ordered choices aside)."""
    for release in ("0.4.6.post5", "0.5.4.post3"):
        text = _rebuilt_help(sys.executable, release, 80, 0)
        assert text == _read("sglang-%s.txt" % release)


@pytest.mark.skipif(not PYTHONS, reason="no Python 3.8/3.9/3.13 interpreter available")
@pytest.mark.parametrize("release", ["0.4.6.post5", "0.5.23"])
@pytest.mark.parametrize("columns", [80, 200])
def test_other_python_versions_with_groups(release, columns):
    seen = []
    for version, exe in PYTHONS:
        text = _rebuilt_help(exe, release, columns, groups=6)
        if version in ("3.8", "3.9"):
            assert "\noptional arguments:\n" in text
        if version == "3.13" and release == "0.5.23":
            assert "  --tp-size, --tensor-parallel-size TP_SIZE\n" in text
        assert "\nGroup 3 options:\n" in text
        result = parse_help(text)
        assert result["prog"] == _actions(release)["prog"]
        assert _compare(result, release) == [], version
        seen.append(version)
    print("checked Python versions: %s" % seen)


# --- failures ------------------------------------------------------------------------

@pytest.mark.parametrize("text", [
    "",
    "Traceback (most recent call last):\n  File x\nImportError: no\n",
    "usage: foo\n\nsome prose only\n",
    "\x00\x01\x02 binary junk",
])
def test_garbled_text_raises_parse_error(text):
    with pytest.raises(HelpParseError):
        parse_help(text)


def test_non_string_raises_parse_error():
    with pytest.raises(HelpParseError):
        parse_help(None)


def test_crlf_and_ansi_colour_tolerated():
    text = _read("sglang-0.5.9.txt")
    coloured = text.replace("usage:", "\x1b[1;34musage:\x1b[0m", 1).replace("\n", "\r\n")
    coloured = coloured.replace("  --tp-size", "  \x1b[36m--tp-size\x1b[0m")
    assert parse_help(coloured) == parsed("sglang-0.5.9.txt")


def test_parse_time_per_release():
    """Best of 20 parses per fixture (printed; generous bound so slow CI passes)."""
    for name, _release, _prog in TEXTS:
        text = _read(name)
        best = None
        for _attempt in range(20):
            started = time.perf_counter()
            parse_help(text)
            took = time.perf_counter() - started
            best = took if best is None else min(best, took)
        print("parse %s: %.2f ms" % (name, best * 1000))
        assert best < 1.0
