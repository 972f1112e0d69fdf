"""What the model scenario's check scripts share (files/*.py import it: a script's own folder
is first on sys.path): values in first-seen order without repeats, and the run of a
subcommand over one JSON document from stdin that prints one JSON document or exits 1
naming what it could not read."""

import json
import sys


def unique(values):
    seen = []
    for value in values:
        if value not in seen:
            seen.append(value)
    return seen


def answer(script, what, compute, stdin=None):
    """Print ``compute(document)`` as JSON (the document: stdin's JSON); 1 on an unreadable one."""
    try:
        out = compute(json.load(stdin or sys.stdin))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        print("%s %s: unreadable input: %s: %s" % (script, what, type(exc).__name__, exc), file=sys.stderr)
        return 1
    json.dump(out, sys.stdout)
    return 0
