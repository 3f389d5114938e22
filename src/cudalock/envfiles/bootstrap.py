"""``cudalock bootstrap``: resolve, lock, write the environment files, and optionally build it.

The edges around the pure parts: it reads ``cudalock.toml`` (flags override it), resolves the
Plan (:func:`cudalock.resolve.resolve`), resolves the whole closure once with uv
(:func:`cudalock.lock.resolve_closure`, the code path ``cudalock lock`` takes), renders the
files (:mod:`cudalock.envfiles.render`) and writes them with the lock files as one group (nothing is
overwritten without ``--force``). With ``--create`` it builds the environment by running the
generated ``install.sh`` inside it (with uv), step by step, the output kept in
``cudalock-bootstrap.log``. A failed step stops everything, names the step, its command and the
log, and leaves the environment for inspection.

When the closure cannot be resolved because an index is unreachable, the files that do not
need it are still written, and the message says how to finish (``cudalock lock``): exit 3.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import sys
import sysconfig
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from cudalock import procs
from cudalock.audit import audit_live
from cudalock.audit.inspection import python_for_prefix, start_inspection
from cudalock.envfiles.render import (
    OUTPUT_FORMATS,
    Installer,
    OutputFormat,
    RenderOptions,
    Step,
    check_env_name,
    default_env_name,
    install_steps,
    render_files,
)
from cudalock.envfiles.spec import (
    SPEC_FILE,
    OutputSpec,
    Spec,
    TargetSummary,
    read_inputs,
    update_spec,
)
from cudalock.errors import EnvironmentFailure, Unsatisfiable, UsageError
from cudalock.fsutil import (
    append_log,
    credentials_note,
    refuse_existing,
    start_log,
    write_outputs,
)
from cudalock.lock import (
    LOCK_FILES,
    Closure,
    NotOnIndex,
    UvOptions,
    absolute_frameworks,
    find_uv,
    lock_texts,
    resolve_closure,
)
from cudalock.lock.frameworks import plan_with_frameworks
from cudalock.lock.http import cache_disabled
from cudalock.lock.pylock import default_index_of
from cudalock.machine import TargetOptions, targets_from_options
from cudalock.matrix import Matrix, load_matrix
from cudalock.model import Plan, Request
from cudalock.resolve import RequestOptions
from cudalock.urls import redact

LOG_FILE = "cudalock-bootstrap.log"
STEP_MARKER = "==> cudalock step "
Echo = Callable[[str], None]
#: How long install.sh may run in all (DeepSpeed builds its ops for a while when asked to).
INSTALL_TIMEOUT_S = 4 * 60 * 60
#: The output of install.sh kept in memory (all of it is in the log).
INSTALL_OUTPUT_LIMIT = 256 * 2**20

#: pip's and uv's words for a network that failed them.
_NETWORK_WORDS = (
    "NewConnectionError",
    "Connection refused",
    "ConnectTimeout",
    "ReadTimeout",
    "Max retries exceeded",
    "Temporary failure in name resolution",
    "Name or service not known",
    "HTTP error 5",
    "IncompleteRead",
    "ProtocolError",
    "SSLError",
    "Failed to fetch",
    "Could not connect",
    "error sending request",
)


@dataclass(frozen=True)
class BootstrapOptions:
    """The bootstrap-only flags (None: not given, so cudalock.toml or the default decides)."""

    output_dir: Path = Path(".")
    name: str | None = None
    output_format: str | None = None
    create: bool = False
    venv: Path | None = None
    force: bool = False
    #: ``--spec``: the spec file to read (default: ``output_dir/cudalock.toml``).
    spec_file: Path | None = None
    #: How uv resolves the closure (cache, network limits).
    uv: UvOptions = dataclasses.field(default_factory=UvOptions)


@dataclass(frozen=True)
class BootstrapResult:
    plan: Plan
    request: Request
    written: tuple[Path, ...]
    environment: Path | None = None
    closure: Closure | None = None


# --------------------------------------------------------------------------------------------
# Inputs


def choose_format(given: str | None, spec: Spec | None) -> OutputFormat:
    chosen = given or (spec.output.format if spec else None) or "conda"
    for candidate in OUTPUT_FORMATS:
        if candidate == chosen:
            return candidate
    raise UsageError(f"invalid --format {chosen!r}: expected one of {', '.join(OUTPUT_FORMATS)}")


# --------------------------------------------------------------------------------------------
# The command


def run_bootstrap(
    target_opts: TargetOptions, request_opts: RequestOptions, options: BootstrapOptions, show: Echo
) -> BootstrapResult:
    """Everything ``cudalock bootstrap`` does; ``show`` prints progress to the user."""

    def echo(line: str) -> None:
        show(redact(line))  # the plan's explanation names index URLs, credentials and all

    out_dir = options.output_dir
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"-o {str(out_dir)!r} is not a directory")
    inputs = read_inputs(request_opts, target_opts, spec_file=options.spec_file, output_dir=out_dir)
    spec_path, spec, request = inputs.spec_path, inputs.spec, inputs.request
    request = dataclasses.replace(
        request, frameworks=absolute_frameworks(request.frameworks, Path.cwd())
    )
    output_format = choose_format(options.output_format, spec)
    if options.create and output_format == "venv" and request.python is None:
        # The venv is made from this interpreter unless asked otherwise: choosing the newest
        # Python torch supports would send most users off to find an interpreter they lack.
        request = dataclasses.replace(request, python=_running_python())
        echo(
            f"python: {request.python}, the interpreter creating the venv "
            "(--python chooses another)"
        )
    if options.create and output_format == "uv":
        raise UsageError(
            "--create builds conda or venv environments; with --format uv, run "
            "'uv sync' in the output directory instead"
        )

    if options.create and output_format == "conda":
        conda_tool()  # known before anything is resolved or written

    target_opts = inputs.target_options
    if inputs.recorded_target:
        echo(f"target: as recorded in {spec_path}, target flags replacing the parts they give")
    matrix = load_matrix(target_opts.matrix_dir)
    targets = targets_from_options(target_opts, matrix)
    plan, _frameworks = plan_with_frameworks(
        matrix,
        targets,
        request,
        default_index=default_index_of(
            request, pypi_index=request.pypi_index, allow_insecure=options.uv.allow_insecure
        ),
        timeout_s=options.uv.timeout_s,
        retries=options.uv.retries,
        offline=options.uv.offline,
        use_cache=not cache_disabled(options.uv.environ),
    )

    name = check_env_name(
        options.name or (spec.output.name if spec else None) or default_env_name(plan)
    )
    render_options = RenderOptions(
        name=name,
        output_format=output_format,
        frameworks=request.frameworks,
        pypi_index=request.pypi_index,
    )
    planned = [out_dir / file for file in render_files(plan, render_options)]
    lock_paths = [out_dir / file for file in LOCK_FILES]
    # Refused before the closure is resolved: a clash should not cost a resolution.
    refuse_existing([*planned, *lock_paths], force=options.force)

    torch = plan.torch_pin
    echo(
        f"plan: torch {torch.version} from {redact(plan.index_url or 'the default index')}, "
        f"Python {plan.python}"
    )
    for line in plan.explanation:
        echo(f"  {line}")

    closure: Closure | None = None
    unresolved: EnvironmentFailure | None = None
    try:
        closure = resolve_closure(
            plan,
            request,
            dataclasses.replace(options.uv, pypi_index=request.pypi_index),
            echo=echo,
        )
    except NotOnIndex:
        raise  # the index lacks the planned build: files that cannot be installed help nobody
    except EnvironmentFailure as err:
        unresolved = err
    rendered = render_files(plan, dataclasses.replace(render_options, closure=closure))
    files = {out_dir / file: text for file, text in rendered.items()}
    if closure is not None:
        files.update(
            {out_dir / file: text for file, text in lock_texts(closure, plan, request).items()}
        )
        count = len(closure.uv_data.get("packages", []))
        echo(f"closure: {count} packages, resolved once by uv and locked")
        for line in closure.notes:
            echo(f"  {line}")
    new_spec = Spec(
        request=request,
        target=TargetSummary.of(targets),
        output=OutputSpec(
            format=output_format, name=options.name or (spec.output.name if spec else None)
        ),
    )
    # The spec is always written beside the outputs, so 'cudalock lock -o DIR' finds it; a
    # --spec read from elsewhere lends its comments to a new one.
    written_spec = out_dir / SPEC_FILE
    files[written_spec] = update_spec(
        written_spec if written_spec.exists() else spec_path, new_spec
    )
    secret = write_outputs(files, executable=[out_dir / "install.sh"])
    if secret:
        echo(f"note: {credentials_note(secret)}")

    echo("wrote: " + ", ".join(sorted(str(path) for path in files)))

    if unresolved is not None:
        raise EnvironmentFailure(
            f"could not resolve the closure: {unresolved.message}; the environment files are "
            f"written, the lock files ({', '.join(LOCK_FILES)}) are not, and install.sh needs "
            "them",
            hint="when the indexes can be reached, run: cudalock lock -o "
            f"{shlex.quote(str(out_dir))} (it reads the cudalock.toml written there), then "
            + next_steps(output_format, out_dir, name).removeprefix("next: "),
        )

    environment = None
    if options.create:
        uv = _uv_or_none()
        installer: Installer = "uv" if uv else "pip"
        steps = install_steps(plan, render_options)
        if output_format == "venv":
            environment = create_venv(
                plan, options.venv or out_dir / ".venv", out_dir, steps, echo, uv=uv
            )
        else:
            environment = create_conda(name, out_dir, steps, echo, uv=uv)
        echo(f"installed with {installer}")
        audit_new_environment(environment, plan, matrix, echo)
    else:
        echo(next_steps(output_format, out_dir, name))
    return BootstrapResult(
        plan=plan, request=request, written=tuple(files), environment=environment, closure=closure
    )


def next_steps(output_format: OutputFormat, out_dir: Path, name: str) -> str:
    where = shlex.quote(str(out_dir))
    if output_format == "conda":
        return (
            f"next: conda env create -f {where}/environment.yml && conda activate {name} "
            f"&& bash {where}/install.sh   (or rerun with --create)"
        )
    if output_format == "venv":
        # install.sh takes a relative PYTHON from where it is started, as typed here.
        return (
            f"next: python -m venv {where}/.venv && PYTHON={where}/.venv/bin/python "
            f"bash {where}/install.sh   (or rerun with --create)"
        )
    return f"next: cd {where} && uv sync"


# --------------------------------------------------------------------------------------------
# --create


def create_venv(
    plan: Plan,
    venv: Path,
    out_dir: Path,
    steps: tuple[Step, ...],
    echo: Echo,
    *,
    uv: str | None = None,
) -> Path:
    """Create (or reuse) a virtual environment with the plan's Python, then run install.sh
    (with ``uv`` when given, else pip)."""
    venv = venv.absolute()  # the steps run inside out_dir; a relative path would nest there
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    log = _start_log(out_dir)
    removal = f"rm -rf {shlex.quote(str(venv))}"
    if python.exists():
        echo(f"environment: reusing {venv}")
    else:
        echo(f"environment: creating {venv} with Python {plan.python}")
        for command in venv_commands(plan.python, venv, uv):
            _run_logged(
                "create the virtual environment",
                command,
                log,
                echo,
                cwd=out_dir,
                env=dict(os.environ),
                removal=removal,
            )
    found = _python_version(python)
    if found != plan.python.rstrip("t"):
        raise UsageError(
            f"the environment at {venv} has Python {found}, the plan needs "
            f"{plan.python}; remove it ({removal}) or choose --venv"
        )
    env = dict(os.environ)
    env.update(
        {
            "PYTHON": str(python.absolute()),
            "VIRTUAL_ENV": str(venv.absolute()),
            "PATH": f"{python.parent.absolute()}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    env.pop("PYTHONHOME", None)
    run_install_script(out_dir, steps, log, env, echo, removal=removal, uv=uv)
    return venv


def venv_commands(python_version: str, venv: Path, uv: str | None) -> list[list[str]]:
    """How to make a venv with ``python_version`` and pip in it.

    With uv: ``uv venv`` (this interpreter when it is that Python), then pip from the wheel
    Python bundles for ``ensurepip``, installed by uv without reaching an index; ``python -m
    venv`` would spend seconds running that same pip to install itself. Without uv: this
    interpreter's ``venv`` module, or ``pythonX.Y``'s.
    """
    wanted = python_version.rstrip("t")
    running = _running_python()
    same = running == wanted and not python_version.endswith("t")
    if uv:
        interpreter = sys.executable if same else python_version
        bundled = bundled_pip()
        create = [uv, "venv", "--python", interpreter, str(venv)]
        if bundled is None:
            return [[*create[:2], "--seed", *create[2:]]]
        python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        seed = [uv, "pip", "install", "--python", str(python), "--no-deps", "--offline"]
        return [create, [*seed, str(bundled)]]
    if same:
        return [[sys.executable, "-m", "venv", str(venv)]]
    versioned = shutil.which(f"python{wanted}")
    if versioned:
        return [[versioned, "-m", "venv", str(venv)]]
    raise EnvironmentFailure(
        f"no Python {python_version} found to create the environment with (this is "
        f"Python {running}, and neither uv nor python{wanted} is on PATH)",
        hint=f"install uv, or Python {python_version}, or choose --python {running}",
    )


def bundled_pip() -> Path | None:
    """The pip wheel this Python ships for ``ensurepip`` (some distributions remove it)."""
    bundled = Path(sysconfig.get_path("stdlib")) / "ensurepip" / "_bundled"
    wheels = sorted(bundled.glob("pip-*-py3-none-any.whl"))
    return wheels[-1] if wheels else None


def _running_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def _uv_or_none() -> str | None:

    try:
        return find_uv()
    except EnvironmentFailure:
        return None


def _python_version(python: Path) -> str:
    try:
        result = procs.run(
            [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            what=f"{python} (asked for its version)",
            timeout=60,
        )
    except OSError as err:
        raise EnvironmentFailure(f"cannot run {python}: {err.strerror or err}") from None
    return result.stdout_text().strip()


def create_conda(
    name: str, out_dir: Path, steps: tuple[Step, ...], echo: Echo, *, uv: str | None = None
) -> Path:
    """Create the conda environment from environment.yml with conda/mamba/micromamba."""
    tool, executable = conda_tool()
    log = _start_log(out_dir)
    removal = f"{tool} env remove -n {shlex.quote(name)}"
    prefix = _conda_prefix(executable, name)
    if prefix is None:
        yml = str(out_dir / "environment.yml")
        command = (
            [executable, "create", "-y", "-n", name, "-f", yml]
            if tool == "micromamba"
            else [executable, "env", "create", "-n", name, "-f", yml]
        )
        echo(f"environment: creating conda environment {name} with {tool}")
        _run_logged(
            f"{tool} creates the environment",
            command,
            log,
            echo,
            cwd=out_dir,
            env=dict(os.environ),
            removal=removal,
        )
        prefix = _conda_prefix(executable, name)
        if prefix is None:
            raise EnvironmentFailure(
                f"{tool} reported success but environment {name} is not listed by '{tool} env list'"
            )
    else:
        echo(f"environment: reusing conda environment {name} at {prefix}")
    python = prefix / ("python.exe" if os.name == "nt" else "bin/python")
    env = dict(os.environ)
    env.update(
        {
            "PYTHON": str(python),
            "CONDA_PREFIX": str(prefix),
            "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    run_install_script(out_dir, steps, log, env, echo, removal=removal, uv=uv)
    return prefix


def conda_tool() -> tuple[str, str]:
    """micromamba, mamba or conda (the first on PATH) and its path; exit 3 when none is."""
    tool = next((t for t in ("micromamba", "mamba", "conda") if shutil.which(t)), None)
    if tool is None:
        raise EnvironmentFailure(
            "--create needs conda, mamba or micromamba on PATH to build a conda environment",
            hint="install one of them, or use --format venv --create",
        )
    return tool, shutil.which(tool) or tool


def _conda_prefix(executable: str, name: str) -> Path | None:
    try:
        result = procs.run(
            [executable, "env", "list", "--json"], what=f"{executable} env list", timeout=120
        )
        prefixes = json.loads(result.stdout_text()).get("envs", [])
    except (OSError, EnvironmentFailure, ValueError, AttributeError):
        return None
    for prefix in prefixes:
        if Path(prefix).name == name:
            return Path(prefix)
    return None


def run_install_script(
    out_dir: Path,
    steps: tuple[Step, ...],
    log: Path,
    env: Mapping[str, str],
    echo: Echo,
    *,
    removal: str,
    uv: str | None = None,
) -> None:
    """Run install.sh (with ``uv`` when given, else pip), showing each step as it starts; a
    failed step raises, naming it."""
    python = env.get("PYTHON", "python")
    run_env = dict(env)
    installer: Installer = "uv" if uv else "pip"
    run_env["CUDALOCK_INSTALLER"] = installer
    if uv:
        run_env["UV"] = uv
    _run_logged(
        "install.sh",
        ["bash", str((out_dir / "install.sh").absolute())],
        log,
        echo,
        cwd=out_dir,
        env=run_env,
        removal=removal,
        steps=steps,
        python=python,
        installer=installer,
        uv=uv or "uv",
    )


def _start_log(out_dir: Path) -> Path:
    """A fresh log for this run (the previous run's log, or a link planted there, is replaced)."""
    log = out_dir / LOG_FILE
    start_log(log, "cudalock bootstrap --create: the output of every step\n")
    return log


def _run_logged(
    what: str,
    command: list[str],
    log: Path,
    echo: Echo,
    *,
    cwd: Path,
    env: Mapping[str, str],
    removal: str,
    steps: tuple[Step, ...] = (),
    python: str = "python",
    installer: Installer = "pip",
    uv: str = "uv",
) -> None:
    """Run ``command``, its output (redacted) appended to ``log``; raise if it fails.

    The child's output is read as it comes (stdout and stderr together), and a run past
    :data:`INSTALL_TIMEOUT_S` is stopped with everything it started (exit 3).
    """
    current: tuple[int, str] | None = None
    errors: list[str] = []
    network: list[str] = []
    with append_log(log) as handle:

        def take(raw: str) -> None:
            nonlocal current
            line = redact(raw.rstrip("\r"))
            # Flushed line by line: a run stopped by a signal keeps every line it wrote.
            handle.write(line + "\n")
            handle.flush()
            if line.startswith(STEP_MARKER):
                label = line[len(STEP_MARKER) :]
                number = label.split("/", 1)[0]
                current = (int(number) if number.isdigit() and len(number) < 5 else 0, label)
                echo(f"  step {label}")
            elif line.startswith(("ERROR:", "error:")) or "verification failed" in line:
                errors.append(line)
            if any(word in line for word in _NETWORK_WORDS):
                network.append(line)

        handle.write(f"\n### {what}: {redact(' '.join(command))}\n")
        handle.flush()
        try:
            # Its own process group, killed with everything it started if cudalock is
            # interrupted (Ctrl-C, SIGTERM): no venv or pip left running on its own.
            returncode = procs.run(
                command,
                what=what,
                timeout=INSTALL_TIMEOUT_S,
                cwd=cwd,
                env=env,
                merge_stderr=True,
                on_line=take,
                output_limit=INSTALL_OUTPUT_LIMIT,
            ).returncode
        except OSError as err:
            raise EnvironmentFailure(
                f"cannot run {what} ({command[0]}): {err.strerror or err}; log: {log}"
            ) from None
        except EnvironmentFailure as err:
            raise EnvironmentFailure(
                f"{err.message}; full output in {log}",
                hint=f"the environment is left for inspection; remove it with: {removal}",
            ) from None
    if returncode == 0:
        return
    if current is not None and 1 <= current[0] <= len(steps):
        step_text = f"step {current[1]}"
        shown = redact(steps[current[0] - 1].display(python, installer, uv))
    else:
        step_text, shown = what, redact(" ".join(command))
    detail = ""
    if errors:
        detail = ": " + errors[0].removeprefix("ERROR: ").removeprefix("error: ")
    status = (
        f"killed by {procs.signal_name(-returncode)}"
        if returncode < 0
        else f"exit status {returncode}"
    )
    message = f"{step_text} failed ({status}){detail}; command: {shown}; full output in {log}"
    hint = f"the environment is left for inspection; remove it with: {removal}"
    if network:
        message += f"; the network failed: {network[-1].strip()}"
        hint = f"check the index URLs and the network, then run again; {hint}"
    raise EnvironmentFailure(message, hint=hint)


def audit_new_environment(environment: Path, plan: Plan, matrix: Matrix, echo: Echo) -> None:
    """Audit the new environment as ``cudalock audit`` would (never importing torch).

    Errors mean the environment cannot be trusted on the target even though every step
    succeeded: exit 1, with the findings shown.
    """

    with start_inspection(python=python_for_prefix(environment)) as inspection:
        # Judged with the policy the plan was resolved with.
        outcome = audit_live(plan.targets, matrix, inspection, compat=plan.compat)
    torch = outcome.installed.torch[0] if outcome.installed.torch else None
    for finding in outcome.findings:
        echo(f"  audit {finding.severity}: {finding.code}: {finding.message}")
    if torch is None or outcome.has_errors:
        raise Unsatisfiable(
            f"the new environment {environment} did not pass the audit"
            + ("" if torch else ": it has no torch"),
            hint=f"see the findings above and {LOG_FILE}; cudalock audit --python "
            f"{shlex.quote(str(python_for_prefix(environment)))} repeats them",
        )
    echo(
        f"environment ready: {environment} (Python {outcome.installed.python_version}, "
        f"torch {torch.version}, CUDA {torch.cuda or 'none'}); audit: no errors"
    )
