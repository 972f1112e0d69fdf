"""Which release is emulated, and where its help texts and argparse dumps live.

Installed from a wheel built by ``tests/emulator/build_wheel.py``, the data sits next to
this file in ``data/`` (``RELEASE``, ``sglang-<R>.txt``, ``argparse/...``). Run from the
source tree (``PYTHONPATH=tests/emulator/src``) there is no ``data/``: the release then
comes from env ``SGLANG_EMULATOR_RELEASE`` (default 0.5.23) and the data from
``tests/fixtures/sglang-help``. The bench_serving double's CLI data
(``bench/bench_serving-<R>.json``, captured by ``tests/emulator/bench_capture.py``) sits in
``data/bench/`` of a wheel and in ``tests/emulator/bench/`` of the source tree.
"""

import json
import os

RELEASES = ("0.4.6.post5", "0.5.4.post3", "0.5.9", "0.5.23")
DEFAULT_SOURCE_RELEASE = "0.5.23"

_HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DATA = os.path.join(_HERE, "data")
SOURCE_FIXTURES = os.path.normpath(
    os.path.join(_HERE, "..", "..", "..", "..", "fixtures", "sglang-help")
)

SOURCE_BENCH = os.path.normpath(os.path.join(_HERE, "..", "..", "..", "bench"))


def installed_mode():
    return os.path.isfile(os.path.join(PACKAGE_DATA, "RELEASE"))


def data_dir():
    return PACKAGE_DATA if installed_mode() else SOURCE_FIXTURES


def current_release():
    if installed_mode():
        with open(os.path.join(PACKAGE_DATA, "RELEASE"), encoding="ascii") as fh:
            return fh.read().strip()
    rel = os.environ.get("SGLANG_EMULATOR_RELEASE", DEFAULT_SOURCE_RELEASE).strip()
    if rel not in RELEASES:
        raise RuntimeError(
            "SGLANG_EMULATOR_RELEASE=%r is not one of %s" % (rel, ", ".join(RELEASES))
        )
    return rel


def help_path(release, columns=None):
    """The captured help text: the 200-column one when COLUMNS >= 200 and it exists."""
    base = data_dir()
    if columns is not None and columns >= 200:
        wide = os.path.join(base, "sglang-%s-cols200.txt" % release)
        if os.path.isfile(wide):
            return wide
    return os.path.join(base, "sglang-%s.txt" % release)


def actions_path(release):
    return os.path.join(data_dir(), "argparse", "sglang-%s.actions.json" % release)


def bench_spec_path(release):
    """The CLI data of the release's bench_serving (its options and result keys)."""
    base = os.path.join(PACKAGE_DATA, "bench") if installed_mode() else SOURCE_BENCH
    return os.path.join(base, "bench_serving-%s.json" % release)


def load_actions(release):
    with open(actions_path(release), encoding="utf-8") as fh:
        return json.load(fh)


def version_tuple(release):
    parts = []
    for p in release.split("."):
        if p.startswith("post"):
            break
        parts.append(int(p))
    return tuple(parts)
