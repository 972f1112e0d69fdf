# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Prefill/decode (PD) disaggregation: what a release offers, each role's flags, the KV
transfer backend, and the refusals of PD inputs.

A PD layout (``_strategy.parse_pd``: ``prefill:ep8+decode:2xep8``) runs prefill servers and
decode servers; every one of them is an SGLang server started with

* ``--disaggregation-mode prefill|decode`` (its role);
* ``--disaggregation-transfer-backend B``: how the KV cache travels from prefill to decode,
  the same on both roles (:func:`choose_backend`);
* ``--disaggregation-bootstrap-port P`` on the prefill servers only (SGLang's default 8998:
  "Bootstrap server port on the prefill server"); the router tells each decode server the
  port with every request, so decode servers get no port;
* ``--disaggregation-ib-device D`` where the backend uses RDMA (``mooncake``):
  :func:`ib_device_value` maps each GPU to its nearest RDMA devices;
* on releases whose help has them (0.5.4.post3 and 0.5.9, gone from 0.5.23):
  ``--disaggregation-decode-tp``/``--disaggregation-decode-dp`` on prefill servers ("This is
  only set on the prefill server") when the decode layout's tp or dp differs from the
  prefill's, and ``--disaggregation-prefill-pp`` on decode servers ("only set on the decode
  server") when the prefill layout has pp > 1.

**Release facts.** What a release offers is read from its own ``--help``
(:func:`facts_from_help`, over the ``flags`` of ``prepare/_sglang_help.parse_help``, which
prepare's probe gives it). The check runs before any host is reached and may not import a
later stage, so it holds :data:`KNOWN_RELEASES`: the same facts for the releases whose help
texts are fixtures (``tests/fixtures/sglang-help/``); ``test_pd.py`` derives each entry from
its help text with :func:`facts_from_help` and fails when they differ. A release outside
the table is left to prepare, which calls :func:`release_problems` with the facts of the
installed release's help. From the fixtures:

=========== ====================================== ==========================================
release     ``--disaggregation-transfer-backend`` other PD flags
=========== ====================================== ==========================================
0.4.6.post5 mooncake, nixl                         mode, bootstrap-port, ib-device
0.5.4.post3 + ascend, fake                         + decode-tp, decode-dp, prefill-pp
0.5.9       + mori                                 as 0.5.4.post3
0.5.23      + mooncake_tcp                         decode-tp/dp, prefill-pp gone; ib-device
                                                   takes a per-GPU JSON mapping
=========== ====================================== ==========================================

**The transfer backend.** ``mooncake`` needs RDMA devices (``/sys/class/infiniband``) and
GPUDirect RDMA (the ``nvidia_peermem`` module) on every PD host, even on one host;
``mooncake_tcp`` runs over plain Ethernet (in 0.5.23's help, not in 0.5.9's); ``nixl`` runs
UCX, over RDMA unless UCX was built with TCP. The collection deploys these three
(:data:`DEPLOYED_BACKENDS`); ``ascend``, ``mori`` (other accelerators) and ``fake`` (no
transfer) are refused. Unforced, :func:`choose_backend` takes ``mooncake`` where every PD
host has RDMA and GPUDirect, else ``mooncake_tcp`` where the release has it, else refuses
saying what is missing; ``sglang_pd_transfer_backend`` forces one.

Everything here is plain Python; host facts come in as arguments.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _version
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import PD_ROLES, pd_name
from ansible_collections.gpufleet.sglang.plugins.module_utils.check._strategy import StrategyError, parse_pd
from ansible_collections.gpufleet.sglang.plugins.module_utils.check import _pd_roles

#: The PD flags the collection renders, by key: (the help's name, where it goes).
FLAGS = {
    "mode": "--disaggregation-mode",
    "transfer_backend": "--disaggregation-transfer-backend",
    "bootstrap_port": "--disaggregation-bootstrap-port",
    "ib_device": "--disaggregation-ib-device",
    "decode_tp": "--disaggregation-decode-tp",
    "decode_dp": "--disaggregation-decode-dp",
    "prefill_pp": "--disaggregation-prefill-pp",
    "base_gpu_id": "--base-gpu-id",
}

#: The flags a PD layout sets on each server: given through server_extra_args inside a PD
#: layout they are refused (the layout owns them); ``--base-gpu-id`` places a server on
#: its GPUs of a shared host.
OWNED = ("mode", "transfer_backend", "bootstrap_port", "ib_device", "decode_tp", "decode_dp",
         "prefill_pp", "base_gpu_id")

#: The flags without which a release cannot run PD at all.
REQUIRED = ("mode", "transfer_backend", "bootstrap_port")

#: The transfer backends the collection deploys and checks on the hosts.
DEPLOYED_BACKENDS = ("mooncake", "mooncake_tcp", "nixl")

#: The last words of a PD check until prepare, the rollout and the router deploy PD.
NOT_DEPLOYED = ("prefill/decode layouts are checked, not deployed yet: prepare, the rollout and "
                "the router do not render the PD servers and the router's PD mode (issue 43); no "
                "host was changed")

#: SGLang's bootstrap port when its help does not say ("Default is 8998.").
DEFAULT_BOOTSTRAP_PORT = 8998

#: The releases whose ``--help`` is a fixture: :func:`facts_from_help` of each help text
#: (``tests/unit/plugins/module_utils/check/test_pd.py`` derives them again and compares).
KNOWN_RELEASES = {
    "0.4.6.post5": {
        "flags": ["base_gpu_id", "bootstrap_port", "ib_device", "mode", "transfer_backend"],
        "modes": ["null", "prefill", "decode"],
        "backends": ["mooncake", "nixl"],
        "bootstrap_port_default": 8998,
        "ib_device_per_gpu": False,
    },
    "0.5.4.post3": {
        "flags": ["base_gpu_id", "bootstrap_port", "decode_dp", "decode_tp", "ib_device", "mode",
                  "prefill_pp", "transfer_backend"],
        "modes": ["null", "prefill", "decode"],
        "backends": ["mooncake", "nixl", "ascend", "fake"],
        "bootstrap_port_default": 8998,
        "ib_device_per_gpu": False,
    },
    "0.5.9": {
        "flags": ["base_gpu_id", "bootstrap_port", "decode_dp", "decode_tp", "ib_device", "mode",
                  "prefill_pp", "transfer_backend"],
        "modes": ["null", "prefill", "decode"],
        "backends": ["mooncake", "nixl", "ascend", "fake", "mori"],
        "bootstrap_port_default": 8998,
        "ib_device_per_gpu": False,
    },
    "0.5.23": {
        "flags": ["base_gpu_id", "bootstrap_port", "ib_device", "mode", "transfer_backend"],
        "modes": ["null", "prefill", "decode"],
        "backends": ["mooncake", "nixl", "ascend", "fake", "mori", "mooncake_tcp"],
        "bootstrap_port_default": 8998,
        "ib_device_per_gpu": True,
    },
}

#: Link of a GPU to a NIC in ``nvidia-smi topo -m``, nearest first.
LINK_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4, "SOC": 4}

_BACKEND_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_DEFAULT = re.compile(r"[Dd]efault is ([0-9]+)")


class PDError(ValueError):
    """PD inputs that cannot be deployed; ``problems`` lists every one."""

    def __init__(self, problems):
        self.problems = list(problems)
        super(PDError, self).__init__("; ".join(self.problems))


# --- what a release offers --------------------------------------------------------------

def _find(flags, name):
    """The entry of ``flags`` (``parse_help``'s mapping) one of whose names is ``name``."""
    if name in flags:
        return flags[name]
    for entry in flags.values():
        if name in (entry.get("names") or ()):
            return entry
    return None


def facts_from_help(flags):
    """The PD facts of a release from the ``flags`` of its parsed ``--help``
    (``prepare/_sglang_help.parse_help(text)["flags"]``): which of :data:`FLAGS` it has,
    the choices of ``--disaggregation-mode`` and ``--disaggregation-transfer-backend`` in the
    help's order, the bootstrap port's default as the help states it, and whether
    ``--disaggregation-ib-device`` takes a per-GPU JSON mapping (its help says so)."""
    flags = flags or {}
    found = {}
    for key, name in FLAGS.items():
        entry = _find(flags, name)
        if entry is not None and not entry.get("deprecated"):
            found[key] = entry
    mode = found.get("mode") or {}
    backend = found.get("transfer_backend") or {}
    port = found.get("bootstrap_port") or {}
    ib = found.get("ib_device") or {}
    default = _DEFAULT.search(port.get("help") or "")
    return {
        "flags": sorted(found),
        "modes": list(mode.get("choices") or []),
        "backends": list(backend.get("choices") or []),
        "bootstrap_port_default": int(default.group(1)) if default else (
            DEFAULT_BOOTSTRAP_PORT if port else None),
        "ib_device_per_gpu": "per-gpu" in (ib.get("help") or "").lower(),
    }


def release_facts(release):
    """:data:`KNOWN_RELEASES`' facts of ``release`` (a copy), or None when the collection has
    no help text of it (prepare decides with the installed release's help)."""
    if not isinstance(release, str):
        return None
    for known, facts in KNOWN_RELEASES.items():
        try:
            same = _version.compare(release, known) == 0
        except ValueError:
            return None
        if same:
            return json.loads(json.dumps(facts))
    return None


def first_known_with_backend(backend):
    """The oldest release of :data:`KNOWN_RELEASES` whose help lists ``backend``, or None."""
    having = [r for r, f in KNOWN_RELEASES.items() if backend in f["backends"]]
    return min(having, key=_version.parse) if having else None


def release_problems(strategy, release, facts, backend=None):
    """Why ``release`` (with ``facts``, :func:`facts_from_help`'s) cannot run the PD layout
    ``strategy``, and why it cannot run a forced ``backend`` (``sglang_pd_transfer_backend``);
    [] when it can, or when ``facts`` is None (unknown release: prepare asks its help)."""
    if facts is None:
        return backend_name_problems(backend)
    problems = []
    missing = [FLAGS[k] for k in REQUIRED if k not in facts["flags"]]
    if missing:
        problems.append(
            "strategy %s is a prefill/decode (PD) layout, but sglang %s has no %s (its --help "
            "lists no such flag%s); PD needs a release with --disaggregation-mode, "
            "--disaggregation-transfer-backend and --disaggregation-bootstrap-port, e.g. %s "
            "(sglang_release)" % (strategy, release, ", ".join(missing),
                                  "" if len(missing) == 1 else "s",
                                  max(KNOWN_RELEASES, key=_version.parse)))
        return problems
    lacking = [r for r in PD_ROLES if r not in facts["modes"]]
    if lacking:
        problems.append("strategy %s: sglang %s's --disaggregation-mode takes %s, not %s"
                        % (strategy, release, ", ".join(facts["modes"]), " or ".join(lacking)))
    problems.extend(backend_problems(backend, release, facts))
    return problems


def backend_name_problems(backend):
    """A forced backend's spelling and whether the collection deploys it (no release
    needed)."""
    if backend is None or backend == "":
        return []
    if not isinstance(backend, str) or not _BACKEND_NAME.match(backend):
        return ["sglang_pd_transfer_backend must be one of %s (got %s)"
                % (", ".join(DEPLOYED_BACKENDS), json.dumps(backend, default=str)[:80])]
    if backend not in DEPLOYED_BACKENDS:
        return ["sglang_pd_transfer_backend is %s, which the collection does not deploy: it "
                "deploys %s (ascend and mori are other accelerators' transports, fake moves no "
                "KV at all)" % (backend, ", ".join(DEPLOYED_BACKENDS))]
    return []


def backend_problems(backend, release, facts):
    """Whether the release ``facts`` describe has the forced ``backend``."""
    problems = backend_name_problems(backend)
    if problems or not backend or facts is None:
        return problems
    if backend not in facts["backends"]:
        first = first_known_with_backend(backend)
        problems.append(
            "sglang_pd_transfer_backend is %s, but sglang %s has no such transfer backend (its "
            "--disaggregation-transfer-backend takes %s)%s"
            % (backend, release, ", ".join(facts["backends"]) or "nothing",
               "; %s is in the help of %s%s" % (
                   backend, first, ", the first release the collection knows with it"
                   if _version.compare(first, release) > 0 else "") if first else ""))
    return problems


# --- each role's flags -----------------------------------------------------------------

def role_flags(role, roles, release, facts, backend, bootstrap_port=None, ib_device=None,
               base_gpu_id=None):
    """The PD flags of one server of ``role`` as ``[[flag, value], ...]``, by the
    names of :data:`FLAGS` (each release of the fixtures prints them so; ``facts``:
    :func:`facts_from_help`'s of ``release``): mode, transfer backend, the bootstrap
    port (prefill only; the help's default when None), the IB devices (``ib_device``, from
    :func:`ib_device_value`, when given), ``--base-gpu-id`` (a server on part of a host's
    GPUs) and, where the release has them, the other role's sizes (see the module's doc).

    ``roles`` is ``_strategy.parse_pd``'s. Raises PDError listing every flag or value the
    release lacks.
    """
    if role not in PD_ROLES:
        raise PDError(["role must be prefill or decode, got %r" % (role,)])
    problems = list(release_problems(pd_name(roles), release, facts, backend))
    if backend is None:
        problems.append("no transfer backend chosen (choose_backend)")
    if base_gpu_id not in (None, 0) and "base_gpu_id" not in facts["flags"]:
        problems.append("--base-gpu-id is not a flag of this release: its servers cannot share a host")
    if ib_device and "ib_device" not in facts["flags"]:
        problems.append("--disaggregation-ib-device is not a flag of this release")
    if problems:
        raise PDError(problems)
    out = [[FLAGS["mode"], role], [FLAGS["transfer_backend"], backend]]
    own, other = roles[role]["layout"], roles["decode" if role == "prefill" else "prefill"]["layout"]
    if role == "prefill":
        port = bootstrap_port if bootstrap_port is not None else (
            facts.get("bootstrap_port_default") or DEFAULT_BOOTSTRAP_PORT)
        out.append([FLAGS["bootstrap_port"], int(port)])
        for key, size in (("decode_tp", "tp"), ("decode_dp", "dp")):
            if key in facts["flags"] and other[size] != own[size]:
                out.append([FLAGS[key], other[size]])
    elif "prefill_pp" in facts["flags"] and other["pp"] > 1:
        out.append([FLAGS["prefill_pp"], other["pp"]])
    if ib_device:
        out.append([FLAGS["ib_device"], ib_device])
    if base_gpu_id not in (None, 0):
        out.append([FLAGS["base_gpu_id"], int(base_gpu_id)])
    return out


# --- the transfer backend, from host facts ---------------------------------------------

def _natural(name):
    return [int(p) if p.isdigit() else p for p in re.split(r"([0-9]+)", str(name))]


def _device_names(devices):
    """RDMA device names from ``/sys/class/infiniband`` entries: names, or mappings with a
    ``name`` and an optional port ``state`` (only ``ACTIVE`` ones count when given)."""
    names = []
    for device in devices or []:
        if isinstance(device, dict):
            state = str(device.get("state") or "ACTIVE").upper()
            if "ACTIVE" not in state or not device.get("name"):
                continue
            device = device["name"]
        if isinstance(device, str) and device and device not in names:
            names.append(device)
    return sorted(names, key=_natural)


def host_transport(facts):
    """What one host offers the KV transfer: ``{"rdma": [devices], "gpudirect": bool or None,
    "missing": [what mooncake lacks there]}``. ``facts``: ``{"ib_devices": [...]`` (the
    entries of ``/sys/class/infiniband``), ``"peermem": bool`` (``nvidia_peermem`` loaded;
    None when not looked at)``}``."""
    facts = facts or {}
    rdma = _device_names(facts.get("ib_devices"))
    peermem = facts.get("peermem")
    missing = []
    if not rdma:
        missing.append("no RDMA device (/sys/class/infiniband is empty or has no active port)")
    if peermem is not True:
        missing.append("GPUDirect RDMA: the nvidia_peermem module is %s"
                       % ("not loaded" if peermem is False else "not known to be loaded"))
    return {"rdma": rdma, "gpudirect": peermem is True, "missing": missing}


def choose_backend(release, facts, hosts, forced=None):
    """The transfer backend of a PD deployment, one for every host (prefill and decode must
    agree): ``({"backend", "reason"}, problems)``.

    ``facts``: the release's (:func:`facts_from_help`); ``hosts``: host -> host facts (see
    :func:`host_transport`); ``forced``: ``sglang_pd_transfer_backend`` (None or "" to
    choose). ``mooncake`` where every host has RDMA devices and GPUDirect RDMA; else
    ``mooncake_tcp`` where the release has it; else a refusal naming, per host, what is
    missing. Prepare calls it once over the PD hosts' facts (the doctor's), before any host
    changes.
    """
    transport = dict((h, host_transport(f)) for h, f in sorted((hosts or {}).items()))
    lacking = ["%s: %s" % (h, "; ".join(t["missing"])) for h, t in transport.items() if t["missing"]]
    no_rdma = [h for h, t in transport.items() if not t["rdma"]]
    problems = list(backend_problems(forced, release, facts))
    if problems:
        return None, problems
    backends = facts["backends"] if facts else []
    if forced:
        if forced == "mooncake" and lacking:
            problems.append(
                "sglang_pd_transfer_backend is mooncake, which needs RDMA devices and GPUDirect "
                "RDMA on every PD host (even on one host); %s%s"
                % (", ".join(lacking), _tcp_hint(release, backends)))
        elif forced == "nixl" and no_rdma:
            problems.append(
                "sglang_pd_transfer_backend is nixl, whose UCX transport needs RDMA devices unless "
                "UCX was built with TCP; %s has no RDMA device (/sys/class/infiniband)%s"
                % (", ".join(no_rdma), _tcp_hint(release, backends)))
        if problems:
            return None, problems
        return {"backend": forced, "reason": "sglang_pd_transfer_backend"}, []
    if not lacking and "mooncake" in backends:
        return {"backend": "mooncake", "reason": "every PD host has RDMA devices and GPUDirect "
                                                 "RDMA (nvidia_peermem)"}, []
    if "mooncake_tcp" in backends:
        return {"backend": "mooncake_tcp",
                "reason": "not every PD host can do RDMA with GPUDirect (%s): KV over TCP"
                          % ", ".join(lacking)}, []
    first = first_known_with_backend("mooncake_tcp")
    problems.append(
        "no KV transfer backend for the PD layout: mooncake needs RDMA devices and GPUDirect RDMA "
        "on every PD host (%s), and sglang %s has no mooncake_tcp (plain Ethernet)%s: add RDMA "
        "NICs and load nvidia_peermem, choose a release with mooncake_tcp (sglang_release), or "
        "force a backend with sglang_pd_transfer_backend"
        % (", ".join(lacking), release, "; %s has it" % first if first else ""))
    return None, problems


def _tcp_hint(release, backends):
    if "mooncake_tcp" in backends:
        return "; mooncake_tcp (plain Ethernet) is in sglang %s: set sglang_pd_transfer_backend " \
               "to mooncake_tcp, or leave it unset to choose from the hosts" % release
    return ""


def nearest_nics(gpu, nics, devices):
    """The RDMA devices of ``devices`` nearest to ``gpu`` by the ``topo -m`` link
    (:data:`LINK_RANK`: PIX before PXB, PHB, NODE, SYS), every one tied at the best link;
    [] when the matrix names none of them."""
    ranked = []
    for name in devices:
        link = (nics.get(name) or {}).get(gpu)
        if link is None:
            link = (nics.get(name) or {}).get(str(gpu))
        if link in LINK_RANK:
            ranked.append((LINK_RANK[link], name))
    if not ranked:
        return []
    best = min(ranked)[0]
    return sorted((name for rank, name in ranked if rank == best), key=_natural)


def ib_device_value(facts, devices, gpus, topology=None):
    """The value of ``--disaggregation-ib-device`` for a server on ``gpus`` (the host's GPU
    indexes it runs on: ``base_gpu_id`` .. ``base_gpu_id + n - 1``), or None without RDMA
    devices.

    ``devices``: the host's RDMA devices (``/sys/class/infiniband``); ``topology``:
    ``prepare/_gpu_parse.parse_topology_nics`` of the host's ``nvidia-smi topo -m``, or None.
    How devices are mapped to GPUs:

    * each GPU gets the RDMA devices nearest to it in the matrix (PIX before PXB, PHB, NODE,
      SYS; every device tied at the best link), by the NIC legend's names
      (``NIC3: mlx5_3``);
    * a release whose help takes a per-GPU JSON mapping (0.5.23) gets
      ``{"<gpu>": "<dev>[,<dev>]"}``; its keys are process-visible GPU ids, which are the
      host's indexes because the server sees every GPU (``--base-gpu-id``, no
      ``CUDA_VISIBLE_DEVICES``) **and the unit sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID``**
      (nvidia-smi numbers GPUs by PCI bus; CUDA's default order may differ);
    * an older release (a device or a comma-separated list, shared by all GPUs) gets the
      devices nearest to any of the server's GPUs;
    * without a matrix, or one that names none of the devices (no NIC legend), every
      device, comma-separated (SGLang's own list form).
    """
    names = _device_names(devices)
    if not names:
        return None
    nics = (topology or {}).get("nics") or {}
    nearest = dict((g, nearest_nics(g, nics, names)) for g in gpus)
    if not nics or not any(nearest.values()):
        return ",".join(names)
    if facts.get("ib_device_per_gpu") and all(nearest.values()):
        return json.dumps(dict((str(g), ",".join(d)) for g, d in nearest.items()),
                          sort_keys=True, separators=(",", ":"))
    union = []
    for g in gpus:
        union.extend(d for d in nearest[g] if d not in union)
    return ",".join(sorted(union, key=_natural))


# --- refusals of the single inputs -----------------------------------------------------

def _norm(key):
    return key.lstrip("-").replace("_", "-").lower() if isinstance(key, str) else ""


def is_pd_flag(key):
    """Whether a ``server_extra_args`` key is a PD flag: ``--disaggregation-*`` in any
    spelling (dashes or underscores, any leading dashes), an abbreviation argparse would
    take for one included (``--disagg...``)."""
    return _norm(key).startswith("disagg")


def owned_flag(key):
    """The :data:`FLAGS` key a ``server_extra_args`` key sets when a PD layout owns it (the
    full name or an abbreviation of at least ``--disagg``/``--base-gpu``), else None."""
    norm = _norm(key)
    for owned in OWNED:
        name = FLAGS[owned].lstrip("-")
        if norm == name or (len(norm) >= 6 and name.startswith(norm) and
                            (norm.startswith("disagg") or norm.startswith("base-gpu"))):
            return owned
    return None


def extra_args_problems(extra_args, strategy, pd):
    """The PD flags of ``server_extra_args``: outside a PD layout (``pd`` false) every
    ``--disaggregation-*`` flag is refused (alone it starts each server as a prefill-only or
    decode-only server with no peer, which answers /health and serves nothing); inside one,
    the flags the layout sets per role (:data:`OWNED`) are refused. Other
    ``--disaggregation-*`` flags (the decode options, e.g.
    ``--disaggregation-decode-enable-radix-cache``) go to every server of a PD layout."""
    if not isinstance(extra_args, dict):
        return []
    problems = []
    for key, value in sorted(extra_args.items(), key=lambda kv: str(kv[0])):
        if not isinstance(key, str):
            continue
        shown = "%s: %s" % (key, json.dumps(value, default=str)[:40])
        if not pd and is_pd_flag(key):
            problems.append(
                "server_extra_args %s is a prefill/decode (PD) flag, and strategy %s is no PD "
                "layout: every server would start as a lone PD server (with "
                "--disaggregation-mode prefill: prefill only, no decode peer, /health 200 and "
                "no answer); deploy PD with a PD layout (-e sglang_strategy=prefill:ep8+decode:"
                "2xep8), which sets the PD flags per role, or drop the flag" % (shown, strategy))
        elif pd and owned_flag(key):
            owned = owned_flag(key)
            instead = {"transfer_backend": "; choose the backend with sglang_pd_transfer_backend",
                       "bootstrap_port": "; choose the port with sglang_pd_bootstrap_port",
                       "ib_device": "; the devices come from each host's RDMA devices and GPU "
                                    "topology, or sglang_pd_ib_device"}.get(owned, "")
            problems.append(
                "server_extra_args %s: the PD layout %s sets %s on each server by its role%s; "
                "drop it from server_extra_args" % (shown, strategy, FLAGS[owned], instead))
    return problems


def port_problems(bootstrap_port, server_port=None):
    """``sglang_pd_bootstrap_port``: unset (the release's default) or a port 1-65535 other
    than the server's HTTP port."""
    if bootstrap_port is None or bootstrap_port == "":
        return []
    text = str(bootstrap_port).strip()
    if _port_or_none(bootstrap_port) is None:
        return ["sglang_pd_bootstrap_port must be a port 1-65535, the prefill servers' bootstrap "
                "port (got %s), e.g. %d" % (json.dumps(bootstrap_port, default=str)[:40],
                                            DEFAULT_BOOTSTRAP_PORT)]
    if server_port is not None and str(server_port).strip() == text:
        return ["sglang_pd_bootstrap_port %s is the server's HTTP port (server_port): the prefill "
                "server's bootstrap server needs a port of its own" % text]
    return []


def ib_device_problems(value):
    """``sglang_pd_ib_device`` (given verbatim to ``--disaggregation-ib-device``): a device,
    a comma-separated list or a per-GPU JSON mapping, without blanks or control characters."""
    if value is None or value == "":
        return []
    if isinstance(value, dict):
        value = json.dumps(value, separators=(",", ":"))
    if not isinstance(value, str) or re.search(r"[\s\x00-\x1f]", value):
        return ["sglang_pd_ib_device must be an RDMA device (mlx5_0), a comma-separated list "
                "(mlx5_0,mlx5_1) or a per-GPU JSON mapping ({\"0\": \"mlx5_0\"}) without blanks "
                "(got %s)" % json.dumps(value, default=str)[:60]]
    return []


# --- the router in front ---------------------------------------------------------------

def router_problems(routers):
    """The routers that cannot route PD: ``routers`` is ``[(host, router_package,
    router_version)]`` (None: the router role's default, ``smg``).

    ``smg`` (1.13.0's help: ``--pd-disaggregation``, ``--prefill URL [BOOTSTRAP_PORT]``,
    ``--decode URL``) and ``sglang-router`` 0.3.x (0.3.2's help has the same flags) can;
    ``sglang-router`` up to 0.2.2 cannot be driven in PD mode by the collection: it drives
    0.2.1 and older through the legacy worker API (``/add_worker?url=``), which adds a worker
    with no role, and does not drive 0.2.2 at all (``router/_router.api_for``).
    """
    problems = []
    for host, package, version in routers or []:
        if package in (None, "", "smg") or not isinstance(package, str):
            continue
        if package != "sglang-router" or version in (None, ""):
            continue
        try:
            old = _version.compare(str(version), "0.3.0") < 0
        except ValueError:
            continue  # the router role names a malformed version
        if old:
            problems.append(
                "router %s runs router_package sglang-router %s, which the collection cannot run in "
                "PD mode: it drives sglang-router up to 0.2.1 through the legacy worker API "
                "(/add_worker?url=, no role) and 0.2.2 not at all; a PD layout needs smg (the "
                "router role's default) or sglang-router 0.3.x, whose --help has "
                "--pd-disaggregation, --prefill URL [BOOTSTRAP_PORT] and --decode URL"
                % (host, version))
    return problems


# --- one decision per PD host: the backend and each of its servers ----------------------

#: The environment of every PD server's unit: ``--disaggregation-ib-device``'s per-GPU keys
#: and ``--base-gpu-id`` count GPUs as ``nvidia-smi`` does, by PCI bus (see
#: :func:`ib_device_value`).
PD_ENVIRONMENT = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}

