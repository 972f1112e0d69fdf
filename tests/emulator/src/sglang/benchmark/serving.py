"""TEST DOUBLE entry point: ``python -m sglang.benchmark.serving`` (0.5.23 on) of the SGLang
emulator. See ``sglang/_emulator/bench_client.py``."""

import sys

if __name__ == "__main__":
    from sglang._emulator.bench_client import main

    sys.exit(main("sglang.benchmark.serving"))
