# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection.
"""The prerequisite doctor's probes and its one entry point, :func:`doctor`.

The probes run nvidia-smi, nvcc and the venv's interpreter through the collection's one
command runner and read package metadata without importing anything (but the KV transfer
engine, whose import :meth:`Prober.transport` tries in the venv); the verdicts are
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
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _venv
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._gpu_prereqs import (
    evaluate,
    format_table,
)

_SITE_SNIPPET = "import json, site, sys; print(json.dumps({'site': site.getsitepackages()}))"

#: Where the kernel lists the RDMA devices (one directory per device, ``ports/<n>/state`` and
#: ``ports/<n>/link_layer`` under it).
IB_ROOT = "/sys/class/infiniband"
#: There while the ``nvidia_peermem`` module (GPUDirect RDMA) is loaded.
PEERMEM_PATH = "/sys/module/nvidia_peermem"
#: Seconds one transfer engine's import may take in the venv.
ENGINE_PROBE_TIMEOUT = 120

_ENGINE_MARK = "GPUFLEET-ENGINE "
# argv: the module to import, then the distributions whose versions to read. The versions
# first (importlib.metadata reads files only), then the import; one marked JSON line at
# the end, and os._exit so that threads the import started do not hold the interpreter.
_ENGINE_SNIPPET = "\n".join([
    "import importlib, json, os, sys",
    "out = {'packages': {}, 'imports': False, 'error': None}",
    "try:",
    "    from importlib import metadata",
    "except ImportError:",
    "    metadata = None",
    "for dist in sys.argv[2:]:",
    "    try:",
    "        out['packages'][dist] = metadata.version(dist)",
    "    except Exception:",
    "        pass",
    "try:",
    "    importlib.import_module(sys.argv[1])",
    "    out['imports'] = True",
    "except BaseException as exc:",
    "    out['error'] = '%s: %s' % (type(exc).__name__, exc)",
    "sys.stdout.write('\\n" + _ENGINE_MARK + "' + json.dumps(out) + '\\n')",
    "sys.stdout.flush()",
    "os._exit(0)",
])


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _read_text(path):
    try:
        with open(path) as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_ib_sysfs(root=IB_ROOT):
    """What ``root`` (``/sys/class/infiniband``) holds, as ``_gpu_parse.parse_ib_sysfs``
    takes it: ``{dev: {port: {"state", "link_layer"}}}`` (a file not readable: None); {}
    when ``root`` is not there (no RDMA stack loaded)."""
    entries = {}
    for dev in _listdir(root):
        ports = os.path.join(root, dev, "ports")
        entries[dev] = dict((port, {"state": _read_text(os.path.join(ports, port, "state")),
                                    "link_layer": _read_text(os.path.join(ports, port, "link_layer"))})
                            for port in _listdir(ports))
    return entries


def _engine_answer(rc, out, err, timeout):
    """The marked JSON line of one engine probe, or what went wrong."""
    for line in reversed((out or "").splitlines()):
        if line.startswith(_ENGINE_MARK):
            try:
                answer = json.loads(line[len(_ENGINE_MARK):])
            except ValueError:
                break
            if isinstance(answer, dict):
                return answer
            break
    if rc in (124, 137):
        why = "timed out after %d s" % timeout
    else:
        lines = [ln.strip() for ln in ("%s\n%s" % (err or "", out or "")).splitlines() if ln.strip()]
        why = "the interpreter exited rc=%s%s" % (rc, ": %s" % lines[-1][:300] if lines else "")
    return {"packages": {}, "imports": False, "error": why}


class Prober(object):
    """Runs the probe commands through the collection's command runner and records failures."""

    def __init__(self, module):
        self.module = module
        self.failures = []
        self.topo_text = None  # what nvidia-smi topo -m printed (gpus()), for transport()

    def run(self, argv, timeout=None):
        try:
            result = run(self.module, argv, timeout=timeout)
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
            self.topo_text = out
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

    # ---------------------------------------------------------------- transport

    def transport(self, python=None, ib_root=IB_ROOT, peermem_path=PEERMEM_PATH, smi_path=None):
        """What a PD layout's KV transfer finds on this host, in the shape
        ``check/_pd.host_transport`` takes (``ib_devices``, ``peermem``), with the GPU-to-NIC
        links ``check/_pd.ib_device_value`` takes (``topology``) and the venv's engines:

        * ``ib_devices``: ``_gpu_parse.parse_ib_sysfs`` of ``ib_root`` (no root: none);
        * ``peermem``: whether ``peermem_path`` (``/sys/module/nvidia_peermem``) exists;
        * ``topology``: ``_gpu_parse.parse_topology_nics`` of the ``nvidia-smi topo -m``
          text :meth:`gpus` read (run here when it did not), None with ``topology_detail``
          when there is none to read;
        * ``engines``: :meth:`engines` of ``python``, None when no python is given.
        """
        facts = {"ib_root": ib_root, "ib_devices": parse.parse_ib_sysfs(read_ib_sysfs(ib_root)),
                 "peermem": os.path.exists(peermem_path), "peermem_path": peermem_path,
                 "topology": None, "python": python, "engines": None}
        text = self.topo_text
        if text is None:
            path = smi_path or self.module.get_bin_path("nvidia-smi")
            if path and os.path.exists(path):
                rc, out, err = self.run([path, "topo", "-m"])
                if rc == 0:
                    text = out
                else:
                    facts["topology_detail"] = "topo -m failed (rc=%s)" % rc
            else:
                facts["topology_detail"] = "nvidia-smi not found (%s)" % (smi_path or "not on PATH")
        if text is not None:
            try:
                facts["topology"] = parse.parse_topology_nics(text)
            except parse.ParseError as exc:
                facts["topology_detail"] = "%s" % exc
        if python:
            facts["engines"] = self.engines(python)
        return facts

    def engines(self, python):
        """Per engine family of ``_venv.TRANSFER_ENGINES``: ``{"module", "imports", "error",
        "packages": {distribution: version}}``, from one run of ``python`` per family that
        reads the versions of the family's builds (``importlib.metadata``) and imports the
        module SGLang imports (``mooncake.engine``, ``nixl._api``)."""
        out = {}
        for family in sorted(_venv.TRANSFER_ENGINES):
            engine = _venv.TRANSFER_ENGINES[family]
            if not os.path.exists(python):
                answer = {"packages": {}, "imports": False,
                          "error": "python %s does not exist" % python}
            else:
                dists = [engine["builds"][b].split("==", 1)[0] for b in sorted(engine["builds"])]
                rc, stdout, stderr = self.run([python, "-I", "-c", _ENGINE_SNIPPET, engine["module"]] + dists,
                                              timeout=ENGINE_PROBE_TIMEOUT)
                answer = _engine_answer(rc, stdout, stderr, ENGINE_PROBE_TIMEOUT)
            out[family] = {"module": engine["module"], "imports": answer.get("imports") is True,
                           "error": answer.get("error"), "packages": dict(answer.get("packages") or {})}
        return out


