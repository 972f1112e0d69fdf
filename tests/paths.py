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
#: ``launch_server --help`` of the SGLang releases below (and argparse/, their parsers' actions).
SGLANG_HELP = os.path.join(FIXTURES, "sglang-help")
#: The SGLang releases whose --help SGLANG_HELP holds, oldest first.
SGLANG_RELEASES = ["0.4.6.post5", "0.5.4.post3", "0.5.9", "0.5.23"]
