"""Reading return codes and training logs: what the launcher, DataLoader and DeepSpeed said.

Pure functions over text. Forms understood:

- return codes: ``-9``, ``137`` (shell 128+9), ``exitcode: -9``, ``exits with return code = -11``,
  ``SIGKILL``, and 247/245 (the DeepSpeed launcher's ``sys.exit(-9)`` / ``sys.exit(-11)``);
- torchrun: ``exitcode  : -9 (pid: 1234)``, ``failed (exitcode: -9) local_rank: 0 (pid: 1234)``,
  ``Signal 9 (SIGKILL) received by PID 1234``;
- DeepSpeed launcher: ``[…] exits with return code = -11``;
- DataLoader: ``DataLoader worker (pid 77) is killed by signal: Killed.`` / ``… Bus error.``,
  and the worker's own ``ERROR: Unexpected bus error encountered in worker.``;
- ``CUDA out of memory``, Slurm's OOM and time-limit lines, NCCL watchdog timeouts;
- the run's shape: DeepSpeed config path, ZeRO stage, offload, GPUs per node, nodes, params;
- where and when it ran (:class:`RunTrace`): the lines' timestamps, the hosts the launcher,
  torchrun's error summary or Slurm name, the ranks' command names and Slurm job ids. Kernel lines
  pasted into the log are left out of these: they are evidence to match against the run.
"""

from __future__ import annotations

import ast
import re
import signal
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import PurePosixPath
from typing import Any

from cudalock.doctor.kernel import full_date, is_kernel_line, year_for
from cudalock.errors import InputError, UsageError
from cudalock.memory.finetuning import FineTuning, finetuning_from_text
from cudalock.memory.sizes import parse_bytes
from cudalock.procs import signal_name

__all__ = [
    "COMM_LENGTH",
    "MAX_EVENTS_PER_KIND",
    "MAX_LINE_CHARS",
    "ExitStatus",
    "LogEvent",
    "LogFacts",
    "RunShape",
    "RunTrace",
    "container_memory_limit",
    "params_from_model_name",
    "parse_exit_code",
    "scan_training_log",
    "shape_from_deepspeed_config",
]

#: The DeepSpeed launcher ends with sys.exit(-N); a shell then shows 256-N.
_LAUNCHER_WRAPPED = {256 - n: n for n in (6, 7, 9, 11)}


@dataclass(frozen=True)
class ExitStatus:
    """A return code as the user gave it, and the signal it stands for (if any)."""

    raw: str
    signal: int | None
    code: int | None
    form: str

    @property
    def name(self) -> str:
        return signal_name(self.signal) if self.signal is not None else f"exit status {self.code}"

    def to_json(self) -> dict[str, Any]:
        return {
            "raw": self.raw,
            "signal": self.signal,
            "signal_name": signal_name(self.signal) if self.signal is not None else None,
            "exit_code": self.code,
            "form": self.form,
        }


_NUMBER_IN = re.compile(r"(?<![\w.])([+-]?\d+)(?![\w.])")
_SIGNAL_NAME = re.compile(r"\bSIG[A-Z0-9]{2,7}\b")


def _from_number(raw: str, value: int) -> ExitStatus:
    if value < 0:
        if -value > 64:
            raise UsageError(
                f"exit code {raw!r}: signal {-value} does not exist; "
                "expected e.g. -9, 137, -11 or 139"
            )
        return ExitStatus(raw, -value, None, f"killed by signal {-value} (Python/launcher form)")
    if 128 < value <= 128 + 64:
        return ExitStatus(raw, value - 128, None, f"shell/container form 128+{value - 128}")
    if value in _LAUNCHER_WRAPPED:
        n = _LAUNCHER_WRAPPED[value]
        return ExitStatus(raw, n, None, f"the DeepSpeed launcher's sys.exit(-{n}) seen by a shell")
    if value > 255:
        raise UsageError(f"exit code {raw!r} is out of range; expected e.g. -9, 137, -11 or 139")
    return ExitStatus(raw, None, value, "plain exit status")


