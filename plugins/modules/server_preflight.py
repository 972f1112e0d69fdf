#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: server_preflight
short_description: Every verdict a host needs before its SGLang server may change, in one call
version_added: 0.2.0
author: gpufleet developers (@gpufleet)
description:
  - Reads the host and the installed SGLang release and refuses, naming the input, the
    value and the release, anything that would keep a new server from starting. It
    changes nothing but its own caches, and nothing at all in check mode.
  - "In this order: the prerequisite doctor (when O(doctor) is given) reads the host's
    GPUs; the GPU count and memory are taken from them when O(plan) does not set them, and
    must agree with them when it does; the layout is resolved for that GPU count times the
    hosts of the server, with the collection's one GPU-count rule (the controller checks
    it only when the count is set in the inventory); the model directory holds
    C(config.json); the memory plan of the layout fits the GPUs (the planner uses a C(--mem-fraction-static) found in
    O(extra_args), since that is what the server gets); nobody but the server's own unit
    holds O(port); the installed release is read (version and fingerprint); its
    C(launch_server --help) is parsed (cached per fingerprint); the launch argv is
    rendered in the release's own spelling; the release's own argparse accepts that exact
    argv (cached per fingerprint and argv)."
  - A re-run with the same inputs and release runs no C(--help) at all.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
