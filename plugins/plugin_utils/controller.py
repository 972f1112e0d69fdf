# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""The base of the collection's action plugins that run on the controller alone.

:class:`ControllerAction` connects to no host and transfers no file; it checks the task's
arguments against the plugin's ``ARGUMENT_SPEC`` and hands the result dict and the checked
arguments to the plugin's :meth:`ControllerAction.act`.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase


class ControllerAction(ActionBase):
    """An action plugin that runs on the controller only (subclasses set ARGUMENT_SPEC and act)."""

    TRANSFERS_FILES = False
    _requires_connection = False
    ARGUMENT_SPEC = {}

    def run(self, tmp=None, task_vars=None):
        result = super(ControllerAction, self).run(tmp, task_vars or {})
        _valid, args = self.validate_argument_spec(argument_spec=self.ARGUMENT_SPEC)
        return self.act(result, args)

    def act(self, result, args):
        """The plugin's work: fill and return ``result`` from the checked ``args``."""
        raise NotImplementedError
