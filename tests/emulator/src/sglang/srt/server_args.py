"""TEST DOUBLE of ``sglang.srt.server_args``: what the collection's server-args gate calls.

``prepare_server_args(argv)`` parses with the release's own argparse (the emulator's,
rebuilt from the real ``actions.json``), ``resolve_once()`` derives like the release does
(``sglang._emulator.server_args``), ``check_server_args()`` refuses what it refuses. The GPUs
are read as the real release reads them: memory with ``nvidia-smi --query-gpu=memory.total``,
compute capability with ``--query-gpu=compute_cap`` (torch in the real one).
"""

import argparse
import logging
import subprocess

from sglang._emulator import cli
from sglang._emulator import server_args as _derive
from sglang._emulator.release import current_release

logger = logging.getLogger(__name__)


def _query(field):
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=%s" % field, "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return [ln.strip() for ln in out.stdout.splitlines() if ln.strip()] if out.returncode == 0 else []


def _gpu():
    memory = [float(x) for x in _query("memory.total") if x.replace(".", "", 1).isdigit()]
    cc = _query("compute_cap")
    major, _dot, minor = (cc[0] if cc else "0.0").partition(".")
    return (min(memory) if memory else None), (int(major), int(minor or 0))


class ServerArgs:
    """The parsed values, then the derived ones (``resolved_dict``)."""

    def __init__(self, values):
        self._values = dict(values)
        self._resolved = None

    @staticmethod
    def add_cli_args(parser):
        built, _defaults = cli.build_parser(current_release())
        for action in built._actions:  # pylint: disable=protected-access
            if action.option_strings and action.option_strings[0] in ("-h", "--help"):
                continue
            if action.default is cli.UNSET:
                action.default = _defaults.get(action.dest)
            parser._add_action(action)  # pylint: disable=protected-access

    def resolve_once(self):
        if self._resolved is not None:
            return
        gpu_mem, cc = _gpu()
        model = _derive.model_facts(self._values.get("model_path") or "")
        derived, warnings = _derive.derive(current_release(), self._values, gpu_mem, cc, model)
        for message in warnings:
            logger.warning(message)
        self._resolved = derived

    def resolved_dict(self):
        return dict(self._resolved)

    def check_server_args(self):
        _derive.check(current_release(), self._resolved)


def prepare_server_args(argv):
    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    values = vars(parser.parse_args(argv))
    for long_name, field in cli.DEST_TO_FIELD.items():
        if long_name in values:
            values[field] = values.pop(long_name)
    return ServerArgs(values)
