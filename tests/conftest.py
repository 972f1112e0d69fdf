"""Make the repository importable as ``ansible_collections.gpufleet.sglang``.

The repository root *is* the collection. Python needs it under
``ansible_collections/gpufleet/sglang``; a symlink tree in ``.cache/`` provides that
without moving anything.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREE = os.path.join(ROOT, ".cache", "collections")
LINK = os.path.join(TREE, "ansible_collections", "gpufleet", "sglang")

if not os.path.islink(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    try:
        os.symlink(ROOT, LINK)
    except FileExistsError:
        pass
if TREE not in sys.path:
    sys.path.insert(0, TREE)

FIXTURES = os.path.join(ROOT, "tests", "fixtures")
