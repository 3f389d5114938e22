"""Render a Plan into the files people use: environment.yml, install.sh, constraints.txt, ...

Pure: a Plan and :class:`RenderOptions` in, file name → text out; the fixed text lives in the
template files of ``templates/`` (shipped as ``cudalock/_data/templates``). Nothing rendered
depends on the clock or the machine, so the same inputs give byte-identical files.

Every value that reaches a shell line goes through :func:`shlex.quote`; every value that reaches
YAML or TOML is quoted for that language when it needs to be. Invalid conda environment names
are refused (:func:`check_env_name`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

from packaging.pylock import Package
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from cudalock.defaults import DEFAULT_PYPI_INDEX, OUTPUT_FORMATS, OutputFormat
from cudalock.errors import UsageError
from cudalock.lock import (
    BUILT_AGAINST_TORCH,
    INSTALL_ROUTING_VARIABLES,
    LAST_FILE,
    LOCK_FILE,
    LOCK_FILES,
    REQUIREMENTS_FILE,
    UV_FIRST_FILE,
    UV_SETTINGS_FILE,
    Closure,
)
from cudalock.lock.metadata import marker_environment
from cudalock.model import PackagePin, Plan
from cudalock.platforms import platform_named
from cudalock.request import TORCH_FAMILY, Framework
from cudalock.safetext import printable
from cudalock.shipped import shipped_dir
from cudalock.urls import redact
from cudalock.versions import format_cuda

__all__ = [
    "CONDA_FORGE_FIRST_NVCC_MAJOR",
    "CUDA_DEV_PACKAGES",
    "CUDA_TARGETS_DIRS",
    "HEREDOC_END",
    "PYTHON",
    "UV",
    "CondaPart",
    "Installer",
    "RenderOptions",
    "Renderer",
    "Step",
    "build_script",
    "built_against_cuda_torch",
    "check_env_name",
    "companions",
    "conda_part",
    "cuda_targets_dir",
    "default_env_name",
    "default_templates_dir",
    "fill",
    "framework_args",
    "install_indexes",
    "install_steps",
    "output_files",
    "render_conda_lock_yml",
    "render_constraints_txt",
    "render_environment_yml",
    "render_files",
    "render_install_sh",
    "render_requirements_txt",
    "render_uv_pyproject",
    "toml_string",
    "torch_family",
    "verify_script",
    "yaml_scalar",
]

Installer = Literal["uv", "pip"]

#: conda-forge ships cuda-nvcc / cuda-version from CUDA 12.0; older compilers are NVIDIA's.
CONDA_FORGE_FIRST_NVCC_MAJOR = 12
#: The CUDA toolkit for ops built just in time: conda-forge's compiler (its ``compiler('cuda')``)
#: and the development packages its own DeepSpeed recipe builds against
#: (conda-forge/deepspeed-feedstock@09ea9375e0c87f29ea84c0422b68f51806995689:recipe/recipe.yaml,
#: requirements build and host when cuda_compiler_version != "None").
CUDA_DEV_PACKAGES = (
    "cuda-nvcc",
    "cuda-profiler-api",
    "libcublas-dev",
    "libcurand-dev",
    "libcusolver-dev",
    "libcusparse-dev",
)
#: conda-forge's CUDA 12+ packages keep headers and libraries in ``$PREFIX/targets/<dir>``,
#: as NVIDIA's toolkit does under /usr/local/cuda (the directory by platform).
CUDA_TARGETS_DIRS = {"linux-x86_64": "x86_64-linux", "linux-aarch64": "sbsa-linux"}
# fullmatch: "$" would also accept a name followed by a newline, which then ends up in YAML.
_ENV_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_RESERVED_ENV_NAMES = ("base", "root")


@dataclass(frozen=True)
class RenderOptions:
    """What the user chose beyond the Plan, and the closure when it could be resolved."""

    name: str
    output_format: OutputFormat = "conda"
    #: As the install command should see them: requirements, absolute paths, or URLs.
    frameworks: tuple[Framework, ...] = ()
    #: Replaces pip's default index for everything not routed to the PyTorch index.
    pypi_index: str | None = None
    #: The resolved closure (None: it could not be resolved, e.g. offline).
    closure: Closure | None = None


@dataclass(frozen=True)
class Step:
    """One install step: a title and its command for pip and for uv, ``$PYTHON`` standing for
    the interpreter and ``$UV`` for uv; ``only_if`` is a shell test that gates it."""

    title: str
    argv: tuple[str, ...]
    uv_argv: tuple[str, ...] | None = None
    only_if: str | None = None
    otherwise: str | None = None
    #: It only reads the environment (a check): once the steps left are such, the
    #: environment is complete.
    reads_only: bool = False

    def command(self, installer: Installer = "pip") -> tuple[str, ...]:
        return self.uv_argv if installer == "uv" and self.uv_argv is not None else self.argv

    def display(self, python: str = "python", installer: Installer = "pip", uv: str = "uv") -> str:
        """The command for messages: scripts abbreviated (credentials: see urls.redact)."""
        names = {PYTHON: python, UV: uv}
        shown = [
            "<script>" if "\n" in arg else names.get(arg, arg) for arg in self.command(installer)
        ]
        return " ".join(shlex.quote(arg) for arg in shown)


PYTHON = "$PYTHON"
UV = "$UV"
HEREDOC_END = "CUDALOCK_VERIFY"
_OPTIONS_WITH_VALUES = ("--index-url", "--extra-index-url", "-c", "-e", "-r", "--config-file")


# --------------------------------------------------------------------------------------------
# Values


def check_env_name(name: str) -> str:
    """A conda environment name, or :class:`UsageError` saying what is allowed."""
    if not _ENV_NAME_RE.fullmatch(name) or name.lower() in _RESERVED_ENV_NAMES:
        raise UsageError(
            f"invalid environment name {name!r}: expected 1-64 letters, digits, '.', '_' or "
            "'-', starting with a letter or digit, and not 'base' or 'root' "
            "(conda forbids '/', ' ', ':' and '#' in names)"
        )
    return name


def default_env_name(plan: Plan) -> str:
    return f"torch-{plan.torch_version}-{plan.variant}"


def framework_args(framework: Framework) -> tuple[str, ...]:
    """How pip is given the framework: a local path is installed editable."""
    return ("-e", framework.text) if framework.kind == "path" else (framework.text,)


def torch_family(plan: Plan, closure: Closure | None = None) -> tuple[PackagePin, ...]:
    """The pins that come from the PyTorch index and go into constraints.txt (torch first):
    every torch-family package of the closure, or the Plan's when there is no closure."""
    if closure is not None and closure.family:
        return closure.family
    family = [
        pin
        for pin in plan.packages
        if canonicalize_name(pin.name) in TORCH_FAMILY
        or (plan.index_url and pin.index_url == plan.index_url)
    ]
    return tuple(sorted(family, key=lambda p: (p.name != "torch", p.name)))


