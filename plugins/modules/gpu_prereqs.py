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
  transport:
    description:
      - Also gather what a prefill/decode (PD) layout's KV transfer finds on the host, returned
        as RV(transport) (the facts the transfer backend is chosen from).
      - The RDMA devices with an active port (C(/sys/class/infiniband/<dev>/ports/<n>/state) and
        C(link_layer), InfiniBand or RoCE), whether C(nvidia_peermem) is loaded
        (C(/sys/module/nvidia_peermem)), the GPU-to-NIC links of C(nvidia-smi topo -m), and,
        with O(python), whether a KV transfer engine imports in the venv (C(mooncake.engine),
        C(nixl._api)) with the versions of its packages.
      - With O(python), the check C(transfer_engine) fails when no engine imports, or when an
        engine's build differs from torch's CUDA major (for example
        C(mooncake-transfer-engine-cuda13) beside a CUDA 12 torch).
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

- name: The facts a prefill/decode layout's transfer backend is chosen from
  gpufleet.sglang.gpu_prereqs:
    python: /opt/sglang/venv/bin/python
    transport: true
  register: pd_facts
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
transport:
  description:
    - What a PD layout's KV transfer finds on the host. C(ib_devices) (each C(name), C(state),
      C(ports) with C(port), C(state), C(link_layer), C(rdma) (C(InfiniBand) or C(RoCE)),
      C(link_layers)), C(peermem) (C(nvidia_peermem) loaded), C(topology) (C(gpus), C(nics)
      with each NIC's link to each GPU; null with C(topology_detail) when not read),
      C(engines) (per engine family C(module), C(imports), C(error), C(packages); null without
      O(python)), C(ib_root), C(peermem_path), C(python).
  returned: when O(transport) is true
  type: dict
  sample: {ib_devices: [{name: mlx5_0, state: ACTIVE, link_layers: [InfiniBand],
            ports: [{port: 1, state: ACTIVE, link_layer: InfiniBand, rdma: InfiniBand}]}],
           peermem: true, topology: {gpus: [0], nics: {mlx5_0: {"0": PIX}}},
           engines: {mooncake: {module: mooncake.engine, imports: true, error: null,
                                packages: {mooncake-transfer-engine: 0.3.13.post1}}}}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _paths
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._gpu_doctor import doctor


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
            cache_dir=dict(type="path", default=_paths.CACHE_DIR),
            fail_on_error=dict(type="bool", default=False),
            transport=dict(type="bool", default=False),
        ),
        supports_check_mode=True,
    )
    params = module.params
    result = doctor(module, python=params["python"], cuda_home=params["cuda_home"],
                    nvidia_smi=params["nvidia_smi"], strategy=params["strategy"],
                    extra_args=params["extra_args"], waive=params["waive"],
                    compile_test=params["compile_test"], cache_dir=params["cache_dir"],
                    transport=params["transport"])
    result["changed"] = False
    if params["fail_on_error"] and not result["ok"]:
        module.fail_json(msg="prerequisite check failed: %s" % ", ".join(result["failed_checks"]), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
