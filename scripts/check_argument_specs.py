"""Fail when a role's defaults/main.yml and meta/argument_specs.yml name different variables."""
import glob
import os
import sys

import yaml

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
bad = 0
for spec_file in sorted(glob.glob(os.path.join(root, "roles", "*", "meta", "argument_specs.yml"))):
    role_dir = os.path.dirname(os.path.dirname(spec_file))
    role = os.path.basename(role_dir)
    with open(spec_file) as handle:
        specs = yaml.safe_load(handle)["argument_specs"]
    spec_keys = set(specs["main"].get("options", {}))
    defaults_file = os.path.join(role_dir, "defaults", "main.yml")
    defaults = {}
    if os.path.exists(defaults_file):
        with open(defaults_file) as handle:
            defaults = yaml.safe_load(handle) or {}
    # every default is documented; every documented option is either defaulted or required
    required = {k for k, v in specs["main"].get("options", {}).items() if v.get("required")}
    undocumented = sorted(set(defaults) - spec_keys)
    without_default = sorted(spec_keys - set(defaults) - required)
    for name in undocumented:
        print("%s: %s is in defaults/main.yml but not in meta/argument_specs.yml" % (role, name))
    for name in without_default:
        print("%s: %s is documented but has no default and is not required" % (role, name))
    bad += len(undocumented) + len(without_default)
    print("%s: %d variables checked" % (role, len(spec_keys)))
sys.exit(1 if bad else 0)
