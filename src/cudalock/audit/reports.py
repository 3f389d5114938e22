"""Parse pasted bug-report text into an :class:`Installed` and a description of the machine.

Recognised, in any mix and any order: ``python -m torch.utils.collect_env`` of every era (each
line optional; booleans as Yes/No or True/False; indented, quoted or hand-edited copies),
DeepSpeed's ``ds_report``, ``llamafactory-cli env`` (also hand-typed), ``pip freeze``, ``pip
list``, ``conda list``, hand-typed ``torch: 2.3.0`` lines, ``nvidia-smi``, and the error and
warning lines of PyTorch, DeepSpeed, xFormers, the CUDA runtime and the loader
(:mod:`cudalock.audit.messages`), also behind the prefixes that docker compose (``vllm-1  | ``),
``kubectl logs --prefix`` (``[pod/name/container] ``) and ``srun --label`` (``0: ``) add.
Parsing is pure and bounded: only the first :data:`MAX_REPORT_CHARS` characters are read, and
nothing but :class:`InputError` (for empty or binary input) escapes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from cudalock.audit import messages
from cudalock.audit.installed import (
    DeepSpeedBuild,
    Distribution,
    ExtensionArchs,
    Installed,
    Nvcc,
    ReportedMessage,
    TorchInstall,
    local_label,
    public_version,
)
from cudalock.errors import InputError
from cudalock.matrix import Matrix
from cudalock.model import Gpu, Target
from cudalock.packagenames import canonical_name
from cudalock.platforms import PLATFORMS, platform_for
from cudalock.versions import (
    CudaVersion,
    DriverVersion,
    cuda_from_nvml,
    cuda_from_variant,
    format_cuda,
    parse_compute_capability,
    parse_cuda_version,
)

__all__ = [
    "COLLECT_ENV",
    "CONDA_LIST",
    "DS_REPORT",
    "HAND_TYPED",
    "LLAMAFACTORY",
    "MAX_REPORT_CHARS",
    "MESSAGES",
    "NVIDIA_SMI",
    "PIP_FREEZE",
    "PIP_LIST",
    "READABLE",
    "TORCH_DISTRIBUTIONS",
    "ParsedReport",
    "ReportGpu",
    "decode_report",
    "parse_report",
    "report_target",
    "require_recognised",
]

#: Reports are a few kB; a pasted log can be larger. Read this much at most.
MAX_REPORT_CHARS = 4 * 1024 * 1024
_MAX_LINE = 4096

COLLECT_ENV = "collect_env"
DS_REPORT = "ds_report"
LLAMAFACTORY = "llamafactory-cli env"
NVIDIA_SMI = "nvidia-smi"
PIP_FREEZE = "pip freeze"
PIP_LIST = "pip list"
PIP_SHOW = "pip show"
CONDA_LIST = "conda list"
HAND_TYPED = "hand-typed versions"
MESSAGES = "error messages"
DETECTRON2 = "detectron2 collect_env"

#: What ``audit --report`` reads, in words (the message for a file in which nothing is).
READABLE = (
    "python -m torch.utils.collect_env, detectron2's collect_env, ds_report, "
    "llamafactory-cli env, pip freeze, pip list, "
    "pip show, conda list, nvidia-smi, and the error lines of PyTorch, DeepSpeed, xFormers, the "
    'CUDA runtime and the loader ("The NVIDIA driver on your system is too old", "no kernel image '
    'is available", "undefined symbol", "cannot open shared object file", ...)'
)

#: Distribution names that install the ``torch`` module.
TORCH_DISTRIBUTIONS = ("torch", "torch-nightly", "pytorch")
#: conda's names for them.
_CONDA_TORCH_NAMES = {"pytorch": "torch", "pytorch-nightly": "torch-nightly"}

_UNKNOWN = {
    "",
    "could not collect",
    "none",
    "n/a",
    "na",
    "no cuda",
    "unknown",
    "not available",
    "[fail]",
    "-",
}


@dataclass(frozen=True)
class ReportGpu:
    """A GPU a report names; the compute capability only when the report states it."""

    name: str
    compute_capability: tuple[int, int] | None = None
    index: int | None = None

    def to_json(self) -> dict[str, Any]:
        cc = self.compute_capability
        return {
            "index": self.index,
            "name": self.name,
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
        }


@dataclass(frozen=True)
class ParsedReport:
    """What a pasted report says about the environment and about the machine it ran on."""

    formats: tuple[str, ...]
    installed: Installed
    driver_version: str | None = None
    #: The driver's maximum CUDA (nvidia-smi's "CUDA Version", PyTorch's "found version 12020").
    driver_cuda: str | None = None
    gpus: tuple[ReportGpu, ...] = ()
    cuda_available: bool | None = None
    #: collect_env's "CUDA runtime version": the nvcc on PATH, not what torch loads.
    cuda_runtime: str | None = None
    #: The fields that were recognised, by format: "collect_env: PyTorch version", ...
    recognised: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def names_driver(self) -> bool:
        return self.driver_version is not None or self.driver_cuda is not None

    @property
    def driver_known(self) -> bool:
        """True when the report says which driver there is, or shows that there is none.

        collect_env with no driver, no GPU and CUDA unavailable describes a machine without an
        NVIDIA driver; a report that simply has no such field (ds_report, llamafactory-cli env)
        leaves the driver unknown.
        """
        if self.names_driver:
            return True
        return COLLECT_ENV in self.formats and self.cuda_available is False and not self.gpus

    def to_json(self) -> dict[str, Any]:
        return {
            "formats": list(self.formats),
            "driver_version": self.driver_version,
            "driver_cuda": self.driver_cuda,
            "gpus": [g.to_json() for g in self.gpus],
            "cuda_available": self.cuda_available,
            "cuda_runtime": self.cuda_runtime,
            "recognised": list(self.recognised),
            "notes": list(self.notes),
        }


def report_target(
    report: ParsedReport, matrix: Matrix, default_platform: str = "linux-x86_64"
) -> Target:
    """The machine the report describes: its driver and GPUs (compute capabilities from the
    report's own warnings, else from the matrix's GPU table by name)."""
    platform = report.installed.platform or default_platform
    notes: list[str] = []
    driver = DriverVersion(report.driver_version) if report.driver_version else None
    driver_cuda = _parse_cuda_or_none(report.driver_cuda)
    if driver is not None and driver_cuda is None:
        driver_cuda = matrix.max_cuda_for_driver(driver, platform)
        if driver_cuda is not None:
            notes.append(
                f"maximum CUDA {format_cuda(driver_cuda)} for driver {driver} from the "
                "matrix's driver table"
            )
    gpus = []
    for gpu in report.gpus:
        cc = gpu.compute_capability
        if cc is None:
            model = matrix.gpu_by_name(gpu.name)
            cc = model.compute_capability if model else None
            if model is None:
                notes.append(
                    f"GPU {gpu.name!r} is not in the matrix's GPU table: its compute "
                    "capability is unknown (give --compute-capability)"
                )
        gpus.append(Gpu(name=gpu.name, compute_capability=cc, index=gpu.index))
    if not report.driver_known:
        notes.append("the report does not name the NVIDIA driver")
    return Target(
        platform=platform,
        driver_version=driver,
        driver_cuda=driver_cuda,
        gpus=tuple(gpus),
        name="the machine in the report",
        source="report",
        notes=tuple(notes),
    )


def _parse_cuda_or_none(text: str | None) -> CudaVersion | None:
    if not text:
        return None
    try:
        return parse_cuda_version(text)
    except InputError:
        return None


# --------------------------------------------------------------------------------------------
# Input hygiene


def decode_report(data: bytes) -> str:
    """Bytes from a file or stdin → text, refusing binary data (InputError).

    UTF-16 with a byte-order mark is accepted: Windows PowerShell writes ``>`` redirections so.
    """
    if not data.strip():
        raise InputError(
            "the report is empty: paste the output of collect_env, ds_report or "
            "llamafactory-cli env"
        )
    head = data[: MAX_REPORT_CHARS * 4]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return head.decode("utf-16", "replace")[:MAX_REPORT_CHARS]
    if b"\x00" in head[:65536]:
        raise InputError(
            "the report is binary data, not text: expected the text output of "
            "collect_env, ds_report or llamafactory-cli env"
        )
    return head.decode("utf-8", "replace").removeprefix("\ufeff")[:MAX_REPORT_CHARS]


def _check_text(text: str) -> str:
    if not isinstance(text, str):
        raise InputError("the report must be text")
    text = text[:MAX_REPORT_CHARS]
    if not text.strip():
        raise InputError(
            "the report is empty: paste the output of collect_env, ds_report or "
            "llamafactory-cli env"
        )
    sample = text[:65536]
    controls = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\t\n\r\f\v\x1b")
    if "\x00" in sample or controls > max(16, len(sample) // 20):
        raise InputError(
            "the report is binary data, not text: expected the text output of "
            "collect_env, ds_report or llamafactory-cli env"
        )
    return text


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_QUOTE_PREFIX = re.compile(r"^(?:\s*>)+")  # markdown / email quoting
#: What log collectors put before each line: docker compose ("vllm-1  | "), kubectl logs
#: --prefix ("[pod/name/container] "), srun --label ("0: ", "12: ").
_LOG_PREFIX = re.compile(r"^(?:[A-Za-z0-9][\w.-]*[-_]\d+\s+\|\s?|\[pod/[^\]\s]+\]\s?|\d{1,4}:\s)")
_BULLET = re.compile(r"^[*•]\s+")


def _clean_lines(text: str) -> list[str]:
    lines = []
    for raw in text.splitlines():
        line = _ANSI.sub("", raw[:_MAX_LINE])
        line = _QUOTE_PREFIX.sub("", line).strip()
        line = _LOG_PREFIX.sub("", line, count=1).strip().strip("`").strip()
        line = _BULLET.sub("- ", line)
        lines.append(line)
    return lines


# --------------------------------------------------------------------------------------------
# Small value parsers (never raise)


def _known(value: str | None) -> str | None:
    if value is None:
        return None
    cleaned = value.strip().strip("`'\"").strip()
    return None if cleaned.lower() in _UNKNOWN else cleaned


def _bool(value: str) -> bool | None:
    word = value.strip().lower().split(" ")[0] if value.strip() else ""
    if word in ("true", "yes", "1"):
        return True
    if word in ("false", "no", "0"):
        return False
    return None


_CUDA_IN_TEXT = re.compile(r"(?<![\d.])(\d{1,2}\.\d{1,2})(?:\.\d+)*(?![\d])")


def _cuda_text(value: str | None) -> str | None:
    """A CUDA version in free text ("12.1", "release 12.1, V12.1.105", "12.1.105") → "12.1"."""
    value = _known(value)
    if value is None:
        return None
    match = re.search(r"release (\d{1,2}\.\d{1,2})", value) or _CUDA_IN_TEXT.search(value)
    if not match:
        return None
    try:
        return format_cuda(parse_cuda_version(match.group(1)))
    except InputError:
        return None


def _driver(value: str | None) -> str | None:
    value = _known(value)
    if value is None:
        return None
    # Whole numbers only: a 5000-digit "driver" must not be read as its first four digits.
    match = re.search(r"(?<!\d)(?<!\d\.)\d{2,4}(?:\.\d{1,3}){0,2}(?!\.?\d)", value)
    if not match:
        return None
    try:
        return str(DriverVersion(match.group(0)))
    except InputError:
        return None


def _version_token(value: str | None) -> str | None:
    """The first version-like token: "2.1.0+cu121 (GPU)" → "2.1.0+cu121"."""
    value = _known(value)
    if value is None:
        return None
    match = re.search(r"\d+(?:\.\d+)*(?:\.?[a-z]+\d*)*(?:\+[A-Za-z0-9_.]+)?", value)
    return match.group(0) if match else None


_LINUX_WORDS = ("linux", "ubuntu", "centos", "debian", "red hat", "rocky", "glibc")


def _platform(text: str | None) -> str | None:
    if not text:
        return None
    lowered = text.lower()
    arch = None
    if re.search(r"x86_64|amd64|x64", lowered):
        arch = "x86_64"
    elif re.search(r"aarch64|arm64", lowered):
        arch = "aarch64"
    if "windows" in lowered or lowered.startswith("win"):
        system = "windows"
        arch = arch or "x86_64"  # torch publishes no other Windows wheels
    elif "macos" in lowered or "darwin" in lowered or "mac os" in lowered:
        system = "macos"
        arch = arch or "aarch64"  # no architecture named: Apple silicon, the one torch serves
    elif arch and any(word in lowered for word in _LINUX_WORDS):
        system = "linux"
    else:
        return None
    name = platform_for(system, arch)
    return name if name in {platform.name for platform in PLATFORMS} else None


def _cuda_of_torch_version(version: str | None) -> str | None:
    label = local_label(version)
    cuda = cuda_from_variant(label) if label else None
    return format_cuda(cuda) if cuda else None


# --------------------------------------------------------------------------------------------
# The parser


@dataclass
class _State:
    formats: list[str] = field(default_factory=list)
    recognised: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    torch_version: str | None = None
    torch_cuda: str | None = None
    torch_cuda_known: bool = False
    torch_hip: str | None = None
    python_version: str | None = None
    platform: str | None = None
    driver_version: str | None = None
    driver_cuda: str | None = None
    gpus: list[ReportGpu] = field(default_factory=list)
    cuda_available: bool | None = None
    cuda_runtime: str | None = None
    dists: list[Distribution] = field(default_factory=list)
    nvcc: list[Nvcc] = field(default_factory=list)
    arch_list: tuple[str, ...] | None = None
    ds_version: str | None = None
    ds_torch: str | None = None
    ds_cuda: str | None = None
    ds_hip: str | None = None
    ds_ops: list[str] = field(default_factory=list)
    ds_ops_seen: bool = False
    messages: list[ReportedMessage] = field(default_factory=list)
    #: The torch CUDA an error message states ("the version torch was compiled with 11.8").
    message_torch_cuda: str | None = None
    xformers_header: bool = False
    #: The index in ``messages`` of xFormers' "PyTorch X (you have Y)" on the line before.
    xformers_built_for: int | None = None
    #: Inside a pip list / conda list table (its header was seen): the table's format.
    table: str | None = None
    extension_archs: list[ExtensionArchs] = field(default_factory=list)
    #: A row only detectron2's table has was seen: its generic rows (Python, PyTorch) are read.
    in_detectron2_table: bool = False

    def format(self, name: str) -> None:
        if name not in self.formats:
            self.formats.append(name)

    def saw(self, fmt: str, what: str) -> None:
        self.format(fmt)
        entry = f"{fmt}: {what}"
        if entry not in self.recognised:
            self.recognised.append(entry)

    def add_gpu(
        self, name: str, cc: tuple[int, int] | None = None, index: int | None = None
    ) -> None:
        """Add a GPU; a GPU named again without an index (a warning) only adds what it says."""
        name = re.sub(r"\s*\(UUID:[^)]*\)", "", name).strip()[:200]
        if not name:
            return
        same = [i for i, gpu in enumerate(self.gpus) if gpu.name == name]
        for position in same:
            if cc and not self.gpus[position].compute_capability:
                self.gpus[position] = ReportGpu(name, cc, self.gpus[position].index)
        if index is None and same:
            return
        if index is not None:
            if any(gpu.index == index for gpu in self.gpus):
                return
            # The unindexed mention came first (a warning): it was this GPU.
            unindexed = next((i for i in same if self.gpus[i].index is None), None)
            if unindexed is not None:
                gpu = self.gpus[unindexed]
                self.gpus[unindexed] = ReportGpu(name, gpu.compute_capability or cc, index)
                return
        known = next((self.gpus[i].compute_capability for i in same), None)
        self.gpus.append(ReportGpu(name, cc or known, index))

    def add_dist(self, name: str, version: str | None, location: str) -> None:
        self.dists.append(Distribution(canonical_name(name), version, location))


_KV = re.compile(r"^-?\s*([A-Za-z`][A-Za-z0-9 _/()\-.`']{0,60}?)\s*:\s*(.*)$")
_DOTTED = re.compile(r"^([A-Za-z][A-Za-z0-9 _/().\-]{0,60}?)\s*\.{3,}\s*(.*)$")
_DS_OP = re.compile(
    r"^([A-Za-z0-9_]+)\s*\.{2,}\s*\[(YES|NO)\]\s*\.{2,}\s*\[(OKAY|NO)\]", re.IGNORECASE
)
#: ``pip show torch``: "Name: torch" with "Version: 2.1.0+cu121" on the next line.
_PIP_SHOW_NAME = re.compile(r"^Name:\s*([A-Za-z0-9][A-Za-z0-9._-]*)$")
_PIP_SHOW_VERSION = re.compile(r"^Version:\s*(\d[^\s]*)$")
_PIP_LINE = re.compile(r"^\[(pip3?|conda)\]\s+(.*)$")
_GPU_LINE = re.compile(r"^GPU\s+(\d{1,4})\s*[:：]\s*(.+)$")
_SMI_HEADER = re.compile(r"Driver Version:\s*([\d.]+)(?:.*?CUDA Version:\s*([\d.]+))?")
_SMI_GPU = re.compile(
    r"^\|?\s*(\d{1,4})\s+((?:NVIDIA|Tesla|Quadro|GeForce|TITAN)[^|]*?)\s+(?:On|Off)\s*\|"
)
# Anchored: unanchored, every position of a long line would start a scan to its end.
_ARCH_WARNING = re.compile(
    r"^(.+?) with CUDA capability sm_(\d+)\s+is not compatible with the current PyTorch"
)
#: torch's older warning (torch/cuda/__init__.py, old_gpu_warn): "Found GPU0 GeForce 820M
#: which is of cuda capability 2.1."
_OLD_GPU_WARNING = re.compile(
    r"Found GPU(\d{1,4}) (.{1,120}?) which is of cuda capability (\d+\.\d+)"
)
_SUPPORTS = re.compile(r"supports CUDA capabilities ((?:sm_\d+[a-z]?\s*)+)")
_TOO_OLD = re.compile(r"driver on your system is too old \(found version (\d{4,5})\)")
_PYTORCH_VERSION_BARE = re.compile(r"^PyTorch version\s+(\d\S*)$", re.IGNORECASE)

# collect_env field names (lower case) → handler name. Hand-edited aliases included.
_COLLECT_KEYS = {
    "pytorch version": "torch_version",
    "torch version": "torch_version",
    "is debug build": "ignore",
    "cuda used to build pytorch": "torch_cuda",
    "rocm used to build pytorch": "torch_hip",
    "os": "os",
    "python version": "python_version",
    "python platform": "python_platform",
    "is cuda available": "cuda_available",
    "cuda runtime version": "cuda_runtime",
    "gpu models and configuration": "gpus",
    "nvidia driver version": "driver",
    "cudnn version": "ignore",
    "hip runtime version": "ignore",
    "miopen runtime version": "ignore",
    "is xnnpack available": "ignore",
    "is xpu available": "ignore",
    "cuda_module_loading set to": "ignore",
    "libc version": "ignore",
    "gcc version": "ignore",
    "clang version": "ignore",
    "cmake version": "ignore",
    "caching allocator config": "ignore",
    "versions of relevant libraries": "libraries",
    "version of relevant libraries": "libraries",
}
# collect_env fields that alone mark the text as collect_env.
_COLLECT_MARKERS = {
    "torch_version",
    "torch_cuda",
    "cuda_available",
    "driver",
    "gpus",
    "libraries",
    "cuda_runtime",
}

_LLAMA_PACKAGES = {
    "`llamafactory` version": "llamafactory",
    "llamafactory version": "llamafactory",
    "transformers version": "transformers",
    "datasets version": "datasets",
    "accelerate version": "accelerate",
    "peft version": "peft",
    "trl version": "trl",
    "deepspeed version": "deepspeed",
    "bitsandbytes version": "bitsandbytes",
    "vllm version": "vllm",
    "torchvision version": "torchvision",
    "torchaudio version": "torchaudio",
}


def require_recognised(report: ParsedReport) -> ParsedReport:
    """``report`` if anything in it was recognised; else InputError (exit 2) saying what
    cudalock reads: a file of nothing readable must never pass as a clean environment."""
    if report.formats or report.installed.messages:
        return report
    raise InputError(f"nothing in this file is a report cudalock reads: it reads {READABLE}")


#: llamafactory-cli env fields no other report has (so a hand-typed copy is still read).
_LLAMA_ONLY_KEYS = {
    *(key.replace("`", "") for key in _LLAMA_PACKAGES),
    "gpu type",
    "gpu number",
    "gpu memory",
    "platform",
    "default data directory",
}


def parse_report(text: str) -> ParsedReport:
    """Parse pasted report text. Raises only :class:`InputError` (empty or binary input)."""
    text = _check_text(text)
    state = _State()
    lines = _clean_lines(text)
    position = 0
    while position < len(lines):
        position = _parse_line(state, lines, position)
    return _finish(state)


def _parse_line(state: _State, lines: list[str], position: int) -> int:
    """Handle ``lines[position]`` and return the index of the next line to look at."""
    line = lines[position]
    nxt = position + 1
    if not line:
        state.table = None
        return nxt
    _scan_anywhere(state, _unwrapped(line, lines[nxt] if nxt < len(lines) else ""))
    if _package_line(state, line):
        return nxt
    shown = _PIP_SHOW_NAME.match(line)
    version = _PIP_SHOW_VERSION.match(lines[nxt]) if shown and nxt < len(lines) else None
    if shown and version:
        state.add_dist(shown.group(1), version.group(1), f"report:{PIP_SHOW}")
        state.saw(PIP_SHOW, "Name and Version")
        return nxt + 1
    if (
        "DeepSpeed C++/CUDA extension op report" in line
        or "DeepSpeed general environment info" in line
    ):
        state.saw(DS_REPORT, "header")
        return nxt
    op = _DS_OP.match(line)
    if op:
        state.ds_ops_seen = True
        state.saw(DS_REPORT, "op table")
        if op.group(2).upper() == "YES":
            state.ds_ops.append(op.group(1))
        return nxt
    pip = _PIP_LINE.match(line)
    if pip:
        _library_line(state, pip.group(1), pip.group(2))
        return nxt
    row = _D2_ROW.match(line)
    if row and _detectron2_row(state, row.group(1), row.group(2).strip(), line):
        return nxt
    dotted = _DOTTED.match(line)
    if dotted:
        _ds_field(state, dotted.group(1).strip().lower(), dotted.group(2).strip())
        return nxt
    typed = _HAND_TORCH_BARE.match(line)
    if typed:
        state.torch_version = state.torch_version or typed.group(1)
        state.saw(HAND_TYPED, "torch")
        return nxt
    bare = _PYTORCH_VERSION_BARE.match(line)
    if bare:
        state.torch_version = state.torch_version or bare.group(1)
        state.saw(COLLECT_ENV, "PyTorch version")
        return nxt
    # "GPU：Tesla V100S": a full-width colon, as a Chinese input method types it.
    kv = _KV.match(line.replace("\uff1a", ": "))
    if not kv:
        return nxt
    key = kv.group(1).strip().strip("`").strip().lower()
    raw_key = kv.group(1).strip()
    value = kv.group(2).strip()
    # llamafactory-cli env lines start with "- "; typed by hand they may not.
    is_llama = line.startswith("-") or key.replace("`", "").lstrip("- ") in _LLAMA_ONLY_KEYS
    if is_llama and _llama_field(state, raw_key.lower().lstrip("- ").strip(), value):
        return nxt
    handler = _COLLECT_KEYS.get(key)
    if handler is None:
        _hand_typed_version(state, key, value)
        return nxt
    if handler in _COLLECT_MARKERS or handler != "ignore":
        state.saw(COLLECT_ENV, raw_key)
    return _collect_field(state, handler, value, lines, nxt)


#: What a message or warning is recognised by; a paste may break one over two lines.
_WRAPPABLE = (*messages.PHRASES, "supports CUDA capabilities", "xFormers was built for")
#: The characters each side of a line break searched for a phrase broken by it (the longest
#: phrase fits).
_SEAM = max(len(phrase) for phrase in _WRAPPABLE)


def _unwrapped(line: str, following: str) -> str:
    """``line`` joined to ``following`` where a phrase is broken between them (a terminal's
    or an issue editor's wrap: "...gnu.so: undefined" / "symbol: _ZN3c10...") or where the
    message itself breaks the line, else ``line``.
    Only the seam is searched: the join costs nothing on lines no wrap broke."""
    if not following:
        return line
    if line.rstrip().endswith(messages.BROKEN_BY_THEIR_AUTHORS):
        return line.rstrip() + " " + following.strip()
    tail, head = line[-_SEAM:], following[:_SEAM]
    for glue in (" ", ""):  # a wrap at a space, or inside a word
        seam = tail + glue + head
        if any(p in seam and p not in tail and p not in head for p in _WRAPPABLE):
            return line + glue + following
    return line


def _scan_anywhere(state: _State, line: str) -> None:
    """Lines that matter whatever report they sit in: warnings, errors and nvidia-smi output."""
    _scan_message(state, line)
    # The substring test first: the lazy ``(.+?)`` makes the search quadratic in the line's
    # length, and a report of long lines that never mention it would take minutes.
    warning = _ARCH_WARNING.search(line) if " with CUDA capability sm_" in line else None
    if warning:
        name = re.sub(r"^.*?(?:UserWarning|Warning):\s*", "", warning.group(1)).strip()
        try:
            cc = parse_compute_capability(warning.group(2))
        except InputError:
            cc = None
        state.add_gpu(name, cc)
        state.saw(COLLECT_ENV, "arch warning")
    old_gpu = _OLD_GPU_WARNING.search(line) if "which is of cuda capability" in line else None
    if old_gpu:
        try:
            old_cc: tuple[int, int] | None = parse_compute_capability(old_gpu.group(3))
        except InputError:
            old_cc = None
        state.add_gpu(old_gpu.group(2).strip(), old_cc)
        state.saw(COLLECT_ENV, "old GPU warning")
    supports = _SUPPORTS.search(line)
    if supports:
        state.arch_list = tuple(supports.group(1).split())
    too_old = _TOO_OLD.search(line)
    if too_old:
        try:
            state.driver_cuda = state.driver_cuda or format_cuda(
                cuda_from_nvml(int(too_old.group(1)))
            )
            state.saw(COLLECT_ENV, "driver too old warning")
        except InputError:
            pass
    header = _SMI_HEADER.search(line)
    if header and ("NVIDIA-SMI" in line or line.startswith("|")):
        state.driver_version = state.driver_version or _driver(header.group(1))
        if header.group(2):
            state.driver_cuda = state.driver_cuda or _cuda_text(header.group(2))
        state.saw(NVIDIA_SMI, "driver header")
    gpu = _SMI_GPU.match(line)
    if gpu:
        state.add_gpu(gpu.group(2).strip(), index=int(gpu.group(1)))
        state.saw(NVIDIA_SMI, "GPU table")
    listed = _SMI_LIST.match(line)
    if listed:
        state.add_gpu(listed.group(2).strip(), index=int(listed.group(1)))
        state.saw(NVIDIA_SMI, "nvidia-smi -L")


_SMI_LIST = re.compile(r"^GPU\s+(\d{1,4}):\s*(.+?)\s*\(UUID:")


def _scan_message(state: _State, line: str) -> None:
    """An error or warning line: kept as evidence, with what it states about the machine."""
    after_header = state.xformers_header
    state.xformers_header = "xFormers was built for" in line
    built_for, state.xformers_built_for = state.xformers_built_for, None
    if built_for is not None:
        with_python = messages.with_xformers_python(state.messages[built_for], line)
        if with_python is not None:
            state.messages[built_for] = with_python
            return
    message = messages.read_message(line, after_xformers_header=after_header)
    if message is None:
        return
    if len(state.messages) < _MAX_MESSAGES and message not in state.messages:
        state.messages.append(message)
        if message.kind == messages.XFORMERS_BUILT_FOR:
            state.xformers_built_for = len(state.messages) - 1
    # Evidence, not a report format: the formats stay those of the report the lines sit in.
    entry = f"{MESSAGES}: {message.kind}"
    if entry not in state.recognised:
        state.recognised.append(entry)
    if message.kind == messages.NVCC_MISMATCH:
        nvcc, torch_cuda = message.get("nvcc"), message.get("torch_cuda")
        if nvcc and not state.nvcc:
            origin = "CUDA_HOME" if message.get("by") == "deepspeed" else "PATH"
            state.nvcc.append(Nvcc(path=None, version=nvcc, origin=origin))
        state.message_torch_cuda = state.message_torch_cuda or torch_cuda
    elif message.kind == messages.XFORMERS_BUILT_FOR:
        installed = message.get("installed")
        state.torch_version = state.torch_version or _version_token(installed)


#: A paste of a long log repeats its errors; a few hundred distinct lines are plenty.
_MAX_MESSAGES = 200

_FREEZE_LINE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(\d[^\s;]*)\s*$")
_TABLE_ROW = re.compile(
    r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s+(\d[\w.+!-]*)(?:\s+(\S+))?(?:\s+(\S+))?\s*$"
)
_PIP_LIST_HEADER = re.compile(r"^Package\s+Version(?:\s+.*)?$")
_CONDA_LIST_HEADER = re.compile(r"^#?\s*Name\s+Version\s+Build(?:\s+Channel)?\s*$")
#: Outside a pip list / conda list table a "name version" row counts only for these packages.
_RELEVANT = re.compile(
    r"^(?:torch|torch-nightly|pytorch|pytorch-nightly|torchvision|torchaudio|deepspeed|flash-attn|flash_attn|"
    r"xformers|vllm|triton|bitsandbytes|nvidia-[a-z0-9-]+|cuda-toolkit|pytorch-cuda|"
    r"cudatoolkit)$",
    re.IGNORECASE,
)


def _package_line(state: _State, line: str) -> bool:
    """A line of pip freeze, pip list or conda list (True: it was one)."""
    if _PIP_LIST_HEADER.match(line):
        state.table = PIP_LIST
        state.saw(PIP_LIST, "header")
        return True
    if _CONDA_LIST_HEADER.match(line):
        state.table = CONDA_LIST
        state.saw(CONDA_LIST, "header")
        return True
    if state.table and re.fullmatch(r"[-\s]+", line):
        return True
    freeze = _FREEZE_LINE.match(line)
    if freeze:
        state.add_dist(freeze.group(1), freeze.group(2), f"report:{PIP_FREEZE}")
        state.saw(PIP_FREEZE, "requirement lines")
        return True
    row = _TABLE_ROW.match(line)
    if row is None:
        if state.table and not line.startswith("#"):
            state.table = None
        return False
    name, version, build, channel = row.groups()
    if state.table is None and not _RELEVANT.match(name):
        return False
    if state.table == CONDA_LIST or (state.table is None and build and channel):
        location = _conda_location(build or "", channel or "")
        name = _CONDA_TORCH_NAMES.get(canonical_name(name), name)
        state.add_dist(name, version, location)
        state.saw(CONDA_LIST, "packages")
        return True
    if build and state.table is None:
        return False  # "torch 2.1.0 something": not a row of a listing
    state.add_dist(name, version, f"report:{PIP_LIST}")
    state.saw(PIP_LIST, "packages")
    return True


def _conda_location(build: str, channel: str) -> str:
    if channel == "pypi" or build.startswith("pypi") or build == "<pip>":
        return "report:[conda] pypi"
    return f"report:[conda] {build}".strip()


#: Hand-typed "torch: 2.3.0" / "PyTorch: 2.3.1+cu121" / "flash-attn: 2.5.7" lines.
_HAND_TORCH_KEYS = {"torch", "pytorch", "torch version", "pytorch version"}
#: Hand-typed machine lines: "Driver: 520.56.06", "GPU: NVIDIA RTX 4060 Ti (16GB VRAM)".
_HAND_DRIVER_KEYS = {"driver", "nvidia driver", "driver version", "gpu driver"}
_HAND_GPU_KEYS = {"gpu", "gpus", "graphics card"}
_HAND_TORCH_BARE = re.compile(r"^-?\s*(?:PyTorch|torch)\s+(\d+\.\d+[\w.+]*)\s*$", re.IGNORECASE)


def _hand_typed_version(state: _State, key: str, value: str) -> None:
    name = key.strip("- ").strip()
    if name in _HAND_DRIVER_KEYS:
        driver = _driver(value)
        if driver:
            state.driver_version = state.driver_version or driver
            state.saw(HAND_TYPED, "driver")
        return
    if name in _HAND_GPU_KEYS and re.search(r"nvidia|geforce|rtx|tesla|quadro", value, re.I):
        state.add_gpu(re.sub(r"\s*\([^)]*\)\s*$", "", value).strip())
        state.saw(HAND_TYPED, "GPU")
        return
    version = _version_token(value)
    if version is None or not re.match(r"\d+\.\d+", version):
        return
    if name in _HAND_TORCH_KEYS:
        state.torch_version = state.torch_version or version
        state.saw(HAND_TYPED, "torch")
    elif _RELEVANT.match(name.replace(" ", "-")):
        state.add_dist(name.replace(" ", "-"), version, f"report:{HAND_TYPED}")
        state.saw(HAND_TYPED, name)


def _collect_field(state: _State, handler: str, value: str, lines: list[str], nxt: int) -> int:
    if handler == "torch_version":
        state.torch_version = state.torch_version or _version_token(value)
    elif handler == "torch_cuda":
        state.torch_cuda_known = True
        state.torch_cuda = _cuda_text(value)
    elif handler == "torch_hip":
        state.torch_hip = _known(value) if _known(value) not in ("0.0", "N/A") else None
    elif handler in ("os", "python_platform"):
        state.platform = state.platform or _platform(value)
    elif handler == "python_version":
        match = re.search(r"\d+\.\d+(?:\.\d+)?", value)
        state.python_version = state.python_version or (match.group(0) if match else None)
    elif handler == "cuda_available":
        state.cuda_available = _bool(value)
        if state.cuda_available is False:
            unavailable = ReportedMessage(messages.CUDA_UNAVAILABLE, f"Is CUDA available: {value}")
            if unavailable not in state.messages:
                state.messages.append(unavailable)
    elif handler == "cuda_runtime":
        state.cuda_runtime = _cuda_text(value)
        if state.cuda_runtime:
            state.nvcc.append(Nvcc(path=None, version=state.cuda_runtime, origin="PATH"))
    elif handler == "driver":
        state.driver_version = _driver(value) or state.driver_version
    elif handler == "gpus":
        return _gpu_lines(state, value, lines, nxt)
    elif handler == "libraries":
        return nxt
    return nxt


#: A driver typed after the GPU, as the bug template's hand-filled line has it: "GeForce RTX
#: 2070, driver 450.102.04".
_GPU_AND_DRIVER = re.compile(
    r"^(.+?)(?:\s*[,;]\s*|\s*\(\s*|\s+)(?:nvidia\s+)?driver(?:\s+version)?[:\s]\s*(\d[\d.]*)\)?$",
    re.IGNORECASE,
)


def _gpu_lines(state: _State, value: str, lines: list[str], nxt: int) -> int:
    with_driver = _GPU_AND_DRIVER.match(value)
    if with_driver and _driver(with_driver.group(2)):
        value = with_driver.group(1).strip()
        state.driver_version = state.driver_version or _driver(with_driver.group(2))
    if _known(value):
        single = _GPU_LINE.match(value)
        if single:
            state.add_gpu(single.group(2), index=int(single.group(1)))
        else:
            state.add_gpu(value)
    while nxt < len(lines):
        match = _GPU_LINE.match(lines[nxt])
        if not match:
            break
        state.add_gpu(match.group(2), index=int(match.group(1)))
        nxt += 1
    return nxt


def _library_line(state: _State, manager: str, rest: str) -> None:
    rest = rest.strip()
    if not rest or rest.lower().startswith("could not collect"):
        return
    if manager.startswith("pip"):
        match = re.match(r"^([A-Za-z0-9_.\-]+)\s*(?:==\s*(\S+)|\((\S+)\))?", rest)
        if match:
            state.add_dist(match.group(1), match.group(2) or match.group(3), f"report:[{manager}]")
            state.saw(COLLECT_ENV, "pip libraries")
        return
    parts = rest.split()
    if len(parts) >= 2:
        name, version = parts[0], parts[1]
        build = parts[2] if len(parts) >= 3 else ""
        channel = parts[3] if len(parts) >= 4 else ""
        if channel == "pypi" or build.startswith("pypi"):
            # pip-installed inside conda: the same install the [pip3] lines list.
            location = "report:[conda] pypi"
        else:
            location = f"report:[conda] {build}".strip()
        if canonical_name(name) == "pytorch":
            name = "torch"
        state.add_dist(name, version, location)
        state.saw(COLLECT_ENV, "conda libraries")


#: A row of detectron2's collect_env table (detectron2/utils/collect_env.py, tabulate: the
#: key, two or more spaces, the value).
_D2_ROW = re.compile(
    r"^(sys\.platform|Python|detectron2(?: arch flags)?|torchvision(?: arch flags)?|PyTorch"
    r"|GPU available|GPU \d[\d,]*)\s{2,}(\S.*)$"
)
#: Rows no other report has: they say the table is detectron2's.
_D2_OWN_ROWS = ("sys.platform", "detectron2", "detectron2 arch flags", "torchvision arch flags")
#: An arch flags value: "sm_70" (older releases) or "6.1, 7.0" (cuobjdump's list).
_D2_ARCH = re.compile(r"(?:sm_(\d{1,2})(\d)|\b(\d{1,2})\.(\d))\b")
_D2_GPU_ARCH = re.compile(r"\s*\(arch=(\d+\.\d+)\)\s*$")


def _detectron2_row(state: _State, key: str, value: str, line: str) -> bool:
    """Read one row of detectron2's collect_env table; False when the row is not one (a row
    of another report that happens to look alike)."""
    if key in _D2_OWN_ROWS:
        state.in_detectron2_table = True
    if not state.in_detectron2_table:
        return False
    version = value.split(" @", 1)[0].strip()
    if key == "Python":
        match = re.match(r"\d+\.\d+(?:\.\d+)?", value)
        state.python_version = state.python_version or (match.group(0) if match else None)
    elif key == "PyTorch":
        state.torch_version = state.torch_version or _version_token(version)
    elif key in ("detectron2", "torchvision"):
        if re.match(r"\d+\.\d+", version):
            state.add_dist(key, version, f"report:{DETECTRON2}")
    elif key.endswith(" arch flags"):
        archs = sorted(
            {
                (int(m.group(1) or m.group(3)), int(m.group(2) or m.group(4)))
                for m in _D2_ARCH.finditer(value)
            }
        )
        if archs:  # else "...; cannot find cuobjdump": no list
            name = key.removesuffix(" arch flags")
            state.extension_archs.append(ExtensionArchs(name, tuple(archs), line.strip()))
    elif key == "GPU available":
        state.cuda_available = _bool(value)
    elif key.startswith("GPU "):
        arch = _D2_GPU_ARCH.search(value)
        name = _D2_GPU_ARCH.sub("", value).strip()
        cc = parse_compute_capability(arch.group(1)) if arch else None
        for index in key.removeprefix("GPU ").split(","):
            state.add_gpu(name, cc, index=int(index))
    state.saw(DETECTRON2, key)
    return True


def _ds_field(state: _State, key: str, value: str) -> None:
    if key == "torch version":
        state.torch_version = state.torch_version or _version_token(value)
        state.saw(DS_REPORT, "torch version")
    elif key == "torch cuda version":
        state.torch_cuda_known = True
        state.torch_cuda = _cuda_text(value) or state.torch_cuda
        state.saw(DS_REPORT, "torch cuda version")
    elif key == "torch hip version":
        state.torch_hip = state.torch_hip or _known(value)
    elif key == "nvcc version":
        version = _cuda_text(value)
        if version:
            state.nvcc.insert(0, Nvcc(path=None, version=version, origin="CUDA_HOME"))
        else:
            state.notes.append(f"ds_report found no nvcc ({value[:120]})")
        state.saw(DS_REPORT, "nvcc version")
    elif key == "deepspeed info":
        state.ds_version = _version_token(value.split(",")[0])
        state.saw(DS_REPORT, "deepspeed info")
    elif key.startswith("deepspeed wheel compiled"):
        torch_match = re.search(r"torch\s+([\d.]+)", value)
        cuda_match = re.search(r"cuda\s+([\d.]+)", value)
        hip_match = re.search(r"hip\s+([\d.]+)", value)
        state.ds_torch = torch_match.group(1).rstrip(".,") if torch_match else None
        state.ds_cuda = cuda_match.group(1).rstrip(".,") if cuda_match else None
        state.ds_hip = hip_match.group(1).rstrip(".,") if hip_match else None
        state.saw(DS_REPORT, "deepspeed wheel compiled w.")
    elif key in (
        "torch install path",
        "deepspeed install path",
        "shared memory (/dev/shm) size",
        "ninja",
    ):
        state.saw(DS_REPORT, key)


def _llama_field(state: _State, key: str, value: str) -> bool:
    key = key.strip()
    if key in ("pytorch version",):
        state.torch_version = state.torch_version or _version_token(value)
        if "(gpu)" in value.lower():
            state.cuda_available = True
        state.saw(LLAMAFACTORY, "PyTorch version")
        return True
    if key in _LLAMA_PACKAGES:
        version = _version_token(value)
        state.add_dist(_LLAMA_PACKAGES[key], version, "report:llamafactory-cli env")
        if _LLAMA_PACKAGES[key] == "deepspeed":
            state.ds_version = state.ds_version or version
        state.saw(LLAMAFACTORY, key)
        return True
    if key == "gpu type":
        state.add_gpu(value)
        state.saw(LLAMAFACTORY, "GPU type")
        return True
    if key == "platform":
        state.platform = state.platform or _platform(value)
        state.saw(LLAMAFACTORY, "Platform")
        return True
    if key == "python version":
        state.python_version = state.python_version or _version_token(value)
        state.saw(LLAMAFACTORY, "Python version")
        return True
    return key in ("gpu number", "gpu memory", "git commit", "default data directory")


def _finish(state: _State) -> ParsedReport:
    if not state.formats:
        state.notes.append("no collect_env, ds_report or llamafactory-cli env fields recognised")
    if state.torch_version and not state.torch_cuda_known and state.message_torch_cuda:
        # "the version torch was compiled with 11.8" (DeepSpeed, cpp_extension) names it.
        state.torch_cuda_known = True
        state.torch_cuda = state.message_torch_cuda
    torch_installs = _torch_installs(state)
    deepspeed = None
    if state.ds_version or state.ds_torch or state.ds_ops_seen:
        deepspeed = DeepSpeedBuild(
            version=state.ds_version,
            torch_version=state.ds_torch,
            torch_cuda=state.ds_cuda,
            torch_hip=state.ds_hip,
            installed_ops=tuple(state.ds_ops),
            has_build_info=state.ds_torch is not None,
        )
    installed = Installed(
        source="report:"
        + "+".join(state.formats or ([MESSAGES] if state.messages else ["unrecognised"])),
        python_version=state.python_version,
        platform=state.platform,
        distributions=tuple(_dedupe(state.dists)),
        torch=tuple(torch_installs),
        deepspeed=deepspeed,
        nvcc=tuple(state.nvcc),
        arch_list=state.arch_list,
        extension_archs=tuple(state.extension_archs),
        notes=tuple(state.notes),
        messages=tuple(state.messages),
    )
    return ParsedReport(
        formats=tuple(state.formats),
        installed=installed,
        driver_version=state.driver_version,
        driver_cuda=state.driver_cuda,
        gpus=tuple(state.gpus),
        cuda_available=state.cuda_available,
        cuda_runtime=state.cuda_runtime,
        recognised=tuple(state.recognised),
        notes=tuple(state.notes),
    )


def _torch_installs(state: _State) -> list[TorchInstall]:
    """The torch the report ran with first, then any other torch its library lists name."""
    primary: TorchInstall | None = None
    if state.torch_version:
        known = state.torch_cuda_known or local_label(state.torch_version) is not None
        cuda = (
            state.torch_cuda
            if state.torch_cuda_known
            else _cuda_of_torch_version(state.torch_version)
        )
        primary = TorchInstall(
            version=state.torch_version,
            cuda=cuda,
            hip=state.torch_hip,
            location="report",
            cuda_known=known,
        )
    others: list[TorchInstall] = []
    for dist in state.dists:
        if dist.name not in TORCH_DISTRIBUTIONS or not dist.version:
            continue
        conda = _is_conda_build(dist)
        cuda = _conda_cuda(dist.location or "") if conda else _cuda_of_torch_version(dist.version)
        candidate = TorchInstall(
            version=dist.version,
            cuda=cuda,
            location=dist.location,
            cuda_known=conda or local_label(dist.version) is not None,
        )
        if primary is None:
            primary = candidate
            continue
        if dist.name == "torch-nightly":
            # Another distribution of the same module: always a second install.
            if candidate not in others:
                others.append(candidate)
            continue
        if _same_install(primary, candidate, conda):
            if conda and not primary.cuda_known:
                # conda's pytorch has no label; its build string names the CUDA.
                primary = replace(primary, cuda=cuda, cuda_known=True)
            continue
        if not any(_same_install(other, candidate, conda) for other in others):
            others.append(candidate)
    runtime = _runtime_cuda(state.dists)
    if primary is not None and not primary.cuda_known and runtime and primary.label is None:
        # PyPI's unlabelled torch wheels pin the NVIDIA runtime of the CUDA they are built for.
        primary = replace(primary, cuda=runtime, cuda_known=True)
        state.notes.append(
            f"torch {primary.version}: CUDA {runtime} read from the nvidia-cuda-runtime package "
            "its PyPI wheel requires"
        )
    if primary is not None and not primary.cuda_known:
        state.notes.append(
            f"the report does not say which CUDA torch {primary.version} was built for"
        )
    return ([primary] if primary else []) + others


def _runtime_cuda(dists: list[Distribution]) -> str | None:
    """ "12.1" from nvidia-cuda-runtime-cu12 12.1.105 (one such package only)."""
    found = {
        f"{match.group(1)}.{match.group(2)}"
        for dist in dists
        if re.fullmatch(r"nvidia-cuda-runtime(?:-cu\d{2})?", dist.name)
        and (match := re.match(r"(\d{2})\.(\d)", dist.version or ""))
    }
    return found.pop() if len(found) == 1 else None


def _same_install(known: TorchInstall, listed: TorchInstall, listed_is_conda: bool) -> bool:
    """A library list names the install collect_env already described (or a second one)."""
    if not known.version or not listed.version:
        return False
    if public_version(known.version) != public_version(listed.version):
        return False
    known_conda = (known.location or "").startswith("report:[conda]")
    known_pypi = (known.location or "").endswith("[conda] pypi")
    listed_pypi = (listed.location or "").endswith("[conda] pypi")
    if (known_pypi and listed_is_conda) or (listed_pypi and known_conda and not known_pypi):
        # conda list shows pip's torch (channel pypi) and conda's pytorch as two rows.
        return False
    if listed_is_conda:
        # conda's pytorch carries no local label; a labelled torch is a pip wheel beside it.
        return local_label(known.version) is None
    listed_label, known_label = local_label(listed.version), local_label(known.version)
    if listed_label in (None, known_label):
        return True
    # Source builds label with a git hash, and collect_env's and pip's hashes can differ.
    return not _VARIANT_LABEL.match(listed_label) and not _VARIANT_LABEL.match(known_label or "")


_VARIANT_LABEL = re.compile(r"^(?:cu\d+|cpu|rocm[\d.]+|xpu)")


def _conda_cuda(location: str) -> str | None:
    """conda build strings: "py3.10_cuda12.1_cudnn8.9.2_0" / "cuda120_py310h..." → "12.1"/"12.0"."""
    match = re.search(r"cuda(\d{1,2})\.(\d)", location) or re.search(r"cuda(\d{2})(\d)", location)
    if not match:
        return None
    return f"{int(match.group(1))}.{int(match.group(2))}"


def _dedupe(dists: list[Distribution]) -> list[Distribution]:
    """A pip package inside conda is listed twice ([pip3] and [conda] ... pypi): keep one."""
    kept: list[Distribution] = []
    for dist in dists:
        duplicate = any(
            k.name == dist.name
            and k.version == dist.version
            and not _is_conda_build(k)
            and not _is_conda_build(dist)
            for k in kept
        )
        if not duplicate:
            kept.append(dist)
    return kept


def _is_conda_build(dist: Distribution) -> bool:
    location = dist.location or ""
    return location.startswith("report:[conda]") and not location.endswith("pypi")
