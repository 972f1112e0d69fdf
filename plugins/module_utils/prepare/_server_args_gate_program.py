# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The semantic gate's program (see ``_server_args_gate``): it runs in the release's venv
Python as ``python -c <this file's source> '<json request>'`` and prints one line,
``GPUFLEET-GATE <json>``.

It is a file of its own so that linters and ansible-test read it. It is shipped to the host
inside the module's payload as any module_util is (``_server_args_gate`` imports it and
passes its source to ``python -c``). Imported, it does nothing: all of it runs under
``__name__ == "__main__"`` only, at module level, as it always did.
"""

# pylint: disable=import-outside-toplevel,invalid-name,unused-argument,broad-exception-caught
# pylint: disable=too-few-public-methods,global-statement,missing-function-docstring
# pylint: disable=missing-class-docstring,multiple-imports,ungrouped-imports

if __name__ == "__main__":
    import argparse
    import dataclasses
    import json
    import logging
    import os
    import stat
    import sys
    import tempfile
    import time
    import traceback
    import types
    import warnings
    req = json.loads(sys.argv[1])
    gpu = req["gpu"]
    started = time.time()
    # nvidia-smi double on PATH: sglang reads the GPU memory with nvidia-smi --query-gpu
    shim = tempfile.mkdtemp(prefix="gpufleet-gate-")
    vals = {"memory.total": str(gpu["memory_mib"]), "name": gpu["name"],
            "compute_cap": "%d.%d" % tuple(gpu["cc"]), "count": str(gpu["count"])}
    with open(os.path.join(shim, "nvidia-smi"), "w") as f:
        f.write("#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in --query-gpu=*) q=${a#--query-gpu=};; esac; done\n"
                "i=0; while [ $i -lt %d ]; do case \"$q\" in %s *) exit 1;; esac; i=$((i+1)); done\n"
                % (gpu["count"], " ".join("%s) echo '%s';;" % (k, v) for k, v in vals.items())))
    os.chmod(os.path.join(shim, "nvidia-smi"), stat.S_IRWXU)
    os.environ["PATH"] = shim + os.pathsep + os.environ.get("PATH", "")
    t0 = time.time()
    stubs = tuple(req.get("stub_modules") or ())
    if stubs:
        # capture only (tests/fixtures/server-args): GPU kernel packages that cannot load
        # without a driver; on a host the real ones are imported.
        import importlib.abc
        import importlib.machinery

        class _Meta(type):
            def __getattr__(cls, name):
                if name.startswith("__"):
                    raise AttributeError(name)
                return _Any

        class _Any(metaclass=_Meta):
            def __init__(self, *a, **k):
                pass

            def __call__(self, *a, **k):
                return _Any()

            def __getattr__(self, name):
                return _Any()

            def __bool__(self):
                return False

            def __iter__(self):
                return iter(())

        class _StubModule(types.ModuleType):
            def __getattr__(self, name):
                if name.startswith("__"):
                    raise AttributeError(name)
                return _Any

        class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in stubs:
                    return importlib.machinery.ModuleSpec(name, self, is_package=True)

            def create_module(self, spec):
                m = _StubModule(spec.name)
                m.__path__ = []
                return m

            def exec_module(self, module):
                pass
        sys.meta_path.insert(0, _Finder())
    try:
        import torch
    except ImportError:  # a release double without torch reads the GPUs from nvidia-smi alone
        torch = None
    if stubs and torch is not None:
        _register_fake = torch.library.register_fake

        def _fake(op, *a, **k):
            if isinstance(op, str) and op.split("::")[0] in stubs:
                return a[0] if a and callable(a[0]) else (lambda f: f)
            return _register_fake(op, *a, **k)
        torch.library.register_fake = _fake
    stubbed_cuda_version = None
    if torch is not None:
        props = types.SimpleNamespace(name=gpu["name"], major=gpu["cc"][0], minor=gpu["cc"][1],
                                      total_memory=gpu["memory_mib"] * 1024 * 1024,
                                      multi_processor_count=gpu.get("sms", 188), uuid="stub",
                                      L2_cache_size=128 * 1024 * 1024, is_integrated=False,
                                      warp_size=32, gcnArchName="")
        c = torch.cuda
        c.is_available = lambda: True
        c.device_count = lambda: gpu["count"]
        c.get_device_capability = lambda device=None: tuple(gpu["cc"])
        c.get_device_name = lambda device=None: gpu["name"]
        c.get_device_properties = lambda device=None: props
        c.mem_get_info = lambda device=None: (props.total_memory, props.total_memory)
        c.current_device = lambda: 0
        if not torch.version.cuda:
            stubbed_cuda_version = torch.version.cuda = req.get("cuda_version") or "12.9"
    records = []
    recording = False
    # every record a logger handles, whatever handlers the release configures (0.5.23
    # reconfigures the root logger while it resolves)
    _logger_handle = logging.Logger.handle

    def _handle(self, r):
        if recording and r.levelno >= logging.WARNING:
            records.append({"level": r.levelname, "where": "%s:%d" % (
                r.pathname.split("site-packages/")[-1], r.lineno), "msg": r.getMessage()})
        return _logger_handle(self, r)
    logging.Logger.handle = _handle

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if recording:
            records.append({"level": category.__name__, "where": "%s:%d" % (
                filename.split("site-packages/")[-1], lineno), "msg": str(message)})
    warnings.showwarning = showwarning
    warnings.simplefilter("always")
    from sglang.srt import server_args as sa
    import_s = time.time() - t0
    out = {"argv": req["argv"], "torch": getattr(torch, "__version__", None), "stubbed_cuda_version": stubbed_cuda_version,
           "import_seconds": round(import_s, 2)}

    def pick(d):
        res = {}
        for k in req["keys"]:
            if k in d:
                v = d[k]
                if isinstance(v, (list, tuple)):
                    v = list(v)
                elif v is not None and not isinstance(v, (bool, int, float, str)):
                    v = str(v)
                res[k] = v
        return res
    stage = "parse"
    try:
        parser = argparse.ArgumentParser()
        sa.ServerArgs.add_cli_args(parser)
        asked = vars(parser.parse_args(req["argv"]))
        # up to 0.5.9 the long names set argparse's dest; from_cli_args copies them onto the fields
        for long_name, field in (("tensor_parallel_size", "tp_size"), ("pipeline_parallel_size", "pp_size"),
                                 ("expert_parallel_size", "ep_size"), ("data_parallel_size", "dp_size"),
                                 ("moe_data_parallel_size", "moe_dp_size")):
            if long_name in asked and field not in asked:
                asked[field] = asked[long_name]
        out["asked"] = pick(asked)
        recording = True
        stage = "prepare"
        args = sa.prepare_server_args(req["argv"])
        if hasattr(args, "resolve_once"):
            args.resolve_once()
            derived = dict(args.resolved_dict())
            graphs = derived.get("cuda_graph_config")
            if isinstance(graphs, dict) and isinstance(graphs.get("decode"), dict):
                # 0.5.23 keeps the CUDA-graph sizes in a nested record; report them as before
                derived["cuda_graph_max_bs"] = graphs["decode"].get("max_bs")
                derived["cuda_graph_bs"] = graphs["decode"].get("bs")
                derived["cuda_graph_backend_decode"] = graphs["decode"].get("backend")
        else:
            derived = dataclasses.asdict(args)
        out["derived"] = pick(derived)
        stage = "check"
        if hasattr(args, "check_server_args"):
            args.check_server_args()
            out["checks"] = "check_server_args"
        else:
            out["checks"] = "none"
        out["verdict"] = "ok"
    except SystemExit as exc:
        out.update(verdict="refused", stage=stage, error="argparse exit %s" % exc.code)
    except BaseException as exc:
        tb = [f for f in traceback.extract_tb(exc.__traceback__) if "site-packages/" in f.filename]
        out.update(verdict="refused", stage=stage, error="%s: %s" % (type(exc).__name__, exc),
                   where="%s:%d" % (tb[-1].filename.split("site-packages/")[-1], tb[-1].lineno) if tb else None,
                   trace=["%s:%d" % (f.filename.split("site-packages/")[-1], f.lineno) for f in tb[-14:]])
    recording = False
    out["warnings"] = records
    out["seconds"] = round(time.time() - started, 2)
    import shutil
    shutil.rmtree(shim, ignore_errors=True)
    print("GPUFLEET-GATE " + json.dumps(out, sort_keys=True, default=str))  # pylint: disable=ansible-bad-function
