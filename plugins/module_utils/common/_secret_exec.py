# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The command line of a unit that starts through the collection's launcher
(``roles/server/files/secret_exec.py``): written once, for the server's unit and the
router's."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _paths


def prefix(python, env_name, path=None):
    """``[python, launcher, "--api-key=<env_name>", "--"]``: the launcher takes the key
    from ``env_name`` and appends ``--api-key`` to what follows ``--``, in the process."""
    return [python, path or _paths.SECRET_EXEC_PATH, "--api-key=%s" % env_name, "--"]
