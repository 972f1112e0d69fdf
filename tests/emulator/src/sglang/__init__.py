"""TEST DOUBLE -- THIS IS NOT SGLANG.

This package is the SGLang *emulator* of the gpufleet.sglang collection: a stdlib-only
stand-in for the real ``sglang`` distribution, installed into a deploy virtualenv by
tests and the demo only. It loads no model, uses no GPU and produces fake words.
It reproduces the real CLI (``python -m sglang.launch_server``), its ``--help`` text,
its argparse errors, the server lifecycle and the HTTP routes of one emulated release.

Never install it on a production host. See tests/emulator/README.md.
"""

__emulator__ = True


def _read_release():
    from sglang._emulator.release import current_release

    return current_release()


__version__ = _read_release()
