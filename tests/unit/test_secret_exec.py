# -*- coding: utf-8 -*-
"""The launcher a unit with an API key starts through (roles/server/files/secret_exec.py):
the key reaches the program's argv but not the kernel's (/proc/<pid>/cmdline), and not its
output. Each check of a leak is shown to find the leak without the launcher."""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.gpufleet.sglang.tests.paths import ROOT
SCRIPT = os.path.join(ROOT, "roles", "server", "files", "secret_exec.py")
KEY = "sk-test-Qw9rT7ZpLx"

_spec = importlib.util.spec_from_file_location("secret_exec", SCRIPT)
secret_exec = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(secret_exec)

# A program that prints what it got, what the kernel shows of its command line, and a
# ServerArgs-like line with the key as SGLang 0.5.9 logs it; exits 3.
LEAKY = textwrap.dedent('''
    import os, sys
    with open("/proc/self/cmdline", "rb") as handle:
        cmdline = handle.read().replace(b"\\0", b" ").decode()
    print("ARGV " + " ".join(sys.argv[1:]), flush=True)
    print("CMDLINE " + cmdline, flush=True)
    print("ENV " + os.environ.get("THE_KEY", "<unset>"), flush=True)
    sys.stderr.write("server_args=ServerArgs(api_key=%r)\\n" % sys.argv[-1])
    sys.stderr.write("tail without newline " + sys.argv[-1])
    sys.exit(3)
''')


@pytest.fixture
def program(tmp_path):
    (tmp_path / "leaky.py").write_text(LEAKY)
    return tmp_path


def _run(cwd, argv, key=KEY):
    env = dict(os.environ, THE_KEY=key)
    return subprocess.run(argv, cwd=str(cwd), env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def test_the_key_reaches_the_program_but_not_the_process_list_nor_the_output(program):
    res = _run(program, [sys.executable, SCRIPT, "--api-key=THE_KEY", "--", "-m", "leaky",
                         "--model-path", "/m"])
    assert res.returncode == 3
    out = res.stdout + res.stderr
    # the program got the key as its last two arguments ...
    assert "ARGV --model-path /m --api-key <redacted>" in out
    # ... which the kernel never showed, and the variable is gone from its environment
    cmdline = [line for line in out.splitlines() if line.startswith("CMDLINE ")][0]
    assert "--api-key " not in cmdline and "THE_KEY --" in cmdline
    assert "ENV <unset>" in out
    assert "server_args=ServerArgs(api_key='<redacted>')" in out
    assert out.rstrip().endswith("tail without newline <redacted>")
    assert KEY not in out


def test_the_control_without_the_launcher_leaks_everywhere(program):
    """The same program given the key on its command line, as the unit did before: every
    check above finds it."""
    res = _run(program, [sys.executable, "-m", "leaky", "--model-path", "/m", "--api-key", KEY])
    out = res.stdout + res.stderr
    cmdline = [line for line in out.splitlines() if line.startswith("CMDLINE ")][0]
    assert KEY in cmdline
    assert "server_args=ServerArgs(api_key='%s')" % KEY in out


def test_an_empty_key_adds_nothing_and_a_script_path_runs(program):
    res = _run(program, [sys.executable, SCRIPT, "--api-key=THE_KEY", "--", "leaky.py", "x"], key="")
    assert res.returncode == 3
    assert "ARGV x\n" in res.stdout


@pytest.mark.parametrize("argv, msg", [
    (["-m", "x"], "usage: secret_exec.py --FLAG=ENVNAME"),
    (["--api-key", "--", "-m", "x"], "'--api-key' is not --FLAG=ENVNAME"),
    (["--api-key=lower-case", "--", "-m", "x"], "is not --FLAG=ENVNAME"),
    (["--api-key=K", "--"], "nothing to run after --"),
    (["--api-key=K", "--", "-m"], "nothing to run after --"),
])
def test_bad_usage_is_named(argv, msg):
    with pytest.raises(ValueError, match=msg.replace("(", r"\(")):
        secret_exec.parse(argv)


def test_a_key_split_across_reads_is_still_redacted():
    red = secret_exec.Redactor(["abcdef"])
    out = red.feed(b"line one abc") + red.feed(b"def and more\nnext ab")
    assert out == b"line one <redacted> and more\n"
    assert red.flush() == b"next ab"
    # no newline for long: all but the last len(key) - 1 bytes go out
    red = secret_exec.Redactor(["abcdef"])
    assert red.feed(b"x" * 20 + b"abc") == b"x" * 18
    assert red.feed(b"def") + red.flush() == b"xx<redacted>"


def test_the_longest_key_is_redacted_first():
    red = secret_exec.Redactor(["abc", "abcdef"])
    assert red.feed(b"abcdef abc\n") == b"<redacted> <redacted>\n"
