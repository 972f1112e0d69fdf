# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection.
"""The prerequisite doctor's probes and its one entry point, :func:`doctor`.

The probes run nvidia-smi, nvcc and the venv's interpreter through the collection's one
command runner and read package metadata without importing anything; the verdicts are
``_gpu_prereqs.evaluate``'s. Used by ``gpufleet.sglang.gpu_prereqs`` and by
``gpufleet.sglang.server_preflight`` (the deploy path asks the doctor in the same call).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import shutil
import tempfile

from ansible_collections.gpufleet.sglang.plugins.module_utils.common._command import CommandResult, run
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files, _paths
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _gpu_env as env
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _gpu_parse as parse
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._gpu_prereqs import (
    evaluate,
    format_table,
)

_SITE_SNIPPET = "import json, site, sys; print(json.dumps({'site': site.getsitepackages()}))"


class Prober(object):
    """Runs the probe commands through the collection's command runner and records failures."""

    def __init__(self, module):
        self.module = module
        self.failures = []

    def run(self, argv):
        try:
            result = run(self.module, argv)
        except Exception as exc:  # pylint: disable=broad-except
            result = CommandResult(argv, 127, "", "%s" % exc)
        if not result.ok:
            self.failures.append({"cmd": result.cmd, "rc": result.rc, "stdout": result.stdout[-2000:],
                                  "stderr": result.stderr[-2000:]})
        return result.rc, result.stdout, result.stderr

    # ---------------------------------------------------------------- nvidia-smi

    def gpus(self, smi_path):
        facts = {"smi": {}, "gpus": [], "driver": {"version": None, "cuda": None},
                 "processes": None, "topology": {"kind": "unknown", "links": {}}}
        path = smi_path or self.module.get_bin_path("nvidia-smi")
        if not path or not os.path.exists(path):
            facts["smi"] = {"status": "missing", "path": smi_path,
                            "detail": "nvidia-smi not found (%s)" % (smi_path or "not on PATH")}
            return facts
        attempts = []
        table = None
        fmt = "--format=csv,noheader,nounits"
        tries = (
            ("query-gpu", [path, "--query-gpu=" + ",".join(parse.QUERY_GPU_FIELDS), fmt],
             lambda t: {"gpus": parse.parse_query_gpu(t), "processes": None}),
            ("q", [path, "-q"], parse.parse_query_q),
            ("table", [path], parse.parse_table),
        )
        result = source = None
        for name, argv, parser in tries:
            rc, out, err = self.run(argv)
            kind = parse.classify_smi_failure(rc, out, err)
            if kind is None:
                try:
                    result, source = parser(out), name
                    if name == "table":
                        table = result
                    break
                except parse.ParseError as exc:
                    kind = "garbled"
                    err = "%s; output starts %r" % (exc, out.strip()[:120])
                    self.failures.append({"cmd": argv, "rc": rc, "stdout": out[-2000:],
                                          "stderr": err, "parse_error": "%s" % exc})
            attempts.append((kind, (out.strip() or err.strip())[:300]))
        if result is None:
            kinds = [k for k, _unused in attempts]
            status = next((k for k in ("driver", "no-devices", "garbled", "failed") if k in kinds), "failed")
            detail = next(d for k, d in attempts if k == status)
            labels = {"driver": "nvidia-smi cannot talk to the NVIDIA driver",
                      "no-devices": "nvidia-smi found no devices",
                      "garbled": "nvidia-smi output is not readable",
                      "failed": "nvidia-smi failed"}
            facts["smi"] = {"status": status, "path": path, "detail": "%s: %s" % (labels[status], detail)}
            return facts
        facts["smi"] = {"status": "ok", "path": path, "source": source}
        facts["gpus"] = result["gpus"]
        facts["driver"] = {"version": result.get("driver") or (result["gpus"][0].get("driver")
                                                               if result["gpus"] else None),
                           "cuda": result.get("cuda")}
        facts["processes"] = result.get("processes")
        if facts["processes"] is None:
            rc, out, err = self.run([path, "--query-compute-apps=" + ",".join(parse.QUERY_APPS_FIELDS), fmt])
            if rc == 0:
                try:
                    facts["processes"] = parse.parse_query_apps(out)
                except parse.ParseError:
                    facts["processes"] = None
            if facts["processes"] is None and table is None:
                rc, out, err = self.run([path])
                if rc == 0:
                    try:
                        table = parse.parse_table(out)
                        facts["processes"] = table["processes"]
                    except parse.ParseError:
                        pass
            if table and not facts["driver"]["cuda"]:
                facts["driver"]["cuda"] = table.get("cuda")
        by_bus = dict((g["pci_bus"], g["index"]) for g in facts["gpus"] if g.get("pci_bus"))
        for proc in facts["processes"] or []:
            if proc.get("gpu_index") is None and proc.get("gpu_bus"):
                proc["gpu_index"] = by_bus.get(proc["gpu_bus"])
        rc, out, err = self.run([path, "topo", "-m"])
        if rc == 0:
            try:
                facts["topology"] = parse.parse_topology(out)
            except parse.ParseError as exc:
                facts["topology"] = {"kind": "unknown", "links": {}, "detail": "%s" % exc}
        else:
            facts["topology"] = {"kind": "unknown", "links": {},
                                 "detail": "topo -m failed (rc=%s)" % rc}
        if facts["topology"]["kind"] == "unknown" and len(facts["gpus"]) == 1:
            facts["topology"] = {"kind": "single", "links": {}}
        return facts

    # --------------------------------------------------------------------- CUDA

    def cuda(self, cuda_home):
        home, source = env.find_cuda_home(cuda_home, os.environ, self.module.get_bin_path)
        facts = {"home": home, "home_source": source, "nvcc": None, "found": False,
                 "release": None, "version": None, "arches": [], "headers": {}, "root": None}
        if not home:
            facts["detail"] = "no CUDA home ($CUDA_HOME, $CUDA_PATH, nvcc on PATH, /usr/local/cuda)"
            return facts
        facts["headers"] = env.scan_headers(home)
        nvcc = os.environ.get("FLASHINFER_NVCC") or os.path.join(home, "bin", "nvcc")
        facts["nvcc"] = nvcc
        if not os.path.isfile(nvcc):
            facts["detail"] = "%s does not exist (CUDA home %s from %s)" % (nvcc, home, source)
            return facts
        rc, out, err = self.run([nvcc, "--version"])
        try:
            facts.update(parse.parse_nvcc_version(out))
        except parse.ParseError as exc:
            facts["detail"] = "%s --version: %s" % (nvcc, exc)
            return facts
        facts["found"] = True
        rc, out, err = self.run([nvcc, "--list-gpu-arch"])
        try:
            facts["arches"] = parse.parse_gpu_arch_list(out)
        except parse.ParseError:
            facts["arches"] = []
        rc, out, err = self.run([nvcc, "--dryrun", "-x", "cu", "-c", os.devnull, "-o", os.devnull])
        facts["root"] = parse.parse_nvcc_root(out + "\n" + err)
        return facts

    def compile(self, cuda, gpus, cache_dir, enabled):
        if not enabled:
            return {"status": "skipped", "detail": "compile_test is off", "results": []}
        if not cuda.get("found"):
            return {"status": "skipped", "detail": "no nvcc", "results": []}
        ccs = sorted(set(g["compute_capability"] for g in gpus if g.get("compute_capability")))
        if not ccs:
            return {"status": "skipped", "detail": "no GPU compute capability known", "results": []}
        results = []
        for cc in ccs:
            arch = env.arch_target(cc)
            marker = env.compile_cache_path(cache_dir, cuda["nvcc"], cuda["version"], arch)
            if os.path.isfile(marker):
                results.append({"arch": arch, "ok": True, "cached": True, "marker": marker})
                continue
            tmp = tempfile.mkdtemp(prefix="gpufleet-prereqs-")
            try:
                src = os.path.join(tmp, "probe.cu")
                with open(src, "w") as handle:
                    handle.write(env.KERNEL_SOURCE)
                argv = [cuda["nvcc"], "-arch=" + arch, "-c", src, "-o", os.path.join(tmp, "probe.o")]
                rc, out, err = self.run(argv)
                entry = {"arch": arch, "ok": rc == 0, "cached": False, "rc": rc, "cmd": argv,
                         "stderr": err[-2000:]}
                if rc == 0:
                    entry["marker"] = self._remember(marker, cuda, arch)
                results.append(entry)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return {"status": "ok" if all(r["ok"] for r in results) else "failed", "results": results}

    @staticmethod
    def _remember(marker, cuda, arch):
        try:
            return _files.write_json(marker, {"nvcc": cuda["nvcc"], "version": cuda["version"],
                                              "arch": arch}, makedirs=True)
        except OSError:
            return None  # cache not writable: the next run compiles again

    # ----------------------------------------------------------------- packages

    def packages(self, python):
        if not python:
            return None
        facts = {"python": python, "site_packages": [], "versions": {}, "torch_cuda": None,
                 "torch_cuda_source": None}
        if not os.path.exists(python):
            facts["error"] = "python %s does not exist" % python
            return facts
        sites = []
        rc, out, err = self.run([python, "-I", "-c", _SITE_SNIPPET])
        if rc == 0:
            try:
                sites = [s for s in json.loads(out.strip().splitlines()[-1])["site"] if os.path.isdir(s)]
            except (ValueError, KeyError, IndexError, TypeError):
                sites = []
        if not sites:
            sites = env.site_dirs_from_prefix(python)
        if not sites:
            facts["error"] = "no site-packages found for %s" % python
            return facts
        facts["site_packages"] = sites
        facts["versions"] = env.read_packages(sites)
        facts["torch_cuda"], facts["torch_cuda_source"] = env.torch_cuda(facts["versions"].get("torch"), sites)
        return facts


