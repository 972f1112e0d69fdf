# -*- coding: utf-8 -*-
"""The model directory rule: one filter, used by the model role and the server role."""

import os

import pytest
import yaml

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.sglang.plugins.filter.model import model_dir

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))))


def test_repo_and_revision_make_the_directory():
    assert model_dir("moonshotai/Kimi-K2.5", "main") == "/models/moonshotai--Kimi-K2.5/main"
    assert model_dir("moonshotai/Kimi-K2.5", None, None) == "/models/moonshotai--Kimi-K2.5/main"
    assert model_dir("org/m", "v1.0", "/data/w") == "/data/w/org--m/v1.0"


def test_a_repo_without_an_org_is_named():
    with pytest.raises(AnsibleFilterError) as err:
        model_dir("Kimi-K2.5", "main")
    assert "Kimi-K2.5" in str(err.value) and "<org>/<name>" in str(err.value)


def _defaults(role):
    with open(os.path.join(ROOT, "roles", role, "defaults", "main.yml"), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def test_both_roles_derive_the_path_with_this_filter():
    assert "gpufleet.sglang.model_dir(model_revision, model_root)" in _defaults("model")["model_path"]
    server = " ".join(_defaults("server")["server_model_path"].split())
    assert "sglang_model_repo | gpufleet.sglang.model_dir(sglang_model_revision" in server
    # the server role's fallbacks are the model role's defaults
    model = _defaults("model")
    assert "default('main')" in model["model_revision"] and "default('/models')" in model["model_root"]


def test_invalid_returns_the_stand_in_instead_of_failing():
    assert model_dir("not", "main", None, invalid="") == ""
    assert model_dir("org/m", "main", None, invalid="") == "/models/org--m/main"