def parse_exit_code(text: str) -> ExitStatus:
    """``-9``, ``137``, ``exitcode: -9``, ``exits with return code = -11``, ``SIGSEGV``."""
    raw = text.strip()
    if not raw:
        raise UsageError("--exit-code is empty; expected e.g. -9, 137, -11 or 139")
    names = [n for n in _SIGNAL_NAME.findall(raw.upper()) if n in signal.Signals.__members__]
    if names:  # "Signal 9 (SIGKILL) received by PID 1234": the name is the signal
        return ExitStatus(raw, int(signal.Signals[names[0]]), None, "signal name")
    numbers = _NUMBER_IN.findall(raw)
    if numbers:
        if len(numbers[0].lstrip("+-")) > 6:  # and int() refuses thousands of digits
            raise UsageError(
                f"exit code {raw[:40]!r}... is out of range; expected e.g. -9, 137, -11 or 139"
                if len(raw) > 40
                else f"exit code {raw!r} is out of range; expected e.g. -9, 137, -11 or 139"
            )
        return _from_number(raw, int(numbers[0]))
    raise UsageError(
        f"exit code {raw!r} is not understood; expected e.g. -9, 137, 'exitcode: -9', -11 or 139"
    )


# --- training logs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogEvent:
    """One line of the training log that matters, and what kind of line it is."""

    kind: str
    line_no: int
    line: str
    signal: int | None = None
    pid: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "line_no": self.line_no,
            "line": self.line,
            "signal": self.signal,
            "pid": self.pid,
        }


@dataclass(frozen=True)
class RunShape:
    """What the log says about the run, each field None when it does not say."""

    deepspeed_config: str | None = None
    zero_stage: int | None = None
    offload_optimizer: bool | None = None
    offload_param: bool | None = None
    gather_16bit_weights: bool | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    params: int | None = None
    params_source: str | None = None
    model: str | None = None
    #: The container's memory limit (bytes) as a pasted pod description gives it.
    container_memory_limit: int | None = None
    #: The fine-tuning method and its numbers, as LLaMA-Factory, PEFT or axolotl print them.
    finetuning: FineTuning | None = None

    def to_json(self) -> dict[str, Any]:
        document = dict(self.__dict__)
        document["finetuning"] = self.finetuning.to_json() if self.finetuning else None
        return document


@dataclass(frozen=True)
class RunTrace:
    """Where and when the log says the run ran, and what its processes were called."""

    #: The first and last time a line of the run was logged (naive local time).
    first_time: datetime | None = None
    last_time: datetime | None = None
    hosts: tuple[str, ...] = ()
    #: Program names of the ranks (``python3``), as the kernel would name them.
    commands: tuple[str, ...] = ()
    slurm_job_ids: tuple[str, ...] = ()
    #: Kernel-log lines found in the log (pasted dmesg output).
    kernel_lines: int = 0
    #: The times come from stamps without a year (glog's) and nothing in the log names one:
    #: the year of the reference (this machine's clock) was assumed.
    year_assumed: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "first_time": self.first_time.isoformat(sep=" ") if self.first_time else None,
            "last_time": self.last_time.isoformat(sep=" ") if self.last_time else None,
            "hosts": list(self.hosts),
            "commands": list(self.commands),
            "slurm_job_ids": list(self.slurm_job_ids),
            "kernel_lines": self.kernel_lines,
            "year_assumed": self.year_assumed,
        }


@dataclass(frozen=True)
class LogFacts:
    events: tuple[LogEvent, ...]
    shape: RunShape
    trace: RunTrace = field(default_factory=RunTrace)

    def of_kind(self, *kinds: str) -> tuple[LogEvent, ...]:
        return tuple(event for event in self.events if event.kind in kinds)

    def _last_phase(self, kind: str, *ended_by: str) -> LogEvent | None:
        """The last ``kind`` line, if no line of an ``ended_by`` kind came after it."""
        last = None
        for event in self.events:
            if event.kind == kind:
                last = event
            elif event.kind in ended_by:
                last = None
        return last

    @property
    def died_while_saving(self) -> LogEvent | None:
        """The last checkpoint-save line, if training made no progress after it."""
        return self._last_phase("checkpoint-save", "training-progress")

    @property
    def died_while_loading(self) -> LogEvent | None:
        """The last model-loading line, if no training step or save came after it."""
        return self._last_phase("model-loading", "training-progress", "checkpoint-save")

    @property
    def reported_pids(self) -> tuple[int, ...]:
        return tuple(dict.fromkeys(e.pid for e in self.events if e.pid is not None))

    def to_json(self) -> dict[str, Any]:
        return {
            "events": [event.to_json() for event in self.events],
            "run": self.shape.to_json(),
            "trace": self.trace.to_json(),
        }


def _signal_from_code(value: int) -> int | None:
    if value < 0:
        return -value
    if 128 < value <= 192:
        return value - 128
    return None


