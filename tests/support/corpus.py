"""The corpus of real cases: what people pasted into public issue threads, with the cause the
thread established, under ``tests/fixtures/corpus/<case>/``.

Each case is a directory holding ``case.toml`` and the files it names, verbatim as pasted::

    source = "https://github.com/OWNER/REPO/issues/N#issuecomment-M"   # where the paste is
    cause = "cu128 wheel on a driver that tops out at CUDA 12.1 (maintainer's answer)"
    command = "audit"            # "audit": the paste is given as --report; "doctor": as --log
    paste = "paste.txt"          # the file, as pasted
    args = ["--driver-version", "530.30.02"]   # flags the thread states (optional)
    expect = ["driver-too-old"]  # finding codes that must be reported (optional)
    absent = ["no-torch"]        # codes that must not be reported (optional)
    control = false              # true: a healthy report; no finding may be an error

Cases are data: adding one needs no code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cudalock.tomlfile import tomllib

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus"


@dataclass(frozen=True)
class Case:
    """One real case of the corpus."""

    name: str
    source: str
    cause: str
    command: str
    paste: Path
    args: tuple[str, ...]
    expect: frozenset[str]
    absent: frozenset[str]
    control: bool


def load_case(directory: Path) -> Case:
    """The case in ``directory``; a malformed case.toml fails the test run, naming the file."""
    path = directory / "case.toml"
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    unknown = set(data) - {
        "source",
        "cause",
        "command",
        "paste",
        "args",
        "expect",
        "absent",
        "control",
    }
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    source, cause, command = data["source"], data["cause"], data["command"]
    if not str(source).startswith("https://"):
        raise ValueError(f"{path}: source must be the thread's https URL")
    if command not in ("audit", "doctor"):
        raise ValueError(f"{path}: command must be 'audit' or 'doctor'")
    paste = directory / data.get("paste", "paste.txt")
    if not paste.is_file():
        raise ValueError(f"{path}: the paste {paste.name} is missing")
    control = bool(data.get("control", False))
    expect = frozenset(data.get("expect", ()))
    if not control and not expect:
        raise ValueError(f"{path}: a problem case names the codes it expects")
    return Case(
        name=directory.name,
        source=str(source),
        cause=str(cause),
        command=str(command),
        paste=paste,
        args=tuple(str(arg) for arg in data.get("args", ())),
        expect=expect,
        absent=frozenset(data.get("absent", ())),
        control=control,
    )


def corpus_cases(command: str) -> list[Case]:
    """Every case of the corpus that ``command`` judges, in name order."""
    if not CORPUS.is_dir():
        return []
    cases = [load_case(path) for path in sorted(CORPUS.iterdir()) if path.is_dir()]
    return [case for case in cases if case.command == command]