def doctor(module, python=None, cuda_home=None, nvidia_smi=None, strategy=None, extra_args=None,
           waive=None, compile_test=True, cache_dir=_paths.CACHE_DIR):
    """Probe the host and judge it: the result the doctor module returns."""
    prober = Prober(module)
    facts = prober.gpus(nvidia_smi)
    facts["cuda"] = prober.cuda(cuda_home)
    facts["packages"] = prober.packages(python)
    facts["compile"] = prober.compile(facts["cuda"], facts["gpus"], cache_dir, compile_test)
    verdict = evaluate(facts, strategy=strategy, extra_args=extra_args or {}, waive=waive or [])
    return dict(
        ok=verdict["ok"],
        checks=verdict["checks"],
        failed_checks=verdict["failed"],
        failures=["%s: %s -- remedy: %s" % (c["name"], c["detail"], c["remedy"] or "see detail")
                  for c in verdict["checks"] if c["name"] in verdict["failed"]],
        table=format_table(verdict["checks"]),
        gpus=facts["gpus"],
        driver=facts["driver"],
        nvidia_smi=facts["smi"],
        topology=facts["topology"].get("kind", "unknown"),
        topology_links=facts["topology"].get("links", {}),
        processes=facts["processes"],
        cuda=facts["cuda"],
        packages=facts["packages"] or {},
        compile=facts["compile"],
        commands=prober.failures,
    )


def refusal(result, host):
    """The message of a failed doctor: every failed check with its remedy, then the table."""
    return "\n".join(["Prerequisite checks failed on %s:" % host] + result["failures"] + [""]
                     + result["table"])