# (kind, pattern); a pattern's "code" group is an exit code, "sig" a signal number, "pid" a PID.
_EVENT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("launcher-exit", re.compile(r"exitcode\s*:\s*(?P<code>-?\d+)\s*\(pid:\s*(?P<pid>\d+)\)")),
    (
        "launcher-exit",
        re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: \d+ \(pid: (?P<pid>\d+)\)"),
    ),
    ("launcher-signal", re.compile(r"Signal (?P<sig>\d+) \(SIG\w+\) received by PID (?P<pid>\d+)")),
    ("launcher-exit", re.compile(r"exits with return code = (?P<code>-?\d+)")),
    # The DeepSpeed launcher names each rank's PID as it stops them.
    ("launcher-stopping", re.compile(r"sigkill_handler\] Killing subprocess (?P<pid>\d+)")),
    (
        "dataloader-killed",
        re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: Killed"),
    ),
    (
        "dataloader-bus-error",
        re.compile(r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: Bus error"),
    ),
    # What the worker itself prints from torch's SIGBUS and SIGSEGV handlers
    # (torch/csrc/DataLoader.cpp), often the only line left in a container's log.
    ("dataloader-bus-error", re.compile(r"Unexpected bus error encountered in worker")),
    (
        "dataloader-segfault",
        re.compile(
            r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: Segmentation fault"
        ),
    ),
    ("dataloader-segfault", re.compile(r"Unexpected segmentation fault encountered in worker")),
    ("cuda-oom", re.compile(r"CUDA out of memory|torch\.(?:cuda\.)?OutOfMemoryError")),
    ("slurm-oom", re.compile(r"Detected \d+ oom[-_]kill events?")),
    # srun's report of the same: "srun: error: node7: task 0: Out Of Memory".
    ("slurm-oom", re.compile(r"srun: error: \S+: tasks? [\d,-]+: Out Of Memory")),
    ("slurm-time-limit", re.compile(r"CANCELLED AT \S+ DUE TO TIME LIMIT")),
    ("slurm-cancelled", re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON \S+ CANCELLED AT")),
    # A container's last state (kubectl describe / get -o json|yaml, docker inspect); docker's
    # "OOMKilled": false of a healthy container is not one.
    ("kubernetes-oomkilled", re.compile(r"\bOOMKilled\b(?![\"']?\s*:\s*false)")),
    ("nccl-timeout", re.compile(r"Watchdog caught collective operation timeout|NCCL.*timed out")),
    (
        "checkpoint-save",
        re.compile(
            r"Saving model checkpoint to|Checkpoint \S+ is about to be saved|Saving checkpoint"
            # The Lightning callbacks of the stable-diffusion trainers (CompVis main.py's
            # melk, on_exception) print this, then call trainer.save_checkpoint.
            r"|[Ss]ummoning checkpoint"
        ),
    ),
    # transformers' from_pretrained progress bar (vLLM prints "Loading safetensors checkpoint
    # shards"): the weights are being read into host RAM.
    ("model-loading", re.compile(r"Loading (?:safetensors )?checkpoint shards")),
    ("training-progress", re.compile(r"""['"]loss['"]\s*:|\bloss[:=]\s*\d""")),
    ("shell-killed", re.compile(r"^(?:\S+: line \d+: +\d+ )?Killed\b")),
    ("shell-segfault", re.compile(r"Segmentation fault(?: \(core dumped\))?\s*$")),
    ("shell-bus-error", re.compile(r"^(?:\S+: line \d+: +\d+ )?Bus error\b")),
)


#: Words every line of a kind contains. A log is searched for these from its end, and only the
#: lines holding one are matched against the patterns: a 10-million-line log then takes seconds,
#: not minutes. (tests/doctor/test_log_search.py checks every kind has its words.)
_EVENT_KEYWORDS: dict[str, tuple[str, ...]] = {
    "launcher-exit": ("exitcode", "exits with return code"),
    "launcher-signal": ("received by PID",),
    "launcher-stopping": ("Killing subprocess",),
    "dataloader-killed": ("DataLoader worker",),
    "dataloader-bus-error": ("DataLoader worker", "bus error encountered in worker"),
    "dataloader-segfault": ("DataLoader worker", "segmentation fault encountered in worker"),
    "cuda-oom": ("CUDA out of memory", "OutOfMemoryError"),
    "slurm-oom": ("oom-kill event", "oom_kill event", "Out Of Memory"),
    "slurm-time-limit": ("DUE TO TIME LIMIT",),
    "slurm-cancelled": ("CANCELLED AT",),
    "kubernetes-oomkilled": ("OOMKilled",),
    "nccl-timeout": ("Watchdog caught collective operation timeout", "NCCL"),
    "checkpoint-save": (
        "Saving model checkpoint to",
        "is about to be saved",
        "Saving checkpoint",
        "ummoning checkpoint",
    ),
    "model-loading": ("checkpoint shards",),
    "training-progress": ("loss",),
    "shell-killed": ("Killed",),
    "shell-segfault": ("Segmentation fault",),
    "shell-bus-error": ("Bus error",),
}
#: The newest events kept of each kind (enough for every rank of a large job).
MAX_EVENTS_PER_KIND = 256
#: Lines holding one keyword examined at most, from the end (crash lines are near the end).
_MAX_LINES_PER_KEYWORD = 50_000
#: Longer lines are cut before matching (a 20 MB line is no reason to use 20 MB more).
MAX_LINE_CHARS = 64 * 2**10


def _number(text: str | None) -> int | None:
    """A count or ID from a log line; None when absent or longer than any real one (int()
    refuses thousands of digits, and a log is not trusted to be sane)."""
    digits = (text or "").replace(",", "")
    return int(digits) if digits and len(digits.lstrip("-")) <= 18 else None


def _classify(line: str) -> tuple[str, str, int | None, int | None] | None:
    """The first pattern (in table order) a line matches: (kind, line, signal, pid)."""
    for part in line.splitlines() or [line]:  # a carriage return starts a line on a terminal
        stripped = part.strip()
        if not stripped:
            continue
        for kind, pattern in _EVENT_PATTERNS:
            match = pattern.search(stripped)
            if match is None:
                continue
            groups = match.groupdict()
            sig = _number(groups.get("sig"))
            code = _number(groups.get("code"))
            if code is not None:
                sig = _signal_from_code(code)
            return kind, stripped[:500], sig, _number(groups.get("pid"))
    return None


def _line_at(text: str, position: int) -> tuple[int, int]:
    """The start and end of the line holding ``position``."""
    start = text.rfind("\n", 0, position) + 1
    end = text.find("\n", position)
    return start, len(text) if end < 0 else end


def _events(text: str) -> list[LogEvent]:
    """The newest :data:`MAX_EVENTS_PER_KIND` events of each kind, in log order."""
    kinds_of: dict[str, set[str]] = {}
    for kind, words in _EVENT_KEYWORDS.items():
        for word in words:
            kinds_of.setdefault(word, set()).add(kind)
    classified: dict[int, tuple[str, str, int | None, int | None] | None] = {}
    for word, kinds in kinds_of.items():
        wanted = dict.fromkeys(kinds, 0)
        end = len(text)
        for _examined in range(_MAX_LINES_PER_KEYWORD):
            position = text.rfind(word, 0, end)
            if position < 0:
                break
            start, stop = _line_at(text, position)
            end = start
            if start not in classified:
                classified[start] = _classify(text[start : min(stop, start + MAX_LINE_CHARS)])
            found = classified[start]
            if found is not None and found[0] in wanted:
                wanted[found[0]] += 1
                if min(wanted.values()) >= MAX_EVENTS_PER_KIND:
                    break
    events: list[LogEvent] = []
    line_no, previous = 1, 0
    for start in sorted(classified):
        line_no += text.count("\n", previous, start)
        previous = start
        found = classified[start]
        if found is not None:
            kind, line, sig, pid = found
            events.append(LogEvent(kind, line_no, line, sig, pid))
    counts: dict[str, int] = {}
    kept: list[LogEvent] = []
    for event in reversed(events):
        counts[event.kind] = counts.get(event.kind, 0) + 1
        if counts[event.kind] <= MAX_EVENTS_PER_KIND:
            kept.append(event)
    return kept[::-1]


#: Lower-case words the lines describing the run's shape hold (see the patterns below).
_SHAPE_KEYWORDS = (
    "deepspeed",
    "zero",
    "offload_",
    "gather_16bit_weights",
    "--nproc",
    "--num",
    "--nnodes",
    "world info dict",
    "all params",
    "trainable parameters",
    "model_name_or_path",
    "limits",
    "lora",
    "finetuning",
    "fine-tuning method",
    "quantiz",
    "load_in_4bit",
    "adapter",
    "trainable params",
)
#: A shape line and the lines after it (a config printed as indented JSON) ...
_SHAPE_WINDOW_LINES = 40
_SHAPE_WINDOW_CHARS = 64 * 2**10
#: ... the first and last of them for each word, and at most this much text in all.
_SHAPE_WINDOWS_PER_WORD = 64
_SHAPE_EXCERPT_CHARS = 8 * 2**20


def _shape_excerpt(text: str) -> str:
    """The parts of ``text`` that can describe the run's shape, in order: the windows after the
    first and the last lines holding each shape word. The patterns, some of which take their
    first match and some their last, then see what they would in the whole log, in far less
    time."""
    lowered = text.lower()
    starts: set[int] = set()
    for word in _SHAPE_KEYWORDS:
        position = -1
        for _first in range(_SHAPE_WINDOWS_PER_WORD):
            position = lowered.find(word, position + 1)
            if position < 0:
                break
            starts.add(_line_at(lowered, position)[0])
        end = len(lowered)
        for _last in range(_SHAPE_WINDOWS_PER_WORD):
            position = lowered.rfind(word, 0, end)
            if position < 0:
                break
            start = _line_at(lowered, position)[0]
            starts.add(start)
            end = start
    del lowered
    windows: list[tuple[int, int]] = []
    for start in sorted(starts):
        stop = start
        for _line in range(_SHAPE_WINDOW_LINES + 1):
            stop = text.find("\n", stop + 1)
            if stop < 0:
                stop = len(text)
                break
        stop = min(stop, start + _SHAPE_WINDOW_CHARS)
        if windows and start <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], stop))
        else:
            windows.append((start, stop))
    half = _SHAPE_EXCERPT_CHARS // 2
    head_end, size = 0, 0
    while head_end < len(windows) and size < half:
        size += windows[head_end][1] - windows[head_end][0]
        head_end += 1
    tail_start, size = len(windows), 0
    while tail_start > head_end and size < half:
        tail_start -= 1
        size += windows[tail_start][1] - windows[tail_start][0]
    chosen = windows[:head_end] + windows[tail_start:]
    # "}" between windows: no JSON-block pattern can run from one window into the next.
    return "\n}\n".join(text[start:stop] for start, stop in chosen)


