# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Filesystem probes for the prerequisite doctor: CUDA home, headers, venv packages.

Plain Python, no Ansible imports, nothing imported from the probed environment:
package versions come from ``*.dist-info/METADATA`` and ``torch/version.py`` read as
text, so a broken or heavy venv cannot hang or crash the probe.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import glob
import json
import os
import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._version import major_minor

#: Headers FlashInfer's JIT needs in ``$CUDA_HOME/include`` (docs/prereqs.md §5.2:
#: ``cuda_runtime.h`` plus the cuRAND headers that ``sampling.cuh`` includes).
REQUIRED_HEADERS = ("cuda_runtime.h", "curand.h", "curand_kernel.h", "curand_philox4x32_x.h")

#: Packages whose versions the rules read (PEP 503 normalised names).
PACKAGES = (
    "sglang",
    "sgl-kernel",
    "sglang-kernel",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "torch",
)

#: Default CUDA build of the plain PyPI torch wheel, by torch minor version
#: (docs/prereqs.md §4: 2.7.x cu126; 2.8.0, 2.9.1, 2.10.0 cu128; 2.11.0 cu130;
#: 2.14.1 cuda-toolkit 13.0). Only used when neither the local version part nor
#: ``torch/version.py`` says.
TORCH_PYPI_CUDA = (((2, 7), "12.6"), ((2, 8), "12.8"), ((2, 11), "13.0"))


def normalize_name(name):
    """PEP 503 name normalisation."""
    return re.sub(r"[-_.]+", "-", (name or "").strip()).lower()


def find_cuda_home(explicit=None, environ=None, which=None, exists=os.path.isdir):
    """The CUDA home FlashInfer's JIT would use, and where it came from.

    FlashInfer ``jit/cpp_ext.py::get_cuda_path()`` (0.6.x and 0.7.x, docs/prereqs.md §5.1):
    ``$CUDA_HOME``, else ``$CUDA_PATH``, else ``dirname(dirname(which nvcc))`` (no
    symlink resolution), else ``/usr/local/cuda``. ``explicit`` (the module's
    ``cuda_home`` option, i.e. the CUDA_HOME the server will run with) comes first.
    Returns ``(home, source)``; ``home`` is ``None`` when nothing is found.
    """
    environ = environ if environ is not None else os.environ
    if explicit:
        return explicit, "option cuda_home"
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(var):
            return environ[var], "$" + var
    nvcc = which("nvcc") if which else None
    if nvcc:
        return os.path.dirname(os.path.dirname(nvcc)), "nvcc on PATH (%s)" % nvcc
    if exists("/usr/local/cuda"):
        return "/usr/local/cuda", "default /usr/local/cuda"
    return None, "not found"


def scan_headers(home, names=REQUIRED_HEADERS):
    """Where each header is: ``{name: {'path', 'where'}}``, ``where`` in
    ``'include'`` (on FlashInfer's ``-isystem $CUDA_HOME/include``), ``'targets'``
    (only under ``targets/*/include``, which FlashInfer does not search) or ``None``.
    """
    result = {}
    for name in names:
        entry = {"path": None, "where": None}
        if home:
            direct = os.path.join(home, "include", name)
            if os.path.isfile(direct):
                entry = {"path": direct, "where": "include"}
            else:
                hits = sorted(glob.glob(os.path.join(home, "targets", "*", "include", name)))
                if hits:
                    entry = {"path": hits[0], "where": "targets"}
        result[name] = entry
    return result


def _metadata(path):
    name = version = None
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if not line.strip():
                    break  # end of the header block
                if line.startswith("Name:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
    except OSError:
        return None, None
    return name, version


def read_packages(site_dirs, wanted=PACKAGES):
    """Versions of ``wanted`` distributions found in ``site_dirs`` (first hit wins)."""
    wanted = set(normalize_name(w) for w in wanted)
    found = {}
    for site in site_dirs or ():
        for meta in sorted(glob.glob(os.path.join(site, "*.dist-info", "METADATA"))):
            name, version = _metadata(meta)
            key = normalize_name(name)
            if key in wanted and key not in found and version:
                found[key] = version
    return found


def torch_cuda(version, site_dirs=()):
    """CUDA build of torch: ``(cuda, source)``; cuda ``None`` for a CPU build/unknown."""
    if not version:
        return None, None
    local = version.partition("+")[2]
    match = re.match(r"^cu(\d+)(\d)$", local)
    if match:
        return "%s.%s" % (match.group(1), match.group(2)), "local version +%s" % local
    for site in site_dirs or ():
        path = os.path.join(site, "torch", "version.py")
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        found = re.search(r"^cuda\b[^=\n]*=\s*(?:'([^']*)'|\"([^\"]*)\"|None)", text, re.MULTILINE)
        if found:
            value = found.group(1) or found.group(2)
            return (value or None), "torch/version.py"
    if local.startswith("cpu") or local.startswith("rocm"):
        return None, "local version +%s" % local
    try:
        release = major_minor(version)
    except ValueError:
        return None, None
    guess = None
    for start, cuda in TORCH_PYPI_CUDA:
        if release >= start:
            guess = cuda
    if guess:
        return guess, "PyPI default for torch %s (docs/prereqs.md §4)" % version
    return None, None


def site_dirs_from_prefix(python):
    """Fallback when the interpreter cannot be run: ``<venv>/lib/python3.*/site-packages``."""
    prefix = os.path.dirname(os.path.dirname(python))
    return sorted(glob.glob(os.path.join(prefix, "lib", "python3*", "site-packages")))


# ------------------------------------------------------------------- compile test

#: The test kernel: one ``__global__`` function, compiled to an object, no GPU needed.
KERNEL_SOURCE = """\
// gpufleet.sglang prerequisite doctor: compile test
extern "C" __global__ void gpufleet_axpy(int n, float a, const float *x, float *y)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        y[i] = a * x[i] + y[i];
    }
}
"""


def arch_target(cc):
    """nvcc ``-arch`` value for a compute capability: ``'12.0'`` -> ``'sm_120a'``.

    Hopper and newer get the arch-specific ``a`` target (``sm_90a``, ``sm_100a``,
    ``sm_120a``; docs/prereqs.md §2: FlashInfer/SGLang build those), older GPUs plain ``sm_XY``.
    """
    major, minor = major_minor(cc)
    base = "sm_%d%d" % (major, minor)
    return base + "a" if major >= 9 else base


def compile_cache_path(cache_dir, nvcc, nvcc_version, arch):
    """Marker file that records a successful compile for (nvcc path, version, arch)."""
    key = json.dumps([os.path.realpath(nvcc), nvcc_version, arch, KERNEL_SOURCE])
    digest = _files.digest_bytes(key)[:24]
    return os.path.join(cache_dir, "compile-test", "%s-%s.json" % (arch, digest))
