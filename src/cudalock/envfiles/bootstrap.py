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

import contextlib
import dataclasses
import itertools
import os
import shlex
import shutil
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cudalock import procs
from cudalock.defaults import OUTPUT_FORMATS, SPEC_FILE, OutputFormat
from cudalock.envfiles.conda import (
    Client,
    configured_channel_alias,
    configured_defaults,
    create_command,
    env_prefix,
    find_client,
    mark_prefix,
    reuse_problem,
)
from cudalock.envfiles.progress import Heartbeat, Live, Progress, requirement_count
from cudalock.envfiles.rattler import DEFAULT_CHANNEL_ALIAS, create_prefix, rattler_available
from cudalock.envfiles.render import (
    CondaPart,
    Installer,
    RenderOptions,
    Step,
    check_env_name,
    conda_part,
    default_env_name,
    install_steps,
    output_files,
    render_files,
)
from cudalock.envfiles.spec import (
    Inputs,
    OutputSpec,
    Spec,
    TargetSummary,
    update_spec,
)
from cudalock.envfiles.wheelsahead import WheelsAhead, wheels_ahead_wanted
from cudalock.errors import (
    CudalockError,
    EnvironmentFailure,
    Unsatisfiable,
    UsageError,
    sentence,
)
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
    check_framework_paths,
    find_uv,
    lock_texts,
)
from cudalock.lock.installfiles import first_packages
from cudalock.lock.pixi import PIXI_FILE
from cudalock.lock.python import closure_with_default_python, planner
from cudalock.matrix import Matrix
from cudalock.model import Plan, Target
from cudalock.platforms import platform_named
from cudalock.request import Request, RequestOptions
from cudalock.urls import redact

if TYPE_CHECKING:
    from cudalock.audit.inspection import RunningInspection

__all__ = [
    "INSTALL_OUTPUT_LIMIT",
    "INSTALL_TIMEOUT_S",
    "KEPT",
    "LOG_FILE",
    "RATTLER_PREFIX",
    "STEP_MARKER",
    "BootstrapOptions",
    "BootstrapResult",
    "Echo",
    "Live",
    "VenvAhead",
    "audit_new_environment",
    "bundled_pip",
    "choose_format",
    "create_conda",
    "create_pixi",
    "create_venv",
    "find_interpreter",
    "find_pixi",
    "next_steps",
    "python_for",
    "run_bootstrap",
    "run_install_script",
    "venv_commands",
]

LOG_FILE = "cudalock-bootstrap.log"
#: Where py-rattler puts the conda environment when no --venv is given (inside -o).
RATTLER_PREFIX = ".conda-env"
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
    #: ``--no-cache``: build what is built against torch anew (no wheel cache).
    no_cache: bool = False
    venv: Path | None = None
    force: bool = False
    #: How uv resolves the closure (cache, network limits).
    uv: UvOptions = dataclasses.field(default_factory=UvOptions)


