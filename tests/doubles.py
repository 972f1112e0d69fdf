# -*- coding: utf-8 -*-
"""Small test doubles the tests share, imported as
``ansible_collections.gpufleet.sglang.tests.doubles``."""

import os
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
