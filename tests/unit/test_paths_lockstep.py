# -*- coding: utf-8 -*-
"""The host paths the collection owns are written once, in ``_paths.py``. Module option
defaults take them from there; what YAML or a module's DOCUMENTATION must restate (a role
variable, a documented default, a scenario's verify step) is checked here against it."""

import os
import re

import yaml

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _paths

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OWNED = {
    "RECORD_PATH": _paths.RECORD_PATH,
    "CACHE_DIR": _paths.CACHE_DIR,
    "STATE_DIR": _paths.STATE_DIR,
}
# role variables that must restate a path (YAML cannot import _paths)
ROLE_VARS = [
    ("roles/server/vars/main.yml", "__server_record_path", _paths.RECORD_PATH),
    ("roles/server/defaults/main.yml", "server_flags_cache_dir", _paths.CACHE_DIR),
    ("roles/prereqs/defaults/main.yml", "prereqs_cache_dir", _paths.CACHE_DIR),
    ("roles/server/vars/main.yml", "__server_secret_exec_path", _paths.SECRET_EXEC_PATH),
    ("roles/router/vars/main.yml", "__router_secret_exec_path", _paths.SECRET_EXEC_PATH),
]
# module options whose documented default restates a path
MODULE_OPTIONS = [
    ("server_unit", "record_path", _paths.RECORD_PATH),
    ("server_unit", "secret_exec", _paths.SECRET_EXEC_PATH),
    ("server_status", "record_path", _paths.RECORD_PATH),
    ("server_preflight", "record_path", _paths.RECORD_PATH),
    ("server_preflight", "cache_dir", _paths.CACHE_DIR),
    ("server_flags", "cache_dir", _paths.CACHE_DIR),
    ("gpu_prereqs", "cache_dir", _paths.CACHE_DIR),
]
# a host path of the collection's own, as YAML or docs would spell it
SPELLED = re.compile(r"/(?:etc/ansible/facts\.d/[\w.-]+|var/(?:cache|lib)/gpufleet-sglang[\w./-]*)")


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as handle:
        return handle.read()


def _documentation(module):
    text = _read(os.path.join("plugins", "modules", module + ".py"))
    return yaml.safe_load(re.search(r'DOCUMENTATION = r?"""(.*?)"""', text, re.S).group(1))


def test_role_vars_restate_the_paths():
    for rel, var, expected in ROLE_VARS:
        assert yaml.safe_load(_read(rel))[var] == expected, (rel, var)


def test_module_docs_restate_the_paths_and_the_specs_take_them_from_paths():
    for module, option, expected in MODULE_OPTIONS:
        assert _documentation(module)["options"][option]["default"] == expected, (module, option)
        text = _read(os.path.join("plugins", "modules", module + ".py"))
        spec = re.search(r"\b%s=dict\([^)]*\)" % option, text).group(0)
        assert "default=_paths." in spec, (module, spec)


def _yaml_and_python_files():
    for top in ("roles", "playbooks", "extensions", "plugins"):
        for dirpath, _dirs, files in os.walk(os.path.join(ROOT, top)):
            for name in files:
                if name.endswith((".yml", ".yaml", ".py", ".j2")):
                    yield os.path.join(dirpath, name)


def test_every_spelled_out_host_path_is_one_of_paths():
    """A path written out anywhere (a verify step, a README-like comment in YAML) is one of
    the owned paths or below one; a renamed path in _paths.py fails here until every place
    says the new name."""
    allowed = tuple(OWNED.values())
    stray = []
    for path in _yaml_and_python_files():
        if path.endswith(os.path.join("module_utils", "common", "_paths.py")):
            continue
        with open(path, encoding="utf-8") as handle:
            for found in SPELLED.findall(handle.read()):
                if not (found in allowed or any(found.startswith(a + "/") for a in allowed)):
                    stray.append((os.path.relpath(path, ROOT), found))
    assert stray == []


def test_the_check_finds_a_stray_path():
    assert SPELLED.findall("src: /etc/ansible/facts.d/sglang2.fact") == [
        "/etc/ansible/facts.d/sglang2.fact"]