@dataclass(frozen=True)
class InstallOptions:
    """How install.sh is run in the environment made for it."""

    steps: tuple[Step, ...]
    #: uv when given, else pip.
    uv: str | None = None
    live: Live | None = None
    #: Build what is built against torch anew (no wheel cache).
    no_cache: bool = False
    #: The wheels downloading since the resolution began: waited for before install.sh runs.
    wheels: WheelsAhead | None = None
    #: Called with the environment's interpreter once the steps left only read the
    #: environment (it is complete then).
    on_checks: Callable[[str], None] | None = None


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
    inputs: Inputs,
    matrix: Matrix,
    targets: Sequence[Target],
    options: BootstrapOptions,
    show: Echo,
    live: Live | None = None,
) -> BootstrapResult:
    """Everything ``cudalock bootstrap`` does with its inputs (the spec and the flags over it,
    the matrix, the targets: computed once by the command line); ``show`` prints progress to
    the user, ``live`` (given on a terminal) keeps a status line of a long install step up to
    date."""

    # ``show`` is the command line's output, which hides URL credentials (the plan's
    # explanation names index URLs, credentials and all).
    echo = show

    out_dir = options.output_dir
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"-o {str(out_dir)!r} is not a directory")
    spec_path, spec, request = inputs.spec_path, inputs.spec, inputs.request
    check_framework_paths(request.frameworks)
    output_format = choose_format(options.output_format, spec)
    if options.create and output_format == "uv":
        raise UsageError(
            "--create builds conda, pixi or venv environments; with --format uv, run "
            "'uv sync' in the output directory instead"
        )

    if options.create and output_format == "conda":
        find_client(rattler_available=rattler_available())  # known before anything is resolved
    if options.create and output_format == "pixi":
        find_pixi()

    if inputs.recorded_target:
        echo(f"target: as recorded in {spec_path}, target flags replacing the parts they give")
    # Without --python, the closure decides the Python (the newest it installs on), for every
    # format and --create alike: plans for older ones are made the same way.
    plan_at = planner(matrix, targets, request, options.uv)
    plan = plan_at(None)

    name = check_env_name(
        options.name or (spec.output.name if spec else None) or default_env_name(plan)
    )
    render_options = RenderOptions(
        name=name,
        output_format=output_format,
        frameworks=request.frameworks,
        pypi_index=request.pypi_index,
    )
    planned = [out_dir / file for file in output_files(output_format)]
    lock_paths = [out_dir / file for file in LOCK_FILES]
    # Refused before the closure is resolved: a clash should not cost a resolution.
    refuse_existing([*planned, *lock_paths], force=options.force)

    torch = plan.torch_pin
    echo(
        f"plan: torch {torch.version} from {plan.index_url or 'the default index'}, "
        f"Python {plan.python}"
    )
    for line in plan.explanation:
        echo(f"  {line}")

    venv_dir = options.venv or out_dir / ".venv"
    ahead = None
    wheels = None
    audit_ahead = AuditAhead()
    # What is started beside the resolution is stopped and removed if the run fails first.
    with contextlib.ExitStack() as beside:
        beside.enter_context(audit_ahead)
        if options.create and output_format in ("venv", "conda"):
            # uv downloads for the plan's Python (--python-version) with an interpreter: the
            # venv's; else one uv finds (the conda environment's is not made yet).
            ahead_python = None
            ahead_uv = _uv_or_none()
            if output_format == "venv" and os.path.lexists(venv_dir):
                ahead_python = str(python_for_venv(venv_dir).absolute())
            elif output_format == "venv" and request.python is not None:
                # Without --python the closure may still choose another Python: the venv
                # waits for it. The downloads need not: a Python passed over stops them.
                ahead_python = _interpreter_for(plan)
                ahead = VenvAhead(venv_dir, out_dir, plan.python, ahead_python, ahead_uv)
                beside.enter_context(ahead.unless_used())
            if ahead_uv and not options.uv.offline and wheels_ahead_wanted(os.environ):
                wheels = WheelsAhead(
                    ahead_uv, ahead_python, os.environ, timeout_s=INSTALL_TIMEOUT_S
                )
                beside.enter_context(wheels.unless_waited())
        closure: Closure | None = None
        unresolved: EnvironmentFailure | None = None
        try:
            plan, closure = closure_with_default_python(
                plan,
                request,
                dataclasses.replace(options.uv, pypi_index=request.pypi_index),
                replan=plan_at,
                echo=echo,
                matrix=matrix,
                on_routed=wheels.start if wheels is not None else None,
            )
        except NotOnIndex:
            raise  # the index lacks the planned build: files that cannot be installed help nobody
        except EnvironmentFailure as err:
            unresolved = err
        if closure is not None and request.python is None:
            echo(f"python: {plan.python_reason}")
        if wheels is not None and closure is not None:
            # The lock's other wheels download while the torch wheels still do, and while
            # the files are made and written (a failure there stops them).
            inp = closure.input
            first = first_packages(closure.uv_data, closure.built_last)
            wheels.start_rest(first, inp.index_for, inp.python, inp.python_platform)
        interpreter = None
        creates_venv = options.create and output_format == "venv" and unresolved is None
        if creates_venv and ahead is None and not python_for_venv(venv_dir).exists():
            interpreter = _interpreter_for(plan)
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
            request=RequestOptions.of(request),
            target=TargetSummary.of(plan),
            output=OutputSpec(
                format=output_format, name=options.name or (spec.output.name if spec else None)
            ),
        )
        # The spec is always written beside the outputs, so 'cudalock lock -o DIR' finds it; a
        # --spec read from elsewhere lends its comments to a new one.
        written_spec = out_dir / SPEC_FILE
        files[written_spec] = update_spec(
            written_spec if written_spec.exists() else spec_path, new_spec, inputs
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
                hint="When the indexes can be reached, run: cudalock lock -o "
                f"{shlex.quote(str(out_dir))} (it reads the cudalock.toml written there), then "
                # The next-step line is aligned for a terminal; in a sentence one space will do.
                + " ".join(next_steps(output_format, out_dir, name).removeprefix("next: ").split())
                + ".",
            )

        environment = None
        if options.create and output_format == "pixi":
            environment = create_pixi(out_dir, echo)
            audit_new_environment(environment, plan, matrix, echo)
        elif options.create:
            uv = _uv_or_none()
            installer: Installer = "uv" if uv else "pip"
            install = InstallOptions(
                install_steps(plan, render_options),
                uv=uv,
                live=live,
                no_cache=options.no_cache,
                wheels=wheels,
                on_checks=audit_ahead.start,
            )
            if output_format == "venv":
                environment = create_venv(
                    plan, venv_dir, out_dir, install, echo, interpreter=interpreter, ahead=ahead
                )
            else:
                environment = create_conda(
                    name,
                    out_dir,
                    install,
                    conda_part(plan, closure),
                    plan,
                    echo,
                    prefix=options.venv,
                )
            echo(f"installed with {installer}")
            audit_new_environment(
                environment, plan, matrix, echo, inspection=audit_ahead.take(environment)
            )
        else:
            echo(next_steps(output_format, out_dir, name))
        return BootstrapResult(
            plan=plan,
            request=request,
            written=tuple(files),
            environment=environment,
            closure=closure,
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
    if output_format == "pixi":
        return f"next: cd {where} && pixi install   (or rerun with --create)"
    return f"next: cd {where} && uv sync"


def find_pixi() -> str:
    """pixi on PATH; exit 3 when it is not."""
    pixi = shutil.which("pixi")
    if pixi is None:
        raise EnvironmentFailure(
            "--format pixi --create runs 'pixi install', and pixi is not on PATH",
            hint="Install pixi (https://pixi.sh), or leave out --create and run "
            "'pixi install' where pixi is.",
        )
    return pixi


def create_pixi(out_dir: Path, echo: Echo) -> Path:
    """``pixi install`` of the written pixi.toml; the environment it made."""
    out_dir = out_dir.absolute()
    manifest = out_dir / PIXI_FILE
    log = _start_log(out_dir)
    echo(f"environment: pixi install --manifest-path {manifest}")
    _run_logged(
        "pixi install",
        [find_pixi(), "install", "--manifest-path", str(manifest)],
        log,
        echo,
        cwd=out_dir,
        env=dict(os.environ),
        removal=f"rm -rf {shlex.quote(str(out_dir / '.pixi'))}",
    )
    return out_dir / ".pixi" / "envs" / "default"


# --------------------------------------------------------------------------------------------
# --create


def create_venv(
    plan: Plan,
    venv: Path,
    out_dir: Path,
    install: InstallOptions,
    echo: Echo,
    *,
    interpreter: str | None = None,
    ahead: VenvAhead | None = None,
) -> Path:
    """Create (or reuse) a virtual environment with the plan's Python (``interpreter``, an
    interpreter of it; default: :func:`find_interpreter`'s), or take the one ``ahead`` made,
    then run install.sh in it as ``install`` says (:func:`run_install_script`)."""
    venv = venv.absolute()  # the steps run inside out_dir; a relative path would nest there
    python = python_for_venv(venv)
    theirs = ahead is None and os.path.lexists(venv)
    if theirs and not python.exists() and venv.is_dir() and any(venv.iterdir()):
        raise UsageError(
            f"--venv {str(venv)!r} is a directory that holds files but no virtual environment; "
            "choose a new or empty directory"
        )
    # Only what cudalock made is offered for removal; a directory that was there is the user's.
    removal = KEPT + f"{venv} was there before and is left as it is" if theirs else _removal(venv)
    if ahead is not None:
        log = ahead.join(echo)
    else:
        log = _start_log(out_dir)
        if python.exists():
            echo(f"environment: reusing {venv}")
        else:
            interpreter = interpreter or find_interpreter(plan.python, install.uv)
            _make_venv(
                venv, plan.python, interpreter, install.uv, out_dir, log, echo, live=install.live
            )
    found = _python_version(python)
    if found != plan.python.rstrip("t"):
        raise UsageError(
            f"the environment at {venv} has Python {found}, the plan needs "
            f"{plan.python}; "
            + ("choose another --venv" if theirs else f"remove it ({removal}) or choose --venv")
        )
    run_install_script(
        out_dir, install, log, environment_variables(python, "VIRTUAL_ENV", venv), echo, removal
    )
    return venv


def _removal(venv: Path) -> str:
    return f"rm -rf {shlex.quote(str(venv))}"


def _make_venv(
    venv: Path,
    python_version: str,
    interpreter: str,
    uv: str | None,
    out_dir: Path,
    log: Path,
    echo: Echo,
    live: Live | None = None,
    cancel: threading.Event | None = None,
) -> None:
    """Make the new venv ``venv`` of ``interpreter`` (:func:`venv_commands`), logged to ``log``;
    setting ``cancel`` stops it."""
    echo(f"environment: creating {venv} with Python {python_version} ({interpreter})")
    for command in venv_commands(interpreter, venv, uv):
        _run_logged(
            "create the virtual environment",
            command,
            log,
            echo,
            cwd=out_dir,
            env=dict(os.environ),
            removal=_removal(venv),
            live=live,
            cancel=cancel,
        )


class VenvAhead:
    """The new venv, made in a thread while uv resolves the closure: it needs only the plan's
    Python, and the resolution spends most of its time waiting on the index. What making it
    says is held back until :meth:`join`, so the output reads as it does without it; a run
    that fails before the venv is used removes it (:meth:`unless_used`)."""

    def __init__(
        self, venv: Path, out_dir: Path, python_version: str, interpreter: str, uv: str | None
    ) -> None:
        self.venv = venv.absolute()
        self.log = _start_log(out_dir)
        self._said: list[str] = []
        self._error: BaseException | None = None
        self._used = False
        self._cancel = threading.Event()
        self._thread = threading.Thread(
            target=self._make, args=(python_version, interpreter, uv, out_dir), daemon=True
        )
        self._thread.start()

    def _make(self, python_version: str, interpreter: str, uv: str | None, out_dir: Path) -> None:
        try:
            _make_venv(
                self.venv,
                python_version,
                interpreter,
                uv,
                out_dir,
                self.log,
                self._said.append,
                cancel=self._cancel,
            )
        except BaseException as err:  # raised in the caller's thread by join()
            self._error = err

    def join(self, echo: Echo) -> Path:
        """Wait for the venv, show what making it said, and raise what it raised; the log the
        rest of the run appends to."""
        self._thread.join()
        self._used = True
        for line in self._said:
            echo(line)
        if self._error is not None:
            raise self._error
        return self.log

    @contextlib.contextmanager
    def unless_used(self) -> Iterator[None]:
        """Stop making the venv and remove it and its log when the body raises before
        :meth:`join` took them: a run that wrote nothing (or only the files, with the closure
        unresolved) leaves no venv behind, and Ctrl-C does not wait for one."""
        try:
            yield
        except BaseException:
            if not self._used:
                self._cancel.set()
                self._thread.join()
                shutil.rmtree(self.venv, ignore_errors=True)
                with contextlib.suppress(OSError):
                    self.log.unlink()
            raise


def _interpreter_for(plan: Plan) -> str:
    """The interpreter to make the plan's venv with, known before anything is written: a venv
    of another Python would not fit the lock."""
    try:
        return find_interpreter(plan.python, _uv_or_none())
    except EnvironmentFailure as err:
        raise EnvironmentFailure(f"{err.message}; nothing was written", hint=err.hint) from None


def venv_commands(interpreter: str, venv: Path, uv: str | None) -> list[list[str]]:
    """How to make a venv of ``interpreter`` with pip in it.

    With uv: ``uv venv``, then pip from the wheel this Python bundles for ``ensurepip``,
    installed by uv without reaching an index; ``python -m venv`` would spend seconds running
    that same pip to install itself. Without uv: the interpreter's ``venv`` module.
    """
    if uv:
        bundled = bundled_pip()
        create = [uv, "venv", "--no-python-downloads", "--python", interpreter, str(venv)]
        if bundled is None:
            return [[*create[:2], "--seed", *create[2:]]]
        python = python_for_venv(venv)
        seed = [uv, "pip", "install", "--python", str(python), "--no-deps", "--offline"]
        return [create, [*seed, str(bundled)]]
    return [[interpreter, "-m", "venv", str(venv)]]


def find_interpreter(python_version: str, uv: str | None) -> str:
    """An interpreter of ``python_version`` (the plan's) to make the venv with: this one when
    it is that version, else the one uv finds (a uv-managed Python, or one on PATH), else
    ``pythonX.Y`` on PATH. None there: exit 3, never a venv of another Python."""
    wanted = python_version.rstrip("t")
    running = _running_python()
    if running == wanted and not python_version.endswith("t"):
        return sys.executable
    said = ""
    if uv:
        try:
            found = procs.run(
                [uv, "python", "find", "--no-python-downloads", python_version],
                what=f"uv python find {python_version}",
                timeout=120,
                env={k: v for k, v in os.environ.items() if k != "UV_PYTHON"},
            )
        except (OSError, EnvironmentFailure) as err:
            said = f"; uv python find failed: {err}"
        else:
            path = found.stdout_text().strip()
            if found.returncode == 0 and path:
                return path
            lines = [line.strip() for line in found.stderr_text().splitlines() if line.strip()]
            said = f"; uv: {lines[0].removeprefix('error: ')}" if lines else ""
    versioned = shutil.which(f"python{wanted}")
    if versioned and _python_version_or_none(Path(versioned)) == wanted:
        return versioned
    how = f"uv python install {python_version}" if uv else f"install Python {python_version}"
    raise EnvironmentFailure(
        f"the plan is for Python {python_version}, and no Python {python_version} is here to "
        f"create the venv with (this is Python {running}{said})",
        hint=f"Make it available ({how}) and run again, or plan for a Python that is here "
        f"with --python {running}.",
    )


def python_for_venv(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


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
    from cudalock.audit.inspection import clean_directory, isolated_argv

    try:
        with clean_directory() as empty:
            result = procs.run(
                isolated_argv(python, "import sys; print('%d.%d' % sys.version_info[:2])"),
                what=f"{python} (asked for its version)",
                timeout=60,
                cwd=Path(empty),
            )
    except OSError as err:
        raise EnvironmentFailure(f"cannot run {python}: {err.strerror or err}") from None
    return result.stdout_text().strip()


def create_conda(
    name: str,
    out_dir: Path,
    install: InstallOptions,
    part: CondaPart,
    plan: Plan,
    echo: Echo,
    *,
    prefix: Path | None = None,
) -> Path:
    """Create (or reuse, when it was made from this conda part) the conda environment, then
    run install.sh in it as ``install`` says (:func:`run_install_script`).

    micromamba, mamba or conda create it by name (or at ``prefix``); without them py-rattler
    creates the prefix (default ``out_dir/.conda-env``). Every path handed on is absolute.
    """
    out_dir = out_dir.absolute()
    client = find_client(rattler_available=rattler_available())
    log = _start_log(out_dir)
    if prefix is None and client.name == "py-rattler":
        prefix = out_dir / RATTLER_PREFIX
    where = prefix.absolute() if prefix is not None else None
    if where is not None:
        removal = f"rm -rf {shlex.quote(str(where))}"
        found = where if (where / "conda-meta").is_dir() else None
        described = "the conda environment"
    else:
        removal = f"{client.name} env remove -y -n {shlex.quote(name)}"
        found = env_prefix(client, name)
        described = f"conda environment {name}"
    if client.name != "py-rattler":
        for path in configured_defaults(os.environ):
            echo(
                f"  note: {path} adds the 'defaults' channel; --create solves from "
                f"{', '.join(part.channels)} alone (--override-channels)"
            )
    if found is not None:
        problem = reuse_problem(
            found, part, _python_version_or_none(python_for(found)), plan.python
        )
        if problem:
            raise UsageError(
                f"{described} at {found} cannot be reused: {problem}",
                hint=f"Remove it ({removal}), or choose another "
                + ("--venv." if where is not None else "--name."),
            )
        echo(f"environment: reusing {described} at {found} (made from this plan)")
        environment = found
    else:
        environment = _create_conda_prefix(
            client,
            name,
            where,
            part,
            plan,
            log,
            echo,
            out_dir=out_dir,
            removal=removal,
            live=install.live,
        )
        mark_prefix(environment, part)
    variables = environment_variables(python_for(environment), "CONDA_PREFIX", environment)
    run_install_script(out_dir, install, log, variables, echo, removal)
    return environment


def _create_conda_prefix(
    client: Client,
    name: str,
    where: Path | None,
    part: CondaPart,
    plan: Plan,
    log: Path,
    echo: Echo,
    *,
    out_dir: Path,
    removal: str,
    live: Live | None = None,
) -> Path:
    """Create the environment of the conda part with ``client``; its prefix."""
    if client.name == "py-rattler":
        assert where is not None
        echo(f"environment: creating {where} with py-rattler ({' '.join(part.specs)})")
        subdir = platform_named(plan.platform).conda_subdir
        installed = create_prefix(
            where,
            part,
            subdir=subdir,
            channel_alias=configured_channel_alias(os.environ, DEFAULT_CHANNEL_ALIAS),
            environ=os.environ,
            echo=echo,
        )
        with append_log(log) as handle:
            handle.write(f"\n### py-rattler created {where}: {' '.join(installed)}\n")
        return where
    command = create_command(client, name, part)
    if where is not None:
        command[command.index("-n") : command.index("-n") + 2] = ["-p", str(where)]
    echo(f"environment: creating {where or f'conda environment {name}'} with {client.name}")
    try:
        _run_logged(
            f"{client.name} creates the environment",
            command,
            log,
            echo,
            cwd=out_dir,
            env=dict(os.environ),
            removal=None,
            live=live,
        )
    except EnvironmentFailure as err:
        left = where if where is not None and where.exists() else env_prefix(client, name)
        if left is None:
            raise
        raise EnvironmentFailure(err.message, hint=_left(removal)) from None
    created = where if where is not None else env_prefix(client, name)
    if created is None or not (created / "conda-meta").is_dir():
        raise EnvironmentFailure(
            f"{client.name} reported success but environment {name} is not listed by "
            f"'{client.name} env list'"
        )
    return created


def python_for(prefix: Path) -> Path:
    return prefix / ("python.exe" if os.name == "nt" else "bin/python")


def _python_version_or_none(python: Path) -> str | None:
    if not python.exists():
        return None
    try:
        return _python_version(python)
    except EnvironmentFailure:
        return None


def environment_variables(python: Path, marker: str, environment: Path) -> dict[str, str]:
    """This process's environment as activating ``environment`` makes it: ``marker``
    (VIRTUAL_ENV, CONDA_PREFIX) names it, its ``python`` comes first on PATH, and PYTHON names
    it for install.sh; no PYTHONHOME, which would point the interpreter elsewhere."""
    python = python.absolute()
    env = dict(os.environ)
    env.update(
        {
            "PYTHON": str(python),
            marker: str(environment.absolute()),
            "PATH": f"{python.parent}{os.pathsep}{env.get('PATH', '')}",
        }
    )
    env.pop("PYTHONHOME", None)
    return env


def run_install_script(
    out_dir: Path,
    install: InstallOptions,
    log: Path,
    env: Mapping[str, str],
    echo: Echo,
    removal: str,
) -> None:
    """Run install.sh, once ``install.wheels`` are in uv's cache, showing each step as it
    starts and how far it is (see :mod:`cudalock.envfiles.progress`); a failed step raises,
    naming it and what to remove (``removal``).

    ``install.on_checks`` is called with the environment's interpreter (from the reader of the
    script's output) when the steps left only read the environment: it is complete."""
    uv, on_checks = install.uv, install.on_checks
    if install.wheels is not None:
        install.wheels.wait(log, echo, install.live)
    python = env.get("PYTHON", "python")
    run_env = dict(env)
    installer: Installer = "uv" if uv else "pip"
    run_env["CUDALOCK_INSTALLER"] = installer
    if uv:
        run_env["UV"] = uv
    if install.no_cache:
        run_env["CUDALOCK_NO_WHEEL_CACHE"] = "1"  # its build step then builds anew
    _run_logged(
        "install.sh",
        ["bash", str((out_dir / "install.sh").absolute())],
        log,
        echo,
        cwd=out_dir,
        env=run_env,
        removal=removal,
        steps=install.steps,
        python=python,
        installer=installer,
        uv=uv or "uv",
        live=install.live,
        on_checks=(lambda: on_checks(python)) if on_checks is not None else None,
    )


def _step_total(directory: Path, step: Step, installer: Installer) -> int | None:
    """How many packages ``step`` installs, from the requirements file or lock it names."""
    argv = step.command(installer)
    for option, value in itertools.pairwise(argv):
        if option == "-r":
            return requirement_count(directory / value)
    return None


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
    removal: str | None,
    steps: tuple[Step, ...] = (),
    python: str = "python",
    installer: Installer = "pip",
    uv: str = "uv",
    live: Live | None = None,
    cancel: threading.Event | None = None,
    on_checks: Callable[[], None] | None = None,
) -> None:
    """Run ``command``, its output (redacted) appended to ``log``; raise if it fails (or once
    ``cancel`` is set); ``on_checks`` is called once, when the first of the trailing
    :attr:`Step.reads_only` ``steps`` starts.

    The child's output is read as it comes (stdout and stderr together) and shown as the
    progress of the step it belongs to; a run past :data:`INSTALL_TIMEOUT_S` is stopped with
    everything it started (exit 3).
    """
    current: tuple[int, str] | None = None
    errors: list[str] = []
    network: list[str] = []
    progress = Progress(step=what, started=time.monotonic())
    checks_from = len(steps) - sum(1 for _ in itertools.takewhile(_reads_only, reversed(steps)))
    checking = on_checks is None or checks_from == len(steps)
    with append_log(log) as handle, Heartbeat(progress, echo, live) as beat:

        def say(text: str) -> None:
            with beat.lock:
                if live is not None:
                    live("")
                echo(text)
                beat.printed()

        def take(raw: str) -> None:
            nonlocal current, checking
            line = redact(raw.rstrip("\r"))
            # Flushed line by line: a run stopped by a signal keeps every line it wrote.
            handle.write(line + "\n")
            handle.flush()
            if line.startswith(STEP_MARKER):
                label = line[len(STEP_MARKER) :]
                number = label.split("/", 1)[0]
                current = (int(number) if number.isdigit() and len(number) < 5 else 0, label)
                index = current[0] - 1
                step = steps[index] if 0 <= index < len(steps) else None
                total = _step_total(cwd, step, installer) if step is not None else None
                with beat.lock:
                    # "2/3": the step's title was just shown in full.
                    progress.start_step(label.split(":", 1)[0], time.monotonic(), total)
                say(f"  step {label}")
                if not checking and index >= checks_from:
                    checking = True
                    assert on_checks is not None
                    on_checks()
                return
            with beat.lock:
                progress.feed(line)
            if line.startswith(("ERROR:", "error:")) or "verification failed" in line:
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
                cancel=cancel,
            ).returncode
        except OSError as err:
            raise EnvironmentFailure(
                f"cannot run {what} ({command[0]}): {err.strerror or err}; log: {log}"
            ) from None
        except EnvironmentFailure as err:
            message = f"{err.message}; full output in {log}"
            raise EnvironmentFailure(message, hint=_left(removal)) from None
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
    message = (
        f"{step_text} failed ({procs.exit_status(returncode)}){detail}; command: {shown}; "
        f"full output in {log}"
    )
    hint = _left(removal)
    if network:
        message += f"; the network failed: {network[-1].strip()}"
        hint = f"Check the index URLs and the network, then run again. {hint}"
    raise EnvironmentFailure(message, hint=hint)


