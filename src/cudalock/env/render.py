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
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from cudalock.errors import UsageError
from cudalock.model import PackagePin, Plan
from cudalock.platforms import platform_named
from cudalock.safetext import printable
from cudalock.shipped import shipped_dir
from cudalock.urls import redact
from cudalock.versions import format_cuda

OutputFormat = Literal["conda", "venv", "uv"]
FrameworkKind = Literal["requirement", "path", "url"]
OUTPUT_FORMATS: tuple[OutputFormat, ...] = ("conda", "venv", "uv")

#: Packages that must come from the PyTorch index together, under one label.
TORCH_FAMILY = ("torch", "torchvision", "torchaudio")
#: conda-forge ships cuda-nvcc / cuda-version from CUDA 12.0; older compilers are NVIDIA's.
CONDA_FORGE_FIRST_NVCC_MAJOR = 12
# fullmatch: "$" would also accept a name followed by a newline, which then ends up in YAML.
_ENV_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_RESERVED_ENV_NAMES = ("base", "root")
_VCS_PREFIXES = ("git+", "hg+", "svn+", "bzr+")


@dataclass(frozen=True)
class RenderOptions:
    """What the user chose beyond the Plan."""

    name: str
    output_format: OutputFormat = "conda"
    #: As the install command should see it: a requirement, an absolute path, or a URL.
    framework: str | None = None
    #: Replaces pip's default index for everything not routed to the PyTorch index.
    pypi_index: str | None = None


@dataclass(frozen=True)
class Step:
    """One install step: a title and the command, ``$PYTHON`` standing for the interpreter."""

    title: str
    argv: tuple[str, ...]

    def display(self, python: str = "python") -> str:
        """The command for messages: scripts abbreviated (credentials: see urls.redact)."""
        shown = [python, *("<script>" if "\n" in arg else arg for arg in self.argv[1:])]
        return " ".join(shlex.quote(arg) for arg in shown)


PYTHON = "$PYTHON"
HEREDOC_END = "CUDALOCK_VERIFY"
_OPTIONS_WITH_VALUES = ("--index-url", "--extra-index-url", "-c", "-e")


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


def classify_framework(text: str) -> FrameworkKind:
    """A requirement (``llamafactory==0.9.5``, ``name @ https://…``), a URL, or a local path."""
    if text.startswith(_VCS_PREFIXES) or re.match(r"^[a-z][a-z0-9+.-]*://", text):
        return "url"
    if text.startswith((".", "/", "~")) or "/" in text or "\\" in text:
        try:
            requirement = Requirement(text)
        except InvalidRequirement:
            return "path"
        return "requirement" if requirement.url else "path"
    try:
        Requirement(text)
    except InvalidRequirement:
        return "path"
    return "requirement"


def framework_args(framework: str) -> tuple[str, ...]:
    """How pip is given the framework: a local path is installed editable."""
    return ("-e", framework) if classify_framework(framework) == "path" else (framework,)


def torch_family(plan: Plan) -> tuple[PackagePin, ...]:
    """The pins that come from the PyTorch index and go into constraints.txt (torch first)."""
    family = [
        pin
        for pin in plan.packages
        if canonicalize_name(pin.name) in TORCH_FAMILY
        or (plan.index_url and pin.index_url == plan.index_url)
    ]
    return tuple(sorted(family, key=lambda p: (p.name != "torch", p.name)))


def companions(plan: Plan) -> tuple[PackagePin, ...]:
    """Pins installed after the framework, from the default index (DeepSpeed, ...)."""
    family = {p.name for p in torch_family(plan)}
    return tuple(p for p in plan.packages if p.name not in family)


def builds_deepspeed_ops(plan: Plan) -> bool:
    return plan.cuda is not None and any(
        canonicalize_name(p.name) == "deepspeed" for p in plan.packages
    )


def yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar: plain when that reads back as the same string, else quoted."""
    plain = re.fullmatch(r"(?:[A-Za-z0-9_./]|--[A-Za-z])[A-Za-z0-9_./+=<>!~@%:, -]*", text)
    if plain and ": " not in text and " #" not in text and not text.endswith((":", " ")):
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
    """The ordered pip commands of install.sh; ``argv[0]`` is ``$PYTHON``."""
    pip = (PYTHON, "-m", "pip", "install", "--no-input")
    default_index = ("--index-url", options.pypi_index) if options.pypi_index else ()
    family = torch_family(plan)
    family_pins = tuple(p.requirement for p in family)
    steps: list[Step] = []

    torch_index: tuple[str, ...] = ()
    if plan.index_url and plan.index_url != options.pypi_index:
        torch_index = ("--index-url", plan.index_url)
        if options.pypi_index:
            # torch's own dependencies (filelock, sympy, nvidia-*) may live only on the mirror;
            # the label pins still match only the PyTorch index's files.
            torch_index += ("--extra-index-url", options.pypi_index)
    else:
        torch_index = default_index
    # Titles are printed when install.sh runs: no credentials in them.
    steps.append(
        Step(
            f"the torch family from {redact(plan.index_url or 'the default index')}",
            (*pip, *torch_index, *family_pins),
        )
    )

    if options.framework:
        args = framework_args(options.framework)
        steps.append(
            Step(
                f"the framework {redact(options.framework)}, without its dependencies",
                (*pip, *default_index, "--no-deps", *args),
            )
        )
        steps.append(
            Step(
                "the framework's dependencies, with the torch family pinned",
                (*pip, *default_index, "-c", "constraints.txt", *args),
            )
        )

    others = companions(plan)
    if others:
        if builds_deepspeed_ops(plan):
            steps.append(
                Step(
                    "build tools for DeepSpeed",
                    (*pip, *default_index, "-c", "constraints.txt", "setuptools", "wheel"),
                )
            )
        isolation = (
            ("--no-build-isolation",)
            if any(canonicalize_name(p.name) == "deepspeed" for p in others)
            else ()
        )
        names = ", ".join(p.name for p in others)
        steps.append(
            Step(
                f"{names}, built against the installed torch",
                (
                    *pip,
                    *default_index,
                    *isolation,
                    "-c",
                    "constraints.txt",
                    *(p.requirement for p in others),
                ),
            )
        )

    steps.append(Step("pip check", (PYTHON, "-m", "pip", "check")))
    planned_cuda = format_cuda(plan.cuda) if plan.cuda else "none"
    steps.append(
        Step(
            "verify torch without importing it",
            (PYTHON, "-c", verify_script(), planned_cuda, *family_pins),
        )
    )
    return tuple(steps)


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


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace ``{{key}}`` placeholders; a missing key is a programming error (KeyError)."""
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: values[m.group(1)], template)


# --------------------------------------------------------------------------------------------
# The files


def render(plan: Plan, options: RenderOptions) -> dict[str, str]:
    """File name → text for ``options.output_format``."""
    check_env_name(options.name)
    files: dict[str, str] = {}
    if options.output_format == "conda":
        files["environment.yml"] = render_environment_yml(plan, options)
        files["environment.conda-lock.yml"] = render_conda_lock_yml(plan, options)
        files["install.sh"] = render_install_sh(plan, options)
    elif options.output_format == "venv":
        files["requirements.txt"] = render_requirements_txt(plan, options)
        files["install.sh"] = render_install_sh(plan, options)
    elif options.output_format == "uv":
        files["pyproject.toml"] = render_uv_pyproject(plan, options)
    else:
        raise UsageError(
            f"invalid --format {options.output_format!r}: expected {', '.join(OUTPUT_FORMATS)}"
        )
    files["constraints.txt"] = render_constraints_txt(plan, options)
    return files


def render_install_sh(plan: Plan, options: RenderOptions) -> str:
    steps = install_steps(plan, options)
    blocks = []
    for number, step in enumerate(steps, start=1):
        title = f"{number}/{len(steps)}: {step.title}"
        blocks.append(f"step {shlex.quote(title)}\n{_wrap_shell(step)}")
    return fill(
        _template("install.sh.tmpl"),
        {
            "header": _header(plan, options, "install.sh"),
            "steps": "\n\n".join(blocks),
        },
    )


def _wrap_shell(step: Step) -> str:
    """The step as bash: options with their values on one line each, joined with backslashes.

    The verification script goes in a quoted here-document (``<<'EOF'``: nothing in it is
    expanded); it is cudalock's own text, never a user value.
    """
    if step.argv[1] == "-c":
        script, args = step.argv[2], step.argv[3:]
        quoted = " ".join(shlex.quote(a) for a in args)
        return f"\"$PYTHON\" - {quoted} <<'{HEREDOC_END}'\n{script.rstrip()}\n{HEREDOC_END}"
    words = [shlex.quote(a) for a in step.argv[1:]]
    head_length = 4 if step.argv[3:4] == ("install",) else len(words)
    head = " ".join(['"$PYTHON"', *words[:head_length]])
    lines: list[str] = []
    index = head_length
    while index < len(words):
        word = words[index]
        if step.argv[index + 1] in _OPTIONS_WITH_VALUES and index + 1 < len(words):
            word = f"{word} {words[index + 1]}"
            index += 1
        lines.append(word)
        index += 1
    if len(" ".join([head, *lines])) <= 96:
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
    lines += [pin.requirement for pin in torch_family(plan)]
    return lines


