"""What the deploy scenario's check scripts share (files/*.py import it: a script's own folder
is first on sys.path): a nested command run from the controller, what a nested
ansible-playbook printed, and files read in the test bed's containers.

A nested run is ``ansible-playbook`` with the default callback and
``ANSIBLE_CALLBACK_RESULT_FORMAT=json`` (as tests/testbed/tasks/deploy_run.yml runs it): a
banner per play (``PLAY [<name>] ****``), one result per host and task (``ok: [h] => {`` and
an indented JSON document for a debug message, ``fatal: [h]: FAILED! => {...}`` on one line
for a failure), the unified diff of a changed file under ``--diff``, and the ``PLAY RECAP``
lines (``h : ok=N changed=N unreachable=N failed=N skipped=N rescued=N ignored=N``).

:func:`run` runs a command and copies what it printed (stdout, then stderr) to this script's
stderr, so that the task's registered stderr holds the run's output for a person while its
stdout holds the script's JSON.

:func:`container_files` reads files in a container through one ``podman exec <host> python3``
(the container's name is the inventory host's, tests/testbed/create.yml).
"""

import json
import re
import subprocess
import sys

# a result's "msg": a JSON string (escaped quotes and newlines stay inside it)
MSG = re.compile(r'"msg": ("(?:[^"\\\n]|\\.)*")')
PLAY = re.compile(r"^PLAY \[(.*)\] \*+[ \t]*$", re.M)
RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)"
    r"\s+skipped=(\d+)\s+rescued=(\d+)\s+ignored=(\d+)", re.M)
RECORD = "/etc/ansible/facts.d/sglang.fact"
RECAP_KEYS = ("ok", "changed", "unreachable", "failed", "skipped", "rescued", "ignored")

# run in the container: each path's text, or null when it cannot be read
READER = (
    "import json, sys\n"
    "out = {}\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        with open(path, encoding='utf-8', errors='replace') as handle:\n"
    "            out[path] = handle.read()\n"
    "    except OSError:\n"
    "        out[path] = None\n"
    "print(json.dumps(out))\n"
)


class Unreadable(Exception):
    """An input that is not what the scenario's commands produce."""


def run(argv, env=None):
    """``(rc, stdout, stderr)`` of ``argv``; both outputs are copied to our stderr."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, check=False)
    except OSError as exc:
        raise Unreadable("cannot run %s: %s" % (argv[0], exc)) from exc
    out = done.stdout.decode("utf-8", "replace")
    err = done.stderr.decode("utf-8", "replace")
    sys.stderr.write(out)
    sys.stderr.write(err)
    sys.stderr.flush()
    return done.returncode, out, err


def messages(output):
    """Every result's ``msg`` in the output, decoded, in order."""
    out = []
    for match in MSG.finditer(output):
        try:
            out.append(json.loads(match.group(1)))
        except ValueError:
            continue
    return out


def plays(output):
    """How many times each play's banner was printed (a serial play: once per batch)."""
    counts = {}
    for name in PLAY.findall(output):
        counts[name] = counts.get(name, 0) + 1
    return counts


def recap(output):
    """``{host: {ok, changed, unreachable, failed, skipped, rescued, ignored}}``."""
    return {m.group(1): dict(zip(RECAP_KEYS, (int(v) for v in m.groups()[1:])))
            for m in RECAP.finditer(output)}


def tail(output, lines):
    """The last ``lines`` lines of the output (all of them when ``lines`` is 0)."""
    return output.splitlines()[-lines:] if lines > 0 else output.splitlines()


def host_list(text):
    return [h for h in (text or "").split(",") if h]


def container_files(host, paths, podman="podman"):
    """``{path: text or None}`` for ``paths`` in the container ``host`` (one ``podman exec``);
    raises Unreadable when podman fails or prints no such document."""
    try:
        done = subprocess.run([podman, "exec", host, "python3", "-c", READER] + list(paths),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    except OSError as exc:
        raise Unreadable("cannot run %s: %s" % (podman, exc)) from exc
    if done.returncode != 0:
        raise Unreadable("%s exec %s: rc %d: %s" % (podman, host, done.returncode,
                                                    done.stderr.decode("utf-8", "replace").strip()))
    try:
        out = json.loads(done.stdout.decode("utf-8", "replace"))
    except ValueError as exc:
        raise Unreadable("%s exec %s printed no JSON: %s" % (podman, host, exc)) from exc
    if not isinstance(out, dict):
        raise Unreadable("%s exec %s printed %r" % (podman, host, out))
    return out


def record_pending(host, podman="podman"):
    """The ``pending`` list of the host's deployment record (:data:`RECORD`, written by
    server_unit), read in its container; raises Unreadable when there is none."""
    text = container_files(host, [RECORD], podman).get(RECORD)
    if text is None:
        raise Unreadable("%s: no %s" % (host, RECORD))
    try:
        pending = json.loads(text)["pending"]
    except (ValueError, KeyError, TypeError) as exc:
        raise Unreadable("%s: %s holds no pending list: %s" % (host, RECORD, exc)) from exc
    if not isinstance(pending, list):
        raise Unreadable("%s: the pending of %s is %r" % (host, RECORD, pending))
    return pending


def answer(script, compute):
    """Print ``compute()`` as JSON; 1 (and why, on stderr) when an input was unreadable."""
    try:
        out = compute()
    except Unreadable as exc:
        print("%s: %s" % (script, exc), file=sys.stderr)
        return 1
    json.dump(out, sys.stdout)
    return 0
