"""What the converged fleet's hosts ran and installed, and what the bare image lacks (issue 47:
the ``wc -l`` and ``grep`` over host files, the Jinja that split their output and the line
splitting of build-image's, in one script with unit tests, tests/unit/test_deploy_scenario_checks.py).

``install_check.py --hosts H1,H2 --help-calls PATH --apt-history PATH --build-image CMD
--packages P1,P2`` (run on the controller) reads, in each container H (one ``podman exec``):

* PATH of ``--help-calls``: the emulator's record of the ``launch_server --help`` runs it
  answered, one JSON object a line (tests/emulator's state.append_record);
* PATH of ``--apt-history``: apt's /var/log/apt/history.log (``Install: name:arch (version[,
  automatic]), ...`` lines);

then runs CMD (tests/testbed/build-image: its last line of stdout names the image) and
``podman run --rm <image> dpkg-query -W P1 P2``, and prints one JSON object:

* ``hosts``: H -> ``help_calls`` (the records, null when the file cannot be read),
  ``help_calls_unreadable`` (its lines that are no JSON object), ``apt_installed`` (the
  packages of its ``Install:`` lines, sorted, without the architecture; [] without the file);
* ``image``; ``image_rc`` (dpkg-query's: 1 when a package is not installed); ``image_installed``
  (the packages dpkg-query lists with a version); ``image_output`` (what it printed).

Exits 1 when podman fails on a host or build-image names no image.
"""

import argparse
import json
import sys

import _deploy_nested


def help_calls(text):
    """``(records, lines that are no JSON object)`` of the --help record; (None, 0) without it."""
    if text is None:
        return None, 0
    records = unreadable = 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            ok = isinstance(json.loads(line), dict)
        except ValueError:
            ok = False
        records, unreadable = records + ok, unreadable + (not ok)
    return records, unreadable


def apt_installed(text):
    """The packages of the ``Install:`` lines of apt's history, sorted."""
    names = set()
    for line in (text or "").splitlines():
        if not line.startswith("Install: "):
            continue
        for item in line[len("Install: "):].split("), "):
            name = item.strip().split(" (", 1)[0].split(":", 1)[0]
            if name:
                names.add(name)
    return sorted(names)


def dpkg_installed(output):
    """The packages ``dpkg-query -W`` lists with a version (``name<TAB>version`` lines)."""
    out = []
    for line in output.splitlines():
        name, tab, version = line.partition("\t")
        if tab and version.strip():
            out.append(name.split(":", 1)[0].strip())
    return out


def check(args):
    hosts = {}
    for host in _deploy_nested.host_list(args.hosts):
        files = _deploy_nested.container_files(host, [args.help_calls, args.apt_history], args.podman)
        records, unreadable = help_calls(files.get(args.help_calls))
        hosts[host] = {"help_calls": records, "help_calls_unreadable": unreadable,
                       "apt_installed": apt_installed(files.get(args.apt_history))}
    rc, out, _err = _deploy_nested.run([args.build_image])
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    if rc != 0 or not lines:
        raise _deploy_nested.Unreadable("%s: rc %d, no image named" % (args.build_image, rc))
    image = lines[-1]
    query = [args.podman, "run", "--rm", image, "dpkg-query", "-W"] + _deploy_nested.host_list(args.packages)
    rc, out, err = _deploy_nested.run(query)
    return {"hosts": hosts, "image": image, "image_rc": rc, "image_installed": dpkg_installed(out),
            "image_output": (out + err).strip()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--hosts", required=True)
    parser.add_argument("--help-calls", required=True)
    parser.add_argument("--apt-history", required=True)
    parser.add_argument("--build-image", required=True)
    parser.add_argument("--packages", required=True)
    parser.add_argument("--podman", default="podman")
    args = parser.parse_args(argv)
    return _deploy_nested.answer("install_check", lambda: check(args))


if __name__ == "__main__":
    sys.exit(main())
