# -*- coding: utf-8 -*-
"""The collection's one version helper, over version strings taken from tests/fixtures.

Driver versions come from the nvidia-smi captures, CUDA releases from the nvcc outputs,
SGLang / FlashInfer / torch / sgl-kernel versions from the ``check_env`` issue excerpts
and the pip freezes; they are read from the files, not copied here.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import os
import re

import pytest

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _version
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._version import (
    at_least,
    compare,
    extract,
    major_minor,
    parse,
)
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES as _FIXTURES

FIX = _FIXTURES


def _grep(pattern, *globs):
    """Every distinct first group of ``pattern`` in the fixture files matching ``globs``."""
    found = set()
    for pat in globs:
        for path in glob.glob(os.path.join(FIX, pat), recursive=True):
            if not os.path.isfile(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as handle:
                found.update(m.group(1) for m in re.finditer(pattern, handle.read()))
    return sorted(found)


DRIVERS = _grep(r"(?:Driver|KMD) Version: *([0-9][0-9.]*[0-9])", "nvidia-smi/**/*.txt")
NVCC_LINES = _grep(r"(Cuda compilation tools, release [^\n]*)", "nvcc/*.txt", "nvidia-smi/**/*.txt")
PACKAGES = _grep(r"(?m)^(?:sglang|flashinfer_python|flashinfer_cubin|flashinfer|sgl_kernel|PyTorch|torchao)"
                 r": *([0-9][^\s]*)", "nvidia-smi/issue-excerpts/*.txt")
FREEZE = _grep(r"(?m)^[A-Za-z0-9_.-]+==([^\s;]+)$", "sglang-help/freeze/*.txt")
SGLANG_RELEASES = _grep(r"sglang-([0-9][^-]*?)(?:-py3|-cp3|\.txt)", "sglang-help/freeze/*.txt",
                        "sglang-help/*.txt")
ALL = sorted(set(DRIVERS + PACKAGES + FREEZE + SGLANG_RELEASES))


def test_fixtures_were_found():
    # the parametrisations below must not silently run over nothing
    assert len(DRIVERS) >= 15 and "595.58.03" in DRIVERS and "610.43.02" in DRIVERS
    assert len(NVCC_LINES) >= 5
    assert "0.6.8.post1" in PACKAGES and "2.8.0+cu129" in PACKAGES and "0.5.0rc0" in PACKAGES
    assert {"0.4.6.post5", "0.5.4.post3", "0.5.9", "0.5.23"} <= set(SGLANG_RELEASES)
    assert len(FREEZE) > 50


@pytest.mark.parametrize("text", ALL)
def test_every_fixture_version_parses(text):
    key = parse(text)
    assert parse(text) == key and compare(text, text) == 0 and at_least(text, text)
    numbers = _version.release(text)
    assert numbers == tuple(int(n) for n in re.match(r"[0-9.]*[0-9]", text).group(0).split("."))
    assert major_minor(text) == (numbers + (0,))[:2]
    # the local part never matters
    assert parse(text.partition("+")[0] + "+local.7") == key


@pytest.mark.parametrize("driver", DRIVERS)
def test_driver_versions(driver):
    assert extract("Driver Version: %s     CUDA Version: 13.0" % driver) == driver
    major, minor = major_minor(driver)
    assert major == int(driver.split(".")[0]) and minor == int(driver.split(".")[1])
    # R580 is the first branch for CUDA 13 (docs/prereqs.md §3)
    numbers = tuple(int(part) for part in driver.split("."))
    assert at_least(driver, "580.65.06") is (numbers >= (580, 65, 6))


def test_driver_versions_sort_numerically():
    assert sorted(DRIVERS, key=parse) == sorted(DRIVERS, key=lambda d: tuple(int(p) for p in d.split(".")))
    assert parse("595.58.03") == parse("595.58.3") and compare("595.80", "595.58.03") == 1
    assert compare("570.124.06", "570.26") == 1  # numeric, not text order


@pytest.mark.parametrize("line", NVCC_LINES)
def test_nvcc_release_and_version(line):
    release, version = re.search(r"release (\S+), V(\S+)", line).groups()
    assert extract(line) == release
    assert major_minor(version) == major_minor(release)
    assert compare(version, release) == 1  # 12.8.93 is newer than 12.8
    assert at_least(version, release) and not at_least(release, version)


def test_sglang_releases_in_order():
    assert sorted(SGLANG_RELEASES, key=parse)[:4] == ["0.4.6.post5", "0.5.4.post3", "0.5.9", "0.5.23"]
    assert parse("v0.5.23") == parse("0.5.23")
    assert compare("0.5.4.post3", "0.5.4") == 1 and compare("0.5.4.post3", "0.5.5") == -1


@pytest.mark.parametrize("older, newer", [
    ("0.5.9", "0.5.23"),
    ("0.4.6.post5", "0.5.4.post3"),
    ("0.5.4", "0.5.4.post3"),
    ("0.6.7", "0.6.7.post2"),
    ("0.6.7.post2", "0.6.18"),
    ("0.7.0rc1", "0.7.0"),
    ("0.7.0", "0.7.0.post1"),
    ("1.13.0rc1", "1.13.0"),
    ("1.13.0a1", "1.13.0b1"),
    ("1.13.0b1", "1.13.0rc1"),
    ("1.13.0.dev1", "1.13.0a1"),
    ("1.13.0a1.dev3", "1.13.0a1"),
    ("1.13.0.post1.dev2", "1.13.0.post1"),
    ("0.5.12.dev136+g9dfb1d2eb", "0.5.12"),
    ("0.5.11", "0.5.12.dev136+g9dfb1d2eb"),
    ("0.5.0rc0", "0.5.0"),
    ("2.13.0a0+git1449fa4", "2.13.0"),
    ("12.9", "13.0.88"),
    ("12.8", "12.8.93"),
    ("9.0", "12.0"),
    ("10.3", "12.0"),
])
def test_order(older, newer):
    assert parse(older) < parse(newer)
    assert compare(older, newer) == -1 and compare(newer, older) == 1
    assert at_least(newer, older) and not at_least(older, newer)


@pytest.mark.parametrize("a, b", [
    ("2.9.1+cu128", "2.9.1"),
    ("2.9.1+cu128", "2.9.1+cu130"),
    ("v0.5.23", "0.5.23"),
    ("12.0", "12"),
    ("12.8.0", "12.8"),
    ("0.6.7.post2", "0.6.7-post2"),
    ("1.13.0rc1", "1.13.0-rc.1"),
    (" 0.5.9 ", "0.5.9"),
])
def test_equal(a, b):
    assert parse(a) == parse(b) and compare(a, b) == 0 and at_least(a, b) and at_least(b, a)


@pytest.mark.parametrize("text, mm", [
    ("12.0", (12, 0)), ("12.1", (12, 1)), ("9.0", (9, 0)), ("13.0.88", (13, 0)),
    ("595.58.03", (595, 58)), ("2.9.1+cu128", (2, 9)), ("v0.5.23", (0, 5)), ("13", (13, 0)),
    ("1.13.0rc1", (1, 13)),
])
def test_major_minor(text, mm):
    assert major_minor(text) == mm


@pytest.mark.parametrize("text", ["latest", "nightly", "", "   ", "v", "main", "x1.2", "cu128", None,
                                  True, ["0.5.9"]])
def test_no_version_raises(text):
    with pytest.raises(ValueError):
        parse(text)
    with pytest.raises(ValueError):
        compare(text, "0.5.9")
    with pytest.raises(ValueError):
        major_minor(text)


@pytest.mark.parametrize("text, found", [
    ("Cuda compilation tools, release 12.8, V12.8.93", "12.8"),
    ("| NVIDIA-SMI 590.48.01              Driver Version: 590.48.01      CUDA Version: 13.1     |",
     "590.48.01"),
    ("sglang @ file://<wheels>/sglang-0.5.4.post3-py3-none-any.whl#sha256=054f", "0.5.4.post3"),
    ("flashinfer: 0.0.9+cu121torch2.3", "0.0.9+cu121torch2.3"),
    ("PyTorch: 2.13.0a0+git1449fa4", "2.13.0a0+git1449fa4"),
    ("sglang: 0.5.12.dev136+g9dfb1d2eb", "0.5.12.dev136+g9dfb1d2eb"),
    ("released v0.5.23.", "0.5.23"),
    ("GPU 0,1,2,3 Compute Capability: 10.0", "10.0"),
    ("GPU 0: NVIDIA H200", None),
    ("no version here", None),
    ("", None),
    (None, None),
])
def test_extract(text, found):
    assert extract(text) == found


def test_extract_then_parse_every_nvcc_fixture():
    for path in glob.glob(os.path.join(FIX, "nvcc", "nvcc-*.txt")):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        name_version = re.search(r"nvcc-([0-9.]+)\.txt$", path).group(1)
        release = extract(text[text.index("release"):])
        assert major_minor(release) == major_minor(name_version), path
