"""SIGKILL a process and every process below it, stopped first so that nothing forks in
between (issue 47: the ``ps | awk`` walk of the process tree, with unit tests).

ansible-playbook's workers start sessions of their own (setsid): a kill of its process group
would leave them running. So the tree is walked by parent pid, level by level, from the pid
in ``--root-file`` (the process ``setsid sh -c 'echo $$ > FILE; exec ...'`` became), in
``ps -e -o pid=,ppid=``; every process of it gets SIGSTOP; the tree is walked again (nothing
forks while stopped) and every process of it gets SIGKILL. A process gone meanwhile is no
error. Prints ``{killed_at: the time after the kill (epoch seconds), stopped: [pids],
killed: [pids]}``.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time


def parents(ps_output):
    """``(pid, ppid)`` of each line of ``ps -e -o pid=,ppid=``."""
    table = []
    for line in ps_output.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[0].isdigit() and fields[1].isdigit():
            table.append((int(fields[0]), int(fields[1])))
    return table


def tree(table, root):
    """``root`` and every process below it, level by level."""
    every, level = [root], [root]
    while level:
        below = set(level)
        level = [pid for pid, ppid in table if ppid in below and pid not in every]
        every.extend(level)
    return every


def process_table():
    return parents(subprocess.run(["ps", "-e", "-o", "pid=,ppid="], stdout=subprocess.PIPE,
                                  universal_newlines=True, check=True).stdout)


def signal_all(pids, signum, kill=os.kill):
    for pid in pids:
        try:
            kill(pid, signum)
        except OSError:
            pass  # gone already


def main(argv=None, table=process_table, kill=os.kill, clock=time.time):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--root-file", required=True, help="the file that holds the root's pid")
    args = parser.parse_args(argv)
    with open(args.root_file, encoding="ascii") as handle:
        text = handle.read().strip()
    if not text.isdigit():
        print("kill_tree: %s holds no pid: %r" % (args.root_file, text), file=sys.stderr)
        return 1
    root = int(text)
    stopped = tree(table(), root)
    signal_all(stopped, signal.SIGSTOP, kill)
    killed = tree(table(), root)
    signal_all(killed, signal.SIGKILL, kill)
    json.dump({"killed_at": clock(), "stopped": stopped, "killed": killed}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
