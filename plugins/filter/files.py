# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters over files on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib

from ansible.errors import AnsibleFilterError


def file_sha1(path):
    """SHA-1 of a file on the controller (what ansible.builtin.stat calls its checksum)."""
    digest = hashlib.sha1()
    try:
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1024 * 1024), b""):
                digest.update(chunk)
    except (IOError, OSError) as exc:
        raise AnsibleFilterError("cannot read %s on the controller: %s" % (path, exc))
    return digest.hexdigest()


class FilterModule(object):
    """gpufleet.sglang file filters."""

    def filters(self):
        return {"file_sha1": file_sha1}
