"""The ``cudalock`` entry point: one argparse parser; a command's module is imported when it runs.

Each command module (``cudalock.cli.probe``, ``cudalock.cli.resolve``, ...) has
``add_arguments(parser)`` and ``run(args)`` and imports only the standard library at the top, so
``cudalock resolve`` imports its own module and the core it uses, and nothing else. The parser
is built for the command being run; ``--help`` lists every command from :data:`COMMANDS` without
importing them.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from cudalock.cli.args import help_and_exit
from cudalock.cli.output import echo
from cudalock.errors import CudalockError, Terminated

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

#: Every command, in the order ``cudalock --help`` lists them: name → (module, one-line summary).
COMMANDS: dict[str, tuple[str, str]] = {
    "probe": (
        "cudalock.cli.probe",
        "What this machine is: NVIDIA driver, its highest CUDA, GPUs, host memory.",
    ),
    "resolve": (
        "cudalock.cli.resolve",
        "The torch stack the target can run (torch, CUDA build, torchvision...), and why.",
    ),
    "bootstrap": (
        "cudalock.cli.bootstrap",
        "Write (or --create) that environment: environment.yml, install.sh, "
        "constraints.txt, cudalock.toml.",
    ),
    "lock": (
        "cudalock.cli.lock",
        "Lock the whole closure for the target, via uv: pylock.toml, requirements.lock.txt.",
    ),
    "audit": (
        "cudalock.cli.audit",
        "What in an environment (or a pasted report) will crash on the target.",
    ),
    "doctor": (
        "cudalock.cli.doctor",
        "Explain a run that ended with -9/137 (SIGKILL) or -11/139 (SIGSEGV).",
    ),
    "memory": (
        "cudalock.cli.memory",
        "Host RAM and GPU memory a DeepSpeed ZeRO run needs, and whether this host has it.",
    ),
    "matrix": ("cudalock.cli.matrix", "Check, show and refresh the compatibility matrix."),
}

DESCRIPTION = """\
The PyTorch stack this machine's NVIDIA driver and GPUs can run: probe, resolve, bootstrap,
lock, audit, and explain -9 / -11 crashes."""

EPILOG = """\
examples:
  cudalock probe
  cudalock resolve --driver-version 535.104.05 --gpu H100
  cudalock bootstrap -o env/ --with deepspeed
  cudalock audit --deep
  cudalock doctor --exit-code -9 --log train.log

'cudalock COMMAND --help' describes a command's flags.

exit status:
  0    success
  1    problems found, or nothing satisfies the request
  2    usage error or bad input (a bad flag or value, a malformed file)
  3    the environment failed (network, permissions, disk)
  129  hung up (SIGHUP: the terminal went away), handled like SIGTERM
  130  interrupted (Ctrl-C)
  141  the reader of the output went away (a closed pipe, as in '| head -1')
  143  terminated (SIGTERM)"""

#: The function that runs a parsed command line (each command's ``run``).
Handler = Callable[[argparse.Namespace], None]


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions and epilogs printed as written: they hold examples and exit-code tables."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
    ) -> None:
        # argparse makes a formatter for every flag declared and reads the width through
        # shutil, whose import (with the compression modules) every command would pay.
        if width is None:
            width = terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width)


def terminal_columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size().columns`` says it: $COLUMNS, else
    the terminal on standard output, else 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class Parser(argparse.ArgumentParser):
    """argparse with cudalock's conventions, for the top level and every (sub)command.

    Descriptions and epilogs are printed as written (:class:`HelpFormatter`); flags are never
    abbreviated (``--js`` is not ``--json``: an abbreviation would break when a flag is added);
    a flag a command does not know is reported by that command's parser, as
    ``cudalock resolve: error: ...``, not by the top level's.
    """

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        kwargs.setdefault("allow_abbrev", False)
        kwargs["add_help"] = False  # added below, worded like the other flags
        super().__init__(**kwargs)
        self._optionals.title = "Options"
        self.add_argument("-h", "--help", action="help", help="Show this help and exit.")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # Usage errors quote the values given, which may hold terminal escapes.
        from cudalock.safetext import printable

        super()._print_message(printable(message), file)

    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: Any = None
    ) -> tuple[Any, list[str]]:
        # argparse hands a command's parser the rest of the line and would have the top level
        # report what it did not know, under the top level's name and usage.
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


class _VersionAction(argparse.Action):
    """``--version``: cudalock's version and the matrix's (the matrix is loaded only here)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="Print cudalock's version and the matrix version, then exit.",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        echo(version_line())
        parser.exit()


