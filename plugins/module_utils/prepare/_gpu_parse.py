# -*- coding: utf-8 -*-
# Copyright (c) gpufleet.sglang contributors
# MIT License (see LICENSE)
#
# This module util is PRIVATE to the gpufleet.sglang collection. It may change
# without notice; do not use it from outside the collection.
"""Parsers for ``nvidia-smi`` and ``nvcc`` output and the RDMA ports of sysfs (plain Python,
no Ansible imports).

Every parser takes text and returns plain data; none of them raises on odd input:
they raise :class:`ParseError` with a short reason, which the caller turns into a
failed check. Formats handled (all seen in the real outputs under
``tests/fixtures/nvidia-smi`` and ``tests/fixtures/nvcc``):

* ``nvidia-smi --query-gpu=...`` CSV with or without header / units;
* ``nvidia-smi -q`` (the "NVSMI LOG" dump);
* the plain ``nvidia-smi`` table (``Driver Version`` or R610's ``KMD Version``);
* ``nvidia-smi --query-compute-apps=...`` CSV;
* ``nvidia-smi topo -m`` (tab or space separated, ANSI escapes on the header), its GPU
  links and its GPU-to-NIC links with the NIC legend (:func:`parse_topology_nics`);
* ``nvidia-smi -L``;
* ``nvcc --version`` and ``nvcc --list-gpu-arch``;
* the ports of ``/sys/class/infiniband`` (:func:`parse_ib_sysfs`, given as data).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.gpufleet.sglang.plugins.module_utils.common import _version

#: Fields the doctor asks ``--query-gpu`` for, in this order.
QUERY_GPU_FIELDS = ("index", "name", "memory.total", "compute_cap", "driver_version", "pci.bus_id")
#: Fields the doctor asks ``--query-compute-apps`` for, in this order.
QUERY_APPS_FIELDS = ("pid", "process_name", "used_memory", "gpu_bus_id")

# nvidia-smi's documented aliases (``nvidia-smi --help-query-gpu`` / ``--help-query-compute-apps``)
FIELD_ALIASES = {
    "gpu_name": "name",
    "gpu_bus_id": "pci.bus_id",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "used_memory": "used_gpu_memory",
    "name": "name",
}
APPS_ALIASES = {"name": "process_name", "used_memory": "used_gpu_memory", "pci.bus_id": "gpu_bus_id"}

DRIVER_FAILURE_MARK = "couldn't communicate with the NVIDIA driver"

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_NUM = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)")


class ParseError(ValueError):
    """Output that does not look like what the command prints."""


def strip_ansi(text):
    return _ANSI.sub("", text or "")


def classify_smi_failure(rc, stdout, stderr):
    """Name the failure of an nvidia-smi run, or ``None`` when it looks usable.

    Returns one of ``'driver'`` (cannot talk to the driver), ``'no-devices'``,
    ``'failed'`` (other non-zero exit).
    """
    text = "%s\n%s" % (stdout or "", stderr or "")
    if DRIVER_FAILURE_MARK.lower() in text.lower() or "NVIDIA-SMI has failed" in text:
        return "driver"
    if "No devices were found" in text:
        return "no-devices"
    if rc != 0:
        return "failed"
    return None


# --------------------------------------------------------------------------- helpers


def _canon_field(name):
    """``'memory.total [MiB]'`` -> ``'memory.total'`` with aliases resolved."""
    base = re.sub(r"\s*\[[^\]]*\]\s*$", "", name.strip()).strip().lower()
    return base


def _mib(value):
    """``'81559 MiB'`` / ``'81559'`` -> 81559; ``None`` for N/A."""
    if value is None:
        return None
    text = str(value).strip()
    match = _NUM.match(text)
    if not match:
        return None
    number = float(match.group(1))
    if re.search(r"GiB", text):
        number *= 1024
    return int(number)


def _is_version(text):
    try:
        _version.parse(text)
    except ValueError:
        return False
    return True


def _na(value):
    text = (value or "").strip()
    if not text or text.upper() in ("N/A", "[N/A]") or text.startswith("[") and text.endswith("]"):
        return None
    return text


def _csv_rows(text):
    rows = []
    for line in (text or "").splitlines():
        line = line.rstrip("\r")
        if not line.strip() or line.startswith("#"):
            continue
        rows.append([cell.strip() for cell in line.split(",")])
    return rows


def _csv_records(text, wanted, aliases):
    """Rows of a ``--query-*`` CSV as dicts keyed by the canonical field names.

    With a header line the columns are mapped by name (so a full capture with many
    more fields works); without one the columns are taken to be ``wanted`` in order.
    """
    rows = _csv_rows(text)
    if not rows:
        return []
    wanted = [aliases.get(w, w) for w in wanted]
    first = [aliases.get(_canon_field(cell), _canon_field(cell)) for cell in rows[0]]
    looks_header = bool(set(wanted).intersection(first)) and not any(
        re.match(r"^[0-9]+$", cell) for cell in rows[0])
    if looks_header:
        header, body = first, rows[1:]
    else:
        header, body = list(wanted), rows
    records = []
    for row in body:
        if len(row) < len(header):
            raise ParseError("CSV row has %d fields, expected %d: %r" % (len(row), len(header), row[:8]))
        if len(row) > len(header):
            # a name or process name containing a comma: glue surplus cells back
            extra = len(row) - len(header)
            for idx, field in enumerate(header):
                if field in ("name", "process_name"):
                    row = row[:idx] + [", ".join(row[idx:idx + extra + 1])] + row[idx + extra + 1:]
                    break
            else:
                raise ParseError("CSV row has %d fields, expected %d" % (len(row), len(header)))
        records.append(dict(zip(header, row)))
    return records


def _bus(value):
    text = (value or "").strip()
    return text.upper() if text else None


def _cc(value):
    text = _na(value)
    if text is None:
        return None
    if not re.match(r"^[0-9]+\.[0-9]+$", text):
        raise ParseError("compute capability %r is not MAJOR.MINOR" % text)
    return text


# ------------------------------------------------------------------- compute capability

# Product name -> compute capability, for outputs without a ``compute_cap`` field
# (``-q``, plain table). Values: NVIDIA "CUDA GPUs - Compute Capability"
# (developer.nvidia.com/cuda-gpus; docs/prereqs.md §1)
# (9.0 H100/H200, 10.0 B200, 10.3 B300, 12.0 RTX PRO 6000 / RTX 5090, 12.1 GB10).
# Order matters: the first match wins. Names may be driver-truncated
# ("NVIDIA RTX PRO 6000 Blac...", "NVIDIA RTX Pro 6000 Blac...").
_NAME_CC = (
    (r"\bGB10\b", "12.1"),
    (r"\bRTX\s+PRO\s+\d{4}\b.*\bBlac", "12.0"),
    (r"\bRTX\s+50[5-9]0\b", "12.0"),
    (r"\bG?B300\b", "10.3"),
    (r"\bG?B[12]00\b", "10.0"),
    (r"\bGH200\b|\bH[12]00\b|\bH800\b|\bH20\b", "9.0"),
    (r"\bL40S?\b|\bL4\b|\bL20\b|\bRTX\s+40[6-9]0\b|\bRTX\s+\d{4}\s+Ada\b", "8.9"),
    (r"\bA100\b|\bA800\b|\bA30\b", "8.0"),
    (r"\bA10G?\b|\bA40\b|\bA16\b|\bA2\b|\bRTX\s+A\d{4}\b|\bRTX\s+30[5-9]0\b", "8.6"),
    (r"\bT4\b", "7.5"),
    (r"\bV100\b", "7.0"),
)


def cc_from_name(name):
    """Compute capability for a product name, or ``None`` when unknown."""
    for pattern, cc in _NAME_CC:
        if re.search(pattern, name or "", re.IGNORECASE):
            return cc
    return None


def _gpu(index, name, memory, cc, driver, bus, cc_source="nvidia-smi"):
    if cc is None:
        cc = cc_from_name(name)
        cc_source = "name" if cc else "unknown"
    return {
        "index": index,
        "name": name,
        "memory_mib": memory,
        "compute_capability": cc,
        "cc_source": cc_source,
        "driver": driver,
        "pci_bus": bus,
    }


# --------------------------------------------------------------------------- parsers


def parse_query_gpu(text):
    """Parse ``--query-gpu=index,name,memory.total,compute_cap,driver_version,pci.bus_id``."""
    records = _csv_records(text, QUERY_GPU_FIELDS, FIELD_ALIASES)
    if not records:
        raise ParseError("no GPU rows in --query-gpu output")
    gpus = []
    for pos, rec in enumerate(records):
        if "name" not in rec:
            raise ParseError("--query-gpu output has no name column")
        index = rec.get("index")
        try:
            index = int(index) if index is not None else pos
        except ValueError:
            raise ParseError("GPU index %r is not a number" % index)
        memory = _mib(rec.get("memory.total"))
        driver = _na(rec.get("driver_version"))
        if driver is not None and not _is_version(driver):
            raise ParseError("driver version %r is not a version" % driver)
        gpus.append(_gpu(index, rec["name"], memory, _cc(rec.get("compute_cap")), driver,
                         _bus(rec.get("pci.bus_id"))))
    return gpus


def parse_query_apps(text):
    """Parse ``--query-compute-apps=pid,process_name,used_memory,gpu_bus_id``."""
    records = _csv_records(text, QUERY_APPS_FIELDS, APPS_ALIASES)
    procs = []
    for rec in records:
        pid = rec.get("pid", "")
        if not pid.strip().isdigit():
            if "no running" in pid.lower():
                continue
            raise ParseError("process id %r is not a number" % pid)
        procs.append({
            "pid": int(pid),
            "name": rec.get("process_name", ""),
            "used_mib": _mib(rec.get("used_gpu_memory")),
            "gpu_bus": _bus(rec.get("gpu_bus_id")),
            "gpu_index": None,
        })
    return procs


def parse_query_q(text):
    """Parse ``nvidia-smi -q``: GPUs (no compute capability there), driver, processes."""
    lines = strip_ansi(text).splitlines()
    if not any("NVSMI LOG" in line for line in lines):
        raise ParseError("not an 'nvidia-smi -q' dump (no NVSMI LOG banner)")
    driver = cuda = None
    gpus, procs = [], []
    cur = None
    section = []  # stack of (indent, title)
    proc = None
    for raw in lines:
        if not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        head = re.match(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f])$", line)
        if indent == 0 and head:
            cur = _gpu(len(gpus), None, None, None, driver, head.group(1).upper())
            gpus.append(cur)
            section = []
            continue
        if indent == 0:
            if key in ("Driver Version", "KMD Version"):
                driver = value
            elif key in ("CUDA Version", "CUDA UMD Version"):
                cuda = value
            continue
        if cur is None:
            continue
        while section and section[-1][0] >= indent:
            section.pop()
        if not sep:
            section.append((indent, line))
            continue
        path = [title for _indent, title in section]
        if key == "Product Name" and not path:
            cur["name"] = value
        elif key == "Total" and path[-1:] == ["FB Memory Usage"]:
            cur["memory_mib"] = _mib(value)
        elif key == "Bus Id" and path[-1:] == ["PCI"]:
            cur["pci_bus"] = value.upper()
        elif path[:1] == ["Processes"] or (key == "Processes" and not path):
            if key == "Process ID":
                proc = {"pid": int(value) if value.isdigit() else None, "name": "",
                        "used_mib": None, "gpu_bus": cur["pci_bus"], "gpu_index": cur["index"]}
                procs.append(proc)
            elif key == "Name" and proc is not None:
                proc["name"] = value
            elif key == "Used GPU Memory" and proc is not None:
                proc["used_mib"] = _mib(value)
    if not gpus:
        raise ParseError("no GPU sections in 'nvidia-smi -q' output")
    for gpu in gpus:
        gpu["driver"] = driver
        if not gpu["name"]:
            raise ParseError("GPU %s has no Product Name" % gpu["pci_bus"])
        cc = cc_from_name(gpu["name"])
        gpu["compute_capability"] = cc
        gpu["cc_source"] = "name" if cc else "unknown"
    return {"gpus": gpus, "processes": procs, "driver": driver, "cuda": cuda}


_TABLE_HEAD = re.compile(
    r"NVIDIA-SMI\s+(?P<smi>\S+)\s+(?:Driver|KMD) Version:\s*(?P<driver>\S+)\s+"
    r"(?:CUDA(?: UMD)? Version:\s*(?P<cuda>\S+))?"
)
_TABLE_GPU = re.compile(
    r"^\|\s+(?P<index>\d+)\s+(?P<name>.+?)\s+(?:On|Off)\s+\|\s+(?P<bus>[0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f])"
)
_TABLE_MEM = re.compile(r"\|\s*(?P<used>\d+)MiB\s*/\s*(?P<total>\d+)MiB\s*\|")
_TABLE_PROC = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?P<gi>\S+)\s+(?P<ci>\S+)\s+(?P<pid>\d+)\s+(?P<type>[CGM+]+)\s+"
    r"(?P<name>.+?)\s+(?P<mem>\d+|N/A)(?:MiB)?\s*\|$"
)


def parse_table(text):
    """Parse the default ``nvidia-smi`` table: GPUs, driver, CUDA version, processes."""
    lines = strip_ansi(text).splitlines()
    head = None
    for line in lines:
        head = _TABLE_HEAD.search(line)
        if head:
            break
    if not head:
        raise ParseError("no 'NVIDIA-SMI ... Driver Version' header line")
    driver = head.group("driver")
    gpus, procs = [], []
    in_procs = False
    pending = None
    for line in lines:
        if "Processes:" in line:
            in_procs = True
            continue
        if "MIG devices:" in line:
            pending = None
            continue
        if in_procs:
            match = _TABLE_PROC.match(line.rstrip())
            if match:
                procs.append({
                    "pid": int(match.group("pid")),
                    "name": match.group("name").strip(),
                    "used_mib": _mib(match.group("mem")),
                    "gpu_bus": None,
                    "gpu_index": int(match.group("gpu")),
                })
            continue
        match = _TABLE_GPU.match(line)
        if match:
            pending = _gpu(int(match.group("index")), match.group("name").strip(), None, None,
                           driver, match.group("bus").upper())
            gpus.append(pending)
            continue
        if pending is not None:
            mem = _TABLE_MEM.search(line)
            if mem:
                pending["memory_mib"] = int(mem.group("total"))
                pending = None
    if not gpus:
        raise ParseError("no GPU rows in the nvidia-smi table")
    by_index = dict((g["index"], g) for g in gpus)
    for proc in procs:
        gpu = by_index.get(proc["gpu_index"])
        if gpu:
            proc["gpu_bus"] = gpu["pci_bus"]
    return {"gpus": gpus, "processes": procs, "driver": driver, "cuda": head.group("cuda")}


def parse_list(text):
    """Parse ``nvidia-smi -L`` -> ``[{index, name}]``."""
    out = []
    for line in (text or "").splitlines():
        match = re.match(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?\s*$", line)
        if match:
            out.append({"index": int(match.group(1)), "name": match.group(2)})
    if not out:
        raise ParseError("no 'GPU n: name' lines in nvidia-smi -L output")
    return out


_LINK_PCIE = ("PIX", "PXB", "PHB", "NODE", "SYS", "SOC")


def _topology_header(lines):
    """``(index, tokens)`` of the header line of ``nvidia-smi topo -m``: the first line that
    starts with ``GPUn`` and is no matrix row (a row is "GPUn <cell> ...", the header
    "GPU0 [GPU1 ... NIC0 ...] CPU Affinity ...")."""
    for pos, line in enumerate(lines):
        tokens = line.split()
        if not tokens or not re.match(r"^GPU\d+$", tokens[0]):
            continue
        if len(tokens) == 1 or not (tokens[1].upper() == "X" or re.match(
                r"^(NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$", tokens[1].upper())):
            return pos, tokens
    raise ParseError("no GPU header row in topo -m output")


def parse_topology(text):
    """Parse ``nvidia-smi topo -m``.

    Returns ``{'kind', 'gpus', 'links'}`` where ``links`` maps ``'i-j'`` (i < j) to the
    matrix cell and ``kind`` is ``'single'`` (one GPU), ``'nvlink'`` (every GPU pair
    is ``NV#``), ``'pcie'`` (no pair is ``NV#``) or ``'mixed'``.
    """
    lines = [strip_ansi(line) for line in (text or "").splitlines()]
    pos, tokens = _topology_header(lines)
    order = [int(t[3:]) for t in tokens if re.match(r"^GPU\d+$", t)]
    size = len(order)
    rows = {}
    for line in lines[pos + 1:]:
        tokens = line.split()
        if not tokens:
            continue
        match = re.match(r"^GPU(\d+)$", tokens[0])
        if not match:
            continue
        cells = tokens[1:1 + size]
        if len(cells) < size:
            raise ParseError("topo row %s has %d cells, expected %d" % (tokens[0], len(cells), size))
        rows[int(match.group(1))] = cells
    if set(rows) != set(order):
        raise ParseError("topo matrix rows %s do not match header GPUs %s" % (sorted(rows), order))
    links = {}
    for i in order:
        for col, j in enumerate(order):
            if j <= i:
                continue
            cell = rows[i][col].upper()
            if not (re.match(r"^NV\d+$", cell) or cell in _LINK_PCIE):
                raise ParseError("unknown topo link %r between GPU%d and GPU%d" % (cell, i, j))
            links["%d-%d" % (i, j)] = cell
    if size == 1:
        kind = "single"
    else:
        nv = [c for c in links.values() if c.startswith("NV")]
        kind = "nvlink" if len(nv) == len(links) else ("pcie" if not nv else "mixed")
    return {"kind": kind, "gpus": size, "links": links}


_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


def parse_topology_nics(text):
    """The GPU-to-NIC links of ``nvidia-smi topo -m``: ``{'gpus': [0, ...], 'nics':
    {name: {gpu: cell}}}``, one entry per NIC column, named by the NIC legend
    (``NIC0: mlx5_0``) where the output has one, else by its column (``NIC0``); ``cell`` is
    the matrix cell (``PIX``, ``PXB``, ``PHB``, ``NODE``, ``SYS``). A matrix without NIC
    columns gives ``nics: {}``. What the links mean for PD's RDMA devices is
    ``check/_pd.ib_device_value``'s to decide.
    """
    lines = [strip_ansi(line) for line in (text or "").splitlines()]
    pos, tokens = _topology_header(lines)
    columns = [t for t in tokens if re.match(r"^(GPU|NIC)\d+$", t)]
    gpus = [int(c[3:]) for c in columns if c.startswith("GPU")]
    legend = {}
    for line in lines:
        match = _NIC_LEGEND.match(line)
        if match:
            legend[match.group(1)] = match.group(2)
    nics = dict((legend.get(c, c), {}) for c in columns if c.startswith("NIC"))
    for line in lines[pos + 1:]:
        tokens = line.split()
        match = re.match(r"^GPU(\d+)$", tokens[0]) if tokens else None
        if not match:
            continue
        cells = tokens[1:1 + len(columns)]
        if len(cells) < len(columns):
            raise ParseError("topo row %s has %d cells, expected %d" % (tokens[0], len(cells), len(columns)))
        for column, cell in zip(columns, cells):
            if not column.startswith("NIC"):
                continue
            cell = cell.upper()
            if cell not in _LINK_PCIE:
                raise ParseError("unknown topo link %r between %s and %s" % (cell, tokens[0], column))
            nics[legend.get(column, column)][int(match.group(1))] = cell
    for name, links in nics.items():
        if sorted(links) != sorted(gpus):
            raise ParseError("topo NIC %s has links to GPUs %s, expected %s" % (name, sorted(links), gpus))
    return {"gpus": gpus, "nics": nics}


#: What an RDMA port's ``link_layer`` means: InfiniBand, or RDMA over Converged Ethernet.
_RDMA_KIND = {"infiniband": "InfiniBand", "ethernet": "RoCE"}


def _port_key(port):
    text = str(port)
    return (0, int(text), text) if text.isdigit() else (1, 0, text)


def parse_ib_sysfs(entries):
    """The RDMA devices of a host from what ``/sys/class/infiniband/<dev>/ports/<n>/state``
    and ``.../link_layer`` hold, given as ``{dev: {port: {"state": "4: ACTIVE",
    "link_layer": "InfiniBand"}}}`` (a file not there: None or left out).

    Returns ``check/_pd.host_transport``'s ``ib_devices``: one ``{"name", "state":
    "ACTIVE", "ports": [{"port", "state", "link_layer", "rdma"}], "link_layers"}`` per
    device with at least one ``ACTIVE`` port (``DOWN``, ``INIT``, ``ARMED`` and
    ``ACTIVE_DEFER`` ports are left out, and with them a device without an active port);
    ``rdma`` is ``InfiniBand`` or ``RoCE`` (an ``Ethernet`` link layer), None when the link
    layer is unknown. Devices by name, ports by number. The state names are the kernel's
    (``ib_port_state``, include/rdma/ib_verbs.h: NOP, DOWN, INIT, ARMED, ACTIVE,
    ACTIVE_DEFER), printed after the state's number.
    """
    devices = []
    for name in sorted(entries or {}) if isinstance(entries, dict) else []:
        ports = entries[name] if isinstance(entries[name], dict) else {}
        active = []
        for port in sorted(ports, key=_port_key):
            files = ports[port] if isinstance(ports[port], dict) else {}
            state = str(files.get("state") or "").strip()
            # "4: ACTIVE" (the number, then the name, as the kernel prints it) or the name alone
            word = state.partition(":")[2].strip() if ":" in state else state
            if word.upper() != "ACTIVE":
                continue
            layer = str(files.get("link_layer") or "").strip() or None
            active.append({"port": int(port) if str(port).isdigit() else str(port),
                           "state": "ACTIVE", "link_layer": layer,
                           "rdma": _RDMA_KIND.get((layer or "").lower())})
        if active:
            layers = sorted(set(p["link_layer"] for p in active if p["link_layer"]))
            devices.append({"name": str(name), "state": "ACTIVE", "ports": active,
                            "link_layers": layers})
    return devices


def parse_nvcc_version(text):
    """``nvcc --version`` -> ``{'release': '13.0', 'version': '13.0.88'}``."""
    match = re.search(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", text or "")
    if not match:
        raise ParseError("no 'release X.Y, VX.Y.Z' line in nvcc --version output")
    return {"release": match.group(1), "version": match.group(2)}


def parse_gpu_arch_list(text):
    """``nvcc --list-gpu-arch`` -> sorted ``['compute_75', ...]`` (virtual archs only)."""
    arches = sorted(set(re.findall(r"\bcompute_\d+[a-z]?\b", text or "")),
                    key=lambda a: (int(re.sub(r"\D", "", a)), a))
    if not arches:
        raise ParseError("no compute_<cc> entries in nvcc --list-gpu-arch output")
    return arches


def parse_nvcc_root(text):
    """Toolkit root that an ``nvcc --dryrun`` run resolved (``_HERE_`` is ``<root>/bin``)."""
    match = re.search(r"^#\$ _HERE_=(.+?)\s*$", text or "", re.MULTILINE)
    if not match:
        return None
    here = match.group(1).rstrip("/")
    return here[:-4] if here.endswith("/bin") else here
