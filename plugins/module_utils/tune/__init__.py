# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""The tune's pure logic (issue 21): the space, verdicts, journal, metrics, search, frontier
and report, one file per concern. No Ansible imports; see docs/tune.md."""
