"""An emulator fleet in-process, for the tune's tests: each candidate goes through the
collection's planner (``_preflight.plan`` / ``judge_plan``), its argv renderer, the emulated
release's argparse and its server-args derivation and checks (what
``server_preflight``'s gate runs against the emulator) and the collection's own gate
summary; an admitted candidate is "loaded" as the emulator's in-process bench
(``sglang._emulator.bench``) and measured over the load's concurrencies, its results read
by the collection's own ``bench_serving`` parser.

Not a test module (no ``test_`` prefix); the tests import it.
"""

import os
import sys

from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES, ROOT, SGLANG_HELP

SRC = os.path.join(ROOT, "tests", "emulator", "src")
if SRC not in sys.path:
    sys.path.insert(0, SRC)

from sglang._emulator import bench as emu_bench  # noqa: E402  pylint: disable=wrong-import-position
from sglang._emulator import cli as emu_cli  # noqa: E402  pylint: disable=wrong-import-position
from sglang._emulator import server_args as emu_sa  # noqa: E402  pylint: disable=wrong-import-position

from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_tool  # noqa: E402
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _preflight  # noqa: E402
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _server_args_gate as gate  # noqa: E402
from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _strategy  # noqa: E402
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_argv import render_argv  # noqa: E402
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import parse_help  # noqa: E402

MODEL = os.path.join(FIXTURES, "models", "moonshotai__Kimi-K2.5")
GPU = {"count": 8, "memory_mib": 97887, "cc": [12, 0],
       "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition"}


def release_flags(release):
    with open(os.path.join(SGLANG_HELP, "sglang-%s.txt" % release)) as handle:
        return parse_help(handle.read())["flags"]


def _pick(values):
    return dict((k, values[k]) for k in gate.KEYS if k in values)