def doctor(module, python=None, cuda_home=None, nvidia_smi=None, strategy=None, extra_args=None,
           waive=None, compile_test=True, cache_dir=_paths.CACHE_DIR, transport=False,
           ib_root=None, peermem_path=None):
    """Probe the host and judge it: the result the doctor module returns. With
    ``transport``, also what a PD layout's KV transfer finds (:meth:`Prober.transport`,
    under ``ib_root`` and ``peermem_path``, :data:`IB_ROOT` and :data:`PEERMEM_PATH` when
    None), returned as ``transport`` and judged by the ``transfer_engine`` check."""
    prober = Prober(module)
    facts = prober.gpus(nvidia_smi)
    facts["cuda"] = prober.cuda(cuda_home)
    facts["packages"] = prober.packages(python)
    facts["compile"] = prober.compile(facts["cuda"], facts["gpus"], cache_dir, compile_test)
    if transport:
        facts["transport"] = prober.transport(python, ib_root or IB_ROOT, peermem_path or PEERMEM_PATH,
                                              nvidia_smi)
    verdict = evaluate(facts, strategy=strategy, extra_args=extra_args or {}, waive=waive or [])
    result = dict(
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
    if transport:
        result["transport"] = facts["transport"]
    return result


def refusal(result, host):
    """The message of a failed doctor: every failed check with its remedy, then the table."""
    return "\n".join(["Prerequisite checks failed on %s:" % host] + result["failures"] + [""]
                     + result["table"])
