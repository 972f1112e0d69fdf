"""Stand-in for pip's get-pip.py that ansible-test's sanity venvs download.

ansible-test fetches get-pip.py from a host this network cannot reach. This script does
the same job from what is here: it installs the pip bundled with CPython (ensurepip) into
the running interpreter, then runs ``pip install`` with the arguments ansible-test gave
(e.g. ``pip==24.2``) against the configured package index.
"""
import ensurepip
import os
import runpy
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
ensurepip.bootstrap(upgrade=False)
# ansible-test runs this with a cleaned environment: keep the machine's CA bundle, which
# a TLS-inspecting proxy in front of the package index needs.
for bundle in (os.environ.get("PIP_CERT"), "/etc/ssl/certs/ca-certificates.crt"):
    if bundle and os.path.exists(bundle):
        args = ["--cert", bundle] + args
        break
sys.argv = ["pip", "install"] + args
runpy.run_module("pip", run_name="__main__", alter_sys=True)
