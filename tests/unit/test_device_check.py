# -*- coding: utf-8 -*-
"""scripts/device-check (issue 46) here, without a GPU:

* over the fake nvidia-smi replaying the fixture sets of ``tests/fakes/nvidia-smi-sets`` (an
  H100 x1, 8x H200 on NVLink with 10 NICs, 8x RTX PRO 6000 on PCIe), with this machine's
  CUDA toolkit when it has one, it passes and writes its recording. The sets lack outputs a
  real driver gives, so these runs take ``--allow-missing``; one runs the ``gpu_prereqs``
  module through ansible, one runs with ``python -S``, where ansible-core cannot be imported
  (as on the lent GPU machines);
* each recording replayed through ``tests/fakes/device-replay`` (``--replay``) passes again
  and records the same outputs;
* the controls: by default a command that failed fails the check; a recording whose output
  was corrupted so that a parser raises, or reads something another output contradicts,
  fails, naming the parser, the command and what disagreed;
* every recording committed under ``tests/fixtures/device/`` (one per GPU machine it ran
  on) replays strictly: every command answered, every check passed.
"""

import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys

import pytest

from ansible_collections.gpufleet.sglang.tests.paths import FAKES, FIXTURES, ROOT

SCRIPT = os.path.join(ROOT, "scripts", "device-check")
REPLAYER = os.path.join(FAKES, "device-replay")
SETS = os.path.join(FAKES, "nvidia-smi-sets")
DEVICE = os.path.join(FIXTURES, "device")
COMMITTED = sorted(d for d in os.listdir(DEVICE) if os.path.isfile(os.path.join(DEVICE, d, "recording.json"))) \
    if os.path.isdir(DEVICE) else []

# set -> (folder device-check names, GPUs, how this run reaches the module)
RUNS = {
    "h100-sxm-x1": ("nvidia-h100-80gb-hbm3-x1", 1, "ansible"),
    "h200-x8": ("nvidia-h200-x8", 8, "no-site"),
    "rtx-pro-6000-server-x8": ("nvidia-rtx-pro-6000-blackwell-server-edition-x8", 8, "no-ansible"),
}


def device_check(args, env=None, python_flags=()):
    """Run the script with this interpreter; ``(rc, stdout + stderr)``."""
    proc = subprocess.run([sys.executable] + list(python_flags) + [SCRIPT] + list(args), capture_output=True,
                          text=True, env=env or dict(os.environ), timeout=300, check=False)
    return proc.returncode, proc.stdout + proc.stderr


def report(folder):
    with open(os.path.join(folder, "report.txt"), encoding="utf-8") as handle:
        return handle.read().splitlines()


def recording(folder):
    with open(os.path.join(folder, "recording.json"), encoding="utf-8") as handle:
        return json.load(handle)


def replayed(data):
    """What the replayer answers from: each nvidia-smi / nvcc command's key and output."""
    return [(c["key"], c["rc"], c["stdout"], c["stderr"]) for c in data["commands"]
            if c["key"][0] in ("nvidia-smi", "nvcc")]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """device-check over each fixture set: ``{set: (rc, output, folder)}``."""
    out = {}
    for smi_set, (slug, _gpus, how) in sorted(RUNS.items()):
        target = str(tmp_path_factory.mktemp(smi_set))
        env = dict(os.environ, FAKE_NVIDIA_SMI_DIR=os.path.join(SETS, smi_set),
                   PATH=FAKES + os.pathsep + os.environ.get("PATH", ""))
        args = ["--allow-missing", target] + (["--no-ansible"] if how == "no-ansible" else [])
        # -S: no site-packages, so no ansible-core (the collection's module_utils need none)
        rc, output = device_check(args, env=env, python_flags=["-S"] if how == "no-site" else [])
        out[smi_set] = (rc, output, os.path.join(target, slug))
    return out


@pytest.mark.parametrize("smi_set", sorted(RUNS))
def test_it_passes_over_the_fixture_sets(recorded, smi_set):
    rc, output, folder = recorded[smi_set]
    assert rc == 0, output
    lines = report(folder)
    assert not [ln for ln in lines if ln.startswith("FAIL")], lines
    gpus = RUNS[smi_set][1]
    assert "PASS parse_topology of `nvidia-smi topo -m`: a %dx%d matrix for %d GPU(s)" % (gpus, gpus, gpus) in lines
    assert any(ln.startswith("PASS the doctor's GPUs: from ") and "%d GPU(s)" % gpus in ln for ln in lines), lines
    data = recording(folder)
    keys = [c["key"] for c in data["commands"]]
    assert ["nvidia-smi", "topo", "-m"] in keys and ["nvidia-smi", "-L"] in keys
    assert all(c["by"] in ("doctor", "device-check") for c in data["commands"])
    names = sorted(os.listdir(folder))
    how = RUNS[smi_set][2]
    assert names == sorted(["recording.json", "doctor.json", "report.txt"] + (
        ["gpu_prereqs.json"] if how == "ansible" else []))


def test_the_module_through_ansible_agrees_with_the_doctor(recorded):
    lines = report(recorded["h100-sxm-x1"][2])
    through = [ln for ln in lines if "gpu_prereqs through ansible" in ln]
    assert len(through) == 8 and all(ln.startswith("PASS") for ln in through), through


