"""What a nested ansible-playbook run of the model scenario printed (issue 47: the Jinja that
sliced its output, decoded it and walked its tasks, with unit tests).

The run's stdout, as ``ansible.builtin.command`` registers it with
``ANSIBLE_STDOUT_CALLBACK=ansible.builtin.json``: the ``model transfer <host>: ...`` progress
lines model_wait prints as it polls, then the callback's document (``plays``: each with
``tasks``: ``{task: {name}, hosts: {host: result}}``). Each subcommand reads one JSON object
on stdin (``output``: that stdout; ``repo``: the Hub double's ``/_admin/repo``) and prints
one JSON object.

``refusal`` (output, repo; ``--free``): the phrases a refusal for lack of space names,
``needed <the tree's bytes> bytes``, ``free <--free> bytes`` and ``nothing was transferred``
(``phrases``), those missing from the output (``missing``), and, to show, the messages of the
failed results (``failures``: host, task, msg; null when the document does not parse).

``relay`` (output; ``--host``): for the tasks that hand the piece hashes out in waves (name
``Hand their piece hashes to this peer``) and for the relay's task (name ``feeder publishes
them``): how many there are (``waves``, ``relay``), how many of the host's results changed
(``waves_changed``) or were skipped (``relay_skipped``), and how many had no result for the
host or no ``changed`` in it (``waves_unreadable``), or no result for it (``relay_unreadable``).
"""

import argparse
import json
import re
import sys

from _stdin_json import answer

WAVE_TASK = "Hand their piece hashes to this peer"
RELAY_TASK = "feeder publishes them"


def document(output):
    """The callback's document: from the first line that starts with ``{`` (the whole output
    when none does after the first line)."""
    return json.loads(output[output.find("\n{") + 1:])


def tasks(doc):
    return [task for play in doc["plays"] for task in play["tasks"]]


def failures(doc):
    out = []
    for task in tasks(doc):
        for host, result in task["hosts"].items():
            if result.get("failed"):
                out.append({"host": host, "task": task["task"]["name"], "msg": result.get("msg")})
    return out


def refusal(output, repo, free):
    needed = sum(entry["size"] for entry in repo["tree"])
    phrases = ["needed %d bytes" % needed, "free %d bytes" % free, "nothing was transferred"]
    try:
        failed = failures(document(output))
    except (ValueError, KeyError, TypeError, AttributeError):
        failed = None
    return {"needed_bytes": needed, "phrases": phrases,
            "missing": [phrase for phrase in phrases if phrase not in output], "failures": failed}


def relay(output, host):
    every = tasks(document(output))
    waves = [task for task in every if re.search(WAVE_TASK, task["task"]["name"])]
    relayed = [task for task in every if re.search(RELAY_TASK, task["task"]["name"])]
    wave_results = [task["hosts"].get(host) for task in waves]
    relay_results = [task["hosts"].get(host) for task in relayed]
    return {
        "waves": len(waves),
        "waves_changed": len([r for r in wave_results if r is not None and r.get("changed")]),
        "waves_unreadable": len([r for r in wave_results if r is None or "changed" not in r]),
        "relay": len(relayed),
        "relay_skipped": len([r for r in relay_results if r is not None and r.get("skipped")]),
        "relay_unreadable": len([r for r in relay_results if r is None]),
    }


def main(argv=None, stdin=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("refusal").add_argument("--free", type=int, required=True)
    sub.add_parser("relay").add_argument("--host", required=True)
    args = parser.parse_args(argv)
    if args.what == "refusal":
        return answer("nested_run", "refusal", lambda doc: refusal(doc["output"], doc["repo"], args.free), stdin)
    return answer("nested_run", "relay", lambda doc: relay(doc["output"], args.host), stdin)


if __name__ == "__main__":
    sys.exit(main())
