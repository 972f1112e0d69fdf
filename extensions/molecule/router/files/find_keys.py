"""Look for secrets on this host where other users could read them (issue 22): every
process's command line (/proc/<pid>/cmdline, readable by any local user), the whole
journal, and every world-readable regular file under the usual roots. The secrets come
on stdin as a JSON list, never as arguments (which would put them in this process's own
command line). Prints JSON: {"hits": [{"where", "what"}], "scanned": {...}}.

tasks/keys.yml copies it onto each host and pipes the keys to it (podman exec -i).
"""

import json
import os
import stat
import subprocess
import sys

ROOTS = ("/etc", "/opt", "/var", "/usr/local", "/tmp", "/run", "/root", "/home", "/srv")
SKIP = ("/var/log/journal", "/run/log/journal", "/proc", "/sys", "/dev")
MAX_BYTES = 64 * 1024 * 1024


def processes(secrets, me):
    hits, count = [], 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == me:
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as handle:
                cmdline = handle.read()
            with open("/proc/%s/comm" % pid, "rb") as handle:
                comm = handle.read().strip().decode("utf-8", "replace")
        except OSError:
            continue
        count += 1
        for secret in secrets:
            if secret in cmdline:
                hits.append({"where": "process list", "what": "pid %s (%s)" % (pid, comm)})
    return hits, count


def journal(secrets):
    out = subprocess.run(["journalctl", "--no-pager", "-o", "short-unix", "-q"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False).stdout
    hits = []
    lines = out.split(b"\n")
    for line in lines:
        for secret in secrets:
            if secret in line:
                text = line.replace(secret, b"<KEY>").decode("utf-8", "replace")
                hits.append({"where": "journal", "what": text[:300]})
    return hits, len(lines)


def files(secrets):
    hits, count = [], 0
    for root in ROOTS:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if os.path.join(dirpath, d) not in SKIP]
            for name in filenames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode) or not st.st_mode & stat.S_IROTH:
                    continue
                if st.st_size > MAX_BYTES:
                    continue
                try:
                    with open(path, "rb") as handle:
                        data = handle.read()
                except OSError:
                    continue
                count += 1
                for secret in secrets:
                    if secret in data:
                        hits.append({"where": "file", "what": "%s (mode %o)" % (
                            path, stat.S_IMODE(st.st_mode))})
    return hits, count


def main():
    secrets = [s.encode("utf-8") for s in json.load(sys.stdin) if s]
    if not secrets:
        sys.exit("no secrets on stdin")
    found, scanned = [], {}
    for name, check in (("processes", lambda: processes(secrets, os.getpid())),
                        ("journal_lines", lambda: journal(secrets)),
                        ("files", lambda: files(secrets))):
        hits, count = check()
        found += hits
        scanned[name] = count
    print(json.dumps({"hits": found, "scanned": scanned}))


if __name__ == "__main__":
    main()