_CONFIG_PATH = re.compile(
    r"""(?:--deepspeed(?:_config)?|deepspeed_config|"deepspeed")["'=:\s]+["']?(?P<path>[^\s"',]+\.json)"""
)
_STAGE = (
    re.compile(r"ZeRO stage (?P<n>[0-3])\b", re.IGNORECASE),
    re.compile(r"zero_optimization_stage\W*(?P<n>[0-3])\b"),
    re.compile(r"zero_optimization\.stage\W*(?P<n>[0-3])\b"),
    # The spans are bounded: unbounded, each of many unclosed openings scans to the text's end.
    re.compile(r""""zero_optimization"\s*:\s*\{[^{}]{0,4000}?"stage"\s*:\s*(?P<n>[0-3])"""),
    re.compile(
        r"""['"]zero_optimization['"]\s*:\s*\{[^{}]{0,4000}?['"]stage['"]\s*:\s*(?P<n>[0-3])"""
    ),
    re.compile(r"zero_config\W(?:(?!zero_config).){0,1000}?\bstage=(?P<n>[0-3])\b"),
)
# "offload_param": {"device": "cpu"} in JSON, offload_param=…Config(device='cpu') in DeepSpeed's
# config dump, offload_param=None when unset; never reading across into the other offload key.
_OFFLOAD = (
    r"{what}(?:\W{{1,3}}(?P<null>None|null)\b"
    r"|(?:(?!offload)[^\n]){{0,60}}?device\W{{0,40}}?"
    r"(?:OffloadDeviceEnum\.)?(?P<device>cpu|nvme|none)\b)"
)
_OFFLOAD_OPTIMIZER = re.compile(_OFFLOAD.format(what="offload_optimizer"))
_OFFLOAD_PARAM = re.compile(_OFFLOAD.format(what="offload_param"))
_GATHER = re.compile(
    r"gather_16bit_weights_on_model_save\W{0,40}?(?P<value>true|false)\b", re.IGNORECASE
)
_NPROC = re.compile(r"--(?:nproc[_-]per[_-]node|num[_-]gpus)[= ](?P<n>\d+)")
_NNODES = re.compile(r"--(?:nnodes|num[_-]nodes)[= ](?P<n>\d+)(?![:\d])")
_WORLD_INFO = re.compile(r"WORLD INFO DICT: (?P<dict>\{.*\})")
_ALL_PARAMS = re.compile(r"all params: (?P<n>[\d,]+)")
_TRAINABLE = re.compile(r"Number of trainable parameters = (?P<n>[\d,]+)")
_MODEL_ARG = re.compile(
    r"--model_name_or_path[= ](?P<name>\S+)|model_name_or_path[=:]\s*['\"]?"
    r"(?P<name2>[^\s'\",]+)"
)
_SIZE_IN_NAME = re.compile(r"(?<![\dA-Za-z.])(?P<n>\d{1,6}(?:\.\d{1,6})?)[bB](?![A-Za-z\d])")