def companions(plan: Plan) -> tuple[PackagePin, ...]:
    """The Plan's pins from the default index (DeepSpeed, ...)."""
    family = {p.name for p in torch_family(plan)}
    return tuple(p for p in plan.packages if p.name not in family)


def built_against_cuda_torch(plan: Plan, closure: Closure | None = None) -> tuple[str, ...]:
    """What is built against a CUDA torch and may need nvcc: DeepSpeed (its ops JIT-compiled
    later), flash-attn (compiled where no prebuilt wheel fits)."""
    if plan.cuda is None:
        return ()
    if closure is not None and closure.built_last:
        return closure.built_last
    return tuple(
        name
        for name in BUILT_AGAINST_TORCH
        if any(canonicalize_name(p.name) == name for p in plan.packages)
    )


#: How each package of BUILT_AGAINST_TORCH uses the toolkit, in words.
_BUILDS = {
    "deepspeed": "DeepSpeed builds its ops just in time",
    "flash-attn": "flash-attn compiles its kernels when no prebuilt wheel fits",
}


def yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar: plain when that reads back as the same string, else quoted."""
    plain = re.fullmatch(r"(?:[A-Za-z0-9_./]|--[A-Za-z])[A-Za-z0-9_./+=<>!~@%:, -]*", text)
    if plain and ": " not in text and " #" not in text and not text.endswith((":", " ")):
        import yaml  # here: only environment.yml's values need it, and its import is ~20 ms

        try:
            # YAML 1.1 resolvers (PyYAML) turn more plain words into non-strings than 1.2 ones
            # (yes, 0x1F, 12:30, dates), so agreeing with PyYAML is the conservative test.
            if yaml.safe_load(f"- {text}\n") == [text]:
                return text
        except yaml.YAMLError:
            pass
    return _yaml_double_quoted(text)


def _yaml_double_quoted(text: str) -> str:
    """A YAML double-quoted scalar: escapes for quotes, backslashes, line breaks (which YAML
    would fold) and every character outside YAML's printable set."""
    out = []
    for char in text:
        code = ord(char)
        if char in ('"', "\\"):
            out.append("\\" + char)
        elif (
            0x20 <= code <= 0x7E
            or (0xA0 <= code <= 0xD7FF and code not in (0x2028, 0x2029))
            or (0xE000 <= code <= 0xFFFD and code != 0xFEFF)
            or code >= 0x10000
        ):
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        else:
            out.append(f"\\u{code:04x}")
    return '"' + "".join(out) + '"'


