# -*- coding: utf-8 -*-
# This module util is PRIVATE to the gpufleet.sglang collection. It may change without notice.
# Copyright: gpufleet developers
# MIT License (see LICENSE)
"""Render a parallelism strategy into ``sglang.launch_server`` argv for one release.

Input is the ``flags`` mapping that :mod:`_sglang_help` parsed from the release's own
``--help``: the renderer never guesses which flags a release has, it looks them up.
Cross-release renames live in one data table, :data:`TRANSLATIONS`. Pure Python, no
Ansible imports.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type  # pylint: disable=invalid-name

import json

__all__ = [
    "ArgvError",
    "LAYOUT_FLAGS",
    "PREFERRED_SPELLINGS",
    "TRANSLATIONS",
    "known_translations",
    "missing",
    "normalize_flag",
    "render_argv",
]


class ArgvError(ValueError):
    """One or more requested flags/values are not valid for the release.

    ``problems`` lists every problem found (not only the first); ``str()`` joins them.
    """

    def __init__(self, problems, version=None):
        self.problems = list(problems)
        self.version = version
        head = "invalid sglang %s arguments (%d problem%s): " % (
            version or "(unknown release)",
            len(self.problems),
            "" if len(self.problems) == 1 else "s",
        )
        super(ArgvError, self).__init__(head + "; ".join(self.problems))


class _Var:
    """A placeholder in a translation pattern: binds to an int value (>= minimum)."""

    def __init__(self, name, minimum=None):
        self.name = name
        self.minimum = minimum

    def __repr__(self):
        if self.minimum is None:
            return "<%s>" % self.name
        return "<%s>=%d>" % (self.name, self.minimum)


def _v(name, minimum=None):
    return _Var(name, minimum)


# Layout key -> candidate spellings (any alias of the flag is fine; the release's own
# preferred spelling is chosen when rendering), and the value that may be omitted.
LAYOUT_FLAGS = (
    ("tp", ("--tp-size", "--tensor-parallel-size"), None),  # tp is always rendered
    ("pp", ("--pp-size", "--pipeline-parallel-size"), 1),
    ("ep", ("--ep-size", "--expert-parallel-size"), 1),
    ("dp", ("--dp-size", "--data-parallel-size"), 1),
    ("nnodes", ("--nnodes",), 1),
    ("node_rank", ("--node-rank",), 0),
    ("dist_init_addr", ("--dist-init-addr", "--nccl-init-addr"), None),
)

# Spellings used whenever the release has them, instead of the first printed name.
# ``--ep`` is an ambiguous prefix on 0.4.6.post5 and ``--expert-parallel-size`` is printed
# first up to 0.5.9; ``--ep-size`` is accepted by every release.
PREFERRED_SPELLINGS = ("--ep-size",)

# The translation table. Each entry maps an ``old`` form to a ``new`` form; a form is a
# list of (flag, value) pairs where value is a literal, True (a switch) or a _Var.
# Forward (old -> new): the request holds the old form and the release lacks the
# ``old_marker`` flag (or marks it deprecated) but has ``new_marker``.
# Backward (new -> old): the request holds the new form and the release lacks
# ``new_marker`` but has ``old_marker``.
# Markers default to the first flag of each form.
TRANSLATIONS = (
    {
        "id": "pp-micro-batch",
        "old": [("--max-micro-batch-size", _v("n"))],
        "new": [("--pp-max-micro-batch-size", _v("n"))],
        "note": "PP micro batch: --max-micro-batch-size (0.4.6) became "
                "--pp-max-micro-batch-size (0.5.4.post3+)",
    },
    {
        "id": "ep-moe-switch",
        "old": [("--enable-ep-moe", True)],
        "new": [("--ep-size", _v("tp"))],
        "backward": False,
        "note": "--enable-ep-moe (0.4.6, ep size = tp size) is gone from 0.5.4.post3; "
                "--ep-size <tp> instead",
    },
    {
        "id": "ep-moe-required",
        "old": [("--enable-ep-moe", True), ("--ep-size", _v("n", 2))],
        "new": [("--ep-size", _v("n", 2))],
        "new_marker": "--moe-a2a-backend",
        "forward": False,
        "note": "before --moe-a2a-backend existed (0.4.6), expert parallelism needs "
                "--enable-ep-moe next to --ep-size",
    },
    {
        "id": "deepep-moe",
        "old": [("--enable-deepep-moe", True)],
        "new": [("--moe-a2a-backend", "deepep")],
        "note": "--enable-deepep-moe (0.4.6) became --moe-a2a-backend deepep (0.5.4.post3+)",
    },
    {
        "id": "dp-attention",
        "old": [("--enable-dp-attention", True), ("--dp-size", _v("n", 2))],
        "new": [("--attn-dp-size", _v("n", 2))],
        "note": "--dp-size N --enable-dp-attention is deprecated in 0.5.23 in favour of "
                "--attn-dp-size N (absent before 0.5.23)",
    },
    {
        "id": "ep-alias",
        "old": [("--ep", _v("n"))],
        "new": [("--ep-size", _v("n"))],
        "backward": False,
        "note": "--ep (0.5.4.post3+) is an ambiguous prefix on 0.4.6; --ep-size instead",
    },
    {
        "id": "model-alias",
        "old": [("--model", _v("path"))],
        "new": [("--model-path", _v("path"))],
        "backward": False,
        "note": "--model is an alias of --model-path only from 0.5.4.post3 on",
    },
    {
        "id": "disable-cuda-graph",
        "old": [("--disable-cuda-graph", True)],
        "new": [("--cuda-graph-backend-decode", "disabled"),
                ("--cuda-graph-backend-prefill", "disabled")],
        "note": "--disable-cuda-graph is deprecated in 0.5.23 in favour of "
                "--cuda-graph-backend-{decode,prefill} disabled",
    },
    {
        "id": "grpc-mode",
        "old": [("--grpc-mode", True)],
        "new": [("--smg-grpc-mode", True)],
        "note": "--grpc-mode is deprecated in 0.5.23 in favour of --smg-grpc-mode",
    },
    {
        "id": "flashinfer-allreduce-fusion",
        "old": [("--enable-flashinfer-allreduce-fusion", True)],
        "new": [("--flashinfer-allreduce-fusion-backend", "auto")],
        "note": "--enable-flashinfer-allreduce-fusion is deprecated in 0.5.23 in favour of "
                "--flashinfer-allreduce-fusion-backend auto",
    },
    {
        "id": "fast-image-processor",
        "old": [("--disable-fast-image-processor", True)],
        "new": [("--image-processor-backend", "pil")],
        "note": "--disable-fast-image-processor is deprecated in 0.5.23 in favour of "
                "--image-processor-backend pil",
    },
    {
        "id": "amd-monokernel",
        "old": [("--monokernel-backend", "amd")],
        "new": [("--enable-amd-monokernel", True)],
        "note": "--monokernel-backend amd is deprecated in 0.5.23 in favour of "
                "--enable-amd-monokernel",
    },
    {
        "id": "flashmla",
        "old": [("--enable-flashmla", True)],
        "new": [("--attention-backend", "flashmla")],
        "backward": False,
        "note": "--enable-flashmla (deprecated in 0.4.6) is --attention-backend flashmla",
    },
    {
        "id": "flashinfer-mla",
        "old": [("--enable-flashinfer-mla", True)],
        "new": [("--attention-backend", "flashinfer")],
        "backward": False,
        "note": "--enable-flashinfer-mla (deprecated in 0.4.6) is "
                "--attention-backend flashinfer",
    },
)


def _form_text(form):
    parts = []
    for flag, value in form:
        if value is True:
            parts.append(flag)
        elif isinstance(value, _Var):
            parts.append("%s <%s>" % (flag, value.name))
        else:
            parts.append("%s %s" % (flag, value))
    return " ".join(parts)


def known_translations():
    """The translations the renderer knows, as a list of dicts (for documentation)."""
    out = []
    for entry in TRANSLATIONS:
        out.append({
            "id": entry["id"],
            "old": _form_text(entry["old"]),
            "new": _form_text(entry["new"]),
            "forward": entry.get("forward", True),
            "backward": entry.get("backward", True),
            "note": entry["note"],
        })
    return out


def normalize_flag(name):
    """``tool_call_parser`` / ``tool-call-parser`` / ``--tool-call-parser`` -> ``--tool-call-parser``."""
    name = str(name).strip()
    if not name.startswith("-"):
        name = "--" + name.replace("_", "-")
    return name


def _index(flags):
    index = {}
    for key, entry in flags.items():
        for name in entry.get("names") or [key]:
            index.setdefault(name, key)
    return index


def _key_of(index, name):
    return index.get(name)


def missing(flags, require_list):
    """Required flags (any alias accepted) that the release lacks, in the given order."""
    index = _index(flags)
    out = []
    for name in require_list or []:
        flag = normalize_flag(name)
        if flag not in index and flag not in out:
            out.append(flag)
    return out


def _spelling(flags, key):
    names = flags[key].get("names") or [key]
    for preferred in PREFERRED_SPELLINGS:
        if preferred in names:
            return preferred
    longs = [n for n in names if n.startswith("--") and not n.startswith("--no-")]
    return longs[0] if longs else names[0]


def _same_flag(index, a, b):
    if a == b:
        return True
    ka, kb = index.get(a), index.get(b)
    return ka is not None and ka == kb


def _value_eq(a, b):
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return str(a) == str(b)


def _match_value(pattern, value, binding):
    if isinstance(pattern, _Var):
        if isinstance(value, bool) or value is None or isinstance(value, (list, dict)):
            return False
        if pattern.minimum is not None:
            try:
                if int(value) < pattern.minimum:
                    return False
            except (TypeError, ValueError):
                return False
        if pattern.name in binding:
            return _value_eq(binding[pattern.name], value)
        binding[pattern.name] = value
        return True
    return _value_eq(pattern, value)


def _match_form(items, form, index, context):
    """Positions of ``items`` matching every pair of ``form`` and the variable binding."""
    binding = dict(context)
    positions = []
    for flag, pattern in form:
        found = None
        for pos, item in enumerate(items):
            if pos in positions:
                continue
            if _same_flag(index, item["flag"], flag) and _match_value(pattern, item["value"], binding):
                found = pos
                break
        if found is None:
            return None, None
        positions.append(found)
    return positions, binding


def _bind(form, binding):
    out = []
    for flag, pattern in form:
        if isinstance(pattern, _Var):
            if pattern.name not in binding:
                return None
            out.append((flag, binding[pattern.name]))
        else:
            out.append((flag, pattern))
    return out


def _has(index, flags, name, not_deprecated=False):
    key = index.get(name)
    if key is None:
        return False
    return not (not_deprecated and flags[key].get("deprecated"))


def _apply(items, entry, direction, index, flags, context, version):
    src, dst = (entry["old"], entry["new"]) if direction == "forward" else (entry["new"], entry["old"])
    old_marker = entry.get("old_marker", entry["old"][0][0])
    new_marker = entry.get("new_marker", entry["new"][0][0])
    if direction == "forward":
        if _has(index, flags, old_marker, not_deprecated=True) or not _has(index, flags, new_marker):
            return None
    else:
        if _has(index, flags, new_marker) or not _has(index, flags, old_marker):
            return None
    positions, binding = _match_form(items, src, index, context)
    if positions is None:
        return None
    # nothing to do when the destination form is already fully present
    done, _unused = _match_form(items, dst, index, binding)
    if done is not None and set(done) >= set(positions):
        return None
    new_pairs = _bind(dst, binding)
    if new_pairs is None:
        return None
    first_item = items[min(positions)]
    # variables bound from the layout context rather than from the matched request items
    implied = set(context) - set(p.name for _f, p in src if isinstance(p, _Var))
    replacement = []
    for (flag, pattern), (_flag, value) in zip(dst, new_pairs):
        replacement.append({
            "flag": flag, "value": value, "section": first_item["section"],
            "origin": "%s via %s" % (first_item["origin"], entry["id"]),
            # a value taken from the layout context, not from the request itself
            "implied": isinstance(pattern, _Var) and pattern.name in implied,
        })
    first = min(positions)
    kept = [it for pos, it in enumerate(items) if pos not in positions]
    insert_at = len([it for pos, it in enumerate(items) if pos < first and pos not in positions])
    new_items = kept[:insert_at] + replacement + kept[insert_at:]
    message = "%s -> %s (sglang %s; %s)" % (
        _form_text([(items[p]["flag"], items[p]["value"]) for p in sorted(positions)]),
        _form_text(new_pairs) or "(nothing)",
        version,
        entry["id"],
    )
    return new_items, message


def _render_value(flag, spelling, entry, value, version, problems):
    """argv tail for one value of a flag, or None when the flag is left out."""
    takes_value = entry.get("takes_value", True)
    nargs = entry.get("nargs")
    choices = entry.get("choices")
    names = entry.get("names") or []
    if value is None:
        return None
    if value is False:
        negative = "--no-" + spelling[2:]
        if not takes_value and negative in names:
            return [negative]
        if not takes_value:
            return None
        problems.append("%s: value False is not valid for a flag that takes a value "
                        "(sglang %s)" % (flag, version))
        return None
    if value is True:
        if takes_value and nargs not in ("?", "*"):
            problems.append("%s takes a value in sglang %s, got a bare switch (true)"
                            % (flag, version))
            return None
        return [spelling]
    if not takes_value:
        problems.append("%s is a switch in sglang %s and takes no value, got %r"
                        % (flag, version, value))
        return None
    if isinstance(value, dict):
        values = [json.dumps(value, sort_keys=True, separators=(",", ":"))]
    elif isinstance(value, (list, tuple)):
        if nargs not in ("+", "*") and not isinstance(nargs, int):
            problems.append("%s takes a single value in sglang %s, got a list %r"
                            % (flag, version, list(value)))
            return None
        if nargs == "+" and not value:
            problems.append("%s needs at least one value in sglang %s" % (flag, version))
            return None
        values = [_scalar(v) for v in value]
    else:
        values = [_scalar(value)]
    bad = [v for v in values if choices is not None and v not in choices]
    for v in bad:
        problems.append("%s: value %r is not accepted by sglang %s (choices: %s)"
                        % (flag, v, version, ", ".join(choices)))
    if bad:
        return None
    return [spelling] + values


def _scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return repr(value)
    return str(value)


def _request_items(layout, server_args, extra_args):
    items = []
    for name, value in (server_args or {}).items():
        items.append({"flag": normalize_flag(name), "value": value, "section": "base",
                      "origin": "server_args"})
    layout = dict(layout or {})
    for key, spellings, omit in LAYOUT_FLAGS:
        if key not in layout or layout[key] is None:
            continue
        value = layout[key]
        if omit is not None and _value_eq(value, omit):
            continue
        items.append({"flag": spellings[0], "value": value, "section": "layout",
                      "origin": "layout", "candidates": spellings})
        asked = set(normalize_flag(n) for n in list(server_args or {}) + list(extra_args or {}))
        if key == "dp" and not asked.intersection(("--enable-dp-attention", "--attn-dp-size")):
            # a strategy's dp is DP attention (_strategy); dp alone would be replicas
            items.append({"flag": "--enable-dp-attention", "value": True, "section": "layout",
                          "origin": "layout"})
    for name, value in (extra_args or {}).items():
        items.append({"flag": normalize_flag(name), "value": value, "section": "extra",
                      "origin": "extra_args"})
    return items


def render_argv(flags, version, layout=None, server_args=None, extra_args=None):
    """Render argv for the release whose parsed help ``flags`` are given.

    Returns ``(argv, translations)``; raises :class:`ArgvError` listing every problem.
    """
    layout = dict(layout or {})
    unknown_layout = sorted(set(layout) - set(k for k, _s, _o in LAYOUT_FLAGS))
    problems = []
    if unknown_layout:
        problems.append("unknown layout keys %s (sglang %s)" % (", ".join(unknown_layout), version))
    if "tp" not in layout or layout.get("tp") is None:
        layout["tp"] = 1
    index = _index(flags)
    items = _request_items(layout, server_args, extra_args)
    # layout spellings: pick the alias the release knows
    for item in items:
        for cand in item.get("candidates", ()):
            if cand in index:
                item["flag"] = cand
                break
    context = {"tp": layout.get("tp")}
    translations = []
    for _round in range(len(TRANSLATIONS) + 1):
        changed = False
        for entry in TRANSLATIONS:
            for direction in ("forward", "backward"):
                if not entry.get(direction, True):
                    continue
                result = _apply(items, entry, direction, index, flags, context, version)
                if result is not None:
                    items, message = result
                    translations.append(message)
                    changed = True
        if not changed:
            break

    # resolve, de-duplicate, validate
    seen = {}
    ordered = []
    for item in items:
        key = index.get(item["flag"])
        if key is None:
            problems.append("%s does not exist in sglang %s (value %r)"
                            % (item["flag"], version, item["value"]))
            continue
        if key in seen:
            prev = seen[key]
            if _value_eq_any(prev["value"], item["value"]):
                continue
            implied = [x for x in (prev, item) if x.get("implied")]
            if len(implied) == 1:
                explicit = prev if implied[0] is item else item
                translations.append("%s %s (%s) kept over the implied %s (%s) (sglang %s)" % (
                    key, explicit["value"], explicit["origin"], implied[0]["value"],
                    implied[0]["origin"], version))
                if explicit is item:
                    ordered[ordered.index(prev)] = item
                    seen[key] = item
                continue
            problems.append("%s given twice with different values %r (%s) and %r (%s) "
                            "(sglang %s)" % (key, prev["value"], prev["origin"], item["value"],
                                             item["origin"], version))
            continue
        seen[key] = item
        ordered.append(item)

    argv = []
    for item in ordered:
        key = index[item["flag"]]
        entry = flags[key]
        spelling = _spelling(flags, key)
        rendered = _render_value(item["flag"], spelling, entry, item["value"], version, problems)
        if rendered:
            argv.extend(rendered)
        if entry.get("deprecated") and item["value"] not in (None, False):
            translations.append("warning: %s is deprecated in sglang %s and no replacement "
                                "is known" % (key, version))
    if problems:
        raise ArgvError(problems, version)
    return argv, translations


def _value_eq_any(a, b):
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and \
            [str(x) for x in a] == [str(x) for x in b]
    return _value_eq(a, b)
