"""What a user sees while ``bootstrap --create`` installs: how far each long step is.

uv and pip print little while they download several GB of torch and ``nvidia-*`` wheels into a
pipe (their progress bars need a terminal), so the installer's lines are read as they come and
turned into a one-line account of the step: how long it has run, how many of its packages are
done, and what it is doing now. :class:`Progress` is that account (plain state, fed with lines
and times); :class:`Heartbeat` shows it while the step runs: redrawn every second on a terminal
(``live``), and as a line of its own after every :data:`QUIET_S` seconds without output
elsewhere, so a log gets a sign of life at least that often and never floods.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "QUIET_S",
    "Heartbeat",
    "Live",
    "Progress",
    "requirement_count",
]

#: Redraws one status line in place (a terminal); called with "" to clear it.
Live = Callable[[str], None]
#: Without a terminal, the longest silence before a line says the step is still working.
QUIET_S = 10.0
#: On a terminal, how often the status line is redrawn.
REDRAW_S = 1.0

# The installers' own lines, as uv (without a terminal) and pip print them. Each pattern is
# anchored and has no nested repetition: a line of any length is matched in linear time.
_UV_RESOLVED = re.compile(r"Resolved (\d+) packages?\b")
_UV_DOWNLOADING = re.compile(r"\s*Downloading (\S+) \(([^()\s]+)\)\s*$")
_UV_DOWNLOADED = re.compile(r"\s*Downloaded (\S+)\s*$")
_UV_PREPARED = re.compile(r"Prepared (\d+) packages?\b")
_UV_INSTALLED = re.compile(r"Installed (\d+) packages?\b")
_UV_BUILDING = re.compile(r"\s*Building (\S+)\s*$")
_PIP_COLLECTING = re.compile(r"Collecting (\S+)")
_PIP_DOWNLOADING = re.compile(r"\s*Downloading (\S+?)(?: \(([^()]+)\))?\s*$")
_PIP_INSTALLING = re.compile(r"Installing collected packages: (.*)$")
_PIP_BUILDING = re.compile(r"\s*Building wheels? for (\S+)")
_PIP_PROCESSING = re.compile(r"Processing (\S+)")


def requirement_count(path: Path) -> int | None:
    """How many packages a requirements file (hash and option lines aside) or a PEP 751 lock
    (its ``[[packages]]`` tables) names; None when it cannot be read."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if path.suffix == ".toml":
        return sum(1 for line in text.splitlines() if line.strip() == "[[packages]]")
    count = 0
    continued = False
    for raw in text.splitlines():
        line = raw.strip()
        starts = not continued and line and not line.startswith(("#", "-"))
        if starts:
            count += 1
        continued = line.endswith("\\")
    return count


def _elapsed(seconds: float) -> str:
    whole = int(seconds)
    if whole < 60:
        return f"{whole} s"
    minutes, rest = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _file_name(url_or_name: str) -> str:
    """pip names a download by its URL: the file name is what a person recognises."""
    return url_or_name.rsplit("/", 1)[-1].split("#", 1)[0]


