"""``--format pixi``: the plan as a pixi workspace (``pixi.toml``).

The form current pixi documents (pixi's manifest schema v0.77, prefix-dev/pixi@2b25fc76:
schema/schema.json and docs/workspace/system_requirements.md): the platform carries the virtual
packages the target guarantees (``platforms = [{ platform = "linux-64", cuda = "12.2" }]``, the
target driver's CUDA, replacing the deprecated ``[system-requirements]``); python and pip (and
conda-forge's CUDA toolkit when DeepSpeed's ops are built just in time) come from conda-forge;
the torch family is in ``[pypi-dependencies]`` pinned and taken from the plan's PyTorch index;
every other package of the locked closure is pinned to its locked version, so ``pixi install``
installs the closure install.sh installs.
"""

from __future__ import annotations

from packaging.markers import Marker
from packaging.utils import canonicalize_name

from cudalock.envfiles.render import (
    RenderOptions,
    _comment,
    _header,
    companions,
    conda_part,
    toml_string,
    torch_family,
)
from cudalock.lock import BUILT_AGAINST_TORCH
from cudalock.lock.metadata import marker_environment
from cudalock.lock.pixi import PIXI_MARKER
from cudalock.model import Plan
from cudalock.platforms import platform_named
from cudalock.versions import format_cuda

__all__ = [
    "render_pixi_toml",
]


def _conda_dependency(spec: str) -> tuple[str, str]:
    """A conda spec of environment.yml (``python=3.11``) as a pixi dependency."""
    name, _, version = spec.partition("=")
    return name, f"{version}.*" if version else "*"


def _inline(values: dict[str, str | bool]) -> str:
    parts = [
        f"{key} = {'true' if value is True else 'false' if value is False else toml_string(value)}"
        for key, value in values.items()
    ]
    return "{ " + ", ".join(parts) + " }"


def render_pixi_toml(plan: Plan, options: RenderOptions) -> str:
    part = conda_part(plan, options.closure)
    subdir = platform_named(plan.platform).conda_subdir
    declared: dict[str, str | bool] = {"platform": subdir}
    driver_cudas = [t.driver_cuda for t in plan.targets if t.driver_cuda is not None]
    if plan.cuda is not None and driver_cudas:
        declared["cuda"] = format_cuda(min(driver_cudas))

    conda = [_conda_dependency(spec) for spec in part.specs]
    pypi, notes = _pypi_dependencies(plan, options)
    options_lines = []
    if options.pypi_index:
        options_lines.append(f"index-url = {toml_string(options.pypi_index)}")
    # The closure's own list holds the sdists it found reading torch when built (axolotl).
    against = options.closure.built_last if options.closure is not None else BUILT_AGAINST_TORCH
    built = [name for name, _ in pypi if name in against]
    if built:
        # Built against the installed torch, as install.sh builds it.
        options_lines.append(
            "no-build-isolation = [" + ", ".join(toml_string(n) for n in built) + "]"
        )
    about = [
        "For pixi: 'pixi install' here creates the environment (.pixi/envs/default): python "
        "and pip from conda-forge, the torch family from the plan's PyTorch index, every other "
        "package of the locked closure at its locked version.",
        "The platform declares the target driver's CUDA (__cuda), so the solve is the target's "
        "on any machine.",
    ]
    if part.system_toolkit:
        about.append(part.system_toolkit + ".")
    header = _header(plan, options, "pixi.toml")
    assert header.startswith(PIXI_MARKER)  # lock --check knows its own files by it
    lines = [
        header,
        "#",
        _comment([*about, *notes]),
        "",
        "[workspace]",
        f"name = {toml_string(options.name)}",
        f"channels = [{', '.join(toml_string(c) for c in part.channels)}]",
        f"platforms = [{_inline(declared)}]",
        "",
        "[dependencies]",
        *(f"{name} = {toml_string(version)}" for name, version in conda),
        "",
        "[pypi-dependencies]",
        *(f"{name} = {value}" for name, value in pypi),
    ]
    if options_lines:
        lines += ["", "[pypi-options]", *options_lines]
    return "\n".join(lines) + "\n"


def _pypi_dependencies(
    plan: Plan, options: RenderOptions
) -> tuple[list[tuple[str, str]], list[str]]:
    """(name, TOML value) of every PyPI package, torch family first; notes for what is not."""
    closure = options.closure
    family = torch_family(plan, closure)
    index = plan.index_url if plan.index_url and plan.index_url != options.pypi_index else None
    entries: list[tuple[str, str]] = []
    for pin in family:
        value: dict[str, str | bool] = {"version": f"=={pin.version}"}
        if index:
            value["index"] = index
        entries.append((canonicalize_name(pin.name), _inline(value)))
    seen = {name for name, _ in entries}
    notes: list[str] = []
    if closure is None:
        entries += [
            (canonicalize_name(p.name), toml_string(f"=={p.version}"))
            for p in companions(plan)
            if canonicalize_name(p.name) not in seen
        ]
        notes.append(
            "The closure could not be resolved: only the plan's packages are pinned; run "
            "'cudalock lock' and then this bootstrap again with --force for the whole closure."
        )
        return entries, notes
    environment = marker_environment(plan.python.rstrip("t"), plan.platform)
    for package in sorted(closure.lock.packages, key=lambda p: p.name):
        name = canonicalize_name(package.name)
        if name in seen:
            continue
        if package.marker is not None and not Marker(str(package.marker)).evaluate(environment):
            continue
        if package.directory is not None:
            path: dict[str, str | bool] = {"path": str(package.directory.path)}
            path["editable"] = bool(package.directory.editable)
            entries.append((name, _inline(path)))
        elif package.vcs is not None and package.vcs.url:
            git: dict[str, str | bool] = {"git": package.vcs.url}
            if package.vcs.commit_id:
                git["rev"] = package.vcs.commit_id
            entries.append((name, _inline(git)))
        elif package.archive is not None and package.archive.url:
            entries.append((name, _inline({"url": package.archive.url})))
        elif package.version is not None:
            entries.append((name, toml_string(f"=={package.version}")))
    return entries, notes
