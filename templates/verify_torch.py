# Checks the installed torch family against the plan WITHOUT importing torch (importing a
# build the driver cannot run is exactly what crashes): it reads torch/version.py as text and
# the other packages' metadata. Arguments: the planned CUDA ("none" for a CPU build), then
# name==version pins, torch first. Kept compatible with old Pythons (the environment's, not
# cudalock's).
import ast
import contextlib
import importlib.metadata
import importlib.util
import os
import sys


def read_version_file():
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("cudalock: verification failed: torch is not installed in " + sys.prefix)
    for location in spec.submodule_search_locations:
        path = os.path.join(location, "version.py")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as handle:
                tree = ast.parse(handle.read())
            values = {}
            for node in tree.body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target, value = node.targets[0], node.value
                elif isinstance(node, ast.AnnAssign) and node.value is not None:
                    target, value = node.target, node.value
                else:
                    continue
                if isinstance(target, ast.Name):
                    with contextlib.suppress(ValueError):
                        values[target.id] = ast.literal_eval(value)
            return path, values
    sys.exit("cudalock: verification failed: torch has no version.py")


def main(planned_cuda, *pins):
    problems = []
    path, values = read_version_file()
    torch_planned = pins[0].partition("==")[2]
    if values.get("__version__") != torch_planned:
        problems.append(f"torch is {values.get('__version__')} ({path}), planned {torch_planned}")
    want_cuda = None if planned_cuda == "none" else planned_cuda
    if values.get("cuda") != want_cuda:
        planned = want_cuda or "none (CPU build)"
        problems.append(f"torch is built for CUDA {values.get('cuda')}, planned {planned}")
    for pin in pins[1:]:
        name, _, planned = pin.partition("==")
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            have = "not installed"
        if have != planned:
            problems.append(f"{name} is {have}, planned {planned}")
    for problem in problems:
        print("cudalock: verification failed: " + problem, file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"cudalock: verified torch {torch_planned} (CUDA {want_cuda or 'none'}) in {sys.prefix}")


main(*sys.argv[1:])
