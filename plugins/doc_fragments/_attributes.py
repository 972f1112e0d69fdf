# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This doc fragment is PRIVATE to the gpufleet.sglang collection.

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """Shared descriptions of module attributes."""

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
  idempotent:
    description:
      - When run twice in a row outside check mode, with the same arguments, the second
        invocation indicates no change.
"""

    # A module that only reads: full check mode support, no diff, always idempotent.
    INFO_MODULE = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: This module only reads and never changes the target.
  diff_mode:
    support: N/A
    details: This module never changes the target.
  idempotent:
    support: full
"""