def params_from_model_name(name: str) -> int | None:
    """``meta-llama/Llama-2-7b-hf`` → 7·10⁹ (a guess from the name; MoE names like 8x7B: none)."""
    if re.search(r"\d+x\d+(?:\.\d+)?[bB]", name):
        return None
    found = _SIZE_IN_NAME.findall(name.rsplit("/", 1)[-1])
    if len(found) != 1:
        return None
    return int(float(found[0]) * 10**9)


def _last(patterns: tuple[re.Pattern[str], ...], text: str) -> re.Match[str] | None:
    best: re.Match[str] | None = None
    for pattern in patterns:
        for match in pattern.finditer(text):
            if best is None or match.start() > best.start():
                best = match
    return best


def _world_info(text: str) -> tuple[int | None, int | None]:
    matches = list(_WORLD_INFO.finditer(text))
    if not matches:
        return None, None
    match = matches[-1]
    try:
        info = ast.literal_eval(match.group("dict"))
    except (ValueError, SyntaxError):
        return None, None
    if not isinstance(info, dict) or not info:
        return None, None
    ranks = [len(v) for v in info.values() if isinstance(v, list)]
    return (max(ranks) if ranks else None), len(info)


_QUANTITY = r"(?P<q>[0-9.]{1,20}[A-Za-z]{0,3})"
_LIMITS_HEAD = re.compile(r"^[\"']?limits[\"']?\s{0,4}:\s{0,4}\{?\s*$", re.IGNORECASE)
_MEMORY_ENTRY = re.compile(rf"^[\"']?memory[\"']?\s{{0,40}}:\s{{0,40}}[\"']?{_QUANTITY}[\"']?,?$")
_INLINE_LIMITS = re.compile(
    rf"\"limits\"\s{{0,4}}:\s{{0,4}}\{{[^{{}}]{{0,200}}?\"memory\"\s{{0,4}}:\s{{0,4}}\"{_QUANTITY}\""
)