#: The environment a backend adds, where the release's help lists that backend: 0.5.23
#: runs ``mooncake_tcp`` as Mooncake with ``MC_FORCE_TCP=1`` and no IB device
#: (``arg_groups/pd_disaggregation_hook.py``, as ``tests/emulator/README.md``, "PD", reads
#: it); the unit says so too, so that what runs is what the unit shows.
BACKEND_ENVIRONMENT = {"mooncake_tcp": {"MC_FORCE_TCP": "1"}}


def _port_or_none(value):
    """``value`` as a port 1-65535 (an int, or digits with spaces around), else None (a
    bool, a sign, a fraction, 0 or more than 65535); :func:`port_problems` and
    :func:`render` read ports with it."""
    text = str(value).strip() if value is not None else ""
    if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= 65535:
        return None
    return int(text)


def _gpu_list(placement):
    base, count = placement.get("base_gpu_id"), placement.get("gpus")
    if base is None or count is None:
        return None
    return list(range(int(base), int(base) + int(count)))


def _port_collisions(host, slots, server_port, step):
    """Each port two of ``slots`` (or a slot and ``server_port``) would both listen on."""
    taken, problems = [], []  # (port, the slot's label or None for server_port, what)
    if not any(s["port"] == server_port for s in slots):
        taken.append((server_port, None, "server_port"))
    for item in slots:
        label = "slot %d (%s %s)" % (item["slot"], item["role"], item["server"])
        for kind in ("port", "bootstrap_port"):
            port = item[kind]
            if port is None:
                continue
            what = "HTTP port" if kind == "port" else "bootstrap port"
            if port > 65535:
                problems.append("%s, %s: its %s would be %d (server_port or sglang_pd_bootstrap_port "
                                "plus %d x %d), above 65535: choose lower ports"
                                % (host, label, what, port, item["slot"], step))
                continue
            for other, owner, other_what in taken:
                if other != port:
                    continue
                shown = other_what if owner is None else "its own %s" % other_what \
                    if owner == label else "%s's %s" % (owner, other_what)
                problems.append(
                    "%s, %s: its %s %d is %s too: every server of a host needs ports of its "
                    "own, and slot k listens on server_port and sglang_pd_bootstrap_port plus "
                    "k x %d; choose server_port and sglang_pd_bootstrap_port so that no two of "
                    "the host's ports meet" % (host, label, what, port, shown, step))
            taken.append((port, label, what))
    return problems