def test_without_ansible_core_it_says_so_and_still_checks(recorded):
    lines = report(recorded["h200-x8"][2])
    assert any(ln.startswith("NOTE gpu_prereqs through ansible: skipped: ansible-core is not importable")
               for ln in lines), lines
    # the 8 NVLink GPUs and 10 NICs of the H200 set's topo -m
    assert any(ln.startswith("PASS parse_topology_nics") and "10 NIC(s) parsed, 10 NIC column(s)" in ln
               for ln in lines), lines


@pytest.mark.parametrize("smi_set", sorted(RUNS))
def test_a_recording_replays(recorded, smi_set, tmp_path):
    folder = recorded[smi_set][2]
    rc, output = device_check(["--replay", folder, "--allow-missing", "--no-ansible", str(tmp_path)])
    assert rc == 0, output
    again = os.path.join(str(tmp_path), os.path.basename(folder))
    assert replayed(recording(again)) == replayed(recording(folder))


def test_by_default_a_command_that_failed_fails_the_check(recorded, tmp_path):
    # the H100 set has no -q and no --query-compute-apps capture: on a GPU machine a driver
    # that does not answer them is a finding, not a gap
    rc, output = device_check(["--replay", recorded["h100-sxm-x1"][2], "--no-ansible", str(tmp_path)])
    assert rc == 1, output
    failed = [ln for ln in output.splitlines() if ln.startswith("FAIL")]
    assert len(failed) == 2, failed
    assert failed[0].startswith("FAIL `nvidia-smi -q`: exited 9: NVIDIA-SMI has failed"), failed
    assert failed[1].startswith("FAIL `nvidia-smi --query-compute-apps="), failed


def corrupt(folder, tmp_path, key, edit):
    """A copy of the recording ``folder`` whose output of the command ``key`` went through
    ``edit``."""
    copy = str(tmp_path / "corrupt")
    shutil.copytree(folder, copy)
    data = recording(copy)
    entries = [c for c in data["commands"] if c["key"] == key]
    assert entries, key
    for entry in entries:
        changed = edit(entry["stdout"])
        assert changed != entry["stdout"]
        entry["stdout"] = changed
    with open(os.path.join(copy, "recording.json"), "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    return copy


def _drop_row(text, prefix):
    return "\n".join(ln for ln in text.split("\n") if not ln.startswith(prefix))


CONTROLS = [
    # a parser raises: a GPU row cut out of the H200 matrix
    ("h200-x8", ["nvidia-smi", "topo", "-m"], lambda t: _drop_row(t, "GPU7"),
     "FAIL parse_topology of `nvidia-smi topo -m`: raised ParseError: topo matrix rows"),
    # a parser reads what another output contradicts: one GPU more in -L than anywhere else
    ("h100-sxm-x1", ["nvidia-smi", "-L"],
     lambda t: t + "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-00000000-0000-0000-0000-000000000001)\n",
     "1 GPU(s), but parse_list of `nvidia-smi -L` read 2"),
    # the table's memory total of the H100 one MiB off the CSV's
    ("h100-sxm-x1", ["nvidia-smi"], lambda t: t.replace("/  81559MiB", "/  81558MiB"),
     "FAIL parse_table of `nvidia-smi`: memory_mib [81558], but parse_query_gpu of `nvidia-smi --query-gpu="),
]


@pytest.mark.parametrize("smi_set,key,edit,message", CONTROLS, ids=["parser-raises", "gpu-count", "memory"])
def test_a_corrupted_output_fails_naming_the_parser(recorded, tmp_path, smi_set, key, edit, message):
    copy = corrupt(recorded[smi_set][2], tmp_path, key, edit)
    rc, output = device_check(["--replay", copy, "--allow-missing", "--no-ansible", str(tmp_path / "out")])
    assert rc == 1, output
    assert message in output, output


def test_the_replayer_answers_only_what_was_recorded(recorded, tmp_path):
    folder = recorded["h100-sxm-x1"][2]
    smi = tmp_path / "nvidia-smi"
    smi.symlink_to(REPLAYER)
    env = dict(os.environ, DEVICE_REPLAY=os.path.join(folder, "recording.json"))
    listed = subprocess.run([str(smi), "-L"], env=env, capture_output=True, text=True, check=False)
    assert listed.returncode == 0 and listed.stdout.startswith("GPU 0: NVIDIA H100 80GB HBM3"), listed
    other = subprocess.run([str(smi), "--query-gpu=uuid", "--format=csv"], env=env, capture_output=True,
                           text=True, check=False)
    assert other.returncode == 2 and "holds no recording of" in other.stderr, other


def test_the_compile_tests_temporary_paths_are_one_key():
    loader = importlib.machinery.SourceFileLoader("device_replay_key", REPLAYER)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    key = module.replay_key(["/usr/local/cuda/bin/nvcc", "-arch=sm_90a", "-c", "/tmp/gpufleet-prereqs-ab12/probe.cu",
                             "-o", "/tmp/gpufleet-prereqs-ab12/probe.o"])
    assert key == ["nvcc", "-arch=sm_90a", "-c", "<tmp>/probe.cu", "-o", "<tmp>/probe.o"]
    assert module.replay_key(["/usr/bin/nvidia-smi", "-q"]) == ["nvidia-smi", "-q"]


@pytest.mark.parametrize("slug", COMMITTED)
def test_a_committed_device_recording_replays_strictly(slug, tmp_path):
    folder = os.path.join(DEVICE, slug)
    rc, output = device_check(["--replay", folder, "--no-ansible", str(tmp_path)])
    assert rc == 0, output
    assert replayed(recording(os.path.join(str(tmp_path), slug))) == replayed(recording(folder))
