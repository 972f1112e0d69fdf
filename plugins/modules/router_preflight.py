#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: router_preflight
short_description: Probe the installed SGLang router and build its command line
version_added: 0.3.0
author: gpufleet developers (@gpufleet)
description:
  - Reads the version of the router package installed in O(venv) (C(smg) or
    C(sglang-router)), runs its launch C(--help), and picks its worker API by version
    (C(smg) 1.x and C(sglang-router) 0.3.x C(/workers); up to 0.2.1 C(/add_worker)).
  - Builds the router's command line from O(settings), using only flags the installed
    release's C(--help) lists; fails naming every setting it has no flag for.
  - Turns tokenizer loading off (C(--disable-tokenizer-autoload)) where the release can;
    where it cannot, requires C(hf_endpoint) (a Hub mirror) so the router never
    contacts huggingface.co.
  - With prefill and decode servers (C(pd_workers) in O(settings)), builds the PD mode's
    command line (C(--pd-disaggregation), C(--prefill URL PORT), C(--decode URL), a policy per
    role, the prefill admission limits) instead of C(--worker-urls), and fails when the release
    cannot route in PD mode.
  - Changes nothing on the host.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
  - gpufleet.sglang._attributes.info_module
seealso:
  - module: gpufleet.sglang.router_worker
    description: Take servers out of the router and put them back.
  - ref: gpufleet.sglang.router <ansible_collections.gpufleet.sglang.router_role>
    description: The role gpufleet.sglang.router that calls this module.
options:
  package:
    description: The router's PyPI package.
    type: str
    choices: [smg, sglang-router]
    default: smg
  venv:
    description: The venv the package is installed in.
    type: path
    required: true
  version:
    description: The version that must be installed (the role's pin); a mismatch fails.
    type: str
  settings:
    description: The router's settings (keys as in the role's defaults without C(router_)).
    type: dict
    required: true
  timeout:
    description: Seconds the C(--help) run may take.
    type: int
    default: 60
"""

EXAMPLES = r"""
- name: Probe the router and build its argv
  gpufleet.sglang.router_preflight:
    package: smg
    venv: /opt/sglang-router/smg/1.13.0
    version: 1.13.0
    settings: "{{ __router_settings }}"
  register: __router_preflight
"""

RETURN = r"""
version:
  description: The installed package's version.
  type: str
  returned: success
  sample: 1.13.0
api:
  description: The worker API, C(workers) or C(legacy).
  type: str
  returned: success
argv:
  description: The router's command line.
  type: list
  elements: str
  returned: success
environment:
  description: Variables the router needs in its environment (C(HF_ENDPOINT)).
  type: dict
  returned: success
help_flags:
  description: How many option strings the release's C(--help) lists.
  type: int
  returned: success
mode:
  description: The router's mode, C(regular) (C(--worker-urls)) or C(pd) (prefill/decode).
  type: str
  returned: success
pd_workers:
  description: The prefill and decode workers (C(host), C(url), C(role), C(bootstrap_port)); empty in the regular mode.
  type: list
  elements: dict
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _command
from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router
from ansible_collections.gpufleet.sglang.plugins.module_utils.router import _router_pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._sglang_help import (
    HelpParseError,
    alias_index,
    parse_help,
)

DIST = {"smg": "smg", "sglang-router": "sglang-router"}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            package=dict(type="str", choices=["smg", "sglang-router"], default="smg"),
            venv=dict(type="path", required=True),
            version=dict(type="str"),
            settings=dict(type="dict", required=True),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    p = module.params
    python = p["venv"] + "/bin/python"
    res = _command.run(module, [python, "-c", "import importlib.metadata as m, sys; "
                                "print(m.version(sys.argv[1]))", DIST[p["package"]]],
                       timeout=p["timeout"])
    if not res.ok:
        _command.fail(module, "router_package %s is not installed in %s"
                      % (p["package"], p["venv"]), res)
    version = res.stdout.strip()
    if p["version"] and version != p["version"]:
        module.fail_json(msg="router_version is %s but %s holds %s %s"
                         % (p["version"], p["venv"], p["package"], version))
    help_res = _command.run(module, _router.help_argv(p["package"], p["venv"]),
                            timeout=p["timeout"], env={"COLUMNS": "200"})
    if not help_res.ok:
        _command.fail(module, "%s %s --help failed" % (p["package"], version), help_res)
    try:
        flags = set(alias_index(parse_help(help_res.stdout)["flags"]))
    except HelpParseError as exc:
        module.fail_json(msg="cannot read %s %s --help: %s" % (p["package"], version, exc))
    settings = dict(p["settings"], version=version)
    try:
        api = _router.api_for(p["package"], version)
        pd_workers = _router_pd.normalize_workers(settings.get("pd_workers"))
        settings["pd_args"] = _router_pd.launch_args(p["package"], version, pd_workers, flags,
                                                     help_res.stdout, settings)
        argv, env = _router.launch_argv(p["package"], p["venv"], flags, settings)
    except (_router.RouterError, KeyError, TypeError, ValueError) as exc:
        module.fail_json(msg="router settings: %s" % exc)
    module.exit_json(changed=False, version=version, api=api, argv=argv, environment=env,
                     help_flags=len(flags), mode="pd" if pd_workers else "regular",
                     pd_workers=pd_workers)


if __name__ == "__main__":
    main()