def toml_string(text: str) -> str:
    return json.dumps(text)  # JSON string escapes are valid TOML basic-string escapes


def _comment(lines: tuple[str, ...] | list[str]) -> str:
    """Comment lines (``# ...``); line breaks inside a value cannot end the comment, and other
    control characters (which YAML and TOML refuse even in comments) are written as escapes."""
    return "\n".join(
        f"# {printable(' '.join(line.split()), keep_lines=False)}".rstrip() for line in lines
    )


def _header(plan: Plan, options: RenderOptions, what: str) -> str:
    torch = plan.torch_pin
    cuda = f"CUDA {format_cuda(plan.cuda)}" if plan.cuda else "CPU only"
    lines = [
        f"{what}, written by cudalock bootstrap (matrix {plan.matrix_version}).",
        f"torch {torch.version} ({cuda}), Python {plan.python}, {plan.platform}, "
        f"compat policy {plan.compat}.",
    ]
    for target in plan.targets:
        driver = str(target.driver_version) if target.driver_version else "no NVIDIA driver"
        ccs = ", ".join(f"{cc[0]}.{cc[1]}" for cc in target.compute_capabilities) or "none"
        driver_cuda = format_cuda(target.driver_cuda) if target.driver_cuda else "unknown"
        lines.append(
            f"Target ({target.name}): driver {driver} (CUDA {driver_cuda}), "
            f"compute capability {ccs}."
        )
    if plan.unverified:
        lines.append("Rests on facts the matrix marks unverified: " + "; ".join(plan.unverified))
    return _comment(lines)


# --------------------------------------------------------------------------------------------
# Install steps (shared by install.sh and ``bootstrap --create``)


def install_steps(plan: Plan, options: RenderOptions) -> tuple[Step, ...]:
    """The ordered commands of install.sh, for pip and for uv.

    They install the lock files (written beside install.sh by bootstrap or ``cudalock lock``)
    and nothing else. First local and VCS frameworks, without their dependencies (the lock
    holds them): from the URL as given, so a private repository's token reaches git, while
    pylock.toml records the URL without it (uv then finds the locked commit installed). Then
    every package pinned with its hash and ``--no-deps`` (uv: the exact files of pylock.toml,
    less what is built last: pylock.first.toml),
    so no resolver runs and nothing can replace torch; then DeepSpeed without build isolation
    or a cached wheel, against the torch just installed; then the checks. Nothing here depends
    on the closure itself, so the script is right for whatever lock is there.
    """
    pip = (PYTHON, "-m", "pip", "install", "--no-input")
    uv_install = (UV, "pip", "install", "--python", PYTHON)
    indexes = install_indexes(plan, options)
    index_args: tuple[str, ...] = ()
    for position, url in enumerate(indexes):
        index_args += ("--index-url" if position == 0 else "--extra-index-url", url)
    default_index = ("--index-url", indexes[0]) if options.pypi_index else ()
    where = redact(plan.index_url or "the default index")
    steps = []
    for framework in options.frameworks:
        requirement = framework.requirement
        if requirement is not None and requirement.url is None:
            continue  # from the lock; a "name @ URL" is installed from the URL, as a bare URL
        args = framework_args(framework)
        # uv reads a path on its command line as a requirement: a file URL keeps every
        # character a directory name may hold.
        uv_args = ("-e", framework.path.as_uri()) if framework.path is not None else args
        steps.append(
            Step(
                f"the framework {redact(framework.text)}, without its dependencies "
                "(the lock holds them)",
                (*pip, "--no-deps", *default_index, *args),
                (*uv_install, "--no-deps", *default_index, *uv_args),
            )
        )
    steps.append(
        Step(
            f"the locked closure ({LOCK_FILE}): every package pinned with its hash, no "
            f"dependency resolution; the torch family from {where}",
            (*pip, "--no-deps", "--require-hashes", *index_args, "-r", REQUIREMENTS_FILE),
            # uv: pylock.toml without what is built last, which the next step builds once.
            (*uv_install, "--config-file", UV_SETTINGS_FILE, *index_args, "-r", UV_FIRST_FILE),
        )
    )
    targets = cuda_targets_dir(plan)
    if (
        options.output_format == "conda"
        and targets
        and conda_part(plan, options.closure).has_toolkit
    ):
        steps.append(
            Step(
                "point torch's extension builder at conda-forge's CUDA layout (an activation "
                "script in $CONDA_PREFIX/etc/conda/activate.d)",
                (PYTHON, "-c", _template("cuda_activation.py"), targets),
            )
        )
    last_index = ("--index-url", options.pypi_index) if options.pypi_index else ()
    build = (LAST_FILE, *last_index)
    steps.append(
        Step(
            f"DeepSpeed and anything else built against the installed torch ({LAST_FILE}), "
            "without build isolation; wheels built earlier against this exact torch build, "
            "CUDA and Python are reused (CUDALOCK_NO_WHEEL_CACHE=1 builds anew)",
            (PYTHON, "-c", build_script(), "pip", "", *build),
            (PYTHON, "-c", build_script(), "uv", UV, *build),
            only_if=f"grep -q '^[A-Za-z0-9]' {LAST_FILE}",
            otherwise="nothing in the closure is built against torch",
        )
    )
    steps.append(
        Step(
            "check the installed requirements",
            (PYTHON, "-m", "pip", "check"),
            (UV, "pip", "check", "--python", PYTHON),
            reads_only=True,
        )
    )
    family = torch_family(plan)
    planned_cuda = format_cuda(plan.cuda) if plan.cuda else "none"
    steps.append(
        Step(
            "verify torch, its family, DeepSpeed's build and every locked version, without "
            "importing torch",
            (
                PYTHON,
                "-c",
                verify_script(),
                planned_cuda,
                *(p.requirement for p in family),
                "--locked",
                REQUIREMENTS_FILE,
                LAST_FILE,
            ),
            reads_only=True,
        )
    )
    return tuple(steps)


