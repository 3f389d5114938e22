"""Inspect a live environment without importing torch: the audit's eyes.

Runs the environment's own interpreter on :mod:`cudalock.audit.inspect_script` (standard
library only) and turns the JSON it prints into an :class:`~cudalock.audit.installed.Installed`
value. A missing or
non-Python interpreter is an :class:`InputError`; one that hangs, floods its output or dies by a
signal is an :class:`EnvironmentFailure` (exit 3). The interpreter runs through
:func:`cudalock.procs.run`: in a process group of its own, killed with everything it started (a
``sitecustomize`` that starts a child, a wrapper that runs ``sleep``) when the timeout passes.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cudalock import sharedlibs
from cudalock.audit.installed import (
    DeepSpeedBuild,
    Distribution,
    ExtensionBuild,
    Installed,
    Nvcc,
    SharedLibrary,
    TorchInstall,
)
from cudalock.errors import EnvironmentFailure, InputError
from cudalock.platforms import PLATFORMS, platform_for
from cudalock.procs import ChildOutputTooLarge, ChildTimedOut, Completed, run, signal_name

__all__ = [
    "RunningInspection",
    "default_python",
    "inspect_environment",
    "installed_from_document",
    "python_for_prefix",
    "start_inspection",
]

_SCRIPT = Path(__file__).with_name("inspect_script.py")
#: Loaded by the script (stdlib only) to read the DT_NEEDED of installed extensions.
_SHAREDLIBS = Path(sharedlibs.__file__)
#: The script prints a few hundred kB at most; anything far beyond is not our script talking.
_MAX_OUTPUT = 32 * 1024 * 1024


def python_for_prefix(prefix: Path) -> Path:
    """The interpreter of a conda environment or venv rooted at ``prefix``."""
    for candidate in (
        prefix / "bin" / "python",
        prefix / "python.exe",
        prefix / "Scripts" / "python.exe",
        prefix / "bin" / "python3",
    ):
        if candidate.is_file():
            return candidate
    raise InputError(
        f"no Python interpreter in environment prefix {str(prefix)!r}: "
        "expected bin/python (or python.exe) inside a conda environment or venv"
    )


def default_python(environ: Mapping[str, str] | None = None) -> Path:
    """The active environment's interpreter: VIRTUAL_ENV, CONDA_PREFIX, else python3 on PATH."""
    env = os.environ if environ is None else environ
    for var in ("VIRTUAL_ENV", "CONDA_PREFIX"):
        root = env.get(var)
        if root:
            try:
                return python_for_prefix(Path(root))
            except InputError:
                continue

    found = shutil.which("python3", path=env.get("PATH")) or shutil.which(
        "python", path=env.get("PATH")
    )
    if not found:
        raise InputError(
            "no active Python environment found (no VIRTUAL_ENV, no CONDA_PREFIX, no python3 on "
            "PATH): name one with --python PATH or --prefix CONDA_PREFIX"
        )
    return Path(found)


def inspect_environment(
    python: Path | None = None, prefix: Path | None = None, timeout: float = 30
) -> Installed:
    """Inspect the environment of ``python`` (or of ``prefix``; default: the active one)."""
    return start_inspection(python=python, prefix=prefix, timeout=timeout).installed()


def start_inspection(
    python: Path | None = None, prefix: Path | None = None, timeout: float = 30
) -> RunningInspection:
    """Start inspecting the environment of ``python`` (or ``prefix``) and return at once.

    The audited interpreter needs about as long to start and read its metadata as cudalock
    needs to load the matrix and probe the machine, so ``audit`` starts it first and does
    both at the same time; :meth:`RunningInspection.installed` waits for the answer.
    """
    if python is not None and prefix is not None:
        raise InputError("give either --python or --prefix, not both")
    if python is None:
        python = python_for_prefix(prefix) if prefix is not None else default_python()
    if not python.exists():
        raise InputError(f"Python interpreter {str(python)!r} does not exist")
    if python.is_dir():
        raise InputError(
            f"{str(python)!r} is a directory: --python expects an interpreter such as "
            f"{str(python / 'bin' / 'python')!r} (or use --prefix for an environment root)"
        )
    source = _SCRIPT.read_text(encoding="utf-8")
    if not os.access(python, os.X_OK):
        raise InputError(f"{str(python)!r} is not executable")
    argv = isolated_argv(python, source, str(_SHAREDLIBS))
    return RunningInspection(python, argv, dict(os.environ), timeout)


