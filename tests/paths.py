# -*- coding: utf-8 -*-
"""Where the tests' shared files are: one place, imported as
``ansible_collections.gpufleet.sglang.tests.paths`` (tests/conftest.py makes that import
path work); the ``fixtures_dir`` fixture of tests/conftest.py gives FIXTURES to a test."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Captures from the shared reference, copied verbatim (never edited).
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
#: Test doubles of host commands (nvidia-smi, the venv interpreter).
FAKES = os.path.join(ROOT, "tests", "fakes")
