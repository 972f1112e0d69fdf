# -*- coding: utf-8 -*-
# This module util is PRIVATE to the gpufleet.sglang collection. It may change without notice.
# Copyright: gpufleet developers
# MIT License (see LICENSE)
"""Parse the argparse ``--help`` text of ``python -m sglang.launch_server``.

The parser works on the text exactly as argparse prints it (any ``COLUMNS``), and
tolerates the variants of Python 3.8 to 3.13+ argparse and the ``sglang serve --help``
preamble. Pure Python, no Ansible imports.

Result of :func:`parse_help`::

    {"prog": "launch_server.py",
     "flags": {"--tp-size": {"names": ["--tp-size", "--tensor-parallel-size"],
                             "takes_value": True, "choices": None, "nargs": None,
                             "deprecated": False, "help": "..."}}}

The key of ``flags`` is the first long option string the help prints (``-h, --help``
is keyed ``--help``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import re

# Bump when the parser's output changes, so caches of parsed help texts are invalidated.
PARSER_VERSION = "1"

__all__ = ["PARSER_VERSION", "HelpParseError", "parse_help", "alias_index", "resolve", "is_deprecated_help"]


class HelpParseError(ValueError):
    """The text does not look like argparse help output."""


# "Deprecated. Use ...", "(Deprecated, use ...)", "(Deprecated: use ...)",
# "[DEPRECATED] ...", "Note: deprecated ..."
_DEPRECATED_LEAD = re.compile(r"^\s*(?:note:\s*)?[\(\[]?\s*deprecated\b", re.IGNORECASE)
# "This flag is deprecated", "This option is deprecated ..."
_DEPRECATED_THIS = re.compile(
    r"\bthis (?:flag|option|argument|parameter) is (?:now )?deprecated\b", re.IGNORECASE
)
# "--old is deprecated", "'--old' is now deprecated"
_DEPRECATED_NAME = re.compile(
    r"(?:^|[\s'\"`(])(--?[A-Za-z0-9][\w.-]*)['\"`]?\s+is\s+(?:now\s+)?deprecated\b", re.IGNORECASE
)
_OPTION_NAME = re.compile(r"^-{1,2}[^\s,\[\]{}]+$")
_SECTION_TITLE = re.compile(r"^\S.*:\s*$")
# textwrap breaks after a hyphen inside a word ("case-" / "sensitive") and after a
# leading "--" of an option name ("'--" / "attention-backend")
_HYPHEN_BREAK = re.compile(r"(?:[A-Za-z0-9]-|(?:^|['\"`(])--)$")


def is_deprecated_help(help_text, names=()):
    """True when ``help_text`` says the option itself is deprecated.

    Matches a leading ``Deprecated`` / ``(Deprecated`` / ``Note: ... deprecated`` and
    ``<one of names> is deprecated``; a mention of some *other* deprecated thing
    ("replaces the deprecated --grpc-mode") does not count.
    """
    text = help_text or ""
    if "deprecat" not in text.lower():
        return False
    if _DEPRECATED_LEAD.search(text) or _DEPRECATED_THIS.search(text):
        return True
    for match in _DEPRECATED_NAME.finditer(text):
        if match.group(1) in names:
            return True
    return False


def _outside_brackets(text):
    """Indexes of the characters of ``text`` outside ``{}``/``[]``/``()`` brackets, brackets
    themselves left out (a closing bracket without its opening one is passed over)."""
    depth = 0
    for i, char in enumerate(text):
        if char in "{[(":
            depth += 1
        elif char in "}])":
            depth = max(0, depth - 1)
        elif depth == 0:
            yield i


def _split_top_level(text, sep):
    """Split ``text`` on ``sep`` (no bracket in it) outside ``{}``/``[]``/``()`` brackets."""
    parts = []
    start = 0
    for i in _outside_brackets(text):
        if i >= start and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
    parts.append(text[start:])
    return parts


def _split_invocation(content):
    """Split an option line (without its 2-space indent) into invocation and help.

    The invocation ends at the first run of two or more spaces outside brackets.
    """
    for i in _outside_brackets(content):
        if content.startswith("  ", i):
            return content[:i], content[i:].strip()
    return content.rstrip(), ""


def _brace_choices(args):
    """Choices from the first ``{...}`` group of an argument format, else None."""
    start = args.find("{")
    if start < 0:
        return None
    depth = 0
    for i in range(start, len(args)):
        if args[i] == "{":
            depth += 1
        elif args[i] == "}":
            depth -= 1
            if depth == 0:
                inner = args[start + 1:i]
                return _split_top_level(inner, ",") if inner else []
    return None


def _nargs_of(args):
    """argparse ``nargs`` as far as the printed argument format tells it."""
    if not args:
        return 0
    # Replace every metavar / choice group by a placeholder token
    norm = re.sub(r"\{[^{}]*\}", "M", args)
    norm = re.sub(r"[^\s\[\]\.]+", "M", norm)
    norm = re.sub(r"\s+", " ", norm).strip()
    if norm == "M":
        return None
    if norm == "[M]":
        return "?"
    if norm == "[M ...]":
        return "*"
    if norm == "M [M ...]":
        return "+"
    if re.match(r"^M( M)+$", norm):
        return norm.count("M")
    return "..." if "..." in norm else None


def _parse_invocation(invocation):
    """Names, takes_value, choices and nargs of one invocation string, or None."""
    names = []
    value_args = []
    for part in _split_top_level(invocation, ", "):
        part = part.strip()
        if not part:
            return None
        if " " in part:
            name, args = part.split(" ", 1)
            args = args.strip()
        else:
            name, args = part, ""
        if not _OPTION_NAME.match(name):
            return None
        names.append(name)
        if args:
            value_args.append(args)
    if not names:
        return None
    choices = None
    for args in value_args:
        choices = _brace_choices(args)
        if choices is not None:
            break
    nargs = _nargs_of(value_args[0]) if value_args else 0
    return {
        "names": names,
        "takes_value": bool(value_args),
        "choices": choices,
        "nargs": nargs,
    }


def _join_help(lines):
    """Re-join wrapped description lines into the original help string.

    argparse wraps with textwrap, which breaks after hyphens inside words
    (``case-`` / ``sensitive``); such breaks are joined without a space.
    """
    out = ""
    for line in lines:
        line = line.strip()
        if not line:
            continue
        if not out:
            out = line
        elif _HYPHEN_BREAK.search(out[-3:]) and re.match(r"[A-Za-z0-9{<\[(]", line):
            out += line
        else:
            out += " " + line
    return out


def _find_usage(lines):
    """Index of the argparse ``usage:`` line (lower-case, as argparse prints it)."""
    for idx, line in enumerate(lines):
        if line.startswith("usage:"):
            return idx
    return None


def _prog_of(usage_line):
    """``prog`` from ``usage: PROG [-h] ...`` (PROG may contain ``-m``)."""
    rest = usage_line[len("usage:"):].strip()
    tokens = rest.split()
    prog = []
    for tok in tokens:
        if tok.startswith("[") or tok.startswith("--") or tok.startswith("{"):
            break
        prog.append(tok)
    return " ".join(prog) if prog else None


def parse_help(text):
    """Parse argparse help text into ``{"prog": ..., "flags": {...}}``.

    Raises :class:`HelpParseError` when no option can be found.
    """
    if not isinstance(text, str):
        raise HelpParseError("help text must be a string, got %s" % type(text).__name__)
    lines = text.expandtabs().replace("\r\n", "\n").replace("\r", "\n").split("\n")
    # Strip ANSI colour codes (newer argparse may colour a terminal's output)
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in lines]
    usage_idx = _find_usage(lines)
    prog = None
    start = 0
    if usage_idx is not None:
        prog = _prog_of(lines[usage_idx])
        start = usage_idx + 1
        # usage continues until the first blank line
        while start < len(lines) and lines[start].strip():
            start += 1

    flags = {}
    order = []
    current = None  # (key, [help lines])
    sections = 0

    def finish():
        if current is None:
            return
        key, help_lines = current
        entry = flags[key]
        entry["help"] = _join_help(help_lines)
        entry["deprecated"] = is_deprecated_help(entry["help"], entry["names"])

    for line in lines[start:]:
        if not line.strip():
            finish()
            current = None
            continue
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            finish()
            current = None
            if flags and (line.startswith("usage:") or line.startswith("---")):
                break  # a second help text (``sglang serve`` diffusion section)
            if _SECTION_TITLE.match(line):
                sections += 1
            continue
        content = line[indent:]
        if indent <= 4 and content.startswith("-"):
            invocation, first_help = _split_invocation(content)
            parsed = _parse_invocation(invocation)
            if parsed is not None:
                finish()
                names = parsed["names"]
                key = next((n for n in names if n.startswith("--")), names[0])
                if key in flags:
                    current = None
                    continue
                parsed["help"] = ""
                parsed["deprecated"] = False
                flags[key] = parsed
                order.append(key)
                current = (key, [first_help] if first_help else [])
                continue
        if current is not None and indent > 2:
            current[1].append(content)
        elif indent <= 2:
            # group description or other prose at the option indent
            finish()
            current = None
    finish()
    if not flags:
        raise HelpParseError(
            "no argparse options found in the help text (%d lines, usage line %s)"
            % (len(lines), "found" if usage_idx is not None else "missing")
        )
    if usage_idx is None and sections == 0:
        raise HelpParseError("text has neither a 'usage:' line nor an options section title")
    return {"prog": prog, "flags": dict((k, flags[k]) for k in order)}


def alias_index(flags):
    """Map every option string to the key of its flag."""
    index = {}
    for key, entry in flags.items():
        for name in entry["names"]:
            index.setdefault(name, key)
    return index


def resolve(flags, name):
    """Key of the flag that accepts ``name`` (any alias), or None."""
    if name in flags:
        return name
    return alias_index(flags).get(name)