def _reads_only(step: Step) -> bool:
    return step.reads_only


#: A removal that is no command: what stays, said as it is (the user's own directory).
KEPT = "kept: "


def _left(removal: str | None) -> str:
    """What is left behind and how to remove it (None: nothing was made)."""
    if removal is None:
        return "No environment was created."
    if removal.startswith(KEPT):
        return sentence(removal[len(KEPT) :])
    return f"The environment is left for inspection (remove it with: {removal})."


class AuditAhead:
    """The new environment's inspection, started when install.sh reaches its checks: they only
    read the environment, complete by then, so the audit's longest part (the new interpreter
    reading every package's metadata) runs beside them. Closed with the run when not taken."""

    def __init__(self) -> None:
        self._running: RunningInspection | None = None
        self._lock = threading.Lock()

    def start(self, python: str) -> None:
        """Start inspecting ``python``'s environment (called once, by install.sh's reader)."""
        # Only --create audits: a bootstrap that writes files loads no audit code.
        import cudalock.audit.runner  # noqa: F401  (loaded while the checks run)
        from cudalock.audit.inspection import start_inspection

        try:
            running = start_inspection(python=Path(python))
        except (CudalockError, OSError):
            return  # the audit starts it again, and says what is wrong
        with self._lock:
            stale, self._running = self._running, running
        if stale is not None:
            stale.close()

    def take(self, environment: Path) -> RunningInspection | None:
        """The inspection started for ``environment``'s interpreter, if there is one."""
        from cudalock.audit.inspection import python_for_prefix

        with self._lock:
            running, self._running = self._running, None
        if running is None:
            return None
        try:
            same = os.path.abspath(running.python) == os.path.abspath(
                python_for_prefix(environment)
            )
        except CudalockError:
            same = False  # the audit says what is wrong with the environment
        if same:
            return running
        running.close()
        return None

    def __enter__(self) -> AuditAhead:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            running, self._running = self._running, None
        if running is not None:
            running.close()


