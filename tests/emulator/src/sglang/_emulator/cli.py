"""An argparse parser with exactly the real options of one release.

Built from ``argparse/sglang-<R>.actions.json`` (the real ``parser._actions`` dump), so
unknown flags, removed flags, bad choices, bad types and ambiguous prefixes fail exactly
as argparse fails in the real CLI (exit 2, ``usage: ...`` + ``error: ...`` on stderr).
``-h/--help`` prints the captured help text byte for byte instead of argparse's own.
"""

import argparse
import json
import os
import re
import sys
import time

from sglang._emulator import release as _release
from sglang._emulator.state import append_record


class _Unset:
    """Default placeholder: keeps argparse from type-converting string defaults."""

    def __repr__(self):
        return "<unset>"


UNSET = _Unset()


# --- type functions; their __name__ appears in argparse's "invalid X value" errors ---

def nullable_str(val):
    if not val or val == "None":
        return None
    return val


def human_readable_int(val):
    """``128k`` -> 128000, ``1Mi`` -> 1048576, plain integers as int()."""
    text = str(val).strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kKmMgGtT])(i?)", text)
    if not m:
        return int(text)
    base = 1024 if m.group(3) else 1000
    power = "kmgt".index(m.group(2).lower()) + 1
    return int(float(m.group(1)) * base ** power)


def json_list_type(val):
    return json.loads(val)


def parse_cuda_graph_backend_arg(val):
    return str(val).strip().lower()


def parse_cuda_graph_config_arg(val):
    return json.loads(val)


TYPES = {
    None: None,
    "str": str,
    "int": int,
    "float": float,
    "nullable_str": nullable_str,
    "human_readable_int": human_readable_int,
    "json_list_type": json_list_type,
    "loads": json.loads,
    "parse_cuda_graph_backend_arg": parse_cuda_graph_backend_arg,
    "parse_cuda_graph_config_arg": parse_cuda_graph_config_arg,
}


def _warn_deprecated(option_string, help_text):
    advice = re.sub(r"^\s*Deprecated[.:,]?\s*", "", help_text or "")
    sys.stderr.write(
        "\x1b[1;33m'%s' is deprecated and will be removed in a future release. %s\x1b[0m\n"
        % (option_string, advice)
    )


class FixtureHelpAction(argparse.Action):
    """``-h/--help``: print the release's captured help text byte for byte, exit 0."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help=None, release=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default,
                         nargs=0, help=help)
        self.release = release

    def __call__(self, parser, namespace, values, option_string=None):
        print_help(self.release)
        parser.exit(0)


class DeprecatedAction(argparse.Action):
    """As in sglang: using the flag raises ValueError(help) (a traceback, exit 1)."""

    def __init__(self, option_strings, dest, nargs=0, **kwargs):
        super().__init__(option_strings, dest, nargs=nargs, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        raise ValueError(self.help)


class DeprecatedStoreTrueAction(argparse._StoreTrueAction):  # pylint: disable=protected-access
    def __call__(self, parser, namespace, values, option_string=None):
        _warn_deprecated(option_string, self.help)
        super().__call__(parser, namespace, values, option_string)


class DeprecatedStoreConstAction(argparse.Action):
    """0.5.23 ``--monokernel-backend amd``: takes one value, stores True, warns."""

    def __call__(self, parser, namespace, values, option_string=None):
        _warn_deprecated(option_string, self.help)
        setattr(namespace, self.dest, True)


class LoRAPathAction(argparse.Action):
    def __call__(self, parser, namespace, values, option_string=None):
        setattr(namespace, self.dest, list(values or []))


def print_help(release):
    columns = None
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        pass
    path = _release.help_path(release, columns)
    with open(path, "rb") as fh:
        data = fh.read()
    append_record("help-calls.jsonl", {
        "time": time.time(), "pid": os.getpid(), "release": release,
        "COLUMNS": os.environ.get("COLUMNS"), "file": os.path.basename(path),
    })
    out = sys.stdout.buffer
    out.write(data)
    out.flush()


def _set_choice_order(release, spec):
    """Choices that came from a Python set: use the order the captured help prints."""
    try:
        with open(_release.help_path(release), encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return spec["choices"]
    opt = re.escape(spec["option_strings"][0])
    m = re.search(opt + r" \{([^}]*)\}", text)
    if not m:
        return spec["choices"]
    printed = m.group(1).split(",")
    if sorted(printed) == sorted(str(c) for c in spec["choices"]):
        return printed
    return spec["choices"]


def build_parser(release, data=None):
    """Return (parser, defaults) for ``release``; defaults maps dest -> real default."""
    data = data or _release.load_actions(release)
    parser = argparse.ArgumentParser(prog=data["prog"], add_help=False)
    defaults = {}
    for spec in data["actions"]:
        opts = list(spec["option_strings"])
        kind = spec["action"]
        help_text = argparse.SUPPRESS if spec.get("help_suppressed") else (
            (spec.get("help") or "").replace("%", "%%"))
        if kind == "_HelpAction":
            parser.add_argument(*opts, action=FixtureHelpAction, release=release,
                                help=help_text)
            continue
        dest = spec["dest"]
        defaults[dest] = spec.get("default")
        kwargs = {"dest": dest, "help": help_text, "default": UNSET}
        if spec.get("required"):
            kwargs["required"] = True
        if kind in ("_StoreTrueAction", "DeprecatedStoreTrueAction"):
            kwargs["action"] = ("store_true" if kind == "_StoreTrueAction"
                                else DeprecatedStoreTrueAction)
        elif kind == "_StoreFalseAction":
            kwargs["action"] = "store_false"
        elif kind == "BooleanOptionalAction":
            opts = [o for o in opts if not o.startswith("--no-")]
            kwargs["action"] = argparse.BooleanOptionalAction
        elif kind == "DeprecatedAction":
            kwargs["action"] = DeprecatedAction
        else:
            if kind == "DeprecatedStoreConstAction":
                kwargs["action"] = DeprecatedStoreConstAction
            elif kind == "LoRAPathAction":
                kwargs["action"] = LoRAPathAction
            elif kind == "_AppendAction":
                kwargs["action"] = "append"
            if spec.get("nargs") is not None:
                kwargs["nargs"] = spec["nargs"]
            tname = spec.get("type")
            if tname is not None:
                kwargs["type"] = TYPES.get(tname, str)
            if spec.get("choices") is not None:
                kwargs["choices"] = (_set_choice_order(release, spec)
                                     if spec.get("choices_is_set") else spec["choices"])
        if spec.get("metavar") is not None:
            kwargs["metavar"] = spec["metavar"]
        parser.add_argument(*opts, **kwargs)
    return parser, defaults


# Up to 0.5.9 the long names come first and set argparse's dest; ServerArgs.from_cli_args
# copies them onto its own fields (tp_size, ...). Do the same.
DEST_TO_FIELD = {
    "tensor_parallel_size": "tp_size",
    "pipeline_parallel_size": "pp_size",
    "data_parallel_size": "dp_size",
    "expert_parallel_size": "ep_size",
    "attention_context_parallel_size": "attn_cp_size",
    "moe_data_parallel_size": "moe_dp_size",
}


def parse(release, argv):
    """Parse ``argv`` like the real CLI; returns a dict of all server args."""
    parser, defaults = build_parser(release)
    ns = parser.parse_args(argv)
    args = {}
    for dest, default in defaults.items():
        val = getattr(ns, dest, UNSET)
        args[DEST_TO_FIELD.get(dest, dest)] = default if val is UNSET else val
    return args
