# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Prerequisite verdicts for an SGLang host (plain Python, no Ansible imports).

:func:`evaluate` turns probed facts into ``checks`` -- ``{name, ok, severity, detail,
remedy}`` with severity ``'error'``, ``'warning'`` or ``'info'`` -- and an overall
``ok``: no failed error-severity check that is not waived. Waived failed checks stay
in the list with ``waived: True``.

Facts (as the ``gpu_prereqs`` module gathers them; every key optional)::

    smi:       {status: ok|missing|driver|no-devices|garbled|failed, path, detail, source}
    gpus:      [{index, name, memory_mib, compute_capability, cc_source, driver, pci_bus}]
    driver:    {version, cuda}
    topology:  {kind: nvlink|pcie|mixed|single|unknown, links, detail}
    processes: [{pid, name, used_mib, gpu_bus, gpu_index}] or None (unknown)
    cuda:      {home, home_source, nvcc, found, release, version, arches, headers, root, detail}
    packages:  {python, site_packages, versions: {name: version}, torch_cuda, torch_cuda_source}
    compile:   {status: ok|failed|skipped, results: [{arch, ok, cached, rc, stderr, cmd}], detail}
    transport: {ib_devices, peermem, topology, python,
                engines: {family: {module, imports, error, packages: {name: version}}} or None}
               (only when asked for: a PD layout's hosts)

Every fact-to-rule mapping cites the collection's ``docs/prereqs.md`` ("docs/prereqs.md §n"),
which remedies point users to.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.common._version import (
    at_least,
    major_minor,
    parse,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._venv import (
    TRANSFER_ENGINES,
    cuda_build,
    engine_distributions,
)

try:  # the strategy grammar lives in its own module util
    from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import (
        StrategyError,
        gpus_needed,
        parse_strategy,
    )
except ImportError:  # pragma: no cover - only when the collection is incomplete
    parse_strategy = gpus_needed = None
    StrategyError = ValueError

ERROR, WARNING, INFO = "error", "warning", "info"

#: Minimum Linux x86_64 driver per CUDA toolkit (GA releases), from NVIDIA's "CUDA Toolkit
#: and Corresponding Driver Versions" table (docs.nvidia.com/cuda/cuda-toolkit-release-notes;
#: docs/prereqs.md §3). A newer toolkit than the table knows needs at least the newest entry.
DRIVER_MIN = (
    ((12, 0), "525.60.13"),
    ((12, 1), "530.30.02"),
    ((12, 2), "535.54.03"),
    ((12, 3), "545.23.06"),
    ((12, 4), "550.54.14"),
    ((12, 5), "555.42.02"),
    ((12, 6), "560.28.03"),
    ((12, 8), "570.26"),
    ((12, 9), "575.51.03"),
    ((13, 0), "580.65.06"),
)

#: The check names :func:`evaluate` can produce (the valid ``waive`` values).
CHECK_NAMES = (
    "nvidia_smi", "gpus", "gpu_arch_known", "topology", "strategy", "python_env",
    "cuda_toolkit", "toolkit_arch", "driver_toolkit", "driver_torch", "cuda_headers",
    "compile_test", "torch_cuda", "flashinfer_nvcc", "flashinfer_packages",
    "sgl_kernel_arch", "attention_backend", "deepep_topology", "foreign_processes",
    "transfer_engine", "waivers",
)

#: Processes that belong to SGLang itself (prereqs fixtures: ``sglang::scheduler_DP0_TP0_EP0``).
OWN_PROCESS = re.compile(r"sglang", re.IGNORECASE)

SMI_REMEDY = {
    "missing": "install the NVIDIA driver utilities (nvidia-smi), or set prereqs_nvidia_smi "
               "to its path",
    "driver": "load the NVIDIA kernel driver (check 'lsmod | grep nvidia', dmesg, a driver/"
              "kernel mismatch after an upgrade); reboot after installing the driver",
    "no-devices": "no GPU is visible: check the driver, PCI passthrough or container device "
                  "mapping",
    "garbled": "nvidia-smi printed output the doctor cannot read; run it by hand and check "
               "the driver installation",
    "failed": "run nvidia-smi by hand and fix the error it prints",
}


# ------------------------------------------------------------------------- helpers


def public_version(text):
    return (text or "").partition("+")[0].strip()


def driver_minimum(release):
    """Minimum driver for a CUDA ``'X.Y'`` release, or ``None`` when older than the table."""
    try:
        wanted = major_minor(release)
    except ValueError:
        return None
    best = None
    for rel, driver in DRIVER_MIN:
        if wanted >= rel:
            best = driver
    return best


def _dash(release):
    return "%d-%d" % major_minor(release)


def _check(name, ok, severity, detail, remedy=""):
    return {"name": name, "ok": bool(ok), "severity": severity, "detail": detail, "remedy": remedy}


def _skip(name, why):
    return _check(name, True, INFO, "skipped: " + why)


def _ccs(gpus):
    return sorted(set(g["compute_capability"] for g in gpus if g.get("compute_capability")),
                  key=parse)


def _major(cc):
    return major_minor(cc)[0]


def normalize_args(extra_args):
    """``{'--attention_backend': 'fa3'}`` -> ``{'attention-backend': 'fa3'}``."""
    out = {}
    for key, value in (extra_args or {}).items():
        name = str(key).strip().lstrip("-").replace("_", "-").lower()
        out[name] = value
    return out


# --------------------------------------------------------------------------- rules


def _rule_smi(facts):
    smi = facts.get("smi") or {}
    status = smi.get("status", "missing")
    gpus = facts.get("gpus") or []
    checks = []
    if status == "ok":
        checks.append(_check("nvidia_smi", True, INFO, "%s answered (%s)" % (
            smi.get("path") or "nvidia-smi", smi.get("source", "?"))))
    else:
        checks.append(_check("nvidia_smi", False, ERROR, smi.get("detail") or status,
                             SMI_REMEDY.get(status, SMI_REMEDY["failed"])))
    if status == "ok":
        if gpus:
            names = sorted(set(g["name"] for g in gpus))
            checks.append(_check("gpus", True, INFO, "%d GPU(s): %s; driver %s" % (
                len(gpus), ", ".join(names), (facts.get("driver") or {}).get("version") or "?")))
        else:
            checks.append(_check("gpus", False, ERROR, "nvidia-smi listed no GPU",
                                 SMI_REMEDY["no-devices"]))
        unknown = [g for g in gpus if not g.get("compute_capability")]
        if unknown:
            checks.append(_check(
                "gpu_arch_known", False, ERROR,
                "compute capability unknown for %s (nvidia-smi gave none and the name is not "
                "in the doctor's table)" % ", ".join(sorted(set(g["name"] for g in unknown))),
                "use a driver whose nvidia-smi supports --query-gpu=compute_cap"))
        elif gpus:
            parts = ["GPU%s %s (%s)" % (g["index"], g["compute_capability"], g.get("cc_source"))
                     for g in gpus]
            checks.append(_check("gpu_arch_known", True, INFO,
                                 "compute capability " + _summ(parts)))
    else:
        checks.append(_skip("gpus", "nvidia-smi unusable"))
    return checks


def _summ(parts, limit=4):
    if len(parts) <= limit:
        return ", ".join(parts)
    same = set(p.split(" ", 1)[1] for p in parts)
    if len(same) == 1:
        return "%s x%d" % (same.pop(), len(parts))
    return ", ".join(parts[:limit]) + ", ..."


def _rule_topology(facts):
    topo = facts.get("topology") or {}
    kind = topo.get("kind", "unknown")
    if kind == "unknown":
        return [_check("topology", True, WARNING, "GPU interconnect unknown: %s" % (
            topo.get("detail") or "topo -m not available"))]
    counts = {}
    for cell in (topo.get("links") or {}).values():
        label = "NV#" if cell.startswith("NV") else cell
        counts[label] = counts.get(label, 0) + 1
    detail = "%s (%s)" % (kind, ", ".join("%s x%d" % kv for kv in sorted(counts.items())) or
                          "one GPU")
    return [_check("topology", True, INFO, detail)]


def _layout(strategy):
    if strategy in (None, "", {}):
        return None, None
    if parse_strategy is None:
        return None, "strategy parser unavailable"
    try:
        return parse_strategy(strategy), None
    except StrategyError as exc:
        return None, str(exc)


def _rule_strategy(facts, strategy):
    if strategy in (None, "", {}):
        return []
    layout, error = _layout(strategy)
    if error:
        return [_check("strategy", False, ERROR, error, "fix the strategy (see the error)")]
    gpus = facts.get("gpus") or []
    need = gpus_needed(layout)
    detail = "tp%(tp)d pp%(pp)d ep%(ep)d dp%(dp)d" % layout
    if gpus and need < len(gpus):
        return [_check("strategy", True, WARNING, "%s uses %d of the %d GPUs on this host" % (
            detail, need, len(gpus)))]
    if gpus and need % len(gpus):
        return [_check("strategy", False, ERROR,
                       "%s needs %d GPUs, not a multiple of this host's %d" % (detail, need, len(gpus)),
                       "choose a strategy whose tp*pp is a multiple of the GPUs per host")]
    return [_check("strategy", True, INFO, "%s on %d GPU(s) per host" % (detail, len(gpus)))]


def _rule_toolkit(facts):
    cuda = facts.get("cuda") or {}
    gpus = facts.get("gpus") or []
    checks = []
    if not cuda.get("found"):
        checks.append(_check(
            "cuda_toolkit", False, ERROR,
            "no nvcc: %s" % (cuda.get("detail") or "CUDA home %s" % cuda.get("home")),
            "install the CUDA toolkit (nvcc) matching torch's CUDA build and set CUDA_HOME "
            "(prereqs_cuda_home); FlashInfer's JIT compiles kernels with it (docs/prereqs.md §5.1)"))
        return checks
    checks.append(_check("cuda_toolkit", True, INFO, "nvcc %s at %s (CUDA home %s from %s)" % (
        cuda.get("version"), cuda.get("nvcc"), cuda.get("home"), cuda.get("home_source"))))
    arches = cuda.get("arches") or []
    ccs = _ccs(gpus)
    if not ccs:
        checks.append(_skip("toolkit_arch", "no GPU compute capability known"))
    else:
        missing = ["compute_%s" % cc.replace(".", "") for cc in ccs
                   if "compute_%s" % cc.replace(".", "") not in arches]
        if missing:
            checks.append(_check(
                "toolkit_arch", False, ERROR,
                "nvcc %s cannot target %s (--list-gpu-arch lacks %s)" % (
                    cuda.get("release"), ", ".join(ccs), ", ".join(missing)),
                "install a CUDA toolkit that lists them: SM100/SM120 need CUDA >= 12.8, "
                "SM103/SM121 >= 12.9 (docs/prereqs.md §2)"))
        else:
            checks.append(_check("toolkit_arch", True, INFO, "nvcc --list-gpu-arch has %s" % ", ".join(
                "compute_%s" % cc.replace(".", "") for cc in ccs)))
    return checks


def _rule_driver(facts):
    driver = (facts.get("driver") or {}).get("version")
    cuda = facts.get("cuda") or {}
    pkgs = facts.get("packages") or {}
    checks = []
    pairs = (
        ("driver_toolkit", cuda.get("release"), "the CUDA %s toolkit (nvcc)"),
        ("driver_torch", pkgs.get("torch_cuda"), "torch's CUDA %s build"),
    )
    for name, release, what in pairs:
        if not release:
            checks.append(_skip(name, "no %s" % ("nvcc" if name == "driver_toolkit" else
                                                 "torch CUDA build known")))
            continue
        if not driver:
            checks.append(_skip(name, "driver version unknown"))
            continue
        need = driver_minimum(release)
        if need is None:
            checks.append(_check(name, True, WARNING, "no driver minimum known for CUDA %s" % release))
            continue
        label = what % release
        if at_least(driver, need):
            checks.append(_check(name, True, INFO, "driver %s >= %s for %s" % (driver, need, label)))
        else:
            checks.append(_check(
                name, False, ERROR, "driver %s is older than %s, the minimum for %s" % (driver, need, label),
                "upgrade the NVIDIA driver to >= %s (R580+ for CUDA 13.x, docs/prereqs.md §3), or use a "
                "toolkit/torch build for an older CUDA" % need))
    return checks


def _header_package(header, release):
    dash = _dash(release) if release else "X-Y"
    if header == "cuda_runtime.h":
        return "cuda-cudart-dev-%s (deb) / cuda-cudart-devel-%s (rpm)" % (dash, dash)
    # docs/prereqs.md §5.2: Ubuntu's NVIDIA repo ships cuRAND headers in libcurand-dev-X-Y
    # (cuda-curand-dev-X-Y does not exist); on RHEL cuda-libraries-devel-X-Y fixed it.
    return "libcurand-dev-%s (deb) / libcurand-devel-%s or cuda-libraries-devel-%s (rpm)" % (
        dash, dash, dash)


def _rule_headers(facts):
    cuda = facts.get("cuda") or {}
    headers = cuda.get("headers") or {}
    if not cuda.get("home"):
        return [_skip("cuda_headers", "no CUDA home")]
    missing = sorted(h for h, e in headers.items() if not e.get("where"))
    elsewhere = sorted(h for h, e in headers.items() if e.get("where") == "targets")
    if not missing and not elsewhere:
        return [_check("cuda_headers", True, INFO, "%s in %s/include" % (
            ", ".join(sorted(headers)), cuda["home"]))]
    parts, remedies = [], []
    if missing:
        parts.append("missing from %s/include: %s" % (cuda["home"], ", ".join(missing)))
        pkgs = []
        for header in missing:
            pkg = _header_package(header, cuda.get("release"))
            if pkg not in pkgs:
                pkgs.append(pkg)
        remedies.append("install " + " and ".join(pkgs))
    if elsewhere:
        parts.append("only under targets/*/include (not on FlashInfer's -isystem path): %s" %
                     ", ".join(elsewhere))
        remedies.append("link %s/include to the targets include directory" % cuda["home"])
    root = cuda.get("root")
    if root and root.rstrip("/") != (cuda.get("home") or "").rstrip("/"):
        parts.append("nvcc resolves to the toolkit at %s" % root)
        remedies.append("point CUDA_HOME (prereqs_cuda_home) at %s, the toolkit nvcc really uses" % root)
    return [_check("cuda_headers", False, ERROR,
                   "; ".join(parts) + " (FlashInfer's JIT includes them from $CUDA_HOME/include, "
                   "docs/prereqs.md §5.2)", "; ".join(remedies))]


def _rule_compile(facts):
    comp = facts.get("compile") or {}
    status = comp.get("status", "skipped")
    if status == "skipped":
        return [_skip("compile_test", comp.get("detail") or "not run")]
    results = comp.get("results") or []
    failed = [r for r in results if not r.get("ok")]
    if failed:
        first = failed[0]
        tail = (first.get("stderr") or "").strip().splitlines()[-1:] or [""]
        return [_check("compile_test", False, ERROR, "nvcc -arch=%s failed (rc=%s): %s" % (
            first["arch"], first.get("rc"), tail[0][:300]),
            "fix the toolkit so that nvcc can build for %s (see the nvcc error)" % first["arch"])]
    return [_check("compile_test", True, INFO, "compiled a test kernel for %s" % ", ".join(
        "%s%s" % (r["arch"], " (cached)" if r.get("cached") else "") for r in results))]


def _rule_packages(facts):
    """The venv's packages: the venv itself, torch's CUDA build, FlashInfer, SGLang's kernels."""
    pkgs = facts.get("packages")
    if not pkgs:
        return [_skip("python_env", "no python (venv interpreter) given")]
    if pkgs.get("error"):
        return [_check("python_env", False, ERROR, pkgs["error"],
                       "create the SGLang virtualenv first, or fix prereqs_python")]
    versions = pkgs.get("versions") or {}
    ccs = _ccs(facts.get("gpus") or [])
    return [
        _python_env_check(pkgs, versions),
        _torch_cuda_check(pkgs, versions, ccs),
        _flashinfer_nvcc_check(versions, ccs, (facts.get("cuda") or {}).get("release")),
        _flashinfer_packages_check(versions),
        _kernel_arch_check(versions, ccs),
    ]


def _python_env_check(pkgs, versions):
    return _check("python_env", True, INFO, "%s: %s" % (
        ", ".join(pkgs.get("site_packages") or []) or "?",
        ", ".join("%s %s" % kv for kv in sorted(versions.items())) or "no SGLang packages"))


def _torch_cuda_check(pkgs, versions, ccs):
    """SGLang's SM100/SM120 paths need torch.version.cuda >= 12.8, and cu126 wheels have no
    sm_120 kernels (docs/prereqs.md §4)."""
    tcuda = pkgs.get("torch_cuda")
    if "torch" not in versions:
        return _skip("torch_cuda", "torch not installed")
    if not tcuda:
        return _check("torch_cuda", False, ERROR, "torch %s has no CUDA build" % versions["torch"],
                      "install a CUDA build of torch")
    if [cc for cc in ccs if _major(cc) >= 10] and not at_least(tcuda, "12.8"):
        return _check("torch_cuda", False, ERROR,
                      "torch %s is built for CUDA %s; %s GPUs need CUDA >= 12.8 builds" % (
                          versions["torch"], tcuda, "/".join("SM" + c.replace(".", "") for c in ccs)),
                      "install torch from the cu128 (or newer) index (docs/prereqs.md §4)")
    return _check("torch_cuda", True, INFO, "torch %s, CUDA %s (%s)" % (
        versions["torch"], tcuda, pkgs.get("torch_cuda_source")))


def _flashinfer_gated(version):
    """flashinfer-python 0.6.7.post2 to 0.7.0 require nvcc >= 12.9 on SM12x (docs/prereqs.md §5.3)."""
    return at_least(version, "0.6.7.post2") and at_least("0.7.0", version)


def _flashinfer_nvcc_check(versions, ccs, nvcc_rel):
    """FlashInfer's SM12x CUDA-version gate (docs/prereqs.md §5.3)."""
    fi = versions.get("flashinfer-python")
    if not fi:
        return _skip("flashinfer_nvcc", "flashinfer-python not installed")
    if not [cc for cc in ccs if _major(cc) == 12]:
        return _skip("flashinfer_nvcc", "no SM12x GPU")
    if not nvcc_rel:
        return _check("flashinfer_nvcc", False, ERROR,
                      "flashinfer-python %s on SM12x needs nvcc for its JIT; none found" % fi,
                      "install a CUDA >= 12.9 toolkit and set CUDA_HOME (docs/prereqs.md §5.1)")
    if _flashinfer_gated(fi) and not at_least(nvcc_rel, "12.9"):
        return _check(
            "flashinfer_nvcc", False, ERROR,
            "flashinfer-python %s targets 120f on SM12x and requires nvcc >= 12.9, found %s "
            "(RuntimeError 'SM 12.x requires CUDA >= 12.9', seen as 'FlashInfer requires GPUs "
            "with sm75 or higher')" % (fi, nvcc_rel),
            "install CUDA >= 12.9 and point CUDA_HOME at it, or use flashinfer-python >= 0.7.1 "
            "(accepts 12.8; docs/prereqs.md §5.3)")
    if not at_least(nvcc_rel, "12.8"):
        return _check("flashinfer_nvcc", False, ERROR,
                      "flashinfer-python %s on SM12x needs nvcc >= 12.8, found %s" % (fi, nvcc_rel),
                      "install CUDA >= 12.9 and point CUDA_HOME at it (docs/prereqs.md §5.3)")
    return _check("flashinfer_nvcc", True, INFO,
                  "flashinfer-python %s with nvcc %s on SM12x" % (fi, nvcc_rel))


def _flashinfer_packages_check(versions):
    """flashinfer-cubin / flashinfer-jit-cache version lock (docs/prereqs.md §5.4)."""
    fi = versions.get("flashinfer-python")
    if not fi:
        return _skip("flashinfer_packages", "flashinfer-python not installed")
    bad = ["%s %s" % (name, versions[name]) for name in ("flashinfer-cubin", "flashinfer-jit-cache")
           if versions.get(name) and public_version(versions[name]) != public_version(fi)]
    if bad:
        return _check(
            "flashinfer_packages", False, ERROR,
            "%s != flashinfer-python %s: FlashInfer ignores mismatched packages and falls back "
            "to JIT / cubin downloads" % (", ".join(bad), fi),
            "install flashinfer-cubin==%s and flashinfer-jit-cache==%s(+cuXXX) or remove them "
            "(docs/prereqs.md §5.4)" % (public_version(fi), public_version(fi)))
    return _check("flashinfer_packages", True, INFO, "flashinfer-python %s%s" % (
        fi, "".join(", %s %s" % (n, versions[n]) for n in ("flashinfer-cubin", "flashinfer-jit-cache")
                    if versions.get(n))))


def _kernel_arch_check(versions, ccs):
    """Kernel wheel with SM120 cubins: sgl-kernel >= 0.3.9 or sglang-kernel 0.4.x (docs/prereqs.md §6)."""
    sgk = versions.get("sgl-kernel")
    sgk_new = versions.get("sglang-kernel")
    if not [cc for cc in ccs if _major(cc) == 12]:
        return _skip("sgl_kernel_arch", "no SM12x GPU")
    if sgk_new:
        return _check("sgl_kernel_arch", True, INFO, "sglang-kernel %s has SM120 kernels" % sgk_new)
    if sgk and not at_least(sgk, "0.3.9"):
        return _check(
            "sgl_kernel_arch", False, ERROR,
            "sgl-kernel %s has no SM120 kernels (first with them: 0.3.9, sglang 0.5.2)" % sgk,
            "upgrade SGLang to >= 0.5.2 (sgl-kernel >= 0.3.9) or sglang-kernel 0.4.x "
            "(docs/prereqs.md §6)")
    if sgk:
        return _check("sgl_kernel_arch", True, INFO, "sgl-kernel %s has SM120 kernels" % sgk)
    if versions.get("sglang"):
        return _check("sgl_kernel_arch", True, WARNING,
                      "sglang %s installed without sgl-kernel/sglang-kernel" % versions["sglang"])
    return _skip("sgl_kernel_arch", "no SGLang kernel package")


def _build_label(build):
    """``cuda12`` -> ``CUDA 12``, ``non-cuda`` -> ``non-CUDA``."""
    return "CUDA %s" % build[4:] if build.startswith("cuda") else "non-CUDA"


def _venv_of(python):
    """The venv of an interpreter ``<venv>/bin/python``, else the interpreter itself."""
    bindir = os.path.dirname(python or "")
    return os.path.dirname(bindir) if os.path.basename(bindir) == "bin" else (python or "?")


def _rule_transfer_engine(facts):
    """The KV transfer engine of a PD layout in the venv (asked for with the transport
    facts, judged when a venv interpreter was given): one engine of
    ``_venv.TRANSFER_ENGINES`` must import (``mooncake.engine``, ``nixl._api``), and no
    engine's installed build may differ from torch's CUDA major (a CUDA 13 build beside a
    cu12 torch, a CUDA build beside a CPU torch, the non-CUDA build beside a CUDA torch)."""
    transport = facts.get("transport")
    if transport is None:
        return []
    engines = transport.get("engines")
    if engines is None:
        return [_skip("transfer_engine", "no python (venv interpreter) given")]
    pkgs = facts.get("packages") or {}
    python = transport.get("python") or pkgs.get("python") or "?"
    venv = _venv_of(python)
    torch = (pkgs.get("versions") or {}).get("torch")
    tcuda = pkgs.get("torch_cuda")
    want = cuda_build(tcuda) if tcuda else ("non-cuda" if torch else None)
    torch_says = ("torch %s is built for CUDA %s" % (torch, tcuda) if tcuda else
                  "torch %s has no CUDA build" % torch if torch else "")
    known = engine_distributions()
    installed = []
    for family in sorted(engines):
        for dist, version in sorted((engines[family].get("packages") or {}).items()):
            build = known.get(dist, (family, None))[1]
            installed.append((family, dist, version, build))
    problems, remedies = [], []
    for family, dist, version, build in installed:
        if want is None or build is None or build == want:
            continue
        problems.append("%s %s in %s is the %s build of the %s transfer engine, and %s" % (
            dist, version, venv, _build_label(build), family, torch_says))
        wanted = TRANSFER_ENGINES[family]["builds"].get(want)
        if wanted:
            remedies.append("replace it with the %s build: %s -m pip uninstall -y %s, then %s -m pip "
                            "install %s" % (_build_label(want), python, dist, python, wanted))
        else:
            remedies.append("%s has no %s build (%s): uninstall %s and use another engine" % (
                family, _build_label(want), ", ".join(sorted(
                    TRANSFER_ENGINES[family]["builds"].values())), dist))
    working = [f for f in sorted(engines) if engines[f].get("imports")]
    if not working:
        tried = "; ".join("import %s: %s" % (engines[f].get("module"), engines[f].get("error") or "fails")
                          for f in sorted(engines))
        found = ", ".join("%s %s" % (dist, version) for _f, dist, version, _b in installed)
        problems.append("no KV transfer engine imports with %s (%s)%s; a PD layout's servers "
                        "need one" % (python, tried, "; installed: %s" % found if found else
                                      "; none of %s is installed" % ", ".join(sorted(known))))
        libs = [f for f in sorted(engines) if "cannot open shared object file" in
                (engines[f].get("error") or "") and engines[f].get("packages")]
        if libs:
            hosts = []
            for family in libs:
                hosts.extend(p for p in TRANSFER_ENGINES[family]["host_packages"] if p not in hosts)
            remedies.append("install the host libraries the engine links (the error names the "
                            "one missing): apt-get install %s" % " ".join(hosts))
        elif installed:
            remedies.append("reinstall the engine in %s (%s -m pip install --force-reinstall %s) and "
                            "read the import error" % (venv, python, installed[0][1]))
        else:
            wanted = TRANSFER_ENGINES["mooncake"]["builds"].get(want) if want else None
            remedies.append("install the engine into %s: %s -m pip install %s (the build of "
                            "torch's CUDA major)" % (
                                venv, python, wanted or " or ".join(sorted(
                                    TRANSFER_ENGINES["mooncake"]["builds"].values()))))
    if problems:
        return [_check("transfer_engine", False, ERROR, "; ".join(problems), "; ".join(remedies))]
    names = ", ".join("%s %s" % (dist, version) for family, dist, version, _b in installed
                      if family in working) or "no package metadata"
    detail = "%s: import %s works with %s" % (
        names, ", ".join(engines[f].get("module") for f in working), python)
    if want is None:
        return [_check("transfer_engine", True, WARNING, detail + "; %s, so the engine's build is not "
                       "compared with torch's CUDA" % ("torch %s's CUDA build %r is no version" % (
                           torch, tcuda) if torch else "torch is not in the venv"))]
    unknown = [f for f in working if not any(i[0] == f and i[3] for i in installed)]
    if unknown:
        return [_check("transfer_engine", True, WARNING, detail + "; no package of the collection's "
                       "table (%s) names the build of %s: not compared with torch's CUDA" % (
                           ", ".join(sorted(known)), ", ".join(unknown)))]
    return [_check("transfer_engine", True, INFO, "%s (%s)" % (detail, torch_says))]


def _backend_problem(backend, cc, phase):
    """Why ``backend`` cannot run on ``cc`` (docs/prereqs.md §7), or ``None``."""
    major = _major(cc)
    if backend == "fa3" and major not in (8, 9):
        return "fa3 kernels exist for SM80/86/89/90 only (is_fa3_supported)"
    if backend == "flashmla" and cc not in ("9.0", "10.0"):
        return "FlashMLA is built for SM90/SM100 only"
    if backend in ("trtllm_mla", "trtllm_mha") and major != 10:
        if major == 12 and phase == "decode":
            return None  # decode works via xqa on SM120 (docs/prereqs.md §7)
        return "trtllm-gen kernels exist for SM100/SM103 only ('Unsupported architecture')"
    return None


def _rule_attention(facts, args):
    gpus = facts.get("gpus") or []
    wanted = []
    for flag, phase in (("attention-backend", "both"), ("prefill-attention-backend", "prefill"),
                        ("decode-attention-backend", "decode")):
        value = args.get(flag)
        if value:
            wanted.append(("--" + flag, str(value).strip().lower(), phase))
    if not wanted:
        return []
    ccs = _ccs(gpus)
    if not ccs:
        return [_check("attention_backend", True, WARNING,
                       "cannot check %s without GPU compute capabilities" % ", ".join(
                           "%s %s" % (f, b) for f, b, _unused in wanted))]
    problems = []
    for flag, backend, phase in wanted:
        for cc in ccs:
            why = _backend_problem(backend, cc, phase)
            if why:
                problems.append("%s %s on SM%s: %s" % (flag, backend, cc.replace(".", ""), why))
    if problems:
        safe = "triton or flashinfer" if any(_major(c) == 12 for c in ccs) else "flashinfer or triton"
        return [_check("attention_backend", False, ERROR, "; ".join(problems),
                       "use --attention-backend %s on these GPUs (docs/prereqs.md §7)" % safe)]
    return [_check("attention_backend", True, INFO, ", ".join(
        "%s %s" % (f, b) for f, b, _unused in wanted) + " supported on " + ", ".join("SM" + c.replace(".", "") for c in ccs))]


def _rule_deepep(facts, args):
    if str(args.get("moe-a2a-backend") or "").strip().lower() != "deepep":
        return []
    topo = (facts.get("topology") or {}).get("kind", "unknown")
    remedy = ("use --moe-a2a-backend none (all-reduce/all-gather dispatch works on PCIe), or "
              "run DeepEP on NVLink hosts (docs/prereqs.md §8)")
    if topo in ("pcie", "mixed"):
        return [_check("deepep_topology", False, ERROR,
                       "--moe-a2a-backend deepep needs NVLink between every GPU pair (normal mode), "
                       "this host is %s" % ("PCIe-only" if topo == "pcie" else "only partly NVLinked"),
                       remedy)]
    if topo == "nvlink":
        old = [cc for cc in _ccs(facts.get("gpus") or []) if not at_least(cc, "9.0")]
        if old:
            return [_check("deepep_topology", False, ERROR,
                           "DeepEP needs SM90 or newer, found %s" % ", ".join(old), remedy)]
        return [_check("deepep_topology", True, INFO, "DeepEP all-to-all over NVLink")]
    if topo == "single":
        return [_check("deepep_topology", True, WARNING,
                       "--moe-a2a-backend deepep on a single-GPU host has no intranode peers")]
    return [_check("deepep_topology", True, WARNING,
                   "--moe-a2a-backend deepep: GPU interconnect unknown, cannot confirm NVLink")]


def _rule_processes(facts):
    procs = facts.get("processes")
    if procs is None:
        if (facts.get("smi") or {}).get("status") != "ok":
            return [_skip("foreign_processes", "nvidia-smi unusable")]
        return [_check("foreign_processes", True, WARNING, "GPU processes unknown")]
    foreign = [p for p in procs if not OWN_PROCESS.search(p.get("name") or "")]
    if not foreign:
        return [_check("foreign_processes", True, INFO, "no foreign process holds GPU memory" +
                       (" (%d SGLang)" % len(procs) if procs else ""))]
    parts = ["pid %s %s %s MiB on %s" % (
        p.get("pid"), p.get("name") or "?", p.get("used_mib") if p.get("used_mib") is not None else "?",
        "GPU%s" % p["gpu_index"] if p.get("gpu_index") is not None else p.get("gpu_bus") or "?")
        for p in foreign]
    total = sum(p.get("used_mib") or 0 for p in foreign)
    return [_check("foreign_processes", False, ERROR,
                   "%d foreign process(es) hold %d MiB of GPU memory: %s" % (
                       len(foreign), total, "; ".join(parts[:6]) + (" ..." if len(parts) > 6 else "")),
                   "stop them before starting SGLang (its memory budget assumes free GPUs), or waive "
                   "foreign_processes")]


def evaluate(facts, strategy=None, extra_args=None, waive=()):
    """Run every rule over ``facts``; returns ``{'ok', 'checks', 'failed'}``."""
    args = normalize_args(extra_args)
    checks = []
    checks.extend(_rule_smi(facts))
    checks.extend(_rule_topology(facts) if (facts.get("smi") or {}).get("status") == "ok"
                  else [_skip("topology", "nvidia-smi unusable")])
    checks.extend(_rule_strategy(facts, strategy))
    checks.extend(_rule_toolkit(facts))
    checks.extend(_rule_driver(facts))
    checks.extend(_rule_headers(facts))
    checks.extend(_rule_compile(facts))
    checks.extend(_rule_packages(facts))
    checks.extend(_rule_transfer_engine(facts))
    checks.extend(_rule_attention(facts, args))
    checks.extend(_rule_deepep(facts, args))
    checks.extend(_rule_processes(facts))
    return apply_waivers(checks, waive)


def apply_waivers(checks, waive=()):
    waive = [str(w).strip() for w in (waive or ()) if str(w).strip()]
    unknown = sorted(set(w for w in waive if w not in CHECK_NAMES))
    if unknown:
        checks.append(_check("waivers", True, WARNING, "unknown check name(s) in waive: %s" % ", ".join(unknown),
                             "valid names: %s" % ", ".join(CHECK_NAMES)))
    for check in checks:
        check["waived"] = bool(not check["ok"] and check["name"] in waive)
    failed = [c for c in checks if not c["ok"] and c["severity"] == ERROR and not c["waived"]]
    return {"ok": not failed, "checks": checks, "failed": [c["name"] for c in failed]}


def status_word(check):
    if check["ok"]:
        return "OK" if check["severity"] != WARNING else "WARN"
    if check.get("waived"):
        return "WAIVED"
    return "FAIL" if check["severity"] == ERROR else "WARN"


def format_table(checks, width=None):
    """One line per check: status, name, detail."""
    name_w = max([len(c["name"]) for c in checks] + [4])
    lines = []
    for check in checks:
        line = "%-6s %-*s %s" % (status_word(check), name_w, check["name"], check["detail"])
        if width and len(line) > width:
            line = line[: width - 3] + "..."
        lines.append(line)
    return lines
