"""Build the SGLang emulator (a TEST DOUBLE) as a pure-Python wheel, by hand.

    python3 tests/emulator/build_wheel.py --release 0.5.9 --out dist/

Distribution ``sglang``, version = the emulated release. The wheel holds:

- the package from ``tests/emulator/src/sglang``;
- that release's captured help text(s) and argparse dump from
  ``tests/fixtures/sglang-help``, as package data (``sglang/_emulator/data/``);
- the CLI data of that release's ``bench_serving`` (``tests/emulator/bench/``, captured
  from the real wheel by ``bench_capture.py``) as ``sglang/_emulator/data/bench/``, for the
  client double ``python -m sglang.bench_serving`` / ``sglang.benchmark.serving``; the
  ``sglang/benchmark/`` package only in the wheels of releases that have it (0.5.23 on);
- the collection's capacity model, vendored as ``sglang/_emulator/_vendor/``:
  ``plugins/module_utils/prepare/_capacity.py`` and every module_utils file it imports,
  transitively. ``sglang/_emulator/_vendor/__init__.py`` finds those files
  (``closure``) and rewrites their collection imports (``rewrite_source``), so hosts
  without the collection can size memory with the planner's own code.

The wheel is byte-for-byte reproducible: fixed timestamps and permissions, sorted
entries. Stdlib only. Prints the wheel's path.
"""

import argparse
import base64
import hashlib
import importlib.util
import os
import sys
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "src")
FIXTURES = os.path.normpath(os.path.join(HERE, "..", "fixtures", "sglang-help"))
BENCH = os.path.join(HERE, "bench")
MODULE_UTILS = os.path.normpath(os.path.join(HERE, "..", "..", "plugins", "module_utils"))
VENDOR_INIT = os.path.join(SRC, "sglang", "_emulator", "_vendor", "__init__.py")
RELEASES = ("0.4.6.post5", "0.5.4.post3", "0.5.9", "0.5.23")
DATE = (1980, 1, 1, 0, 0, 0)
SUMMARY = ("TEST DOUBLE: SGLang emulator for the gpufleet.sglang tests -- NOT the real "
           "sglang; no model, no GPU, fake tokens")


def _bench_spec(release):
    with open(os.path.join(BENCH, "bench_serving-%s.json" % release), "rb") as fh:
        return fh.read()


def _package_files(release):
    """The package's modules; ``sglang/benchmark/`` only where the release's serving
    benchmark lives there (its captured ``module``)."""
    import json  # pylint: disable=import-outside-toplevel

    benchmark_pkg = json.loads(_bench_spec(release))["module"].startswith("sglang.benchmark.")
    files = {}
    root = os.path.join(SRC, "sglang")
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and d != "data")
        for name in filenames:
            if not name.endswith(".py"):
                continue
            full = os.path.join(dirpath, name)
            arc = os.path.relpath(full, SRC).replace(os.sep, "/")
            if arc.startswith("sglang/benchmark/") and not benchmark_pkg:
                continue
            with open(full, "rb") as fh:
                files[arc] = fh.read()
    return files


def _data_files(release):
    data = "sglang/_emulator/data/"
    files = {data + "RELEASE": (release + "\n").encode("ascii")}
    names = ["sglang-%s.txt" % release, "sglang-%s-cols200.txt" % release]
    for name in names:
        path = os.path.join(FIXTURES, name)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                files[data + name] = fh.read()
    actions = os.path.join(FIXTURES, "argparse", "sglang-%s.actions.json" % release)
    with open(actions, "rb") as fh:
        files[data + "argparse/sglang-%s.actions.json" % release] = fh.read()
    files[data + "bench/bench_serving-%s.json" % release] = _bench_spec(release)
    return files


def _vendor_files():
    """The capacity model of the collection, rewritten to import from the wheel.

    The rewrite lives in ``_vendor/__init__.py``. It is loaded here from its file, not
    imported, because importing ``sglang`` would run the emulator's package init.
    """
    spec = importlib.util.spec_from_file_location("_sglang_emulator_vendor", VENDOR_INIT)
    vendor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor)
    files = {}
    for name in vendor.closure(_read_module_util):
        text = vendor.rewrite_source(name, _read_module_util(name))
        files["sglang/_emulator/_vendor/%s.py" % name] = text.encode("utf-8")
    return files


def _read_module_util(name):
    spec = importlib.util.spec_from_file_location("_sglang_emulator_vendor", VENDOR_INIT)
    vendor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor)
    path = vendor.find(MODULE_UTILS, name)
    if path is None:
        raise SystemExit("no module_utils file %s.py under %s" % (name, MODULE_UTILS))
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _record_hash(data):
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def build(release, out_dir):
    if release not in RELEASES:
        raise SystemExit("unknown release %r (known: %s)" % (release, ", ".join(RELEASES)))
    dist_info = "sglang-%s.dist-info" % release
    files = _package_files(release)
    files.update(_data_files(release))
    files.update(_vendor_files())
    files[dist_info + "/METADATA"] = (
        "Metadata-Version: 2.1\n"
        "Name: sglang\n"
        "Version: %s\n"
        "Summary: %s\n"
        "License: Apache-2.0\n"
        "Requires-Python: >=3.8\n"
        "Description-Content-Type: text/plain\n"
        "\n"
        "TEST DOUBLE. This wheel is the SGLang emulator of the gpufleet.sglang Ansible\n"
        "collection. It emulates the CLI, help text, lifecycle and HTTP routes of sglang\n"
        "%s for tests and demos. It is NOT sglang. Never deploy it to serve a model.\n"
        % (release, SUMMARY, release)).encode("utf-8")
    files[dist_info + "/WHEEL"] = (
        "Wheel-Version: 1.0\n"
        "Generator: gpufleet.sglang tests/emulator/build_wheel.py\n"
        "Root-Is-Purelib: true\n"
        "Tag: py3-none-any\n").encode("ascii")
    files[dist_info + "/top_level.txt"] = b"sglang\n"
    record = dist_info + "/RECORD"
    lines = ["%s,%s,%d" % (name, _record_hash(data), len(data))
             for name, data in sorted(files.items())]
    lines.append("%s,," % record)
    files[record] = ("\n".join(lines) + "\n").encode("utf-8")

    os.makedirs(out_dir, exist_ok=True)
    wheel = os.path.join(out_dir, "sglang-%s-py3-none-any.whl" % release)
    tmp = "%s.%d.tmp" % (wheel, os.getpid())  # two fleets may build at once
    order = sorted(n for n in files if n != record) + [record]
    with zipfile.ZipFile(tmp, "w") as zf:
        for name in order:
            info = zipfile.ZipInfo(name, date_time=DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            info.external_attr = (0o100644 << 16)
            zf.writestr(info, files[name], compresslevel=9)
    os.replace(tmp, wheel)
    return wheel


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", required=True, choices=RELEASES + ("all",),
                    help="the release to emulate, or all of them (one wheel each)")
    ap.add_argument("--out", required=True, help="output directory")
    opts = ap.parse_args(argv)
    for release in RELEASES if opts.release == "all" else (opts.release,):
        print(os.path.abspath(build(release, opts.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
