# -*- coding: utf-8 -*-
"""Rebuild a real argparse parser from a fixture ``sglang-<V>.actions.json``.

Test helper (not a test): used in-process by the argv tests (to check that rendered argv
parses), and as a script under other Python versions by the help-parser tests (to get
real ``optional arguments:`` / single-metavar / group layouts):

    python rebuild_sglang_help.py ACTIONS.json [--groups N]   # prints --help

Works on Python 3.8+ (BooleanOptionalAction is emulated on 3.8).
"""

import argparse
import json
import sys


class _ZeroArgs(argparse.Action):
    """Stand-in for sglang's DeprecatedAction (nargs=0)."""

    def __init__(self, option_strings, dest, **kwargs):
        kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, True)


class _StoreList(argparse.Action):
    """Stand-in for LoRAPathAction (nargs='*')."""

    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, values)


def load_actions(path):
    with open(path) as handle:
        return json.load(handle)


def _nargs(value):
    if value in (None, "?", "*", "+"):
        return value
    return int(value)


def add_action(target, action):
    """Add one actions.json entry to a parser or argument group."""
    names = action["option_strings"]
    kind = action["action"]
    kwargs = {"dest": action["dest"]}
    if action["help_suppressed"]:
        kwargs["help"] = argparse.SUPPRESS
    else:
        kwargs["help"] = (action["help"] or "").replace("%", "%%")
    choices = action["choices"]
    if kind == "_HelpAction":
        return None
    if kind in ("_StoreTrueAction", "DeprecatedStoreTrueAction"):
        return target.add_argument(*names, action="store_true", **kwargs)
    if kind == "BooleanOptionalAction":
        if hasattr(argparse, "BooleanOptionalAction"):
            positive = [n for n in names if not n.startswith("--no-")]
            return target.add_argument(*positive, action=argparse.BooleanOptionalAction, **kwargs)
        return target.add_argument(*names, action="store_true", **kwargs)
    if kind == "DeprecatedAction" or action["nargs"] == 0:
        return target.add_argument(*names, action=_ZeroArgs, **kwargs)
    if kind == "LoRAPathAction":
        return target.add_argument(*names, action=_StoreList, nargs=_nargs(action["nargs"]), **kwargs)
    # _StoreAction, DeprecatedStoreConstAction (nargs None with choices), ...
    if choices is not None:
        kwargs["choices"] = [str(c) for c in choices]
    if action["nargs"] is not None:
        kwargs["nargs"] = _nargs(action["nargs"])
    if action.get("required"):
        kwargs["required"] = True
    return target.add_argument(*names, **kwargs)


def build_parser(actions, prog="launch_server.py", groups=0, required=True):
    """An argparse parser equivalent (names, nargs, choices, switches) to the release's."""
    parser = argparse.ArgumentParser(prog=prog, allow_abbrev=True)
    targets = [parser]
    entries = [a for a in actions if a["action"] != "_HelpAction"]
    if groups:
        size = max(1, len(entries) // groups + 1)
        targets = []
        for idx in range(groups):
            targets.append(parser.add_argument_group(
                "Group %d options" % (idx + 1),
                "Options of group %d: a description line that argparse wraps like any "
                "other text, and that mentions --some-flag in prose." % (idx + 1)))
        chunks = [entries[i:i + size] for i in range(0, len(entries), size)]
    else:
        chunks = [entries]
    for target, chunk in zip(targets, chunks):
        for action in chunk:
            if not required:
                action = dict(action, required=False)
            add_action(target, action)
    return parser


class Refused(Exception):
    """argparse's error, raised instead of exiting (:func:`strict_parse`)."""


class _StrictParser(argparse.ArgumentParser):
    def error(self, message):
        raise Refused(message)


def strict_parse(actions, pairs, prog="launch_server.py"):
    """``--model-path /m`` and ``pairs`` (``[flag, value]``) through the parser of
    ``actions`` (a release's actions.json entries) with abbreviations off, so that only
    exact option strings pass; argparse's refusal raises :class:`Refused`."""
    parser = _StrictParser(prog=prog, allow_abbrev=False)
    for action in actions:
        add_action(parser, action)
    argv = ["--model-path", "/m"]
    for flag, value in pairs:
        argv += [flag, str(value)]
    return parser.parse_args(argv)


def main(argv):
    path = argv[1]
    groups = 0
    if "--groups" in argv:
        groups = int(argv[argv.index("--groups") + 1])
    data = load_actions(path)
    parser = build_parser(data["actions"], prog=data.get("prog") or "launch_server.py", groups=groups)
    parser.print_help()


if __name__ == "__main__":
    main(sys.argv)