def container_memory_limit(text: str) -> int | None:
    """A container's memory limit, as ``kubectl describe pod`` (``Limits:`` then ``memory:
    16Gi``), ``kubectl get pod -o yaml|json`` print it; the last one given. Bytes, or None."""
    found: str | None = None
    lines = text.splitlines()
    for position, line in enumerate(lines):
        stripped = line.strip()
        if (inline := _INLINE_LIMITS.search(stripped)) is not None:
            found = inline.group("q")
        elif _LIMITS_HEAD.match(stripped):
            for entry in lines[position + 1 : position + 6]:
                if (memory := _MEMORY_ENTRY.match(entry.strip())) is not None:
                    found = memory.group("q")
                    break
    if found is None:
        return None
    try:
        return parse_bytes(found, unit_required=False)  # Kubernetes: a bare number is bytes
    except InputError:
        return None


def _shape(text: str) -> RunShape:
    config = _CONFIG_PATH.search(text)
    stage = _last(_STAGE, text)
    opt = _last((_OFFLOAD_OPTIMIZER,), text)
    par = _last((_OFFLOAD_PARAM,), text)
    gather = _last((_GATHER,), text)
    gpus, nodes = _world_info(text)
    if gpus is None and (nproc := _NPROC.search(text)):
        gpus = _number(nproc.group("n"))
    if nodes is None and (nnodes := _NNODES.search(text)):
        nodes = _number(nnodes.group("n"))
    params: int | None = None
    params_source: str | None = None
    finetuning = finetuning_from_text(text)
    if (count := _last((_ALL_PARAMS,), text)) is not None:
        params, params_source = _number(count.group("n")), "log: 'all params'"
    elif (count := _last((_TRAINABLE,), text)) is not None and not (
        finetuning is not None and finetuning.adapter
    ):
        # The Trainer's count; with LoRA it counts the adapter, not the model.
        params = _number(count.group("n"))
        params_source = "log: 'Number of trainable parameters' (full fine-tuning assumed)"
    model_match = _MODEL_ARG.search(text)
    model = (model_match.group("name") or model_match.group("name2")) if model_match else None
    if params is None and model and (guess := params_from_model_name(model)):
        params, params_source = guess, f"the model name {model!r} (a guess)"
    return RunShape(
        container_memory_limit=container_memory_limit(text),
        finetuning=finetuning,
        deepspeed_config=config.group("path") if config else None,
        zero_stage=int(stage.group("n")) if stage else None,
        offload_optimizer=(opt.group("device") not in (None, "none")) if opt else None,
        offload_param=(par.group("device") not in (None, "none")) if par else None,
        gather_16bit_weights=(gather.group("value").lower() == "true") if gather else None,
        gpus_per_node=gpus,
        nodes=nodes,
        params=params,
        params_source=params_source,
        model=model,
    )


