#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: pd_reach
short_description: Check that the hosts of a prefill/decode layout reach each other's ports
version_added: 0.4.0
author: gpufleet developers (@gpufleet)
description:
  - Checks, before any PD server starts, that each host of a prefill/decode (PD) layout can
    open a TCP connection to the ports its peers' servers will listen on.
  - A decode server connects to each prefill server's bootstrap port (on the prefill's first
    host, the host of its worker URL, which the router hands out as C(bootstrap_host)) and to
    the KV port of each prefill host; a prefill server connects to the KV port of each decode
    host. The release's KV managers bind a port the kernel picks from
    C(ip_local_port_range); each host stands for that range with one port drawn from it
    (C(kv_port) in O(hosts)).
  - O(mode=listen) listens on this host's ports (the bootstrap port of each prefill server
    whose first host it is, and its KV port), accepts and closes every connection for
    O(listen_seconds), then returns. A port that another process holds and answers on (a
    running server's bootstrap port) counts as listening, and the result says so. Run it with
    C(async) on every PD host, then O(mode=connect) on every PD host.
  - O(mode=connect) connects to every port this host needs (O(connect_timeout) each, several
    at a time), returns each result, and fails with every port it could not reach at once,
    one line each.
  - 'For example: C(gpufleet-router-2 (decode-0\) cannot reach gpufleet-router-1 (prefill-0\) at
    10.88.0.5:8998, the bootstrap port: timed out after 3 s).'
  - A host that holds no server of the layout listens on nothing and connects to nothing.
  - Changes nothing on the host.
extends_documentation_fragment:
  - gpufleet.sglang._attributes
attributes:
  check_mode:
    support: full
    details:
      - With O(mode=listen) opens no port and returns the ports it would listen on.
      - With O(mode=connect) connects and reports the problems without failing.
  diff_mode:
    support: none
  idempotent:
    support: full
seealso:
  - module: gpufleet.sglang.gpu_prereqs
    description: The transport facts (RDMA devices, transfer engine) of a PD host.
