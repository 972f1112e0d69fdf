"""TEST DOUBLE entry point: ``python -m sglang.bench_serving`` of the SGLang emulator.

Up to 0.5.9 the serving benchmark lives here. In 0.5.23 this path is a deprecated shim of
``sglang.benchmark.serving`` (the real ``sglang/bench_serving.py`` of 0.5.23, 22 lines): it
warns with a ``FutureWarning`` when imported and runs the same CLI. See
``sglang/_emulator/bench_client.py``.
"""

import sys
import warnings

from sglang._emulator.release import current_release as _current_release, version_tuple as _version

if _version(_current_release()) >= (0, 5, 23):
    warnings.warn(
        "`sglang.bench_serving` is deprecated and will be removed in a future "
        "release; use `sglang.benchmark.serving` instead "
        "(e.g. `python -m sglang.benchmark.serving`).",
        FutureWarning,
        stacklevel=1,
    )

if __name__ == "__main__":
    from sglang._emulator.bench_client import main

    sys.exit(main("sglang.bench_serving"))