# Timestamps as training stacks print them, near the start of a line: DeepSpeed's
# "[2026-11-29 13:40:02,511]", Trainer's "[INFO|trainer.py:2369] 2026-11-29 13:40:40,001",
# torchrun's summary "time : 2026-11-29_14:02:15", ISO with an offset, accelerate's
# "11/29/2026 13:40:02", and glog's "E1129 14:02:15.120000" (no year).
_FULL_TIME = re.compile(
    r"(?<!\d)(?P<date>\d{4}-\d\d-\d\d)[ T_](?P<time>\d\d:\d\d:\d\d)(?:[.,]\d+)?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)?(?!\d)"
)
_US_TIME = re.compile(r"(?<!\d)(?P<m>\d\d)/(?P<d>\d\d)/(?P<y>\d{4}) (?P<time>\d\d:\d\d:\d\d)")
_GLOG_TIME = re.compile(r"^[IWEF](?P<m>\d\d)(?P<d>\d\d) (?P<time>\d\d:\d\d:\d\d)\.\d+ ")
#: How far into a line a timestamp is looked for: prefixes such as "[INFO|trainer.py:2369] ".
_STAMP_WITHIN = 60

_HOST_PATTERNS = (
    re.compile(r"^host\s*:\s*(?P<host>[\w.-]+)$"),  # torchrun's error summary
    re.compile(r"^srun: error: (?P<host>[\w.-]+): task"),
    re.compile(r"\*\*\* (?:JOB|STEP) \S+ ON (?P<host>[\w.-]+) CANCELLED"),
    re.compile(r"^slurmstepd-(?P<host>[\w.-]+): "),
    # pdsh, as DeepSpeed's multi-node launcher prefixes each line: "node-3: [2026-…".
    re.compile(r"^(?P<host>[A-Za-z][\w.-]*): \[\d{4}-\d\d-\d\d"),
)
_COMMAND_PATTERNS = (
    re.compile(r"of binary: (?P<path>\S+)"),  # torchrun
    re.compile(r"\bcmd = (?P<path>\S+)"),  # the DeepSpeed launcher
    re.compile(r"^\[['\"](?P<path>[^'\"]+)['\"], .*\] exits with return code"),
)
_SLURM_JOB = re.compile(r"\bStepId=(?P<job>\d+)|\*\*\* (?:JOB|STEP) (?P<job2>\d+)")
#: The kernel truncates a process's name to 15 characters (TASK_COMM_LEN).
COMM_LENGTH = 15


def _full_time(match: re.Match[str]) -> datetime | None:
    tz = match.group("tz")
    text = f"{match.group('date')}T{match.group('time')}{'+00:00' if tz == 'Z' else (tz or '')}"
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    return when.astimezone().replace(tzinfo=None) if when.tzinfo is not None else when


def _line_time(line: str) -> tuple[datetime | None, tuple[int, int, str] | None]:
    """A line's full timestamp, or glog's year-less (month, day, time)."""
    head = line[: _STAMP_WITHIN + 30]
    if (match := _FULL_TIME.search(head)) is not None and match.start() <= _STAMP_WITHIN:
        return _full_time(match), None
    if (match := _US_TIME.search(head)) is not None and match.start() <= _STAMP_WITHIN:
        try:
            return datetime.strptime(
                f"{match.group('y')}-{match.group('m')}-{match.group('d')} {match.group('time')}",
                "%Y-%m-%d %H:%M:%S",
            ), None
        except ValueError:
            return None, None
    if (match := _GLOG_TIME.match(line)) is not None:
        return None, (int(match.group("m")), int(match.group("d")), match.group("time"))
    return None, None


#: Names that say "this machine" without naming it.
_NO_HOST_NAMES = ("localhost", "127.0.0.1")