options:
  mode:
    description:
      - V(listen) listens on this host's ports for O(listen_seconds); V(connect) connects to
        its peers' ports.
    type: str
    choices: [listen, connect]
    required: true
  me:
    description: This host's inventory name, as O(placements) and O(hosts) name it.
    type: str
    required: true
  placements:
    description:
      - The servers of the PD layout, as the check's placement gives them (a plan's
        C(servers)), each C({name, role, hosts, base_gpu_id, gpus}); C(role) is V(prefill) or
        V(decode), C(hosts) the server's hosts in node-rank order.
      - A host's servers are numbered by their first GPU (the slot); a prefill server's
        bootstrap port is O(bootstrap_port) plus its slot times O(slot_port_step), unless the
        server carries its own C(bootstrap_port).
    type: list
    elements: dict
    required: true
  hosts:
    description:
      - Each host of the layout mapped to C({address, kv_port}), C(address) being the address
        its peers connect to (the host of its servers' worker URLs) and C(kv_port) the port it
        drew from its C(ip_local_port_range).
    type: dict
    required: true
  bootstrap_port:
    description: The prefill servers' bootstrap port (C(sglang_pd_bootstrap_port)) for slot 0.
    type: int
    default: 8998
  slot_port_step:
    description: How far apart the ports of a host's slots are (C(sglang_pd_slot_port_step)).
    type: int
    default: 10
  listen_seconds:
    description: With O(mode=listen), how long to accept connections.
    type: float
    default: 20
  listen_address:
    description: With O(mode=listen), the address to listen on; V(0.0.0.0) is every IPv4 address.
    type: str
    default: 0.0.0.0
  connect_timeout:
    description: With O(mode=connect), seconds one connection may take.
    type: float
    default: 3
"""

EXAMPLES = r"""
- name: Listen on this host's PD ports while the peers connect
  gpufleet.sglang.pd_reach:
    mode: listen
    me: "{{ inventory_hostname }}"
    placements: "{{ __server_pd_plan.servers }}"
    hosts: "{{ __server_pd_reach_hosts }}"
    listen_seconds: 20
  async: 40
  poll: 0
  register: __server_pd_listen

- name: Connect to the peers' PD ports
  gpufleet.sglang.pd_reach:
    mode: connect
    me: "{{ inventory_hostname }}"
    placements: "{{ __server_pd_plan.servers }}"
    hosts: "{{ __server_pd_reach_hosts }}"
    connect_timeout: 3

- name: Wait for the listener
  ansible.builtin.async_status:
    jid: "{{ __server_pd_listen.ansible_job_id }}"
  register: __server_pd_listened
  until: __server_pd_listened.finished
  retries: 30
  delay: 2
"""

RETURN = r"""
mode:
  description: The mode that ran.
  type: str
  returned: always
  sample: connect
listening:
  description:
    - With O(mode=listen), each port and its state, V(listening), V(answered by a running
      process) (another process holds it and answers), V(not listening), or in check mode
      V(would listen).
  type: list
  elements: dict
  returned: success
  sample: [{"port": 8998, "what": "bootstrap", "servers": ["prefill-0"], "state": "listening"}]
accepted:
  description: With O(mode=listen), the addresses that connected to each port, in order.
  type: list
  elements: dict
  returned: success
  sample: [{"port": 8998, "from": ["10.88.0.6"]}]
results:
  description:
    - With O(mode=connect), each port connected to, C(host), C(role) and C(servers) naming the
      peer, C(what) V(bootstrap) or V(kv), C(from) this host's servers that need it, C(ok),
      C(elapsed) (seconds) and C(error) (null when it answered).
  type: list
  elements: dict
  returned: success
  sample:
    - {"host": "gpufleet-router-1", "role": "prefill", "servers": ["prefill-0"], "address": "10.88.0.5",
       "port": 8998, "what": "bootstrap", "from": ["decode-0"], "ok": true, "elapsed": 0.002, "error": null}
problems:
  description: One line per port this host could not reach (O(mode=connect)) or listen on (O(mode=listen)).
  type: list
  elements: str
  returned: always
  sample: ["gpufleet-router-2 (decode-0) cannot reach gpufleet-router-1 (prefill-0) at 10.88.0.5:8998, the bootstrap port: timed out after 3 s"]
msg:
  description: One line for the operator.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpufleet.sglang.plugins.module_utils.prepare import _pd_reach
from ansible_collections.gpufleet.sglang.plugins.module_utils.common._net import listening

ANY_ADDRESS = ("", "0.0.0.0", "::")


def _ports_text(entries):
    return ", ".join("%s (%s)" % (e["port"], "KV" if e["what"] == "kv" else e["what"]) for e in entries) or "no port"


def run_listen(module):
    params = module.params
    me = params["me"]
    address = params["listen_address"] or "0.0.0.0"
    own = params["hosts"].get(me)
    own_address = own.get("address") if isinstance(own, dict) else None
    # where a process that holds one of the ports would answer
    probe_at = [address]
    if address in ANY_ADDRESS:
        probe_at = [a for a in (own_address, "::1" if address == "::" else "127.0.0.1") if a]

    def answers(port):
        return any(listening(a, port, 1.0) for a in probe_at)

    every = _pd_reach.listen_ports(me, params["placements"], params["hosts"], params["bootstrap_port"],
                                   step=params["slot_port_step"])
    result = dict(changed=False, mode="listen", accepted=[], problems=[])
    if module.check_mode:
        result["listening"] = [dict(e, state="would listen") for e in every]
        result["msg"] = "would listen on %s" % _ports_text(every)
        return result
    answering = [e["port"] for e in every if e["what"] == "bootstrap" and answers(e["port"])]
    ports = _pd_reach.listen_ports(me, params["placements"], params["hosts"], params["bootstrap_port"],
                                   answering=answering, step=params["slot_port_step"])
    sockets, opened, problems = _pd_reach.open_listeners(ports, address, answers)
    # every port in listen_ports' order, those a running server answers on included
    opened = iter(opened)
    states = [dict(e, state="answered by a running process") if e["what"] == "bootstrap" and e["port"] in answering
              else next(opened) for e in every]
    accepted = _pd_reach.serve(sockets, params["listen_seconds"])
    result.update(listening=states, problems=problems,
                  accepted=[{"port": port, "from": peers} for port, peers in sorted(accepted.items())])
    held = [e for e in states if e["state"] == "answered by a running process"]
    result["msg"] = "listened on %s for %s s; %d connection(s)%s" % (
        _ports_text([e for e in states if e["state"] == "listening"]), params["listen_seconds"],
        sum(len(peers) for peers in accepted.values()),
        "; a running process answers on %s" % _ports_text(held) if held else "")
    if problems:
        result["msg"] = "; ".join(problems)
        module.fail_json(**result)
    return result


def run_connect(module):
    params = module.params
    me = params["me"]
    wanted = _pd_reach.targets(me, params["placements"], params["hosts"], params["bootstrap_port"],
                               step=params["slot_port_step"])
    results = _pd_reach.connect(wanted, params["connect_timeout"])
    problems = _pd_reach.verdict(me, results)
    result = dict(changed=False, mode="connect", results=results, problems=problems)
    if problems:
        result["msg"] = "; ".join(problems)
        if not module.check_mode:
            module.fail_json(**result)
    else:
        result["msg"] = "%s reached all %d PD port(s) it needs" % (me, len(results))
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", required=True, choices=["listen", "connect"]),
            me=dict(type="str", required=True),
            placements=dict(type="list", elements="dict", required=True),
            hosts=dict(type="dict", required=True),
            bootstrap_port=dict(type="int", default=8998),
            slot_port_step=dict(type="int", default=10),
            listen_seconds=dict(type="float", default=20),
            listen_address=dict(type="str", default="0.0.0.0"),
            connect_timeout=dict(type="float", default=3),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not 1 <= params["bootstrap_port"] <= 65535:
        module.fail_json(msg="bootstrap_port must be a port 1-65535, got %s" % params["bootstrap_port"])
    for name in ("connect_timeout", "slot_port_step"):
        if params[name] <= 0:
            module.fail_json(msg="%s must be greater than 0, got %s" % (name, params[name]))
    if params["listen_seconds"] < 0:
        module.fail_json(msg="listen_seconds must be 0 or more, got %s" % params["listen_seconds"])
    try:
        if params["mode"] == "listen":
            result = run_listen(module)
        else:
            result = run_connect(module)
    except ValueError as exc:
        module.fail_json(msg=str(exc), mode=params["mode"], problems=[str(exc)])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
