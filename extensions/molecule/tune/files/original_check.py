"""Figures of the tune scenario's keep=original run (test only): its trials, and each
server's starts from phase ``original-before`` to phase ``before`` (the run in between).

    python original_check.py --work DIR --hosts h1,h2,h3,h4 --journal journal-original.jsonl

Prints one JSON document: the journal's trials (id, host, status, started, wall_s), its
``original`` and ``stays`` lines, per host the number of new starts and the argv of its last
start before and after the run.
"""

import argparse
import json
import os


def _lines(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", required=True)
    ap.add_argument("--hosts", required=True)
    ap.add_argument("--journal", required=True)
    args = ap.parse_args(argv)
    hosts = {}
    for host in args.hosts.split(","):
        before = _lines(os.path.join(args.work, "starts-original-before-%s.jsonl" % host))
        after = _lines(os.path.join(args.work, "starts-before-%s.jsonl" % host))
        hosts[host] = {
            "new_starts": len(after) - len(before),
            "argv_before": before[-1].get("argv") if before else None,
            "argv_after": after[-1].get("argv") if after else None,
            "layouts_loaded": [s.get("layout") for s in after[len(before):]],
        }
        hosts[host]["same_argv"] = hosts[host]["argv_before"] == hosts[host]["argv_after"]
    lines = _lines(args.journal)
    trials = [{"id": t["candidate"]["id"], "host": t.get("host"), "status": t.get("status"),
               "strategy": t["candidate"].get("strategy"), "started": t.get("started"),
               "wall_s": t.get("wall_s")}
              for t in lines if t.get("kind") == "trial"]
    # what each host served before the tune (written once per tune) and what it left there
    originals = [{"host": t.get("host"), "deployed": t.get("deployed"), "strategy": t.get("strategy")}
                 for t in lines if t.get("kind") == "original"]
    stays = [{"host": t.get("host"), "keep": t.get("keep"), "strategy": t.get("strategy")}
             for t in lines if t.get("kind") == "stays"]
    print(json.dumps({"trials": trials, "hosts": hosts, "originals": originals, "stays": stays}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
