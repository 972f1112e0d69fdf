# -*- coding: utf-8 -*-
"""Small test doubles the tests share, imported as
``ansible_collections.gpufleet.sglang.tests.doubles``."""

import os
import stat
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing."""

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass


def start_http(handler):
    """A threading HTTP server on a free loopback port, serving in a daemon thread."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def stop_http(httpd):
    httpd.shutdown()
    httpd.server_close()


def lstat_tree(root):
    """``(path, os.lstat(path))`` of every directory and file under ``root`` (links not
    followed), in ``os.walk`` order."""
    for base, dirs, files in os.walk(str(root)):
        for name in dirs + files:
            path = os.path.join(base, name)
            yield path, os.lstat(path)


def install_venv_python(bin_dir):
    """The one fake SGLang interpreter of the module tests (tests/fakes/venv-python), as
    ``<bin_dir>/python`` run by this test's interpreter; returns its path. It answers the
    release query, prints the --help fixture its ``state.json`` (beside it) names and plays
    the release's argparse."""
    from ansible_collections.gpufleet.sglang.tests.paths import FAKES  # pylint: disable=import-outside-toplevel

    with open(os.path.join(FAKES, "venv-python"), encoding="utf-8") as handle:
        text = "#!" + sys.executable + "\n" + handle.read().split("\n", 1)[1]
    path = os.path.join(str(bin_dir), "python")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class ActionTask(object):
    """The task an action plugin reads in a unit test: its arguments, no async, no check
    or diff mode."""

    def __init__(self, args, action="gpufleet.sglang.test"):
        self.args = args
        self.async_val = 0
        self.action = action
        self.check_mode = False
        self.diff = False

    def get_validated_value(self, *args):  # pylint: disable=unused-argument
        return None