def audit_new_environment(
    environment: Path,
    plan: Plan,
    matrix: Matrix,
    echo: Echo,
    *,
    inspection: RunningInspection | None = None,
) -> None:
    """Audit the new environment as ``cudalock audit`` would (never importing torch), with the
    ``inspection`` of it already running (:class:`AuditAhead`) or a new one.

    Errors mean the environment cannot be trusted on the target even though every step
    succeeded: exit 1, with the findings shown.
    """

    # Only --create audits: a bootstrap that writes files loads no audit code.
    from cudalock.audit.inspection import python_for_prefix, start_inspection
    from cudalock.audit.runner import audit_live

    if inspection is None:
        inspection = start_inspection(python=python_for_prefix(environment))
    with inspection:
        # Judged with the policy the plan was resolved with.
        outcome = audit_live(plan.targets, matrix, inspection, compat=plan.compat)
    torch = outcome.installed.torch[0] if outcome.installed.torch else None
    for finding in outcome.findings:
        echo(f"  audit {finding.severity}: {finding.code}: {finding.message}")
    if torch is None or outcome.has_errors:
        raise Unsatisfiable(
            f"the new environment {environment} did not pass the audit"
            + ("" if torch else ": it has no torch"),
            hint=f"See the findings above and {LOG_FILE}; 'cudalock audit --python "
            f"{shlex.quote(str(python_for_prefix(environment)))}' repeats them.",
        )
    echo(
        f"environment ready: {environment} (Python {outcome.installed.python_version}, "
        f"torch {torch.version}, CUDA {torch.cuda or 'none'}); audit: no errors"
    )
