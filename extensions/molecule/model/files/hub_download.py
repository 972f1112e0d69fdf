"""A Hub download running in the background on a host (issue 47: the Jinja that decoded its
progress file and the shell that watched for a partial file, with unit tests). Run on the
host (``ansible.builtin.script``), standard library only.

``progress PATH``: reads the download's progress file (model_fetch's ``progress_path``:
``pid``, ``bytes_done``, ``files_done``, ``line``, ...) and prints ``{present, bytes_done,
pid, line}`` (``present`` false, ``bytes_done`` 0, while the file is missing or unreadable).
Its output is what a wait's ``until`` reads, so it prints on every outcome.

``kill-when-partial --under DIR --pid PID``: looks under DIR every 0.1 s, 600 times at most,
for an entry named ``*.incomplete`` holding bytes (a file huggingface_hub is still writing)
and SIGKILLs PID within the look that found it; prints the partial file's path. Exits 1 (``no
partial file in 60 s``) when none showed, and when the kill fails.
"""

import argparse
import fnmatch
import json
import os
import signal
import sys
import time

PARTIAL = "*.incomplete"
LOOKS = 600
EVERY_S = 0.1


def progress(path):
    try:
        with open(path, encoding="utf-8") as handle:
            doc = json.load(handle)
        return {"present": True, "bytes_done": int(doc["bytes_done"]), "pid": doc.get("pid"),
                "line": doc.get("line")}
    except (OSError, ValueError, KeyError, TypeError):
        return {"present": False, "bytes_done": 0, "pid": None, "line": None}


def partial_file(top):
    """The first entry under ``top`` named ``*.incomplete`` with more than 0 bytes (as ``find
    TOP -name '*.incomplete' -size +0 -print -quit``), or None."""
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            if fnmatch.fnmatch(name, PARTIAL):
                path = os.path.join(root, name)
                try:
                    if os.lstat(path).st_size > 0:
                        return path
                except OSError:
                    continue  # renamed meanwhile
    return None


def kill_when_partial(top, pid, looks=LOOKS, every=EVERY_S, kill=os.kill, sleep=time.sleep):
    """The partial file seen when ``pid`` was killed; None when none showed in ``looks``."""
    for _look in range(looks):
        found = partial_file(top)
        if found:
            kill(pid, signal.SIGKILL)
            return found
        sleep(every)
    return None


def main(argv=None, kill=os.kill, sleep=time.sleep):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("progress").add_argument("path")
    one = sub.add_parser("kill-when-partial")
    one.add_argument("--under", required=True)
    one.add_argument("--pid", type=int, required=True)
    args = parser.parse_args(argv)
    if args.what == "progress":
        json.dump(progress(args.path), sys.stdout)
        return 0
    try:
        found = kill_when_partial(args.under, args.pid, kill=kill, sleep=sleep)
    except OSError as exc:
        print("kill %d: %s" % (args.pid, exc))
        return 1
    if found is None:
        print("no partial file in 60 s")
        return 1
    print(found)
    return 0


if __name__ == "__main__":
    sys.exit(main())
