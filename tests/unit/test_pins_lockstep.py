# -*- coding: utf-8 -*-
"""Pins and test-bed settings written in more than one place agree (as
tests/unit/test_default_release.py does for the default release):

* the Hub client: requirements-dev.txt (the tests' client), the model role's
  model_hub_version (default and argument spec), tests/testbed/hub.yml (the wheels the
  controller downloads for hosts without an index);
* the test bed's Hub double in the three inventories that start one: each names every
  setting hub.yml reads, in names and ports of its own, with a fixture that exists;
* the checkpoint size the double's index declares is derived from the config by the
  capacity model, never written as a number.
"""

import json
import os
import re
import sys

import yaml
from ansible_collections.gpufleet.sglang.tests.paths import FIXTURES, ROOT

HUB_INVENTORIES = {
    # file -> where its Hub settings live in it (None: the file's top level)
    "inventories/local/hosts.yml": ("all", "vars"),
    "tests/integration/minimal_inventory/testbed.yml": ("all", "vars"),
    "extensions/molecule/model/inventory/group_vars/all.yml": None,
}
OPTIONAL = {"hub_declared_total_size"}  # hub.yml guards it with "is defined"


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as handle:
        return handle.read()


def _hub_client_pins():
    pins = {}
    pins["requirements-dev.txt"] = re.findall(r"^huggingface_hub==(\S+)$", _read("requirements-dev.txt"), re.M)
    pins["model_hub_version"] = [str(yaml.safe_load(_read("roles/model/defaults/main.yml"))["model_hub_version"])]
    specs = yaml.safe_load(_read("roles/model/meta/argument_specs.yml"))
    pins["model_hub_version spec"] = sorted(set(
        str(entry["options"]["model_hub_version"]["default"])
        for entry in specs["argument_specs"].values()
        if "model_hub_version" in entry.get("options", {})))
    hub = _read("tests/testbed/hub.yml")
    pins["tests/testbed/hub.yml"] = sorted(set(
        re.findall(r"huggingface_hub==([\w.]+)", hub) + re.findall(r"huggingface_hub-([\d.]+)-py3", hub)))
    return pins


def test_the_hub_client_is_pinned_to_one_version_everywhere():
    pins = _hub_client_pins()
    assert all(len(found) == 1 for found in pins.values()), pins
    assert len(set(found[0] for found in pins.values())) == 1, pins


def _hub_settings(rel):
    data = yaml.safe_load(_read(rel))
    for key in HUB_INVENTORIES[rel] or ():
        data = data[key]
    return dict((k, v) for k, v in data.items() if k.startswith("hub_"))


def test_each_hub_inventory_names_what_hub_yml_reads_in_names_and_ports_of_its_own():
    needed = set(re.findall(r"\b(hub_[a-z_]+)\b", _read("tests/testbed/hub.yml")))
    needed -= {"hub_image", "hub_ready", "hub_container_started", "hub_double"}  # registers, a path
    needed -= OPTIONAL
    seen_names, seen_ports = {}, {}
    for rel in HUB_INVENTORIES:
        settings = _hub_settings(rel)
        assert needed <= set(settings), (rel, sorted(needed - set(settings)))
        fixture = os.path.join(FIXTURES, "models", settings["hub_config_fixture"])
        assert os.path.isfile(os.path.join(fixture, "config.json")), (rel, fixture)
        assert settings["hub_container"] not in seen_names, (rel, seen_names)
        seen_names[settings["hub_container"]] = rel
        for port in (settings["hub_port"], settings["hub_cdn_port"]):
            assert port not in seen_ports, (rel, port, seen_ports)
            seen_ports[port] = rel
        declared = settings.get("hub_declared_total_size")
        # a size is derived from the config ("config"), never a number written by hand
        assert declared in (None, "config"), (rel, declared)


def test_the_declared_size_is_what_the_capacity_model_reads_from_the_config():
    sys.path.insert(0, os.path.join(ROOT, "tests", "hub_double"))
    try:
        import hub_double
    finally:
        sys.path.pop(0)
    from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare._capacity_model import spec_from_config
    for rel in HUB_INVENTORIES:
        settings = _hub_settings(rel)
        if settings.get("hub_declared_total_size") != "config":
            continue
        path = os.path.join(FIXTURES, "models", settings["hub_config_fixture"], "config.json")
        with open(path, "rb") as handle:
            config = handle.read()
        expected = spec_from_config(json.loads(config.decode("utf-8"))).total_bytes()
        assert hub_double.config_total_size(config) == expected
        files = hub_double.build_repo(config, shards=2, shard_size=1024,
                                      declared_total_size=hub_double.config_total_size(config))
        index = json.loads(files["model.safetensors.index.json"])
        assert index["metadata"]["total_size"] == expected
        assert expected > sum(len(v) for k, v in files.items() if k.endswith(".safetensors"))
