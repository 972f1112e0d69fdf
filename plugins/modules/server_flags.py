#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: server_flags
short_description: Probe the launch flags of an installed SGLang release and render argv
version_added: 0.1.0
author: gpufleet developers (@gpufleet)
description:
  - Runs C(<python> -m sglang.launch_server --help) with the virtualenv's interpreter and
    parses the text into the flags the installed release accepts (all aliases, whether
    a flag takes a value, its choices, deprecation).
  - Reads the installed release and a fingerprint of the installed package (the sglang
    C(.dist-info) directory name and the sha256 of its C(RECORD) file) with one small
    C(python -c) call, and caches the parsed flags in O(cache_dir) keyed by release and
    fingerprint, so a re-run against the same virtualenv does not run C(--help) again.
    Any change of the installed package invalidates the cache.
  - Fails, naming every missing flag and the release, when flags listed in O(require)
    do not exist.
  - When O(layout), O(server_args) or O(extra_args) is given, renders the server argv for
    that release, translating known renames across releases, and fails listing every
    flag or value the release does not accept.
requirements:
  - SGLang installed in the virtualenv of O(python).
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details: Only reads; in check mode it still probes but does not write the cache.
  diff_mode:
    support: none
  idempotent:
    support: full
options:
  python:
    description: Python interpreter of the virtualenv SGLang is installed in.
    type: path
    required: true
  require:
    description:
      - Flags that must exist (any alias counts, e.g. C(--tp-size) or
        C(--tensor-parallel-size)). The module fails naming every missing one.
    type: list
    elements: str
    default: []
  cache:
    description: Use and update the cache of parsed help texts.
    type: bool
    default: true
  cache_dir:
    description: Directory of the cache files. Created when missing.
    type: path
    default: /var/cache/gpufleet-sglang
  columns:
    description:
      - C(COLUMNS) for the C(--help) run. argparse wraps descriptions at this width; a
        wide value keeps descriptions intact. Option names and choices do not depend on it.
    type: int
    default: 200
  timeout:
    description: Seconds the C(--help) run may take (importing SGLang is slow).
    type: int
    default: 120
  layout:
    description:
      - Parallel layout to render. Keys C(tp), C(pp), C(ep), C(dp), C(nnodes),
        C(node_rank) (int) and C(dist_init_addr) (str). Values of 1 (C(node_rank) 0) are
        left out, except C(tp), which is always rendered.
    type: dict
  server_args:
    description:
      - Base server arguments, flag name to value, e.g. C(--model-path), C(--host),
        C(--port), C(--served-model-name). Any alias of a flag is accepted.
    type: dict
  extra_args:
    description:
      - Further arguments, flag name to value. V(true) is a switch, V(false) leaves the
        switch out (or renders C(--no-<flag>) for boolean-optional flags), a list gives
        several values to a flag that takes them.
    type: dict
    default: {}
  return_flags:
    description: Return the parsed C(flags) mapping (large for new releases).
    type: bool
    default: true
notes:
  - The cache files are JSON, one per release, fingerprint and O(columns).
"""

EXAMPLES = r"""
- name: Probe the installed SGLang and render the server command line
  gpufleet.sglang.server_flags:
    python: /opt/sglang/venv/bin/python
    require:
      - --tp-size
      - --ep-size
    layout:
      tp: 8
      ep: 8
    server_args:
      --model-path: /models/kimi-k2
      --host: 0.0.0.0
      --port: 30000
      --served-model-name: kimi
    extra_args:
      --trust-remote-code: true
      --tool-call-parser: kimi_k2
    return_flags: false
  register: sglang_flags

- name: Show the command line
  ansible.builtin.debug:
    msg: "{{ sglang_flags.argv | join(' ') }}"
"""

RETURN = r"""
version:
  description: Installed SGLang release.
  returned: always
  type: str
  sample: 0.5.9
fingerprint:
  description: sha256 over release, dist-info name, RECORD sha256 and Python version.
  returned: always
  type: str
prog:
  description: The C(prog) of the argparse usage line.
  returned: always
  type: str
  sample: launch_server.py
flags:
  description:
    - Parsed flags keyed by the first long option string the help prints. Each has
      C(names), C(takes_value), C(choices), C(nargs), C(deprecated), C(help).
  returned: when O(return_flags) is true
  type: dict
missing:
  description: Flags of O(require) the release lacks (empty on success).
  returned: always
  type: list
  elements: str
cached:
  description: Whether the flags came from the cache (C(--help) was not run).
  returned: always
  type: bool
cache_file:
  description: Cache file used or written.
  returned: when O(cache) is true
  type: str
argv:
  description: Rendered server arguments (flag and value as separate items).
  returned: when O(layout), O(server_args) or O(extra_args) is given
  type: list
  elements: str
  sample: ["--model-path", "/models/k", "--tp-size", "8", "--ep-size", "8"]
translations:
  description: Cross-release translations applied while rendering (and deprecation warnings).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _paths
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _sglang_probe as probe
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._command import failure_payload
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_argv import (
    ArgvError,
    missing,
    render_argv,
)


def _fail_probe(module, exc, **extra):
    if exc.result is not None:
        module.fail_json(**failure_payload(str(exc), exc.result, **extra))
    module.fail_json(msg=str(exc), **extra)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            python=dict(type="path", required=True),
            require=dict(type="list", elements="str", default=[]),
            cache=dict(type="bool", default=True),
            cache_dir=dict(type="path", default=_paths.CACHE_DIR),
            columns=dict(type="int", default=200),
            timeout=dict(type="int", default=120),
            layout=dict(type="dict"),
            server_args=dict(type="dict"),
            extra_args=dict(type="dict", default={}),
            return_flags=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    params = module.params
    python = params["python"]
    if params["columns"] < 40:
        module.fail_json(msg="columns must be at least 40, got %d" % params["columns"])
    try:
        probe.check_interpreter(python)
        info = probe.query_release(module, python, params["columns"], params["timeout"])
    except probe.ProbeError as exc:
        _fail_probe(module, exc)
    version = info["version"]
    result = dict(changed=False, version=version, fingerprint=info["fingerprint"], cached=False)
    try:
        data, cached, path = probe.flags(module, python, info, params["cache_dir"], params["columns"],
                                         params["timeout"], use_cache=params["cache"])
    except probe.ProbeError as exc:
        _fail_probe(module, exc, **result)
    result["cached"] = cached
    if params["cache"]:
        result["cache_file"] = path

    flags = data["flags"]
    result["prog"] = data.get("prog")
    result["missing"] = missing(flags, params["require"])
    result["translations"] = []
    if params["return_flags"]:
        result["flags"] = flags

    if result["missing"]:
        result.pop("flags", None)
        module.fail_json(
            msg="sglang %s (%s) lacks required flag%s: %s" % (
                version, python, "" if len(result["missing"]) == 1 else "s",
                ", ".join(result["missing"])),
            **result
        )

    if params["layout"] is not None or params["server_args"] is not None or params["extra_args"]:
        try:
            argv, translations = render_argv(flags, version, layout=params["layout"],
                                             server_args=params["server_args"],
                                             extra_args=params["extra_args"])
        except ArgvError as exc:
            result.pop("flags", None)
            module.fail_json(msg=str(exc), problems=exc.problems, **result)
        result["argv"] = argv
        result["translations"] = translations

    module.exit_json(**result)


if __name__ == "__main__":
    main()