def install_indexes(plan: Plan, options: RenderOptions) -> tuple[str, ...]:
    """The index URLs the installers are given, credentials and all (the lock files carry
    none): the default index first, then the PyTorch index."""
    default = options.pypi_index or DEFAULT_PYPI_INDEX
    indexes = [default]
    if plan.index_url and plan.index_url != default:
        indexes.append(plan.index_url)
    return tuple(indexes)


# --------------------------------------------------------------------------------------------
# Templates


def default_templates_dir() -> Path:
    """The templates shipped with cudalock."""

    return shipped_dir("templates")


@cache
def _template(name: str) -> str:
    return (default_templates_dir() / name).read_text(encoding="utf-8")


def verify_script() -> str:
    return _template("verify_torch.py")


def build_script() -> str:
    return _template("build_against_torch.py")


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace ``{{key}}`` placeholders; a missing key is a programming error (KeyError)."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values[m.group(1)], template)


# --------------------------------------------------------------------------------------------
# The files


Renderer = Callable[[Plan, RenderOptions], str]


def _renderers(output_format: str) -> dict[str, Renderer]:
    """File name → its renderer, for one output format: the one list of what each writes."""
    renderers: dict[str, Renderer]
    if output_format == "conda":
        renderers = {
            "environment.yml": render_environment_yml,
            "environment.conda-lock.yml": render_conda_lock_yml,
            "install.sh": render_install_sh,
        }
    elif output_format == "venv":
        renderers = {"requirements.txt": render_requirements_txt, "install.sh": render_install_sh}
    elif output_format == "uv":
        renderers = {"pyproject.toml": render_uv_pyproject}
    elif output_format == "pixi":
        from cudalock.envfiles.pixi import render_pixi_toml
        from cudalock.lock.pixi import PIXI_FILE

        renderers = {PIXI_FILE: render_pixi_toml}
    else:
        raise UsageError(
            f"invalid --format {output_format!r}: expected {', '.join(OUTPUT_FORMATS)}"
        )
    renderers["constraints.txt"] = render_constraints_txt
    return renderers


def output_files(output_format: str) -> tuple[str, ...]:
    """The names of the files ``output_format`` writes, without rendering them."""
    return tuple(_renderers(output_format))


def render_files(plan: Plan, options: RenderOptions) -> dict[str, str]:
    """File name → text for ``options.output_format``."""
    check_env_name(options.name)
    return {
        name: render(plan, options) for name, render in _renderers(options.output_format).items()
    }


