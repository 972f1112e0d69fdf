"""Integration tests: registered marker (skipped unless GPUFLEET_INTEGRATION=1), and this
directory on ``sys.path``, so that the test files import ``_testbed`` (and
``bad_input_report``) by name."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


def pytest_configure(config):
    config.addinivalue_line("markers", "integration: needs GPUFLEET_INTEGRATION=1 (emulators, aiperf)")
