"""The exhaustive side of the tune scenario (test only): the same space, load and target as
the fleet's tune, searched exhaustively in-process through the emulator's own engine
(``sglang._emulator.bench``, the scheduler model the emulated HTTP servers run) by the
tune branch's in-process fleet (``tests/unit/plugins/module_utils/tune/tune_inprocess.py``:
the collection's planner, argv renderer and gate summary, the release's argparse and
server-args checks, then the in-process bench, with the same rates as the fleet).

    python exhaustive.py --project ROOT --journal journal.jsonl --report tune-<time>.json \
        --vars vars/tune.yml --rates '<SGLANG_EMULATOR_RATES>'

Prints one JSON document: the exhaustive run's trials and best goodput, the in-process
goodput of the fleet search's winner, and for every candidate the fleet measured, its
goodput on the fleet against in-process (how close the two measurements are).
"""

import argparse
import json
import os
import sys
import tempfile
import time

import yaml


def _text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--project", required=True)
    ap.add_argument("--journal", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--vars", required=True)
    ap.add_argument("--rates", required=True)
    args = ap.parse_args(argv)
    os.environ["SGLANG_EMULATOR_RATES"] = args.rates
    sys.path.insert(0, os.path.join(args.project, ".cache", "collections"))
    sys.path.insert(0, os.path.join(args.project, "tests", "unit", "plugins", "module_utils", "tune"))
    import tune_inprocess  # pylint: disable=import-outside-toplevel,import-error
    from ansible_collections.gpufleet.sglang.plugins.module_utils.tune import metrics  # pylint: disable=import-outside-toplevel

    tune = yaml.safe_load(_text(args.vars))
    load = dict({"tool": "bench_serving"}, **tune["tune_load"])
    slo = tune.get("tune_slo") or {}
    report = json.loads(_text(args.report))

    def goodput(line):
        points = metrics.trial(line.get("runs") or [], (line.get("gpus") or {}).get("used") or 8, slo)
        return metrics.goodput(points, line.get("status", "ok"))[0]

    fleet = tune_inprocess.Fleet(release="0.5.9")
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        journal = os.path.join(tmp, "exhaustive.jsonl")
        plan, rounds, trials = tune_inprocess.run_tune(fleet, tune["tune_space"], load, slo, ["inproc-1"],
                                                       journal, budget=0, method="exhaustive")
        lines = [json.loads(line) for line in _text(journal).splitlines() if line.strip()]
    wall = time.monotonic() - start
    inproc = {line["candidate"]["id"]: goodput(line) for line in lines}
    ranked = sorted(((v, k) for k, v in inproc.items() if v is not None), reverse=True)
    best_goodput, best_id = ranked[0] if ranked else (None, None)

    fleet_lines = [json.loads(line) for line in _text(args.journal).splitlines() if line.strip()]
    ids = {r["id"] for r in report["rows"]}
    on_fleet = {line["candidate"]["id"]: goodput(line) for line in fleet_lines
                if line.get("kind") == "trial" and line["candidate"]["id"] in ids}
    winner = (report.get("winner") or {}).get("id")
    closeness = {cid: {"fleet": value, "inprocess": inproc.get(cid),
                       "ratio": (value / inproc[cid]) if value and inproc.get(cid) else None}
                 for cid, value in sorted(on_fleet.items())}
    print(json.dumps({
        "method": plan["method"], "trials": trials, "rounds": rounds, "wall_s": round(wall, 2),
        "refused": len(plan["refused"]), "best": best_id, "best_goodput": best_goodput,
        "winner": winner, "winner_goodput": inproc.get(winner),
        "winner_fleet_goodput": on_fleet.get(winner),
        "goodput_inprocess": inproc, "fleet_vs_inprocess": closeness,
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