def render(pd, release, facts, hosts_facts, host, placements, server_port,
           bootstrap_port=DEFAULT_BOOTSTRAP_PORT, forced=None, ib_device=None, step=None):
    """One PD host's servers: the transfer backend, chosen once over every PD host, and
    for each of ``host``'s placements its slot, names, ports, flags and environment.

    ``pd``: ``_strategy.parse_pd``'s roles (or the layout's text); ``release`` and
    ``facts`` (:func:`facts_from_help` of the installed help; None: :data:`KNOWN_RELEASES`'
    entry of ``release``); ``hosts_facts``: every PD host -> the transport facts
    (``gpu_prereqs`` with ``transport: true``: ``ib_devices``, ``peermem``, ``topology``;
    None where a host has none); ``placements``: ``host``'s (``_pd_roles.assign``'s
    ``hosts[host]``); ``server_port``, ``bootstrap_port`` (None: the release's default),
    ``forced`` (``sglang_pd_transfer_backend``), ``ib_device`` (``sglang_pd_ib_device``,
    verbatim on every slot when set; else mooncake's from :func:`ib_device_value`),
    ``step`` (``_pd_roles.SLOT_PORT_STEP`` when None).

    Returns ``{"backend", "backend_reason", "slots", "problems"}``; each slot is ``{"slot",
    "role", "server", "node_rank", "base_gpu_id", "gpus", "service_name", "unit", "port",
    "bootstrap_port", "record", "record_path", "ib_device", "flags", "environment"}`` (``gpus``:
    the host's GPU indexes, None for all of them; ``bootstrap_port`` None on decode;
    ``flags`` :func:`role_flags`' pairs, None when they cannot be rendered). ``problems``
    lists every refusal at once: the layout or the release, a plan host without facts, no
    backend for the fleet, a malformed port or IB device, two slots' ports that meet.
    """
    step = _pd_roles.SLOT_PORT_STEP if step is None else int(step)
    problems = []

    def add(items):
        for item in items:
            if item not in problems:
                problems.append(item)

    roles = pd
    if isinstance(pd, str):
        try:
            roles = parse_pd(pd)
        except StrategyError as exc:
            add([str(exc)])
            roles = None
    elif not isinstance(pd, dict) or any(not isinstance(pd.get(r), dict) for r in PD_ROLES):
        add(["pd must be a prefill/decode layout (prefill:ep8+decode:2xep8) or its parsed roles, "
             "got %s" % json.dumps(pd, default=str)[:80]])
        roles = None
    strategy = pd_name(roles) if roles else str(pd)

    if facts is None:
        facts = release_facts(release)
    if facts is None:
        add(["sglang %s is no release the collection has a --help text of, and the installed "
             "help's flags were not given: its PD flags and transfer backends are unknown"
             % (release,)])
        release_ok = False
    else:
        before = len(problems)
        add(release_problems(strategy, release, facts, forced))
        release_ok = len(problems) == before
    add(ib_device_problems(ib_device))
    if isinstance(ib_device, dict):
        ib_device = json.dumps(ib_device, sort_keys=True, separators=(",", ":"))

    http = _port_or_none(server_port)
    if http is None:
        add(["server_port must be a port 1-65535, the servers' HTTP port (got %s)"
             % json.dumps(server_port, default=str)[:40]])
    bootstrap = None
    if bootstrap_port is None or bootstrap_port == "":
        bootstrap = (facts or {}).get("bootstrap_port_default") or DEFAULT_BOOTSTRAP_PORT
    else:
        more = port_problems(bootstrap_port)
        add(more)
        bootstrap = None if more else _port_or_none(bootstrap_port)

    hosts_facts = dict(hosts_facts or {})
    hosts_facts.setdefault(host, None)
    bare = sorted(h for h, f in hosts_facts.items() if not isinstance(f, dict))
    if bare:
        add(["%s ha%s no transport facts (gpu_prereqs with transport: true, registered as "
             "__server_pd_facts): the transfer backend is chosen from every PD host's RDMA "
             "devices and GPUDirect RDMA, so each PD host runs that probe first"
             % (", ".join(bare), "s" if len(bare) == 1 else "ve")])

    chosen = None
    if release_ok and not bare:
        chosen, more = choose_backend(release, facts, hosts_facts, forced)
        add(more)
    backend = chosen["backend"] if chosen else None
    mine = hosts_facts.get(host) or {}

    placements = list(placements or [])
    if not placements:
        add(["%s has no server in the PD layout %s (no placement): the plan runs on the hosts "
             "the check placed a server on" % (host, strategy)])
    slots = []
    for placement in sorted(placements, key=lambda p: int(p.get("slot") or 0)):
        slot = int(placement.get("slot") or 0)
        role = placement.get("role")
        names = _pd_roles.slot_names(slot)
        port, boot = (None, None)
        if http is not None:
            port, boot = _pd_roles.slot_ports(slot, http, bootstrap, step)
        boot = boot if role == "prefill" else None
        gpus = _gpu_list(placement)
        device = ib_device or None
        if device is None and backend == "mooncake":
            topology = mine.get("topology") or {}
            device = ib_device_value(facts, mine.get("ib_devices"),
                                     gpus if gpus is not None else list(topology.get("gpus") or []),
                                     topology)
        environment = dict(PD_ENVIRONMENT)
        if backend in (facts or {}).get("backends", []):
            environment.update(BACKEND_ENVIRONMENT.get(backend, {}))
        flags = None
        if backend and roles and (role != "prefill" or boot is not None):
            try:
                flags = role_flags(role, roles, release, facts, backend, boot, device,
                                   placement.get("base_gpu_id"))
            except PDError as exc:
                # the release's refusals are in problems already; the slot's own name the slot
                add("%s, slot %d (%s %s): %s" % (host, slot, role, placement.get("server"), p)
                    for p in exc.problems if p not in problems)
        item = {"slot": slot, "role": role, "server": placement.get("server"),
                "node_rank": placement.get("node_rank", 0),
                "base_gpu_id": placement.get("base_gpu_id"), "gpus": gpus,
                "port": port, "bootstrap_port": boot, "ib_device": device,
                "flags": flags, "environment": environment}
        item.update(names)
        slots.append(item)
    if http is not None:
        add(_port_collisions(host, slots, http, step))
    return {"backend": backend, "backend_reason": chosen["reason"] if chosen else None,
            "slots": slots, "problems": problems}
