"""Capture the CLI of a real SGLang release's ``bench_serving`` as data, for the emulator's
client double (``sglang/_emulator/bench_client.py``).

    python3 tests/emulator/bench_capture.py sglang-0.5.9-py3-none-any.whl \
        > tests/emulator/bench/bench_serving-0.5.9.json

The input is a wheel of the real ``sglang`` from PyPI (``pip download --no-deps
sglang==<R>``). Nothing of it is imported. The script reads the serving benchmark's source
(``sglang/benchmark/serving.py`` from 0.5.23 on, ``sglang/bench_serving.py`` before), finds
the statements that build its ``ArgumentParser`` (from ``parser = ArgumentParser(...)`` to
``parser.parse_args()``, in ``cli_main`` or under ``if __name__ == "__main__"``) and runs only
those against a recording stand-in of argparse. The names they use that are defined
elsewhere in the module (``ASYNC_REQUEST_FUNCS``, type functions, ``LoRAPathAction``,
constants) are resolved from the module's own top-level assignments: dict keys, literals,
or a placeholder carrying the name. It writes, as JSON:

- ``module`` (where the benchmark lives) and ``shim`` (a deprecated alias module, if any);
- ``description`` and ``arguments``: every ``add_argument`` call in order, with its group
  (``add_argument_group`` title) or mutually exclusive group, its option strings and its
  keyword arguments (``type`` and ``action`` by name);
- ``result_keys``: the keys of the ``result = {...}`` literal of ``benchmark()``, the line
  the tool appends to ``--output-file``.

Stdlib only. The data is what the release's CLI is; the emulator's code that uses it is
its own.
"""

import ast
import json
import sys
import zipfile


class Named:
    """A name from the module that the capture keeps by name (a type function, an action)."""

    def __init__(self, name):
        self.name = name

    def __call__(self, *args, **kwargs):
        return self


class Recorder:
    def __init__(self, out, group=None, mutex=None):
        self.out = out
        self.group = group
        self.mutex = mutex

    def add_argument(self, *names, **kwargs):
        self.out["arguments"].append({"names": list(names), "group": self.group,
                                      "mutex": self.mutex, "kwargs": _plain(kwargs)})

    def add_argument_group(self, title=None, description=None):
        self.out["groups"].append({"title": title, "description": description})
        return Recorder(self.out, group=title, mutex=self.mutex)

    def add_mutually_exclusive_group(self, required=False):
        self.out["mutex_groups"].append({"required": bool(required), "group": self.group})
        return Recorder(self.out, group=self.group, mutex=len(self.out["mutex_groups"]) - 1)

    def set_defaults(self, **kwargs):
        self.out["set_defaults"].update(_plain(kwargs))


def _plain(kwargs):
    out = {}
    for key, value in kwargs.items():
        if isinstance(value, Named):
            value = {"name": value.name}
        elif isinstance(value, type):
            value = {"name": value.__name__}
        elif isinstance(value, (tuple, set, frozenset)):
            value = list(value)
        elif callable(value):
            value = {"name": getattr(value, "__name__", repr(value))}
        out[key] = value
    return out


def _module_values(tree):
    """Top-level names of the module: a dict literal's keys (as a dict), a literal, or a
    :class:`Named` placeholder for functions, classes and anything else."""
    values = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            values[node.name] = Named(node.name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if isinstance(node.value, ast.Dict):
                try:
                    values[name] = dict((ast.literal_eval(k), None) for k in node.value.keys)
                except ValueError:
                    values[name] = Named(name)
                continue
            try:
                values[name] = ast.literal_eval(node.value)
            except ValueError:
                values[name] = Named(name)
    return values


def _parser_statements(body):
    for index, stmt in enumerate(body):
        if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call)
                and getattr(stmt.value.func, "id", None) == "ArgumentParser"):
            end = index
            while end < len(body):
                call = getattr(body[end], "value", None)
                if isinstance(call, ast.Call) and getattr(call.func, "attr", None) == "parse_args":
                    return body[index:end]
                end += 1
            raise SystemExit("no parser.parse_args() after ArgumentParser(...)")
        for field in ("body", "orelse"):
            inner = getattr(stmt, field, None)
            if isinstance(inner, list):
                found = _parser_statements(inner)
                if found:
                    return found
    return None


def _result_keys(tree):
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "result" and isinstance(node.value, ast.Dict)):
            keys = [k.value for k in node.value.keys if isinstance(k, ast.Constant)]
            if "completed" in keys and "output_throughput" in keys:
                return keys
    raise SystemExit("no result = {...} literal with completed and output_throughput")


def capture(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        version = next(n.split("/")[0][len("sglang-"):-len(".dist-info")] for n in names
                       if n.endswith(".dist-info/METADATA"))
        if "sglang/benchmark/serving.py" in names:
            module, path = "sglang.benchmark.serving", "sglang/benchmark/serving.py"
            shim = "sglang.bench_serving" if "sglang/bench_serving.py" in names else None
        else:
            module, path, shim = "sglang.bench_serving", "sglang/bench_serving.py", None
        source = zf.read(path).decode("utf-8")
        extra = {}
        for helper in sorted(n for n in names if n.startswith("sglang/benchmark/") and n.endswith(".py")):
            extra.update(_module_values(ast.parse(zf.read(helper).decode("utf-8"))))
    tree = ast.parse(source)
    out = {"release": version, "module": module, "shim": shim, "description": None,
           "arguments": [], "groups": [], "mutex_groups": [], "set_defaults": {},
           "result_keys": _result_keys(tree)}
    stmts = _parser_statements(tree.body)
    if not stmts:
        raise SystemExit("no ArgumentParser(...) in %s" % path)
    scope = dict(extra)
    scope.update(_module_values(tree))

    def argument_parser(*args, **kwargs):
        out["description"] = kwargs.get("description")
        return Recorder(out)

    scope.update({"ArgumentParser": argument_parser, "__builtins__": __builtins__})
    scope["argparse"] = type("argparse", (), {"ArgumentParser": staticmethod(argument_parser),
                                              "SUPPRESS": "==SUPPRESS==",
                                              "BooleanOptionalAction": Named("BooleanOptionalAction")})
    code = compile(ast.Module(body=stmts, type_ignores=[]), path, "exec")
    exec(code, scope)  # pylint: disable=exec-used  # only the parser-building statements
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        raise SystemExit(__doc__.split("\n\n")[1])
    json.dump(capture(argv[0]), sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