def render_install_sh(plan: Plan, options: RenderOptions) -> str:
    steps = install_steps(plan, options)
    blocks = []
    for number, step in enumerate(steps, start=1):
        title = f"{number}/{len(steps)}: {step.title}"
        blocks.append(f"step {shlex.quote(title)}\n{_step_shell(step)}")
    return fill(
        _template("install.sh.tmpl"),
        {
            "header": _header(plan, options, "install.sh"),
            "lock_files": " ".join(shlex.quote(name) for name in LOCK_FILES),
            "steps": "\n\n".join(blocks),
            "routing_variables": " ".join(INSTALL_ROUTING_VARIABLES),
        },
    )


def _step_shell(step: Step) -> str:
    """A step as bash: the uv and pip forms behind a test of ``$INSTALLER`` when they differ,
    gated by ``only_if`` when it has one."""
    if step.uv_argv is None:
        body = _wrap_shell(step.argv)
    else:
        body = (
            'if [ "$INSTALLER" = uv ]; then\n'
            f"{_indent(_wrap_shell(step.uv_argv))}\n"
            "else\n"
            f"{_indent(_wrap_shell(step.argv))}\n"
            "fi"
        )
    if step.only_if is None:
        return body
    otherwise = shlex.quote(f"cudalock: {step.otherwise or 'nothing to do'}")
    return f"if {step.only_if}; then\n{_indent(body)}\nelse\n    echo {otherwise}\nfi"


def _indent(text: str) -> str:
    """``text`` indented one level, except the body and end of a here-document: bash ends it
    only at a line that is exactly its word."""
    lines, in_heredoc = [], False
    for line in text.splitlines():
        if in_heredoc:
            lines.append(line)
            in_heredoc = line != HEREDOC_END
            continue
        lines.append(f"    {line}" if line else line)
        in_heredoc = line.endswith(f"<<'{HEREDOC_END}'")
    return "\n".join(lines)


def _shell_word(arg: str) -> str:
    return {PYTHON: '"$PYTHON"', UV: '"$UV"'}.get(arg, shlex.quote(arg))


def _wrap_shell(argv: tuple[str, ...]) -> str:
    """A command as bash: options with their values on one line each, joined with backslashes.

    The verification script goes in a quoted here-document (``<<'EOF'``: nothing in it is
    expanded); it is cudalock's own text, never a user value.
    """
    if argv[1] == "-c":
        script, args = argv[2], argv[3:]
        quoted = " ".join(_shell_word(a) for a in args)
        return f"\"$PYTHON\" - {quoted} <<'{HEREDOC_END}'\n{script.rstrip()}\n{HEREDOC_END}"
    words = [_shell_word(a) for a in argv]
    head_length = 3 if argv[0] == UV else 4
    head_length = min(head_length, len(words))
    head = " ".join(words[:head_length])
    lines: list[str] = []
    index = head_length
    while index < len(words):
        word = words[index]
        if argv[index] in (*_OPTIONS_WITH_VALUES, "--python") and index + 1 < len(words):
            word = f"{word} {words[index + 1]}"
            index += 1
        lines.append(word)
        index += 1
    if len(" ".join([head, *lines])) <= 92:
        return " ".join([head, *lines])
    return " \\\n    ".join([head, *lines])


def _pip_section(plan: Plan, options: RenderOptions) -> list[str]:
    """Requirements-file lines: index options, then the torch family's exact pins."""
    lines: list[str] = []
    if plan.index_url and plan.index_url != options.pypi_index:
        lines.append(f"--index-url {plan.index_url}")
        if options.pypi_index:
            lines.append(f"--extra-index-url {options.pypi_index}")
    elif options.pypi_index:
        lines.append(f"--index-url {options.pypi_index}")
    lines += [pin.requirement for pin in torch_family(plan, options.closure)]
    return lines


def _conda_python(plan: Plan) -> list[str]:
    if plan.python.endswith("t"):
        return [f"python={plan.python[:-1]}", "python-freethreading"]
    return [f"python={plan.python}"]


@dataclass(frozen=True)
class CondaPart:
    """What conda installs: the channels, and the specs (Python, pip, a CUDA toolkit when
    ops are built just in time); the pip part is the lock's."""

    channels: tuple[str, ...]
    specs: tuple[str, ...]
    #: Why a CUDA toolkit is needed that conda does not bring (None: none is, or it does).
    system_toolkit: str | None = None

    @property
    def cuda_version(self) -> str | None:
        """The ``cuda-version`` pin, which constrains the driver (``__cuda``)."""
        for spec in self.specs:
            if spec.startswith("cuda-version="):
                return spec.removeprefix("cuda-version=")
        return None

    @property
    def has_toolkit(self) -> bool:
        return "cuda-nvcc" in self.specs

    def fingerprint(self) -> str:
        """One line naming the channels and specs, recorded in an environment made from them."""
        return " ".join([*(f"-c {c}" for c in self.channels), *self.specs])