options:
  host:
    description: The host's inventory name, for the messages.
    type: str
    required: true
  python:
    description: Interpreter of the release's venv.
    type: path
    required: true
  model_path:
    description: Model directory on the host; it must hold C(config.json).
    type: str
    required: true
  model_commit:
    description:
      - The commit the model step resolved; when set, O(model_path) must hold a valid
        verified marker for it (M(gpufleet.sglang.model_check) quick check), else nothing
        starts.
    type: str
  layout:
    description:
      - The layout (C(name), C(tp), C(pp), C(ep), C(dp)), as M(gpufleet.sglang.deploy_check)
        returns it; resolved here again for the host's GPUs (RV(layout) is the checked one).
      - Required unless O(candidates) is given.
    type: dict
  strategy:
    description:
      - The strategy as the user gave it (the C(strategy) that M(gpufleet.sglang.deploy_check)
        returns), resolved for the host's GPUs so that a refusal names it as the controller would.
      - Omit to resolve the sizes of O(layout).
    type: str
  multinode:
    description: C(nnodes), C(node_rank) and C(dist_init_addr) of a multi-node server; omit for one host.
    type: dict
  server_args:
    description: The server's own flags (model path, host, port, served name), flag to value.
    type: dict
    default: {}
  extra_args:
    description: Further launch flags, flag to value (V(true) for a switch).
    type: dict
    default: {}
  require:
    description: Flags the release must know.
    type: list
    elements: str
    default: []
  plan:
    description:
      - The memory planner's inputs. C(gpu_count), C(gpu_memory_mib), C(nnodes),
        C(mem_fraction_static) (0 for SGLang's default), C(context_length),
        C(kv_dtype), C(allow_unfit) and C(release) (the release whose default
        C(mem_fraction_static) formula the first plan uses; see
        M(gpufleet.sglang.capacity_plan)). Once the release's own check has run, the plan
        is made again with the fraction the release derived.
      - C(gpu_count) and C(gpu_memory_mib) (the inventory's C(sglang_gpu_count) and
        C(sglang_gpu_memory_mib)) may be V(null) or empty; then the GPUs the host has decide
        (their number and the memory.total of the smallest, in MiB). Set, they must agree
        with the host's GPUs (the refusal names the variable and both numbers).
      - Without O(doctor), the GPUs are read with C(nvidia-smi) only when one of them is unset.
    type: dict
    required: true
  port:
    description: The server's HTTP port.
    type: int
    required: true
  service_name:
    description: The server's systemd unit, without C(.service).
    type: str
    default: sglang
  record_path:
    description: The deployment record (it names the port the server was deployed on).
    type: path
    default: /etc/ansible/facts.d/sglang.fact
  cache_dir:
    description: Where the parsed C(--help) and the argparse verdicts are cached.
    type: path
    default: /var/cache/gpufleet-sglang
  columns:
    description: Terminal width C(--help) is rendered at.
    type: int
    default: 200
  timeout:
    description: Seconds one release command may take.
    type: int
    default: 120
  doctor:
    description:
      - Run the prerequisite doctor first (see M(gpufleet.sglang.gpu_prereqs)) with these
        options (C(python), C(cuda_home), C(nvidia_smi), C(strategy), C(extra_args),
        C(waive), C(compile_test), C(cache_dir)), and refuse when a check that is not
        waived fails, listing each with its remedy, then the table of all checks.
      - The GPUs it reads are the ones O(plan)'s C(gpu_count) and C(gpu_memory_mib) are
        taken from or checked against. When it read no GPUs at all, its refusal stands alone.
      - Omit to skip the doctor.
    type: dict
  candidates:
    description:
      - Check several launch requests in one call, as C(playbooks/tune.yml) checks its whole
        search space. Each entry is C(id), C(strategy), C(layout) and C(extra_args) (all of
        the launch flags beyond the server's own), which replace O(strategy), O(layout) and
        O(extra_args) for that entry; every other option is shared.
      - The release is read once for all of them; each entry is checked as one call would
        check it, and its refusal is its own. The module itself does not fail; RV(results)
        holds one result per entry, in order.
      - One SSH round trip and one release query for the whole space, where a loop over the
        module pays one of each per candidate (a real release's import takes seconds).
      - Not with O(doctor) (the doctor is a check of the host, run by the deploy path).
    type: list
    elements: dict
  strict:
    description:
      - Refuse, instead of warning, when the release changes a value the launch flags asked
        for while it derives its settings (DP attention dropped, expert-parallel size
        overridden by the all-to-all backend, ...). Changes of the release's own defaults
        (the overlap schedule turned off by pipeline parallelism) are reported, not refused.
    type: bool
    default: false
seealso:
  - module: gpufleet.sglang.server_flags
  - module: gpufleet.sglang.capacity_plan
  - module: gpufleet.sglang.gpu_prereqs
  - module: gpufleet.sglang.server_unit
"""

EXAMPLES = r"""
- name: Check everything before the server changes
  gpufleet.sglang.server_preflight:
    host: "{{ inventory_hostname }}"
    python: /opt/sglang/0.5.9/bin/python
    model_path: /models/Kimi-K2.5
    layout: {name: ep8, tp: 8, pp: 1, ep: 8, dp: 1}
    server_args: {--model-path: /models/Kimi-K2.5, --host: 0.0.0.0, --port: 30000}
    plan: {gpu_count: 8, gpu_memory_mib: 97887, nnodes: 1}
    port: 30000
  register: preflight

- name: The same, with the GPU count and memory read on the host
  gpufleet.sglang.server_preflight:
    host: "{{ inventory_hostname }}"
    python: /opt/sglang/0.5.9/bin/python
    model_path: /models/Kimi-K2.5
    layout: {name: ep8, tp: 8, pp: 1, ep: 8, dp: 1}
    strategy: ep8
    server_args: {--model-path: /models/Kimi-K2.5, --host: 0.0.0.0, --port: 30000}
    plan: {gpu_count: null, gpu_memory_mib: null, nnodes: 1}
    port: 30000
    doctor: {python: /opt/sglang/0.5.9/bin/python}
  register: preflight

- name: Check two candidates of a tune in one call (never fails; see results)
  gpufleet.sglang.server_preflight:
    host: "{{ inventory_hostname }}"
    python: /opt/sglang/0.5.9/bin/python
    model_path: /models/Kimi-K2.5
    server_args: {--model-path: /models/Kimi-K2.5, --host: 0.0.0.0, --port: 30000}
    plan: {gpu_count: 8, gpu_memory_mib: 97887, nnodes: 1}
    port: 30000
    candidates:
      - {id: c01-ep8, strategy: ep8, layout: {name: ep8}, extra_args: {}}
      - {id: c02-ep8, strategy: ep8, layout: {name: ep8}, extra_args: {--cuda-graph-max-bs: 8}}
  register: gate
"""

RETURN = r"""
version:
  description: The installed SGLang release.
  returned: success
  type: str
  sample: 0.5.9
fingerprint:
  description: sha256 over version, dist-info, RECORD and Python version of the release.
  returned: success
  type: str
argv:
  description: The launch flags in the release's spelling (after C(-m sglang.launch_server)).
  returned: success
  type: list
  elements: str
translations:
  description: Cross-release translations applied while rendering.
  returned: success
  type: list
  elements: str
layout:
  description:
    - The layout resolved for the host's GPUs (C(name), C(tp), C(pp), C(ep), C(dp),
      C(nnodes), C(gpus)); what everything after the preflight uses.
  returned: success
  type: dict
  sample: {name: ep8, tp: 8, pp: 1, ep: 8, dp: 1, nnodes: 1, gpus: 8}
gpus:
  description:
    - The GPUs the layout and the memory plan use, C(count), C(memory_mib) (of one GPU, the
      smallest), C(name) (the GPU model(s) read on the host, V(null) when none was read),
      C(source) (of the count) and C(memory_source), each V(inventory) or V(detected).
  returned: success
  type: dict
  sample: {count: 8, memory_mib: 97887, name: NVIDIA RTX PRO 6000 Blackwell Server Edition,
           source: detected, memory_source: detected}
plan:
  description: The memory plan of the layout (see M(gpufleet.sglang.capacity_plan)).
  returned: success
  type: dict
pp_layer_partition:
  description: The PP layer split for C(SGLANG_PP_LAYER_PARTITION), empty for none.
  returned: success
  type: str
port_owner:
  description: Who holds the port now (C(free) or C(ours)).
  returned: success
  type: str
cached:
  description: Which verdicts came from the host's cache (C(help), C(argparse)).
  returned: success
  type: dict
server_args:
  description:
    - The release's own derivation and checks over RV(argv) for the host's GPUs (the
      semantic gate), C(verdict) (V(ok), or V(skipped) with C(reason) when the GPU model was
      not read), C(derived) (memory fraction, chunked prefill, CUDA-graph batch size,
      attention backend, parallel sizes), C(changes) and C(messages) (what the release
      changed against what was asked) and C(warnings) (what it logged while deriving).
  returned: success
  type: dict
doctor:
  description: The doctor's C(ok), C(failed_checks), C(failures) and C(table) (when O(doctor) is given).
  returned: when O(doctor) is given
  type: dict
results:
  description:
    - With O(candidates), one result per entry, in order, as a single call returns it (the
      keys above; C(failed) V(true) and C(msg) on a refusal), with C(item) (C(id) of the
      entry) and C(warnings) (what a single call would have warned).
  returned: when O(candidates) is given
  type: list
  elements: dict
  sample: [{item: {id: c01-tp8}, failed: false, warnings: []},
           {item: {id: c13-pp8}, failed: true, msg: "strategy pp8 does not fit ..."}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _paths
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _port_owner
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _server_args_gate as sa_gate
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _sglang_probe as probe
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._command import failure_payload, run
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._gpu_doctor import Prober, doctor, refusal
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._inputs import is_unset
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._preflight import (
    PreflightError,
    check_model_dir,
    fit_layout,
    host_gpus,
    judge_plan,
    plan as plan_memory,
)
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_argv import (
    ArgvError,
    missing,
    render_argv,
)


def _record_port(path):
    data = probe.read_json(path)
    if isinstance(data, dict):
        return data.get("port")
    return None


def _unit_active(module, service):
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return False
    return run(module, [systemctl, "is-active", "--quiet", "%s.service" % service], timeout=30).rc == 0


def check_port(module, params):
    verdict = _port_owner.inspect(params["port"], params["service_name"], None, None)
    if verdict["owner"] == "other" and not verdict["pids"]:
        # no holder visible (no CAP_SYS_PTRACE): ours if our unit runs on this port
        verdict = _port_owner.decide(
            params["port"], {"?"}, {}, params["service_name"],
            _unit_active(module, params["service_name"]), _record_port(params["record_path"]))
    if verdict["owner"] == "other":
        raise PreflightError(_port_owner.message(verdict, params["host"], params["service_name"]))
    return verdict["owner"]


def check_host(module, params, result):
    """The prerequisite doctor: its verdict (the GPUs it read included); refusing is the caller's."""
    options = dict(params["doctor"])
    known = ("python", "cuda_home", "nvidia_smi", "strategy", "extra_args", "waive", "compile_test",
             "cache_dir")
    unknown = sorted(set(options) - set(known))
    if unknown:
        module.fail_json(msg="doctor: unknown options %s" % ", ".join(unknown))
    for key in ("python", "cuda_home", "nvidia_smi"):
        options[key] = options.get(key) or None
    options["compile_test"] = module.boolean(options.get("compile_test", True))
    options.setdefault("cache_dir", params["cache_dir"])
    verdict = doctor(module, **options)
    result["doctor"] = dict((k, verdict[k]) for k in ("ok", "failed_checks", "failures", "table"))
    return verdict


def check_gpus(module, params, result, memo=None):
    """The doctor, then the GPUs and the layout for them; ``(gpus, layout)`` or a refusal.

    A doctor that read no GPUs refuses on its own (its refusal says why). Otherwise a wrong
    GPU variable or a layout that does not fit the host's GPUs is named first, followed by
    the doctor's failed checks when there are any.
    """
    verdict = check_host(module, params, result) if params["doctor"] is not None else None
    host, settings = params["host"], params["plan"]
    if verdict is not None:
        found, detail = verdict["gpus"], verdict["nvidia_smi"].get("detail")
    elif any(is_unset(settings.get(key)) for key in ("gpu_count", "gpu_memory_mib")):
        facts = _memo(memo, "gpus", lambda: Prober(module).gpus(None))
        found, detail = facts["gpus"], facts["smi"].get("detail")
    else:
        found, detail = [], "not read: no doctor"
    doctor_refusal = refusal(verdict, host) if verdict is not None and not verdict["ok"] else None
    if doctor_refusal and not found:
        module.fail_json(msg=doctor_refusal, **result)
    try:
        gpus = host_gpus(settings, found, host, detail)
        result["gpus"] = gpus
        layout = fit_layout(params["strategy"], params["layout"], gpus["count"],
                            settings.get("nnodes") or 1, host)
    except PreflightError as exc:
        module.fail_json(msg="\n".join(m for m in (str(exc), doctor_refusal) if m), **result)
    if doctor_refusal:
        module.fail_json(msg=doctor_refusal, **result)
    result["layout"] = layout
    return gpus, layout


def _memo(memo, key, compute):
    """``compute()``, once per call of the module with O(candidates) (``memo`` a dict);
    every time without (``memo`` None)."""
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]


def probe_release(module, params, layout, result, memo=None):
    """Release, flags, argv and the argparse verdict for ``layout``; fills ``result``."""
    python = params["python"]
    prefix = "server_python %s: " % python
    try:
        probe.check_interpreter(python)
        info = _memo(memo, "release",
                     lambda: probe.query_release(module, python, params["columns"], params["timeout"]))
        data, help_cached, _path = probe.flags(module, python, info, params["cache_dir"],
                                               params["columns"], params["timeout"])
    except probe.ProbeError as exc:
        _fail_probe(module, prefix + str(exc), exc, result)
    version = info["version"]
    result.update(version=version, fingerprint=info["fingerprint"], prog=data.get("prog"))
    lacking = missing(data["flags"], params["require"])
    if lacking:
        module.fail_json(msg="%ssglang %s lacks required flag%s: %s" % (
            prefix, version, "" if len(lacking) == 1 else "s", ", ".join(lacking)),
            missing=lacking, **result)
    layout = dict((k, layout[k]) for k in ("tp", "pp", "ep", "dp"))
    if params["multinode"]:
        layout.update(params["multinode"])
    try:
        argv, translations = render_argv(data["flags"], version, layout=layout,
                                         server_args=params["server_args"],
                                         extra_args=params["extra_args"])
    except ArgvError as exc:
        module.fail_json(msg="server_extra_args or the server settings are not valid for this "
                             "release: %s" % exc, problems=exc.problems, **result)
    result.update(argv=argv, translations=translations)
    ok, verdict_cached, error = probe.argparse_verdict(module, python, info, argv,
                                                       params["cache_dir"], params["timeout"])
    if not ok:
        module.fail_json(msg="sglang %s refuses the launch flags (server_extra_args or the server "
                             "settings): %s" % (version, error), **result)
    result["cached"] = {"help": help_cached, "argparse": verdict_cached}
    check_server_args(module, params, info, argv, result)


def check_server_args(module, params, info, argv, result):
    """The release's own derivations and checks over ``argv`` (the semantic gate)."""
    version = info["version"]
    gpu = sa_gate.gpu_of(result.get("gpus") or {})
    if gpu is None:
        result["server_args"] = {"verdict": "skipped", "changes": [], "messages": [],
                                 "reason": "the host's GPU model and compute capability were not read"}
        module.warn("sglang %s: the server-args check was skipped: %s"
                    % (version, result["server_args"]["reason"]))
        return
    try:
        answer, cached = sa_gate.ask(module, params["python"], info, argv, gpu,
                                     params["cache_dir"], params["timeout"])
    except sa_gate.GateError as exc:
        _fail_probe(module, "server_python %s: %s" % (params["python"], exc), exc, result)
    gate = sa_gate.summary(answer, version)
    result["server_args"] = gate
    result["cached"]["server_args"] = cached
    if gate["verdict"] != "ok":
        module.fail_json(msg="sglang %s refuses the launch flags once it derives its settings for %d "
                             "x %s: %s (%s)" % (version, gpu["count"], gpu["name"], gate["error"],
                                                gate["where"]), **result)
    if gate["strict_refuses"] and params["strict"]:
        module.fail_json(msg="%s; refused because sglang_strict is true (nothing was changed on "
                             "the host)" % "; ".join(gate["strict_refuses"]), **result)
    # a value the launch flags asked for and the release changed is a warning; the release
    # changing its own default (the overlap schedule under pp) is reported with the rollout
    # and recorded (server_args.messages), not warned about on every deploy
    for message in gate["strict_refuses"]:
        module.warn(message)


def _fail_probe(module, msg, exc, result):
    if exc.result is not None:
        module.fail_json(**failure_payload(msg, exc.result, **result))
    module.fail_json(msg=msg, **result)


class _Refused(Exception):
    """A refusal of one entry of O(candidates): what fail_json was given."""

    def __init__(self, payload):
        Exception.__init__(self, payload.get("msg"))
        self.payload = payload


class _OneCandidate:
    """The module as one entry of O(candidates) sees it: a refusal ends that entry only
    (fail_json raises), and its warnings stay with it."""

    def __init__(self, module):
        self._module = module
        self.warnings = []

    def fail_json(self, **kwargs):
        raise _Refused(kwargs)

    def warn(self, text):
        self.warnings.append(text)

    def __getattr__(self, name):
        return getattr(self._module, name)


def check_one(module, params, memo=None):
    """Every verdict for one launch request; the result a single call returns."""
    result = dict(changed=False)
    gpus, layout = check_gpus(module, params, result, memo)
    settings = dict(params["plan"], gpu_count=gpus["count"], gpu_memory_mib=gpus["memory_mib"])
    try:
        # the model directory and the port are the same for every entry of O(candidates)
        _memo(memo, "model_dir", lambda: check_model_dir(params["model_path"], params["host"],
                                                         params["model_commit"]))
        plan, model_warnings = plan_memory(params["model_path"], layout, settings,
                                           params["extra_args"])
        result.update(plan=plan, pp_layer_partition=plan.get("pp_layer_partition") or "")
        allow_unfit = module.boolean(params["plan"].get("allow_unfit") or False)
        for warning in model_warnings + judge_plan(plan, params["host"], allow_unfit):
            module.warn(warning)
        result["port_owner"] = _memo(memo, "port_owner", lambda: check_port(module, params))
    except PreflightError as exc:
        module.fail_json(msg=str(exc), **result)
    probe_release(module, params, layout, result, memo)
    replan_with_release(module, params, layout, settings, result)
    return result


def candidate_problems(entries):
    """What is wrong with O(candidates), every entry at once."""
    problems = []
    for pos, entry in enumerate(entries):
        name = "candidates[%d]" % pos
        if not isinstance(entry.get("id"), str) or not entry.get("id"):
            problems.append("%s: id must be a non-empty string (got %r)" % (name, entry.get("id")))
        if not isinstance(entry.get("layout"), dict):
            problems.append("%s: layout must be a mapping (got %r)" % (name, entry.get("layout")))
        if not isinstance(entry.get("extra_args", {}), dict):
            problems.append("%s: extra_args must be a mapping (got %r)" % (name, entry.get("extra_args")))
    return problems


def check_candidates(module, params):
    """One result per entry of O(candidates), in order; the release is read once."""
    memo, results = {}, []
    for entry in params["candidates"]:
        one = _OneCandidate(module)
        entry_params = dict(params, strategy=entry.get("strategy"), layout=entry["layout"],
                            extra_args=entry.get("extra_args") or {})
        try:
            result = check_one(one, entry_params, memo)
            result["failed"] = False
        except _Refused as exc:
            result = dict(exc.payload, failed=True)
        result.update(item={"id": entry["id"]}, warnings=one.warnings)
        results.append(result)
    return results


def main():
    module = AnsibleModule(
        argument_spec=dict(
            host=dict(type="str", required=True),
            python=dict(type="path", required=True),
            model_path=dict(type="str", required=True),
            model_commit=dict(type="str"),
            layout=dict(type="dict"),
            strategy=dict(type="str"),
            multinode=dict(type="dict"),
            server_args=dict(type="dict", default={}),
            extra_args=dict(type="dict", default={}),
            require=dict(type="list", elements="str", default=[]),
            plan=dict(type="dict", required=True),
            port=dict(type="int", required=True),
            service_name=dict(type="str", default="sglang"),
            record_path=dict(type="path", default=_paths.RECORD_PATH),
            cache_dir=dict(type="path", default=_paths.CACHE_DIR),
            columns=dict(type="int", default=200),
            timeout=dict(type="int", default=120),
            doctor=dict(type="dict"),
            strict=dict(type="bool", default=False),
            candidates=dict(type="list", elements="dict"),
        ),
        required_one_of=[("layout", "candidates")],
        mutually_exclusive=[("layout", "candidates"), ("doctor", "candidates")],
        supports_check_mode=True,
    )
    params = module.params
    if params["candidates"] is not None:
        problems = candidate_problems(params["candidates"])
        if problems:
            module.fail_json(msg="candidates: %s" % "; ".join(problems), problems=problems)
        module.exit_json(changed=False, results=check_candidates(module, params))
    module.exit_json(**check_one(module, params))


def replan_with_release(module, params, layout, settings, result):
    """Plan again with the static memory fraction the release itself derived, when the plan
    used the planner's estimate of SGLang's default (the release's own number wins)."""
    derived = (result.get("server_args") or {}).get("derived") or {}
    fraction = derived.get("mem_fraction_static")
    if fraction is None or result["plan"].get("fraction_from") != "SGLang's default":
        return
    estimate = result["plan"].get("mem_fraction_static")
    try:
        plan, _warnings = plan_memory(params["model_path"], layout,
                                      dict(settings, mem_fraction_static=fraction),
                                      params["extra_args"])
        plan["fraction_from"] = "sglang %s's own default (server-args check)" % result["version"]
        plan["planner_estimate_mem_fraction_static"] = estimate
        result.update(plan=plan, pp_layer_partition=plan.get("pp_layer_partition") or "")
        allow_unfit = module.boolean(params["plan"].get("allow_unfit") or False)
        for warning in judge_plan(plan, params["host"], allow_unfit):
            module.warn(warning)
    except PreflightError as exc:
        module.fail_json(msg=str(exc), **result)


if __name__ == "__main__":
    main()