class _CompletionAction(argparse.Action):
    """``--print-completion bash``: a static completion script generated from the parser."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from cudalock.cli.completion import bash_completion

        sys.stdout.write(bash_completion(build_parser(COMMANDS, with_flags=True)))
        parser.exit()


def version_line() -> str:
    from cudalock import __version__
    from cudalock.matrix.load import load_matrix

    try:
        matrix = load_matrix()
        detail = f"matrix {matrix.matrix_version} (schema {matrix.schema_version})"
    except CudalockError as err:
        detail = f"matrix unavailable: {err.message}"
    return f"cudalock {__version__}, {detail}"


def build_parser(commands: Iterable[str], *, with_flags: bool) -> Parser:
    """The parser for ``commands`` (names in :data:`COMMANDS`), with each command's flags (its
    module imported) or, without ``with_flags``, only its name and summary, for help."""
    parser = Parser(
        prog="cudalock",
        description=DESCRIPTION,
        epilog=EPILOG,
        usage="%(prog)s [--version] COMMAND [options]",
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument(
        "--print-completion",
        action=_CompletionAction,
        choices=("bash",),
        metavar="SHELL",
        help="Print a completion script for SHELL (bash), then exit: "
        'eval "$(cudalock --print-completion bash)".',
    )
    parser.set_defaults(handler=help_and_exit(parser))  # no command: what there is to run
    subparsers = parser.add_subparsers(title="Commands", metavar="COMMAND")
    for name in commands:
        module_name, summary = COMMANDS[name]
        command = subparsers.add_parser(
            name,
            prog=f"{parser.prog} {name}",
            help=summary,
            description=summary,
            usage="%(prog)s [options]",
        )
        if with_flags:
            module = importlib.import_module(module_name)
            module.add_arguments(command)
            handler: Handler = module.run
            command.set_defaults(handler=handler)
    return parser


def report_error(err: CudalockError) -> None:
    """One line (plus an optional hint) on stderr, no traceback, URL credentials hidden (by
    :func:`echo`, as everything printed)."""
    echo(f"cudalock: error: {err.message}", err=True)
    if err.hint:
        echo(f"hint: {err.hint}", err=True)


def run(argv: Sequence[str] | None = None) -> None:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``).

    Returns when the command succeeds; otherwise exits with its status (usage errors 2,
    interrupted 130).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    _usable_output_streams()
    previous = _terminate_like_ctrl_c()
    unraisable_before = sys.unraisablehook
    sys.unraisablehook = _stop_signals_are_not_lost
    try:
        if args and args[0] in COMMANDS:
            # Everything after the command's name is its own: the others need not be built.
            parser = build_parser([args[0]], with_flags=True)
        else:
            # Help, --version, a usage error: the commands are listed, not built.
            parser = build_parser(COMMANDS, with_flags=False)
            if args and not args[0].startswith("-"):
                parser.error(unknown_command(args[0]))
        namespace = parser.parse_args(args)
        handler: Handler = namespace.handler
        handler(namespace)
        sys.stdout.flush()  # a full disk or a closed pipe is said here, not at exit
    except CudalockError as err:
        _quietly(report_error, err)
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        _quietly(echo, "cudalock: interrupted", err=True)
        sys.exit(130)
    except Terminated as stopped:
        said = "hung up" if stopped.signum == getattr(signal, "SIGHUP", None) else "terminated"
        _quietly(echo, f"cudalock: {said}", err=True)
        sys.exit(128 + stopped.signum)
    except BrokenPipeError:
        # The reader went away (| head -1): stop quietly, as other command-line tools do.
        _discard_output()
        sys.exit(141)
    except OSError as err:
        if err.errno == errno.ENAMETOOLONG:  # a path the user named, past NAME_MAX or PATH_MAX
            from cudalock.fsutil import name_too_long

            usage = name_too_long(err.filename)
            _quietly(report_error, usage)
            sys.exit(usage.exit_code)
        if not _is_output_failure(err):
            raise
        _discard_output("stdout")
        _quietly(echo, f"cudalock: error: cannot write the output: {err.strerror}", err=True)
        sys.exit(3)
    finally:
        sys.unraisablehook = unraisable_before
        for signum, handler_before in previous.items():
            signal.signal(signum, handler_before)


def _stop_signals_are_not_lost(unraisable: Any) -> None:
    """A Ctrl-C or SIGTERM that lands while Python runs a ``__del__`` or a weakref callback
    raises there, and Python prints it and carries on: the signal is sent again, a moment
    later (sent from here, it would be raised in here and dropped as well), to be raised where
    the run can unwind. Anything else is reported as Python would."""
    error = unraisable.exc_value
    if isinstance(error, KeyboardInterrupt | Terminated):
        import threading  # only on this rare path

        signum = error.signum if isinstance(error, Terminated) else signal.SIGINT
        again = threading.Timer(0.01, os.kill, (os.getpid(), signum))
        again.daemon = True
        again.start()
    else:
        sys.__unraisablehook__(unraisable)


def _terminate_like_ctrl_c() -> dict[int, Any]:
    """SIGTERM and SIGHUP raise :class:`Terminated` in the main thread, so they unwind like
    Ctrl-C: child processes are killed and temporary files removed on the way out (the default
    action would end cudalock at once and leave both behind, install.sh and uv running
    detached). Returns the handlers it replaced."""

    def terminate(signum: int, frame: Any) -> None:
        stopped = Terminated()
        stopped.signum = signum
        raise stopped

    replaced: dict[int, Any] = {}
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is None:
            continue
        try:
            replaced[number] = signal.signal(number, terminate)
        except ValueError:  # not the main thread (cudalock run as a library): leave it be
            break
    return replaced


#: Characters cudalock prints that an ASCII terminal cannot show, and what stands for them.
_ASCII_FORMS = {
    "≥": ">=",
    "≤": "<=",
    "→": "->",
    "←": "<-",
    "…": "...",
    "—": "-",
    "–": "-",
    "×": "x",
    "≈": "~",
    "·": "*",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
}


def _degrade(err: UnicodeError) -> tuple[str, int]:
    """The ``cudalock-degrade`` codec error handler: ``≥`` becomes ``>=``, anything else
    without an ASCII form ``?``."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    text = err.object[err.start : err.end]
    return "".join(_ASCII_FORMS.get(char, "?") for char in text), err.end