def conda_part(plan: Plan, closure: Closure | None = None) -> CondaPart:
    """The conda part of the environment (what environment.yml lists outside ``pip:``).

    When DeepSpeed's ops (just in time) or flash-attn (where no prebuilt wheel fits) are built
    against a CUDA torch, a CUDA 12+ toolkit comes
    from conda-forge: its compiler and the development libraries conda-forge's own DeepSpeed
    recipe builds against (:data:`CUDA_DEV_PACKAGES`), of torch's CUDA (``cuda-version``).
    conda-forge has no CUDA 11 compiler, so there the toolkit must be the system's.
    """
    specs = [*_conda_python(plan), "pip"]
    toolkit = None
    built = built_against_cuda_torch(plan, closure)
    if built and plan.cuda is not None:
        cuda = format_cuda(plan.cuda)
        if plan.cuda[0] >= CONDA_FORGE_FIRST_NVCC_MAJOR:
            specs += [*CUDA_DEV_PACKAGES, f"cuda-version={cuda}"]
        else:
            toolkit = (
                f"{' and '.join(_BUILDS.get(name, name) for name in built)} against a CUDA "
                f"{cuda} toolkit, which "
                f"conda-forge does not have: a system toolkit of CUDA {cuda} is needed "
                f"(nvcc and headers; point CUDA_HOME at it, e.g. CUDA_HOME=/usr/local/cuda-{cuda})"
            )
    return CondaPart(("conda-forge",), tuple(specs), toolkit)


def cuda_targets_dir(plan: Plan) -> str | None:
    """Where conda-forge's CUDA 12+ keeps headers and libraries under the prefix
    (``targets/<dir>/include``), for the plan's platform; None where it has none."""
    return CUDA_TARGETS_DIRS.get(plan.platform)


def render_environment_yml(plan: Plan, options: RenderOptions) -> str:
    part = conda_part(plan, options.closure)
    dependencies = [f"  - {yaml_scalar(dep)}" for dep in part.specs]
    dependencies.append("  - pip:")
    # The hashed lock: pip checks every file against it, so nothing outside the locked
    # closure can be installed (conda writes these lines to a requirements file beside this
    # one, so the relative path holds).
    dependencies.append(f"      - {yaml_scalar(f'-r {REQUIREMENTS_FILE}')}")
    after = [
        f"The pip: section installs {REQUIREMENTS_FILE}, the locked closure, every file "
        "hash-checked (index credentials come from netrc or keyring, as for the lock files).",
        f"Then:    conda activate {options.name} && bash install.sh",
        "(it installs what the pip: section installs, then the frameworks from local paths or "
        "VCS and DeepSpeed, built against the installed torch, and checks the result)",
        *_conda_notes(plan, part),
    ]
    return fill(
        _template("environment.yml.tmpl"),
        {
            "header": _header(plan, options, "environment.yml"),
            "next_steps": _comment(after),
            "name": yaml_scalar(options.name),
            "channels": "\n".join(f"  - {yaml_scalar(c)}" for c in part.channels),
            "dependencies": "\n".join(dependencies),
        },
    )


def _conda_notes(plan: Plan, part: CondaPart) -> list[str]:
    """What a person creating the conda part should know: the driver pin and the toolkit."""
    notes: list[str] = []
    if part.system_toolkit:
        notes.append(part.system_toolkit + ".")
    if part.cuda_version:
        target_cuda = min(
            (t.driver_cuda for t in plan.targets if t.driver_cuda is not None), default=None
        )
        override = format_cuda(target_cuda) if target_cuda else part.cuda_version
        notes += [
            f"cuda-version={part.cuda_version} needs a driver of CUDA >= "
            f"{part.cuda_version.split('.')[0]} (the __cuda virtual package). On a machine "
            "without the target's driver (a login node), solve as on the target with: "
            f"CONDA_OVERRIDE_CUDA={override} conda env create -f environment.yml",
            "install.sh adds an activation script that points torch's extension builder "
            "(CUDA_HOME, CPATH, LIBRARY_PATH) at conda-forge's CUDA layout "
            "(targets/<arch>-linux/include and lib), so DeepSpeed's ops can be built just "
            "in time.",
        ]
    notes.append(
        "Channels: conda-forge only. If your conda configuration adds 'defaults', it is mixed "
        "into 'conda env create'; 'conda create -n NAME --override-channels -c conda-forge' "
        "with the packages above keeps it out (cudalock bootstrap --create does that)."
    )
    return notes


