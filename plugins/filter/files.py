# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters over files on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _files


def file_sha1(path):
    """SHA-1 of a file on the controller (what ansible.builtin.stat calls its checksum)."""
    try:
        return _files.digest(path, "sha1")
    except (IOError, OSError) as exc:
        raise AnsibleFilterError("cannot read %s on the controller: %s" % (path, exc))


class FilterModule(object):
    """gpufleet.sglang file filters."""

    def filters(self):
        return {"file_sha1": file_sha1}
