"""NVML answers recorded at the pynvml boundary, and a stand-in module that replays them.

A recording is JSON::

    {
      "description": "...",
      "system": {"nvmlInit": null, "nvmlSystemGetDriverVersion": "535.104.05",
                 "nvmlSystemGetCudaDriverVersion_v2": 12020, "nvmlDeviceGetCount": 1, ...},
      "devices": [{"nvmlDeviceGetName": "NVIDIA A100-SXM4-80GB",
                   "nvmlDeviceGetCudaComputeCapability": [8, 0],
                   "nvmlDeviceGetMemoryInfo": {"total": 85899345920}, ...}]
    }

An answer of ``{"nvml_error": CODE}`` raises ``pynvml.NVMLError(CODE)``: pynvml's own class
machinery turns it into the matching subclass (12 → ``NVMLError_LibraryNotFound``, 18 →
``NVMLError_LibRmVersionMismatch``), so the probe's error handling runs against real exception
types. A call with no recorded answer is logged in ``unrecorded`` and raises AssertionError,
so a test can tell a fixture that does not cover what the probe asked.

``python tests/support/fake_nvml.py > answers.json`` records a real machine's answers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

SYSTEM_CALLS = (
    "nvmlInit",
    "nvmlSystemGetDriverVersion",
    "nvmlSystemGetCudaDriverVersion_v2",
    "nvmlSystemGetCudaDriverVersion",
    "nvmlDeviceGetCount",
)
DEVICE_CALLS = (
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetMemoryInfo",
)


class FakeNvml:
    """Quacks like the ``pynvml`` module for the calls the probe makes."""

    NVMLError = pynvml.NVMLError

    def __init__(self, recording: dict[str, Any]) -> None:
        self.system: dict[str, Any] = recording.get("system", {})
        self.devices: list[dict[str, Any]] = recording.get("devices", [])
        self.calls: list[str] = []
        self.unrecorded: list[str] = []
        self.initialised = 0

    @classmethod
    def load(cls, path: Path) -> FakeNvml:
        return cls(json.loads(path.read_text(encoding="utf-8")))

    def _answer(self, table: dict[str, Any], call: str) -> Any:
        self.calls.append(call)
        if call not in table:
            self.unrecorded.append(call)
            raise AssertionError(f"no recorded NVML answer for {call}")
        value = table[call]
        if isinstance(value, dict) and "nvml_error" in value:
            raise pynvml.NVMLError(value["nvml_error"])
        return value

    def nvmlInit(self) -> None:
        self._answer(self.system, "nvmlInit")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.calls.append("nvmlShutdown")
        if self.initialised == 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        self.initialised -= 1

    def _require_init(self) -> None:
        if self.initialised == 0:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def nvmlSystemGetDriverVersion(self) -> str:
        self._require_init()
        return str(self._answer(self.system, "nvmlSystemGetDriverVersion"))

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        self._require_init()
        return int(self._answer(self.system, "nvmlSystemGetCudaDriverVersion_v2"))

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._require_init()
        return int(self._answer(self.system, "nvmlSystemGetCudaDriverVersion"))

    def nvmlDeviceGetCount(self) -> int:
        self._require_init()
        return int(self._answer(self.system, "nvmlDeviceGetCount"))

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        self._require_init()
        self.calls.append("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.devices):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        answer = self.devices[index].get("nvmlDeviceGetHandleByIndex")
        if isinstance(answer, dict) and "nvml_error" in answer:
            raise pynvml.NVMLError(answer["nvml_error"])
        return index

    def _device(self, handle: int, call: str) -> Any:
        self._require_init()
        return self._answer(self.devices[handle], call)

    def nvmlDeviceGetName(self, handle: int) -> str:
        return str(self._device(handle, "nvmlDeviceGetName"))

    def nvmlDeviceGetUUID(self, handle: int) -> str:
        return str(self._device(handle, "nvmlDeviceGetUUID"))

    def nvmlDeviceGetCudaComputeCapability(self, handle: int) -> tuple[int, int]:
        major, minor = self._device(handle, "nvmlDeviceGetCudaComputeCapability")
        return int(major), int(minor)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        # pynvml returns a c_nvmlMemory_t structure; the probe reads its ``total`` attribute.
        return SimpleNamespace(**self._device(handle, "nvmlDeviceGetMemoryInfo"))


def record(library: Any = pynvml) -> dict[str, Any]:
    """Ask a real NVML every question the probe asks; errors are kept as their codes."""

    def ask(call: str, *args: Any) -> Any:
        try:
            value = getattr(library, call)(*args)
        except library.NVMLError as err:
            return {"nvml_error": err.value}
        if isinstance(value, bytes):
            return value.decode()
        if call == "nvmlDeviceGetMemoryInfo":
            return {"total": value.total, "free": value.free, "used": value.used}
        if isinstance(value, tuple):
            return list(value)
        return value

    recording: dict[str, Any] = {
        "description": "recorded on a real machine",
        "system": {},
        "devices": [],
    }
    recording["system"]["nvmlInit"] = ask("nvmlInit")
    if recording["system"]["nvmlInit"] is not None:
        return recording
    try:
        for call in SYSTEM_CALLS[1:]:
            recording["system"][call] = ask(call)
        count = recording["system"]["nvmlDeviceGetCount"]
        for index in range(count if isinstance(count, int) else 0):
            handle = library.nvmlDeviceGetHandleByIndex(index)
            recording["devices"].append({call: ask(call, handle) for call in DEVICE_CALLS})
    finally:
        library.nvmlShutdown()
    return recording


if __name__ == "__main__":
    json.dump(record(), sys.stdout, indent=2)
    sys.stdout.write("\n")