def render_conda_lock_yml(plan: Plan, options: RenderOptions) -> str:
    part = conda_part(plan, options.closure)
    pip_lines, repositories = _conda_lock_pip(plan, options)
    dependencies = [f"  - {yaml_scalar(dep)}" for dep in part.specs]
    dependencies.append("  - pip:")
    dependencies += [f"      - {yaml_scalar(line)}" for line in pip_lines]
    subdir = platform_named(plan.platform).conda_subdir
    return fill(
        _template("environment.conda-lock.yml.tmpl"),
        {
            "header": _header(plan, options, "environment.conda-lock.yml"),
            "name": yaml_scalar(options.name),
            "channels": "\n".join(f"  - {yaml_scalar(c)}" for c in part.channels),
            "platforms": f"  - {yaml_scalar(subdir)}",
            "pip_repositories": "\n".join(f"  - {yaml_scalar(url)}" for url in repositories)
            or "  []",
            # With a mirror given, conda-lock must not fall back to pypi.org behind its back.
            "allow_pypi": "allow-pypi-requests: false\n" if options.pypi_index else "",
            "dependencies": "\n".join(dependencies),
        },
    )


def _conda_lock_pip(plan: Plan, options: RenderOptions) -> tuple[list[str], list[str]]:
    """The pip requirements and repositories of the conda-lock form.

    conda-lock offers every repository for every package, so with a closure the PyTorch index
    is not a repository at all: each package the closure routes to it is a direct reference
    to its locked wheel, with its hash (conda-lock takes direct references verbatim), and
    everything else is pinned to its locked version on the default index: the lock conda-lock
    makes is pylock.toml's. Without a closure only the torch family is known, and the PyTorch
    index must be a repository.
    """
    closure = options.closure
    default = [options.pypi_index] if options.pypi_index else []
    if closure is None:
        routed = [plan.index_url] if plan.index_url and plan.index_url != options.pypi_index else []
        return [pin.requirement for pin in torch_family(plan)], routed + default
    family = {canonicalize_name(pin.name) for pin in closure.family}
    environment = marker_environment(plan.python.rstrip("t"), plan.platform)
    lines: list[str] = []
    fallback = False
    for package in sorted(closure.lock.packages, key=lambda p: (p.name not in family, p.name)):
        name = canonicalize_name(package.name)
        if package.version is None or package.directory is not None or package.vcs is not None:
            continue  # local frameworks: install.sh installs them
        if package.marker is not None and not package.marker.evaluate(environment):
            continue
        wheel = _target_wheel(package, plan) if name in family else None
        if wheel is not None:
            lines.append(f"{name} @ {wheel}")
        else:
            fallback = fallback or name in family
            lines.append(f"{name}=={package.version}")
    routed = [plan.index_url] if fallback and plan.index_url else []
    return lines, routed + default


def _target_wheel(package: Package, plan: Plan) -> str | None:
    """``URL#sha256=HASH`` of the package's locked https wheel for the plan's Python and
    platform (None: there is none)."""
    python = plan.python.rstrip("t").replace(".", "")
    arch = platform_named(plan.platform).wheel_tag_arch
    for wheel in package.wheels or ():
        sha256 = wheel.hashes.get("sha256")
        # conda-lock reads a direct reference as a URL only when it is https (an http one
        # becomes a local path): an insecure index stays a repository.
        if not wheel.url or not wheel.url.startswith("https://") or not sha256:
            continue
        # PEP 751 makes the name optional (uv leaves it out): the URL's last segment is it.
        filename = wheel.name or unquote(urlsplit(wheel.url).path.rsplit("/", 1)[-1])
        try:
            _, _, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if any(
            tag.interpreter in (f"cp{python}", "py3", f"py{python[0]}")
            and (tag.platform == "any" or tag.platform.endswith(arch))
            for tag in tags
        ):
            return f"{wheel.url}#sha256={sha256}"
    return None


def render_constraints_txt(plan: Plan, options: RenderOptions) -> str:
    return fill(
        _template("constraints.txt.tmpl"),
        {
            "header": _header(plan, options, "constraints.txt"),
            "pins": "\n".join(pin.requirement for pin in torch_family(plan, options.closure)),
        },
    )


