#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: gpu_prereqs
short_description: Check that a GPU host can run SGLang (the prerequisite doctor)
version_added: 0.1.0
author: gpufleet developers (@gpufleet)
description:
  - Probes the GPUs (C(nvidia-smi) CSV query, C(-q) dump or plain table, C(topo -m),
    compute processes), the CUDA toolkit FlashInfer's JIT would use (C(nvcc --version),
    C(nvcc --list-gpu-arch), headers under the CUDA home) and the SGLang virtualenv's
    package versions (read from C(*.dist-info/METADATA), nothing imported).
  - Compiles a tiny test kernel with the found C(nvcc) for the GPUs' architecture
    (for example C(-arch=sm_120a) for compute capability 12.0); a success is cached
    per (nvcc path, nvcc version, arch) under O(cache_dir).
  - Returns a list of checks with a severity, detail and remedy, and an overall RV(ok)
    that is false when an error-severity check failed and is not waived.
  - The CUDA home is found in FlashInfer's JIT order C($CUDA_HOME), C($CUDA_PATH),
    the parent of the directory of C(nvcc) on C(PATH), C(/usr/local/cuda)
    (FlashInfer C(jit/cpp_ext.py) C(get_cuda_path)); O(cuda_home) overrides it.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Only reads the host; the compile test writes to a temporary directory and its
      cache marker under O(cache_dir), also in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  python:
    description:
      - The SGLang virtualenv's interpreter; its site-packages are read for the versions of
        sglang, sgl-kernel / sglang-kernel, flashinfer-python, flashinfer-cubin,
        flashinfer-jit-cache and torch.
      - Package checks are skipped when not given.
    type: path
  cuda_home:
    description: The CUDA home the server will run with (its C(CUDA_HOME)); default is FlashInfer's search.
    type: path
  strategy:
    description: Parallelism strategy, a name (C(tp8), C(pp8), C(tp8-ep8)) or a C(tp/pp/ep/dp) layout mapping.
    type: raw
  extra_args:
    description:
      - "Extra SGLang server arguments, e.g. C({attention-backend: fa3, moe-a2a-backend: deepep})."
      - Used to refuse attention backends the GPUs cannot run and DeepEP on PCIe-only hosts.
    type: dict
    default: {}
  nvidia_smi:
    description: Path of C(nvidia-smi); default is to find it on C(PATH).
    type: path
  waive:
    description: Names of checks whose failure does not make RV(ok) false; they stay in RV(checks) with C(waived=true).
    type: list
    elements: str
    default: []
  compile_test:
    description: Compile a test kernel with the found C(nvcc).
    type: bool
    default: true
  cache_dir:
    description: Where compile-test successes are remembered.
    type: path
    default: /var/cache/gpufleet-sglang
  fail_on_error:
    description: Fail the task when RV(ok) is false (by default the caller decides).
    type: bool
    default: false
notes:
  - Facts and rules are cited from the collection's prerequisite reference (CUDA driver
    minimums, FlashInfer's SM12x CUDA gate, SM120 kernel support, DeepEP's NVLink need).
"""

EXAMPLES = r"""
- name: Check the host before deploying SGLang
  gpufleet.sglang.gpu_prereqs:
    python: /opt/sglang/venv/bin/python
    cuda_home: /usr/local/cuda-12.9
    strategy: pp8
    extra_args:
      attention-backend: triton
    waive:
      - foreign_processes
  register: doctor

- name: Show the verdict
  ansible.builtin.debug:
    var: doctor.table
"""

RETURN = r"""
ok:
  description: True unless an error-severity check failed and is not waived.
  returned: always
  type: bool
checks:
  description: One entry per check.
  returned: always
  type: list
  elements: dict
  contains:
    name: {description: Check name (the value to put in O(waive)), type: str}
    ok: {description: Whether the check passed, type: bool}
    severity: {description: "C(error), C(warning) or C(info)", type: str}
    detail: {description: What was found, type: str}
    remedy: {description: How to fix a failure, type: str}
    waived: {description: A failed check listed in O(waive), type: bool}
failed_checks:
  description: Names of the failed, not waived, error-severity checks.
  returned: always
  type: list
  elements: str
failures:
  description: One line per failed, not waived, error-severity check, C(name, detail -- remedy).
  returned: always
  type: list
  elements: str
table:
  description: One line per check, C(STATUS name detail).
  returned: always
  type: list
  elements: str
gpus:
  description: GPUs found.
  returned: always
  type: list
  elements: dict
  sample: [{index: 0, name: NVIDIA H200, memory_mib: 143771, compute_capability: "9.0",
            cc_source: nvidia-smi, driver: 590.48.01, pci_bus: "00000000:83:00.0"}]
driver:
  description: Driver version and the CUDA version it supports (when nvidia-smi shows it).
  returned: always
  type: dict
nvidia_smi:
  description: How nvidia-smi answered, C(status) (C(ok), C(missing), C(driver), C(no-devices), C(garbled), C(failed)), C(path), C(source), C(detail).
  returned: always
  type: dict
topology:
  description: C(nvlink), C(pcie), C(mixed), C(single) or C(unknown).
  returned: always
  type: str
topology_links:
  description: C(topo -m) cell for every GPU pair, keyed C(i-j).
  returned: always
  type: dict
processes:
  description: Processes holding GPU memory (null when unknown).
  returned: always
  type: list
  elements: dict
cuda:
  description: CUDA home (and how it was found), nvcc, version, arches, headers, the toolkit root nvcc resolves to.
  returned: always
  type: dict
packages:
  description: Site-packages and package versions of O(python), torch's CUDA build.
  returned: always
  type: dict
compile:
  description: Compile-test results per arch (C(cached) when the cache answered).
  returned: always
  type: dict
commands:
  description: Commands that failed while probing, with C(cmd), C(rc), C(stdout), C(stderr) (truncated).
  returned: always
  type: list
  elements: dict
"""

import json
import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils._command import CommandResult, run
from ansible_collections.gpufleet.sglang.plugins.module_utils import _gpu_env as env
from ansible_collections.gpufleet.sglang.plugins.module_utils import _gpu_parse as parse
from ansible_collections.gpufleet.sglang.plugins.module_utils._gpu_prereqs import (
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
            os.makedirs(os.path.dirname(marker), exist_ok=True)
            with open(marker, "w") as handle:
                json.dump({"nvcc": cuda["nvcc"], "version": cuda["version"], "arch": arch}, handle)
            return marker
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


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path"),
            cuda_home=dict(type="path"),
            strategy=dict(type="raw"),
            extra_args=dict(type="dict", default={}),
            nvidia_smi=dict(type="path"),
            waive=dict(type="list", elements="str", default=[]),
            compile_test=dict(type="bool", default=True),
            cache_dir=dict(type="path", default="/var/cache/gpufleet-sglang"),
            fail_on_error=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    prober = Prober(module)
    facts = prober.gpus(params["nvidia_smi"])
    facts["cuda"] = prober.cuda(params["cuda_home"])
    facts["packages"] = prober.packages(params["python"])
    facts["compile"] = prober.compile(facts["cuda"], facts["gpus"], params["cache_dir"], params["compile_test"])
    verdict = evaluate(facts, strategy=params["strategy"], extra_args=params["extra_args"],
                       waive=params["waive"])
    result = dict(
        changed=False,
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
    if params["fail_on_error"] and not verdict["ok"]:
        module.fail_json(msg="prerequisite check failed: %s" % ", ".join(verdict["failed"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
