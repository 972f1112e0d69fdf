# -*- coding: utf-8 -*-
"""Parameters the tests of ``_server_unit`` build a unit from, imported as
``ansible_collections.gpufleet.sglang.tests.unit_params``."""

#: The tp8-ep8 layout of one host with 8 GPUs.
LAYOUT = {"tp": 8, "pp": 1, "ep": 8, "dp": 1, "name": "tp8-ep8", "nnodes": 1, "gpus": 8}


def server_unit_params(**over):
    """The parameters of ``_server_unit.render_unit``/``render_env`` for a tp8-ep8 server of
    SGLang 0.5.9 (no API key, no token, no extra environment), with ``over`` in place."""
    p = dict(
        service_name="sglang",
        python="/opt/sglang/0.5.9/bin/python",
        argv=["--model-path", "/models/kimi-k2", "--tp-size", "8", "--ep-size", "8",
              "--host", "0.0.0.0", "--port", "30000"],
        api_key="",
        hf_token="",
        environment={},
        pp_layer_partition="",
        user="sglang",
        group="sglang",
        device_groups=["video"],
        home="/var/lib/sglang",
        config_dir="/etc/sglang",
        restart_sec=10,
        start_limit_burst=3,
        start_limit_interval_sec=3600,
        timeout_stop_sec=120,
        strategy="tp8-ep8",
        layout=dict(LAYOUT),
        release="0.5.9",
    )
    p.update(over)
    return p