def _usable_output_streams() -> None:
    """Streams that take whatever cudalock prints: one closed at start (``>&-``) goes to the
    null device, and characters the output encoding lacks (PYTHONIOENCODING=ascii) degrade."""
    import codecs

    codecs.register_error("cudalock-degrade", _degrade)
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115
            continue
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="cudalock-degrade")


def _is_output_failure(err: OSError) -> bool:
    """Whether ``err`` came from writing cudalock's own stdout or stderr (full, closed)."""
    return err.errno in (errno.ENOSPC, errno.EBADF, errno.EPIPE, errno.EIO, errno.EDQUOT)


def _discard_output(*names: str) -> None:
    """Point stdout (and stderr) at the null device, so that nothing still buffered fails
    again when the interpreter exits."""
    for name in names or ("stdout", "stderr"):
        stream = getattr(sys, name)
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, stream.fileno())
            os.close(null)
        except (OSError, ValueError, AttributeError):
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115


def _quietly(say: Callable[..., None], *args: Any, **kwargs: Any) -> None:
    """Say it on stderr if stderr can take it; a closed or full stderr is not a second error."""
    try:
        say(*args, **kwargs)
        sys.stderr.flush()
    except (OSError, ValueError):
        _discard_output("stderr")


def unknown_command(word: str) -> str:
    """The error for a command name that does not exist, with the nearest if there is one."""
    import difflib

    nearest = difflib.get_close_matches(word, COMMANDS, n=1)
    if nearest:
        return f"unknown command {word!r}; did you mean {nearest[0]!r}?"
    return f"unknown command {word!r}; expected one of {', '.join(COMMANDS)}"
