# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Action plugin of gpufleet.sglang.model_resolve: the revision, the manifest and the
fan-out plan, worked out once for the fleet on the controller."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.plugins.action import ActionBase

from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _fanout, _model


class ActionModule(ActionBase):
    """Resolve a branch or tag to its commit; with tree, list the files and plan the fan-out."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super(ActionModule, self).run(tmp, task_vars or {})
        result["changed"] = False
        args = self._task.args
        repo_id = args.get("repo_id") or ""
        revision = str(args.get("revision") or "main")
        endpoint = (args.get("endpoint") or "https://huggingface.co").rstrip("/")
        token = args.get("token") or ""
        xet = bool(args.get("xet", False))
        want_tree = bool(args.get("tree", False))
        if "/" not in repo_id:
            return dict(result, failed=True,
                        msg="model_repo is %r: expected '<org>/<name>'" % (repo_id,))
        if args.get("manifest") is not None:  # a local source brings its own manifest
            try:
                manifest = _model.check_manifest(args["manifest"], repo_id, revision)
            except _model.ModelError as error:
                return dict(result, failed=True, msg=str(error))
            result.update(commit=revision, manifest=manifest, hub_requests_made=False)
            return self._plan(result, args, manifest)
        from ansible_collections.gpufleet.sglang.plugins.module_utils.weights import _model_hub
        if _model.is_commit(revision) and not want_tree:
            result.update(commit=revision, manifest=None, hub_requests_made=False)
            return result
        try:
            commit, manifest, xet_advertised = _model_hub.resolve(
                endpoint, repo_id, revision, token, xet, args.get("allow_patterns") or None,
                want_tree)
        except ImportError as error:
            return dict(result, failed=True, msg="the controller needs huggingface_hub "
                        "(requirements-dev.txt): %s" % error)
        except _model.ModelError as error:
            return dict(result, failed=True, msg=str(error))
        result.update(commit=commit, manifest=manifest, xet_advertised=xet_advertised,
                      hub_requests_made=True)
        if manifest is None:
            return result
        capacity = args.get("capacity") or {}
        if capacity.get("strategy") and capacity.get("gpu_count") and capacity.get("gpu_memory_mib"):
            try:
                result["capacity_plan"] = _model_hub.plan_before_transfer(
                    endpoint, repo_id, commit, token, capacity)
            except _model.ModelError as error:
                return dict(result, failed=True, msg=str(error))
        return self._plan(result, args, manifest)

    @staticmethod
    def _plan(result, args, manifest):
        result["total_bytes"] = _model.total_bytes(manifest)
        try:
            result["plan"] = _fanout.plan(args.get("hosts") or {}, args.get("verified") or [],
                                          args.get("seeds") or {})
        except ValueError as error:
            return dict(result, failed=True, msg=str(error))
        return result
