# -*- coding: utf-8 -*-
"""The controller-side file filters."""

import hashlib

import pytest

from ansible.errors import AnsibleFilterError

from ansible_collections.gpufleet.sglang.plugins.filter.files import file_sha1


def test_sha1_of_a_controller_file_is_stats_checksum(tmp_path):
    path = tmp_path / "sglang-0.5.9-py3-none-any.whl"
    data = bytes(range(256)) * 5000
    path.write_bytes(data)
    assert file_sha1(str(path)) == hashlib.sha1(data).hexdigest()


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(AnsibleFilterError) as err:
        file_sha1(str(tmp_path / "nope.whl"))
    assert "nope.whl on the controller" in str(err.value)
