"""One harness for the action plugins' tests through a real ``ansible-playbook`` on the
controller: the tasks as data, one play on localhost, this checkout's collection; the tasks
end by writing what they registered to ``out.json`` in ``tmp_path``, which is returned."""

import json
import os
import subprocess
import sys

import yaml

from ansible_collections.gpufleet.sglang.tests.paths import ROOT


def run_tasks(tmp_path, tasks, check=False):
    """Run ``tasks`` on localhost (with ``--check`` when ``check``); the JSON the tasks wrote
    to ``tmp_path / "out.json"``. Fails the test when the run fails."""
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    cmd = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", "localhost,",
           "-c", "local", "-e", "ansible_python_interpreter=%s" % sys.executable, str(path)] + (
        ["--check"] if check else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    return json.loads((tmp_path / "out.json").read_text())