def render_requirements_txt(plan: Plan, options: RenderOptions) -> str:
    return fill(
        _template("requirements.txt.tmpl"),
        {
            "header": _header(plan, options, "requirements.txt"),
            "lines": "\n".join(_pip_section(plan, options)),
        },
    )


def render_uv_pyproject(plan: Plan, options: RenderOptions) -> str:
    """A uv project holding the closure: its direct requirements (the torch family routed to
    an explicit index), every locked version as a constraint, and DeepSpeed built against the
    locked torch, so ``uv sync`` installs what install.sh installs."""
    closure = options.closure
    family = torch_family(plan, closure)
    family_names = {canonicalize_name(p.name) for p in family}
    dependencies = [pin.requirement for pin in family]
    dependencies += [pin.requirement for pin in companions(plan)]
    notes: list[str] = []
    local_sources: list[str] = []
    fits = {fit.given: fit for fit in closure.frameworks} if closure else {}
    for framework in options.frameworks:
        text = framework.text
        if framework.kind == "requirement":
            fit = fits.get(text)
            dependencies.append(fit.requested if fit else text)
            continue
        found = _locked_local(closure, text) if closure else None
        if found is None:
            flag = "--editable " if framework.kind == "path" else ""
            notes.append(f"Add the framework with: uv add {flag}{shlex.quote(text)}")
            continue
        name, dependency, source = found
        dependencies.append(dependency)
        if source:
            local_sources.append(f"{name} = {source}")
    constraints: list[str] = []
    build: list[str] = []
    if closure is not None:
        dependencies += list(closure.additions)
        constraints = [
            f"{canonicalize_name(p.name)}=={p.version}"
            for p in sorted(closure.lock.packages, key=lambda p: p.name)
            if p.version is not None and p.directory is None and p.vcs is None
        ]
        built = closure.built_last
    else:
        built = tuple(
            name for name in BUILT_AGAINST_TORCH if any(p.name == name for p in plan.packages)
        )
    if built:
        torch = plan.torch_pin.requirement
        build = [f"{name} = [{toml_string(torch)}]" for name in built]
    index_name = f"pytorch-{plan.variant}"
    indexes = []
    if plan.index_url and plan.index_url != options.pypi_index:
        indexes.append(
            f"[[tool.uv.index]]\nname = {toml_string(index_name)}\n"
            f"url = {toml_string(plan.index_url)}\nexplicit = true"
        )
    if options.pypi_index:
        indexes.append(
            f'[[tool.uv.index]]\nname = "pypi-mirror"\n'
            f"url = {toml_string(options.pypi_index)}\ndefault = true"
        )
    routed = sorted({*TORCH_FAMILY, *family_names})
    sources = (
        [f"{name} = {{ index = {toml_string(index_name)} }}" for name in routed]
        if plan.index_url and plan.index_url != options.pypi_index
        else []
    )
    python = plan.python.rstrip("t")
    environment = platform_named(plan.platform).marker
    return fill(
        _template("pyproject.toml.tmpl"),
        {
            "header": _header(plan, options, "pyproject.toml"),
            "notes": _comment(notes) if notes else "#",
            "project_name": toml_string(options.name),
            "requires_python": toml_string(f"=={python}.*"),
            "dependencies": "\n".join(f"    {toml_string(d)}," for d in dependencies),
            "environments": toml_string(environment),
            "constraints": "\n".join(f"    {toml_string(c)}," for c in constraints),
            "build": "\n".join(build),
            "indexes": "\n\n".join(indexes),
            "sources": "\n".join([*sources, *local_sources]),
        },
    )


def _locked_local(closure: Closure, framework: str) -> tuple[str, str, str | None] | None:
    """(name, dependency, source) of a path or VCS framework as the lock holds it."""
    for package in closure.lock.packages:
        if package.directory is not None and Path(package.directory.path) == Path(framework):
            source = (
                f"{{ path = {toml_string(str(package.directory.path))}, "
                f"editable = {'true' if package.directory.editable else 'false'} }}"
            )
            return package.name, package.name, source
        vcs = package.vcs
        if vcs is not None and vcs.url and framework.endswith(vcs.url.split("://", 1)[-1]):
            revision = f"@{vcs.commit_id}" if vcs.commit_id else ""
            return package.name, f"{package.name} @ {vcs.type}+{vcs.url}{revision}", None
    return None
