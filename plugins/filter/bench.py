# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
"""Filters of the benchmark role: argv of one run (bench_serving or aiperf), and the
parsing of a tool's output into the collection's result schema."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError

# The module_utils are imported where a filter runs, not when this file loads: Ansible
# resolves any gpufleet.sglang filter by loading every filter file of the collection, in
# each task's worker process (see plugins/filter/router.py).


def _tool():
    from ansible_collections.gpufleet.sglang.plugins.module_utils.bench import _bench_tool
    return _bench_tool


_SERVING_KEYS = ("python", "release", "base_url", "tokenizer", "concurrency", "num_prompts",
                 "input_len", "output_len", "output_file", "seed", "warmup_requests", "backend",
                 "model", "ready_timeout", "extra_args")
_AIPERF_KEYS = ("aiperf", "url", "model", "tokenizer", "concurrency", "request_count",
                "input_len", "output_len", "artifact_dir", "seed", "warmup_requests",
                "endpoint_type", "streaming", "ignore_eos", "workers_max", "api_key", "extra_args")


def _kwargs(run, keys, what):
    if not isinstance(run, dict):
        raise AnsibleFilterError("%s expects a mapping, got %s" % (what, type(run).__name__))
    unknown = sorted(set(run) - set(keys))
    if unknown:
        raise AnsibleFilterError("%s: unknown keys %s (known: %s)" % (what, ", ".join(unknown), ", ".join(keys)))
    return dict((k, v) for k, v in run.items() if v is not None and v != "")


def bench_serving_argv_filter(run, help_text=None):
    """argv of one bench_serving run; checked against the release's --help when given."""
    kwargs = _kwargs(run, _SERVING_KEYS, "bench_serving_argv")
    if help_text:
        from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _sglang_help

        try:
            kwargs["available_flags"] = _sglang_help.parse_help(help_text)["flags"]
        except _sglang_help.HelpParseError as exc:
            raise AnsibleFilterError("cannot read the bench_serving --help: %s" % exc)
    tool = _tool()
    try:
        return tool.bench_serving_argv(**kwargs)
    except (tool.BenchError, TypeError) as exc:
        raise AnsibleFilterError(str(exc))


def aiperf_argv_filter(run):
    """argv of one ``aiperf profile`` run."""
    kwargs = _kwargs(run, _AIPERF_KEYS, "aiperf_argv")
    tool = _tool()
    try:
        return tool.aiperf_argv(**kwargs)
    except (tool.BenchError, TypeError) as exc:
        raise AnsibleFilterError(str(exc))


def bench_parse(text, tool, strategy=None, concurrency=None, num_prompts=None):
    """A tool's output file (text) -> one result in the collection's schema."""
    mod = _tool()
    try:
        return mod.parse_result(text, tool, strategy=strategy, concurrency=concurrency,
                                num_prompts=num_prompts)
    except mod.BenchError as exc:
        raise AnsibleFilterError("%s result%s: %s" % (tool, (" of %s" % strategy) if strategy else "", exc))


def bench_serving_module_filter(release):
    """Python module of SGLang's serving benchmark for a release."""
    tool = _tool()
    try:
        return tool.bench_serving_module(release)
    except tool.BenchError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule(object):
    """gpufleet.sglang benchmark filters."""

    def filters(self):
        return {
            "bench_serving_argv": bench_serving_argv_filter,
            "aiperf_argv": aiperf_argv_filter,
            "bench_parse": bench_parse,
            "bench_serving_module": bench_serving_module_filter,
        }