def isolated_argv(python: Path, code: str, *args: str, options: Sequence[str] = ()) -> list[str]:
    """``python`` running ``code`` isolated from where cudalock was started: run with ``cwd`` a
    fresh empty directory (:func:`clean_directory`), the ``-c`` code puts only that directory
    on ``sys.path``, so nothing the user's working directory holds (a ``json.py`` or
    ``sitecustomize.py`` in an untrusted repository) can be imported; ``-B`` writes no bytecode
    into the audited environment; the interpreter is named by its absolute path (``./python3``
    is that file, never ``python3`` from PATH).

    Not ``-I``: it would also drop ``PYTHONPATH`` and the user site, which the training run
    imports from as well; a torch found there is what the audit must see (a second torch on
    ``PYTHONPATH`` is a cause of -11)."""
    return [os.path.abspath(python), "-B", *options, "-c", code, *args]


def clean_directory() -> tempfile.TemporaryDirectory[str]:
    """An empty directory to run an audited interpreter in, removed afterwards."""
    return tempfile.TemporaryDirectory(prefix="cudalock-audit-")


class RunningInspection:
    """The inspection script running in the audited interpreter (in a thread of its own, so the
    caller can load the matrix and probe the machine meanwhile)."""

    def __init__(
        self, python: Path, argv: Sequence[str], env: Mapping[str, str], timeout: float
    ) -> None:
        self.python = python
        self._timeout = timeout
        self._cancel = threading.Event()
        self._outcome: Completed | BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(argv, env), daemon=True)
        self._thread.start()

    def _run(self, argv: Sequence[str], env: Mapping[str, str]) -> None:
        try:
            with clean_directory() as empty:
                self._outcome = run(
                    argv,
                    what=f"{str(self.python)!r}",
                    timeout=self._timeout,
                    cwd=Path(empty),
                    env=env,
                    output_limit=_MAX_OUTPUT,
                    cancel=self._cancel,
                )
        except BaseException as err:  # handed to the caller by installed()
            self._outcome = err

    def installed(self) -> Installed:
        """Wait for the script (until the timeout given at the start) and read its answer."""
        python = self.python
        self._thread.join()
        outcome = self._outcome
        if isinstance(outcome, ChildTimedOut):
            raise EnvironmentFailure(
                f"{str(python)!r} did not finish inspecting its environment within "
                f"{self._timeout:g} s; it was stopped, with every process it started",
                hint="Something run at interpreter start-up (sitecustomize, a .pth file) may hang.",
            )
        if isinstance(outcome, ChildOutputTooLarge):
            raise EnvironmentFailure(
                f"{str(python)!r} wrote more than {_MAX_OUTPUT // 2**20} MiB while inspecting its "
                "environment (the inspection prints a few hundred kB); it was stopped",
                hint="Something run at interpreter start-up (sitecustomize, a .pth file, a "
                "wrapper script) writes to stdout.",
            )
        if isinstance(outcome, PermissionError):
            raise InputError(f"{str(python)!r} is not executable")
        if isinstance(outcome, OSError):
            raise InputError(f"cannot run {str(python)!r}: {outcome.strerror or outcome}")
        if isinstance(outcome, BaseException):
            raise outcome
        assert outcome is not None
        if outcome.returncode < 0:
            name = signal_name(-outcome.returncode)
            raise EnvironmentFailure(
                f"{str(python)!r} was killed by {name} ({outcome.returncode}) while starting up, "
                "before importing anything but the standard library",
                hint="The interpreter itself, or a sitecustomize/.pth file it runs, crashes.",
            )
        document = _parse_output(python, outcome.returncode, outcome.stdout, outcome.stderr)
        return installed_from_document(document, source=f"python:{python}")

    def close(self) -> None:
        """Stop the script if it is still running (the audit failed before reading it)."""
        self._cancel.set()
        self._thread.join(timeout=30)

    def __enter__(self) -> RunningInspection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _parse_output(python: Path, returncode: int, stdout: bytes, stderr: bytes) -> dict[str, Any]:
    errors = stderr.decode("utf-8", "replace").strip()
    if returncode != 0:
        last = errors.splitlines()[-1] if errors else f"exit status {returncode}"
        if "SyntaxError" in errors:
            raise InputError(
                f"{str(python)!r} is too old to inspect (Python 3.7 or newer is needed): {last}"
            )
        raise InputError(f"{str(python)!r} could not inspect its environment: {last}")
    try:
        document = json.loads(stdout.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        document = None
    if not isinstance(document, dict) or "script_version" not in document:
        raise InputError(
            f"{str(python)!r} does not look like a Python interpreter: it did not run the "
            "inspection script"
        )
    return document


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _items(value: object) -> list[Mapping[str, Any]]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, Mapping)]