class Fleet:
    """Preflight and trials of candidates on emulated 8-GPU hosts of one release."""

    def __init__(self, release="0.5.9", model=MODEL, gpu=None, port=30000):
        self.release = release
        self.model = model
        self.gpu = dict(gpu or GPU)
        self.port = port
        self.flags = release_flags(release)
        self.loads = []  # ids of the candidates "loaded" (started), in order
        self.rounds_left = []  # tune_plan's rounds_left of each call of run_tune, in order
        self._measured = {}  # the in-process model is deterministic: one run per argv and load
        self._preflights = {}

    def preflight(self, cand):
        """What ``server_preflight`` returns for a candidate (``failed`` + ``msg`` on a refusal)."""
        key = (cand["strategy"], repr(sorted(cand["extra_args"].items())))
        if key not in self._preflights:
            self._preflights[key] = self._preflight(cand)
        return dict(self._preflights[key])

    def _preflight(self, cand):
        host = "trial-1"
        result = {"changed": False, "version": self.release,
                  "gpus": {"count": self.gpu["count"], "memory_mib": self.gpu["memory_mib"],
                           "name": self.gpu["name"], "source": "detected", "memory_source": "detected"}}
        try:
            layout = _strategy.resolve(cand["strategy"], self.gpu["count"], 1)
        except _strategy.StrategyError as exc:
            return dict(result, failed=True, msg=str(exc))
        result["layout"] = layout
        settings = {"gpu_count": self.gpu["count"], "gpu_memory_mib": self.gpu["memory_mib"],
                    "nnodes": 1, "release": self.release}
        try:
            plan, _warnings = _preflight.plan(self.model, layout, settings, cand["extra_args"])
            _preflight.judge_plan(plan, host, False)
        except _preflight.PreflightError as exc:
            return dict(result, failed=True, msg=str(exc))
        result["plan"] = plan
        argv, _tr = render_argv(self.flags, self.release,
                                layout=dict((k, layout[k]) for k in ("tp", "pp", "ep", "dp")),
                                server_args={"--model-path": self.model, "--host": "127.0.0.1",
                                             "--port": self.port},
                                extra_args=cand["extra_args"])
        result["argv"] = argv
        try:
            asked = emu_cli.parse(self.release, argv)
        except SystemExit as exc:
            return dict(result, failed=True, msg="sglang %s refuses the launch flags: argparse exit %s"
                        % (self.release, exc.code))
        answer = {"argv": argv, "asked": _pick(asked), "checks": "check_server_args"}
        try:
            derived, warnings = emu_sa.derive(self.release, asked, self.gpu["memory_mib"], self.gpu["cc"],
                                              emu_sa.model_facts(self.model))
            emu_sa.check(self.release, derived)
            answer.update(verdict="ok", derived=_pick(derived),
                          warnings=[{"msg": w, "where": "server_args.py"} for w in warnings])
        except emu_sa.ServerArgsCheckError as exc:
            answer.update(verdict="refused", error="AssertionError: %s" % exc, where="server_args.py")
        summary = gate.summary(answer, self.release)
        result["server_args"] = summary
        if summary["verdict"] != "ok":
            return dict(result, failed=True, msg="sglang %s refuses the launch flags once it derives its "
                        "settings for %d x %s: %s (%s)" % (self.release, self.gpu["count"], self.gpu["name"],
                                                           summary["error"], summary["where"]))
        return result

    def trial(self, cand, load):
        """Load the candidate (in-process) and measure every concurrency of ``load``:
        ``(status, reason, runs)`` as the playbook passes them to ``tune_record``."""
        self.loads.append(cand["id"])
        key = (tuple(cand["argv"]), repr(sorted(load.items())))
        if key not in self._measured:
            self._measured[key] = self._trial(cand, load)
        return self._measured[key]

    def _trial(self, cand, load):
        try:
            model, _info = emu_bench.server_model(self.release, cand["argv"], gpus_per_node=self.gpu["count"],
                                                  gpu_memory_mib=self.gpu["memory_mib"])
        except emu_bench.StartFailure as exc:
            return "failed", str(exc), []
        runs = []
        for conc in load["concurrencies"]:
            prompts = load["num_prompts"]
            prompts = prompts.get(str(conc), prompts.get(conc)) if isinstance(prompts, dict) else prompts
            line = emu_bench.run(model, conc, int(prompts), load["input_len"], load["output_len"])
            runs.append(_bench_tool.parse_bench_serving(line, strategy=cand["strategy"], concurrency=conc,
                                                        num_prompts=int(prompts)))
        return "ok", "", runs


def run_tune(fleet, space, load, slo, hosts, journal, budget=0, method="auto", stop_after=None):
    """The flow of playbooks/tune.yml over the in-process fleet: expand, preflight every
    candidate, then rounds of ``tune_plan next`` / trials / ``tune_record`` until done.
    Returns ``(last plan result, rounds, trials run)``; ``stop_after`` trials: an interrupted
    tune (the rest of the round is lost)."""
    from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import plan as tune_plan
    from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import space as tune_space

    expanded = tune_space.expand(space, fleet.flags, fleet.release)
    cands = expanded["candidates"]
    preflight = dict((c["id"], fleet.preflight(c)) for c in cands)
    rounds, trials = 0, 0
    while True:
        out = tune_plan.next_round(cands, expanded["knobs"], preflight, journal, hosts, budget, method,
                                   slo, fleet.release, "", load)
        fleet.rounds_left.append(out["rounds_left"])
        if out["done"]:
            return out, rounds, trials
        rounds += 1
        picked = [c for c in out["assignment"].values() if c is not None]
        assert len(set(c["id"] for c in picked)) == len(picked), "a round assigned one candidate twice"
        for host, cand in sorted(out["assignment"].items()):
            if cand is None:
                continue
            if stop_after is not None and trials >= stop_after:
                return out, rounds, trials
            status, reason, runs = fleet.trial(cand, load)
            tune_plan.record(journal, cand, host, runs, status, reason, load=load, slo=slo)
            trials += 1
