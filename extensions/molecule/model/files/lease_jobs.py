"""How each host's part in the swarm ended after its controller was killed (issue 47: the
Jinja that decoded the swarm jobs and sorted them into seed and peers, with unit tests).

Reads, on the controller, each container's (``--hosts``, comma-separated) async job file that names ``lease_expired``
(``podman exec <host> sh -c 'cat $(grep -l lease_expired /root/.ansible_async/*)'``: one
model_fetch result as async_wrapper wrote it) and prints one JSON object:

``ended`` (host -> its job), ``lease_expired`` and ``lease_s`` (the distinct values of the
jobs' ``lease_expired`` and ``lease.lease_s``, first seen first), ``seeds`` (jobs that did not
fail: the seed, which holds every file), ``seed_idle_s`` (the first seed's ``lease.idle_s``),
``peers`` (jobs that failed: the hosts that did not hold every file), ``peers_no_word`` (the
peers whose message says the controller went silent).

Exits 1, naming the host, when a job file cannot be read or is not one JSON document.
"""

import argparse
import json
import re
import subprocess
import sys

from _stdin_json import unique

READ_JOB = "cat $(grep -l lease_expired /root/.ansible_async/*)"
NO_WORD = "no word from the controller for"


def read_job(host):
    done = subprocess.run(["podman", "exec", host, "sh", "-c", READ_JOB], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, check=False)
    if done.returncode != 0:
        raise OSError("%s: rc %d: %s" % (host, done.returncode, done.stderr.strip()))
    try:
        return json.loads(done.stdout)
    except ValueError as exc:
        raise OSError("%s: not one JSON document (%s): %s" % (host, exc, done.stdout[:500])) from exc


def figures(ended):
    """``ended``: host -> job, in the hosts' order."""
    jobs = list(ended.values())
    seeds = [job for job in jobs if "failed" not in job]
    peers = [job for job in jobs if "failed" in job]
    return {
        "ended": ended,
        "lease_expired": unique(job.get("lease_expired") for job in jobs),
        "lease_s": unique((job.get("lease") or {}).get("lease_s") for job in jobs),
        "seeds": len(seeds),
        "seed_idle_s": (seeds[0].get("lease") or {}).get("idle_s") if seeds else None,
        "peers": len(peers),
        "peers_no_word": len([job for job in peers
                              if isinstance(job.get("msg"), str) and re.search(NO_WORD, job["msg"])]),
    }


def main(argv=None, read=read_job):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--hosts", required=True, help="the containers, comma-separated")
    args = parser.parse_args(argv)
    try:
        ended = dict((host, read(host)) for host in args.hosts.split(","))
    except OSError as exc:
        print("lease_jobs: %s" % exc, file=sys.stderr)
        return 1
    json.dump(figures(ended), sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