def platform_name(sys_platform: str | None, machine: str | None) -> str | None:
    """``("linux", "x86_64")`` → ``"linux-x86_64"``; platforms outside the table → None."""
    if not sys_platform or not machine:
        return None
    name = platform_for(sys_platform, machine)
    return name if name in {platform.name for platform in PLATFORMS} else None


def installed_from_document(document: Mapping[str, Any], source: str) -> Installed:
    """The inspection script's JSON → :class:`Installed` (tolerant of missing fields)."""

    py = document.get("python")
    py = py if isinstance(py, Mapping) else {}
    notes: list[str] = []
    torch = tuple(
        TorchInstall(
            version=_str(t.get("version")),
            cuda=_str(t.get("cuda")),
            hip=_str(t.get("hip")),
            git_version=_str(t.get("git_version")),
            location=_str(t.get("location")),
            has_version_file=bool(t.get("has_version_file", True)),
        )
        for t in _items(document.get("torch"))
    )
    for install in torch:
        if not install.has_version_file:
            notes.append(f"torch at {install.location} has no torch/version.py")
    ds = document.get("deepspeed")
    deepspeed = None
    if isinstance(ds, Mapping):
        deepspeed = DeepSpeedBuild(
            version=_str(ds.get("version")),
            torch_version=_str(ds.get("torch_version")),
            torch_cuda=_str(ds.get("torch_cuda")),
            torch_hip=_str(ds.get("torch_hip")),
            accelerator=_str(ds.get("accelerator")),
            installed_ops=tuple(o for o in ds.get("installed_ops") or () if isinstance(o, str)),
            has_build_info=bool(ds.get("has_build_info", True)),
            location=_str(ds.get("location")),
        )
    nvcc = tuple(
        Nvcc(
            path=_str(n.get("path")),
            version=_str(n.get("version")),
            origin=_str(n.get("origin")) or "unknown",
            problem=_str(n.get("problem")),
        )
        for n in _items(document.get("nvcc"))
    )
    libraries = tuple(
        SharedLibrary(
            name=str(lib.get("name")),
            path=str(lib.get("path")),
            version=_str(lib.get("version")),
            directory=str(lib.get("directory")),
        )
        for lib in _items(document.get("cuda_libraries"))
        if _str(lib.get("name")) and _str(lib.get("path"))
    )
    ld_path = document.get("ld_library_path")
    return Installed(
        source=source,
        python=_str(py.get("executable")),
        python_version=_str(py.get("version")),
        platform=platform_name(_str(py.get("platform")), _str(py.get("machine"))),
        prefix=_str(py.get("prefix")),
        distributions=tuple(
            Distribution(
                name=str(d.get("name")),
                version=_str(d.get("version")),
                location=_str(d.get("location")),
            )
            for d in _items(document.get("distributions"))
            if _str(d.get("name"))
        ),
        torch=torch,
        deepspeed=deepspeed,
        nvcc=nvcc,
        ld_library_path=tuple(p for p in ld_path if isinstance(p, str))
        if isinstance(ld_path, list)
        else (),
        cuda_libraries=libraries,
        cuda_builds=tuple(
            ExtensionBuild(
                name=str(b.get("name")),
                version=_str(b.get("version")),
                cpp_lib=_cpp_lib(b.get("cpp_lib")),
                needed=tuple(
                    (str(n[0]), tuple(str(s) for s in n[1] if isinstance(s, str)))
                    for n in b.get("needed") or ()
                    if isinstance(n, list) and len(n) == 2 and isinstance(n[1], list)
                ),
                per_cuda=tuple(p for p in b.get("extensions") or () if isinstance(p, str)),
            )
            for b in _items(document.get("cuda_builds"))
            if _str(b.get("name"))
        ),
        notes=tuple(notes),
    )


def _cpp_lib(value: Any) -> tuple[str, str] | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        return value[0], value[1]
    return None
