"""The collection's capacity model, vendored into the emulator (TEST DOUBLE). Stdlib only.

The emulator sizes weights and KV cache with the *same* code as the collection's planner
(``plugins/module_utils/prepare/_capacity.py`` and what it imports). There is no second model here.

- In a wheel, ``tests/emulator/build_wheel.py`` copies those files next to this one
  (``sglang/_emulator/_vendor/<name>.py``), with :func:`rewrite_source` applied, so a host
  without the collection can import them.
- From the source tree (``PYTHONPATH=tests/emulator/src``) the copies are absent.
  :func:`load` then reads the repository's files, applies the same rewrite, and registers
  them under the same module names.

Which files: ``_capacity`` and every collection module_utils file it imports,
transitively (see :func:`closure`). Today that is ``_capacity_model`` and ``_strategy``.
The only rewrite is the import path: ``from
ansible_collections.gpufleet.sglang.plugins.module_utils.<stage>.X import ...`` (or without
the stage's subpackage) becomes ``from sglang._emulator._vendor.X import ...``: the vendored
files lie flat, named by their module (:func:`find`). Any other form of collection import makes the
rewrite fail loudly. The build then fails instead of shipping a wheel that cannot import.
"""

import os
import re
import sys
import types

ROOTS = ("_capacity",)  # what the emulator uses; dependencies are found from imports
COLLECTION_PACKAGE = "ansible_collections.gpufleet.sglang.plugins.module_utils"
VENDOR_PACKAGE = __name__  # sglang._emulator._vendor

_HERE = os.path.dirname(os.path.abspath(__file__))
# tests/emulator/src/sglang/_emulator/_vendor -> repository root
REPO_MODULE_UTILS = os.path.normpath(
    os.path.join(_HERE, "..", "..", "..", "..", "..", "..", "plugins", "module_utils"))
_FROM_RE = re.compile(
    r"^(?P<indent>[ \t]*)from[ \t]+ansible_collections\.gpufleet\.sglang\.plugins\.module_utils\."
    r"(?:\w+\.)?(?P<name>\w+)[ \t]+import\b", re.M)


def dependencies(text):
    """Collection module_utils names that ``text`` imports (``from ...module_utils.X import``
    or ``from ...module_utils.<stage>.X import``)."""
    return sorted(set(m.group("name") for m in _FROM_RE.finditer(text)))


def find(module_utils, name):
    """The file of module ``name`` in ``module_utils``: in a stage's subpackage
    (``<stage>/<name>.py``) or flat; None when there is none."""
    candidates = [os.path.join(module_utils, name + ".py")]
    if os.path.isdir(module_utils):
        candidates += [os.path.join(module_utils, d, name + ".py")
                       for d in sorted(os.listdir(module_utils))]
    return next((c for c in candidates if os.path.isfile(c)), None)


def closure(read, roots=ROOTS):
    """Module names needed by ``roots``, dependencies first. ``read(name)`` gives a source."""
    order = []

    def visit(name, stack):
        if name in stack:
            raise ValueError("import cycle in module_utils: %s" % " -> ".join(stack + (name,)))
        if name in order:
            return
        for dep in dependencies(read(name)):
            visit(dep, stack + (name,))
        order.append(name)

    for root in roots:
        visit(root, ())
    return order


def rewrite_source(name, text, vendor_package="sglang._emulator._vendor"):
    """Point the collection imports of module ``name`` at ``vendor_package``."""
    out = _FROM_RE.sub(lambda m: "%sfrom %s.%s import" % (m.group("indent"), vendor_package,
                                                          m.group("name")), text)
    for line in out.splitlines():
        stripped = line.strip()
        if stripped.startswith(("import ", "from ")) and "ansible_collections" in stripped:
            raise ValueError("%s.py: collection import the vendoring cannot rewrite: %s"
                             % (name, stripped))
    return out


def read_repo(name):
    """Source of ``plugins/module_utils/[<stage>/]<name>.py`` in the repository."""
    path = find(REPO_MODULE_UTILS, name)
    if path is None:
        raise ImportError(
            "sglang emulator: the capacity model is neither vendored (%s) nor in the "
            "source tree (%s)" % (_HERE, os.path.join(REPO_MODULE_UTILS, "*", name + ".py")))
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _vendored_present():
    return all(os.path.isfile(os.path.join(_HERE, m + ".py")) for m in ROOTS)


def _load_from_repo():
    for name in closure(read_repo):
        full = "%s.%s" % (VENDOR_PACKAGE, name)
        if full in sys.modules:
            continue
        path = find(REPO_MODULE_UTILS, name)
        text = rewrite_source(name, read_repo(name), VENDOR_PACKAGE)
        module = types.ModuleType(full)
        module.__file__ = path
        module.__package__ = VENDOR_PACKAGE
        sys.modules[full] = module
        try:
            exec(compile(text, path, "exec"), module.__dict__)  # pylint: disable=exec-used
        except BaseException:
            del sys.modules[full]
            raise
        setattr(sys.modules[VENDOR_PACKAGE], name, module)


def load():
    """Return the vendored ``_capacity`` module (wheel copy, else the repository's file)."""
    if _vendored_present():
        from sglang._emulator._vendor import _capacity  # pylint: disable=import-outside-toplevel

        return _capacity
    _load_from_repo()
    return sys.modules["%s._capacity" % VENDOR_PACKAGE]
