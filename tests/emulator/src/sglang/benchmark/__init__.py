"""TEST DOUBLE: ``sglang.benchmark``, which exists from 0.5.23 on.

``build_wheel.py`` leaves this package out of the wheels of older releases; run from the
source tree with an older ``SGLANG_EMULATOR_RELEASE`` it is missing as well.
"""

from sglang._emulator.release import current_release as _current_release, version_tuple as _version

if _version(_current_release()) < (0, 5, 23):
    raise ModuleNotFoundError("No module named 'sglang.benchmark'", name="sglang.benchmark")
