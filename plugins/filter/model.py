# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters of the model step."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.sglang.plugins.module_utils.common._weights import ModelError, model_path

#: The revision and the root a model directory is derived with when none is given (the
#: model role's defaults of model_revision and model_root).
DEFAULT_REVISION = "main"
DEFAULT_ROOT = "/models"


def model_dir(repo_id, revision=None, root=None, invalid=None):
    """The directory the model step places ``repo_id`` at ``revision`` in, on each host.

    A repo id that is no ``<org>/<name>`` fails, unless ``invalid`` is given: then that is
    returned, and the check that reads the repo id refuses it in the collection's words
    (the server role's deploy_check), instead of ansible-core reporting a failed filter."""
    try:
        return model_path(root or DEFAULT_ROOT, repo_id, revision or DEFAULT_REVISION)
    except ModelError as exc:
        if invalid is not None:
            return invalid
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    """gpufleet.sglang model filters."""

    def filters(self):
        return {"model_dir": model_dir}