def _conda_python(plan: Plan) -> list[str]:
    if plan.python.endswith("t"):
        return [f"python={plan.python[:-1]}", "python-freethreading"]
    return [f"python={plan.python}"]


def _conda_channels_and_compilers(plan: Plan) -> tuple[list[str], list[str]]:
    channels = ["conda-forge"]
    packages: list[str] = []
    if builds_deepspeed_ops(plan) and plan.cuda is not None:
        cuda = format_cuda(plan.cuda)
        if plan.cuda[0] >= CONDA_FORGE_FIRST_NVCC_MAJOR:
            packages += ["cuda-nvcc", f"cuda-version={cuda}"]
        else:
            channels.append("nvidia")
            packages += [f"nvidia::cuda-nvcc={cuda}"]
    return channels, packages


def render_environment_yml(plan: Plan, options: RenderOptions) -> str:
    channels, compilers = _conda_channels_and_compilers(plan)
    conda_deps = [*_conda_python(plan), "pip", *compilers]
    dependencies = [f"  - {yaml_scalar(dep)}" for dep in conda_deps]
    dependencies.append("  - pip:")
    dependencies += [f"      - {yaml_scalar(line)}" for line in _pip_section(plan, options)]
    after = []
    if options.framework or companions(plan):
        after = [
            f"Then:    conda activate {options.name} && bash install.sh",
            "(the framework and companions need pip options environment.yml cannot carry)",
        ]
    return fill(
        _template("environment.yml.tmpl"),
        {
            "header": _header(plan, options, "environment.yml"),
            "next_steps": _comment(after) if after else "#",
            "name": yaml_scalar(options.name),
            "channels": "\n".join(f"  - {yaml_scalar(c)}" for c in channels),
            "dependencies": "\n".join(dependencies),
        },
    )


def render_conda_lock_yml(plan: Plan, options: RenderOptions) -> str:
    channels, compilers = _conda_channels_and_compilers(plan)
    repositories = []
    if plan.index_url and plan.index_url != options.pypi_index:
        repositories.append(plan.index_url)
    if options.pypi_index:
        repositories.append(options.pypi_index)
    dependencies = [f"  - {yaml_scalar(dep)}" for dep in [*_conda_python(plan), "pip", *compilers]]
    dependencies.append("  - pip:")
    dependencies += [f"      - {yaml_scalar(pin.requirement)}" for pin in torch_family(plan)]
    subdir = platform_named(plan.platform).conda_subdir
    return fill(
        _template("environment.conda-lock.yml.tmpl"),
        {
            "header": _header(plan, options, "environment.conda-lock.yml"),
            "name": yaml_scalar(options.name),
            "channels": "\n".join(f"  - {yaml_scalar(c)}" for c in channels),
            "platforms": f"  - {yaml_scalar(subdir)}",
            "pip_repositories": "\n".join(f"  - {yaml_scalar(url)}" for url in repositories)
            or "  []",
            # With a mirror given, conda-lock must not fall back to pypi.org behind its back.
            "allow_pypi": "allow-pypi-requests: false\n" if options.pypi_index else "",
            "dependencies": "\n".join(dependencies),
        },
    )


def render_constraints_txt(plan: Plan, options: RenderOptions) -> str:
    return fill(
        _template("constraints.txt.tmpl"),
        {
            "header": _header(plan, options, "constraints.txt"),
            "pins": "\n".join(pin.requirement for pin in torch_family(plan)),
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
    family = torch_family(plan)
    dependencies = [pin.requirement for pin in family]
    dependencies += [pin.requirement for pin in companions(plan)]
    notes: list[str] = []
    if options.framework:
        kind = classify_framework(options.framework)
        if kind == "requirement":
            dependencies.append(options.framework)
        else:
            flag = "--editable " if kind == "path" else ""
            notes.append(f"Add the framework with: uv add {flag}{shlex.quote(options.framework)}")
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
    routed = sorted({*TORCH_FAMILY, *(canonicalize_name(p.name) for p in family)})
    sources = (
        [f"{name} = {{ index = {toml_string(index_name)} }}" for name in routed]
        if plan.index_url and plan.index_url != options.pypi_index
        else []
    )
    python = plan.python.rstrip("t")
    return fill(
        _template("pyproject.toml.tmpl"),
        {
            "header": _header(plan, options, "pyproject.toml"),
            "notes": _comment(notes) if notes else "#",
            "project_name": toml_string(options.name),
            "requires_python": toml_string(f"=={python}.*"),
            "dependencies": "\n".join(f"    {toml_string(d)}," for d in dependencies),
            "indexes": "\n\n".join(indexes),
            "sources": "\n".join(sources),
        },
    )
