"""TEST DOUBLE entry point: ``python -m sglang.launch_server`` of the SGLang emulator."""

import sys
import warnings

from sglang._emulator.release import current_release

if __name__ == "__main__":
    if current_release() == "0.5.23":
        # The real 0.5.23 prints this on every `python -m sglang.launch_server` run.
        warnings.warn(
            "'python -m sglang.launch_server' is still supported, but 'sglang serve' "
            "is the recommended entrypoint.",
            UserWarning,
        )
    from sglang._emulator.main import main

    sys.exit(main(sys.argv[1:]))