@dataclass
class Progress:
    """The account of the step that is running; every method takes the time it happens at."""

    step: str = ""
    started: float = 0.0
    #: What is shown in place of ``step N/M`` (work that is no step of install.sh).
    title: str = ""
    #: Packages the step installs, when known (uv says it; a requirements file counts them).
    total: int | None = None
    done: int = 0
    doing: str = ""
    #: The packages seen in this step, so a package reported twice counts once.
    _seen: set[str] = field(default_factory=set)

    def start_step(self, label: str, now: float, total: int | None = None) -> None:
        self.step, self.started, self.total = label, now, total
        self.done, self.doing = 0, ""
        self._seen = set()

    def _count(self, name: str) -> None:
        if name not in self._seen:
            self._seen.add(name)
            self.done += 1

    def feed(self, line: str) -> None:
        """Take one line the installer printed."""
        if match := _UV_RESOLVED.match(line):
            self.total = int(match.group(1))
            self.doing = "downloading"
        elif match := _UV_DOWNLOADING.match(line):
            self.doing = f"downloading {match.group(1)} ({match.group(2)})"
        elif match := _UV_DOWNLOADED.match(line):
            self._count(match.group(1))
            self.doing = f"downloaded {match.group(1)}"
        elif match := _UV_PREPARED.match(line):
            self.doing = f"installing {match.group(1)} packages"
        elif match := _UV_INSTALLED.match(line):
            self.done = max(self.done, int(match.group(1)))
            self.doing = f"installed {match.group(1)} packages"
        elif match := _PIP_COLLECTING.match(line):
            self._count(match.group(1).split("==", 1)[0].lower())
            self.doing = f"collecting {match.group(1)}"
        elif match := _PIP_PROCESSING.match(line):
            self._count(_file_name(match.group(1)).split("-", 1)[0].lower())
            self.doing = f"processing {_file_name(match.group(1))}"
        elif match := _PIP_DOWNLOADING.match(line):
            size = f" ({match.group(2)})" if match.group(2) else ""
            self.doing = f"downloading {_file_name(match.group(1))}{size}"
        elif match := _PIP_INSTALLING.match(line):
            names = [name for name in match.group(1).split(", ") if name]
            self.doing = f"installing {len(names)} packages"
        elif (match := _UV_BUILDING.match(line)) or (match := _PIP_BUILDING.match(line)):
            self.doing = f"building {match.group(1)}"

    def describe(self, now: float) -> str:
        """``step 2/3, 42 s: 3 of 151 packages; downloading torch (812.3MiB)``."""
        name = self.title or (f"step {self.step}" if self.step else "installing")
        parts = [name, _elapsed(now - self.started)]
        text = ", ".join(parts)
        counted = []
        if self.total is not None:
            counted.append(f"{min(self.done, self.total)} of {self.total} packages")
        elif self.done:
            counted.append(f"{self.done} packages so far")
        if self.doing:
            counted.append(self.doing)
        return f"{text}: {'; '.join(counted)}" if counted else text


class Heartbeat:
    """Shows a :class:`Progress` while a step runs, from a thread of its own.

    ``echo`` prints a line of its own; ``live`` (a terminal) redraws one status line in place
    and is called with ``""`` to clear it. Call :meth:`printed` whenever something else was
    printed, so the quiet time counts from there. ``lock`` (default: a new one) is held
    while the progress is read; whoever feeds it holds it too. Use as a context manager.
    """

    def __init__(
        self,
        progress: Progress,
        echo: Callable[[str], None],
        live: Callable[[str], None] | None = None,
        *,
        quiet_s: float = QUIET_S,
        clock: Callable[[], float] = time.monotonic,
        lock: threading.Lock | None = None,
    ) -> None:
        self.progress = progress
        self._echo, self._live = echo, live
        self._quiet_s, self._clock = quiet_s, clock
        self._last_printed = clock()
        self._stop = threading.Event()
        self.lock = lock or threading.Lock()
        self._thread = threading.Thread(target=self._run, name="cudalock-progress", daemon=True)

    def printed(self) -> None:
        self._last_printed = self._clock()

    def tick(self) -> None:
        """One look at the clock: redraw the live line, or say the step is still working."""
        now = self._clock()
        with self.lock:
            if self._live is not None:
                self._live(self.progress.describe(now))
            elif now - self._last_printed >= self._quiet_s:
                self._echo(f"  ... still working: {self.progress.describe(now)}")
                self._last_printed = now

    def _run(self) -> None:
        interval = REDRAW_S if self._live is not None else min(REDRAW_S, self._quiet_s)
        while not self._stop.wait(interval):
            self.tick()

    def __enter__(self) -> Heartbeat:
        self._last_printed = self._clock()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self._live is not None:
            self._live("")