def _world_hosts(text: str) -> list[str]:
    matches = list(_WORLD_INFO.finditer(text))
    if not matches:
        return []
    try:
        info = ast.literal_eval(matches[-1].group("dict"))
    except (ValueError, SyntaxError):
        return []
    if not isinstance(info, dict):
        return []
    return [str(name) for name in info if str(name) not in _NO_HOST_NAMES]


def _trace(text: str, reference: datetime | None) -> RunTrace:
    times: list[datetime] = []
    year_less: list[tuple[int, int, str]] = []
    hosts: list[str] = []
    commands: list[str] = []
    jobs: list[str] = []
    kernel_lines = 0
    kernel_dates: list[datetime] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if is_kernel_line(line):
            kernel_lines += 1
            if (kernel_date := full_date(line)) is not None:
                kernel_dates.append(kernel_date)
            continue
        when, partial = _line_time(line)
        if when is not None:
            times.append(when)
        elif partial is not None:
            year_less.append(partial)
        for pattern in _HOST_PATTERNS:
            if (match := pattern.search(line)) is not None:
                # torchrun's summary says "host : localhost" for a single-node run: no name.
                if match.group("host") not in _NO_HOST_NAMES:
                    hosts.append(match.group("host"))
                break
        for pattern in _COMMAND_PATTERNS:
            if (match := pattern.search(line)) is not None:
                commands.append(PurePosixPath(match.group("path")).name[:COMM_LENGTH])
                break
        if (match := _SLURM_JOB.search(line)) is not None:
            jobs.append(match.group("job") or match.group("job2"))
    # glog lines carry no year: the one of the log's full timestamps, else of the kernel lines
    # pasted with it (the same incident's dmesg -T), else the reference's.
    dated = times or kernel_dates
    anchor = max(dated) + timedelta(days=1) if dated else reference
    year_assumed = bool(year_less) and not dated
    for month, day, clock in year_less:
        if (when := year_for(month, day, clock, anchor)) is not None:
            times.append(when)
    hosts.extend(_world_hosts(text))
    return RunTrace(
        first_time=min(times) if times else None,
        last_time=max(times) if times else None,
        hosts=tuple(dict.fromkeys(hosts)),
        commands=tuple(dict.fromkeys(command for command in commands if command)),
        slurm_job_ids=tuple(dict.fromkeys(jobs)),
        kernel_lines=kernel_lines,
        year_assumed=year_assumed,
    )


def scan_training_log(text: str, *, reference: datetime | None = None) -> LogFacts:
    """The crash lines, the run's shape and where and when it ran, found in a training log.

    ``reference`` (default: now) gives glog's year-less stamps a year when the log has no
    full timestamp.
    """
    return LogFacts(
        tuple(_events(text)), _shape(_shape_excerpt(text)), _trace(_trace_excerpt(text), reference)
    )


#: How much of each end of a log tells where and when the run ran: its first and last lines,
#: the launcher's world info at the start and its error summary at the end.
_TRACE_END_CHARS = 4 * 2**20


def _trace_excerpt(text: str) -> str:
    """The first and last :data:`_TRACE_END_CHARS` of ``text``, cut at line ends."""
    if len(text) <= 2 * _TRACE_END_CHARS:
        return text
    head_end = text.rfind("\n", 0, _TRACE_END_CHARS)
    tail_start = text.find("\n", len(text) - _TRACE_END_CHARS)
    return text[: max(head_end, 0)] + "\n" + text[tail_start + 1 :]


def shape_from_deepspeed_config(config: dict[str, Any]) -> RunShape:
    """ZeRO stage, offload and gathering from a DeepSpeed config JSON ("auto" counts as unknown)."""
    zero = config.get("zero_optimization")
    if not isinstance(zero, dict):
        return RunShape()
    stage = zero.get("stage")

    def device(key: str) -> bool | None:
        section = zero.get(key)
        if not isinstance(section, dict):
            return False if section is None else None
        value = section.get("device")
        return None if value in (None, "auto") else value != "none"

    gather = zero.get(
        "stage3_gather_16bit_weights_on_model_save", zero.get("gather_16bit_weights_on_model_save")
    )
    return RunShape(
        zero_stage=stage if isinstance(stage, int) and 0 <= stage <= 3 else None,
        offload_optimizer=device("offload_optimizer"),
        offload_param=device("offload_param"),
        gather_16bit_weights=gather if isinstance(gather, bool) else None,
    )
