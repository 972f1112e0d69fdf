"""Figures of the tune scenario from its raw data (test only): the journal, the report's
JSON, the tune's space and each server's emulator start records, read after each run.

    python trials_check.py --work DIR --report tune-<time>.json --vars vars/tune.yml \
        --hosts h1,h2,h3,h4 --phases before,killed,resumed,again --journal-lines 1,6,6

DIR holds starts-<phase>-<host>.jsonl (the host's starts.jsonl after that phase) and
journal.jsonl; --journal-lines gives the journal's length after each phase but the first.
A start is matched to a candidate by its layout and the values of the space's knob flags
in its argv (a knob at null, or a switch at false, is absent). Prints one JSON document.
"""

import argparse
import datetime
import json
import os

import yaml

LAYOUTS = {"tp8": (8, 1, 1), "pp8": (1, 8, 1), "ep8": (8, 1, 8)}


def _text(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _flags(argv):
    out, i = {}, 0
    while i < len(argv):
        if argv[i].startswith("--"):
            if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                out[argv[i]] = argv[i + 1]
                i += 2
                continue
            out[argv[i]] = True
        i += 1
    return out


def _same(value, given):
    if value is None or value is False:
        return given is None
    if value is True:
        return given is True
    try:
        return given is not None and given is not True and float(given) == float(value)
    except ValueError:
        return str(given) == str(value)


def matches(start, cand, knobs):
    lay = start.get("layout") or {}
    if (lay.get("tp_size"), lay.get("pp_size"), lay.get("ep_size")) != LAYOUTS[cand["strategy"]]:
        return False
    flags = _flags(start.get("argv") or [])
    extra = cand.get("extra_args") or {}
    return all(_same(extra.get(k), flags.get(k)) for k in knobs)


def _time(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc).timestamp()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--vars", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--phases", required=True)
    ap.add_argument("--journal-lines", required=True)
    args = ap.parse_args(argv)
    hosts, phases = args.hosts.split(","), args.phases.split(",")
    counts = [int(n) for n in args.journal_lines.split(",")]
    space = yaml.safe_load(_text(args.vars))["tune_space"]
    knobs = list(space["knobs"])
    report = json.loads(_text(args.report))
    journal = [json.loads(line) for line in _text(os.path.join(args.work, "journal.jsonl")).splitlines() if line.strip()]
    ids = {r["id"] for r in report["rows"]} | {r["id"] for r in report["refused"]} | {r["id"] for r in report["left_out"]}
    trials = [t for t in journal if t.get("kind") == "trial" and t["candidate"]["id"] in ids]

    starts = {}
    for phase in phases:
        for host in hosts:
            path = os.path.join(args.work, "starts-%s-%s.jsonl" % (phase, host))
            starts[(phase, host)] = [json.loads(line) for line in _text(path).splitlines() if line.strip()] if os.path.exists(path) else []
    new_on = {}  # (phase, host) -> the host's starts since the phase before
    for prev, phase in zip(phases, phases[1:]):
        for h in hosts:
            new_on[(phase, h)] = starts[(phase, h)][len(starts[(prev, h)]):]
    new = {phase: [s for h in hosts for s in new_on[(phase, h)]] for phase in phases[1:]}
    every_new = [s for phase in phases[1:] for s in new[phase]]

    refused = report["refused"]
    # the release's own check says "refuses the launch flags"; the planner "does not fit"
    gate = [r for r in refused if "refuses the launch flags" in (r.get("reason") or "") or r.get("verdict") == "rewritten"]
    planner = [r for r in refused if "does not fit" in (r.get("reason") or "")]
    refused_loaded = [r["id"] for r in refused if any(matches(s, r, knobs) for s in every_new)]

    by_phase = {}
    for i, phase in enumerate(phases[1:]):
        lo = counts[i - 1] if i else 0
        by_phase[phase] = [t for t in journal[lo:counts[i]] if t.get("kind") == "trial"]
    measured = [t["candidate"]["id"] for t in trials]
    first = {t["candidate"]["id"] for t in by_phase[phases[1]] if t["status"] == "ok"}
    rows = {r["id"]: r for r in report["rows"]}
    # a host that already ran a candidate measures it without a restart: any start counts
    every = [s for h in hosts for s in starts[(phases[-1], h)]]
    unmatched = sorted(cid for cid in rows if not any(matches(s, rows[cid], knobs) for s in every))
    later = [s for p in phases[2:] for s in new[p]]
    # the winner's rollout loads it once more on each host that does not run it yet (it may
    # be a first-run trial); any other first-run candidate loaded again was measured again
    winner = (report.get("winner") or {}).get("id")
    reloaded = sorted(cid for cid in first if cid in rows and cid != winner
                      and any(matches(s, rows[cid], knobs) for s in later))
    winner_loads = {h: sum(1 for p in phases[2:] for s in new_on[(p, h)]
                           if winner in rows and matches(s, rows[winner], knobs))
                    for h in hosts}

    def wall(lines):
        if not lines:
            return 0.0
        # a trial's own wall_s ends at its measurement, not at its journal line: the round
        # starts at the first trial's start
        ends = [_time(t["time"]) for t in lines]
        starts = [float(t["started"]) if t.get("started") is not None else e - float(t["wall_s"])
                  for e, t in zip(ends, lines)]
        return max(ends) - min(starts)

    one = by_phase[phases[1]][0] if by_phase[phases[1]] else None

    # what the compare scenario checked: each strategy's single-request decode rate (its
    # first measured trial, concurrency 1), and every strategy measured without a failure
    single = {}
    for t in trials:
        strat = t["candidate"]["strategy"]
        run1 = [r for r in t.get("runs") or [] if r.get("concurrency") == 1]
        if strat not in single and t["status"] == "ok" and run1:
            single[strat] = run1[0].get("request_tok_s")

    def mean_trial(lines):
        walls = [float(t["wall_s"]) for t in lines]
        return round(sum(walls) / len(walls), 1) if walls else None
    out = {
        "space_size": report["space_size"],
        "admissible": report["space_size"] - len(report["refused"]),
        "refused_planner": [r["id"] for r in planner],
        "refused_gate": [r["id"] for r in gate],
        "refused_reasons": {r["id"]: r.get("reason") for r in refused},
        "refused_loaded": refused_loaded,
        "measured_unmatched": unmatched,
        "trials": len(trials),
        "measured_twice": sorted({m for m in measured if measured.count(m) > 1}),
        "measured_per_phase": {p: [t["candidate"]["id"] for t in v] for p, v in by_phase.items()},
        "starts_per_phase": {p: len(v) for p, v in new.items()},
        "first_run_measured_loaded_again": reloaded,
        "winner_loads_after_first_run": winner_loads,
        "one_trial_s": float(one["wall_s"]) if one else None,
        "one_trial_host": one["host"] if one else None,
        "search_wall_s": {p: round(wall(v), 1) for p, v in by_phase.items()},
        "trial_wall_s": {p: [round(float(t["wall_s"]), 1) for t in v] for p, v in by_phase.items()},
        # the mean of a phase's trials, each timed on its host from its load to its journal
        # line, beside the others of its round
        "mean_trial_s": {p: mean_trial(v) for p, v in by_phase.items()},
        "single_tok_s": single,
        "strategies_measured_ok": sorted({t["candidate"]["strategy"] for t in trials if t["status"] == "ok"}),
        "strategies": list(space["strategies"]),
        "method": report.get("method"),
        "winner": report.get("winner"),
        "left_out": len(report["left_out"]),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
