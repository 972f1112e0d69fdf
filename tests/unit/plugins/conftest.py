"""The one module harness of the unit tests (tests/unit/plugins: modules, module_utils,
action and filter tests see it): run a module's main() in-process and catch its exit."""
import json

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args


class ModuleExit(Exception):
    def __init__(self, result, failed):
        super().__init__(result)
        self.result = result
        self.failed = failed


@pytest.fixture
def run_module(monkeypatch):
    """Call ``module.main()`` with ``args``; return ``(result, failed)``, the one shape
    every module test uses (``failed``: the module left through fail_json)."""

    def exit_json(self, **kwargs):
        raise ModuleExit(kwargs, False)

    def fail_json(self, **kwargs):
        kwargs["failed"] = True  # as AnsibleModule.fail_json says it
        raise ModuleExit(kwargs, True)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)

    def run(module, args):
        with patch_module_args(args):
            try:
                module.main()
            except ModuleExit as done:
                json.dumps(done.result, default=str)  # results must be serialisable
                # a result that says it failed leaves through fail_json (a non-zero exit)
                assert done.failed == bool(done.result.get("failed")), done.result
                return done.result, done.failed
        raise AssertionError("module returned without exit_json/fail_json")

    return run
