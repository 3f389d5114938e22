"""Files inside a wheel on an index, read with HTTP range requests: only the parts asked for.

A wheel is a zip archive whose table of contents (the central directory) sits at its end. A
:class:`RemoteZip` is a seekable, read-only file over the wheel's URL: :mod:`zipfile` reads the
end record and the central directory through it, then only the members it is asked for, each
with a request of its own. A 300 MiB vllm wheel is read in a few hundred KiB that way, where
downloading it whole would cost the whole file. An index that ignores ``Range`` (answers 200
with the whole body) is read whole, up to the wheel limit.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from collections.abc import Sequence

from cudalock import httpget
from cudalock.errors import EnvironmentFailure
from cudalock.urls import redact

__all__ = [
    "BLOCK",
    "WHEEL_LIMIT",
    "MemberReader",
    "RemoteZip",
    "open_wheel",
]

#: A wheel is read whole only from a server that ignores range requests.
WHEEL_LIMIT = 256 * 2**20

#: Bytes asked for at a time: a zip's end record and a central directory of a few thousand
#: entries fit in one or two; member data comes in blocks of this size.
BLOCK = 256 * 2**10


class RemoteZip(io.RawIOBase):
    """A seekable read-only file whose bytes come from ``url`` by HTTP range requests."""

    def __init__(
        self, url: str, *, indexes: Sequence[str] = (), timeout_s: float = 60, retries: int = 3
    ) -> None:
        super().__init__()
        self.url = url
        self._indexes = tuple(indexes)
        self._timeout_s = timeout_s
        self._retries = retries
        self._position = 0
        self._blocks: dict[int, bytes] = {}
        #: Bytes fetched, for the caller's accounting (and the tests').
        self.fetched = 0
        self._whole: bytes | None = None
        self.size = self._probe_size()

    # -- HTTP ---------------------------------------------------------------------------------

    def _request(self, start: int, end: int, limit: int) -> httpget.Answer:
        try:
            return httpget.get(
                self.url,
                timeout=self._timeout_s,
                limit=limit,
                retries=self._retries,
                credentials=httpget.credentials_of(self._indexes),
                headers={"Range": f"bytes={start}-{end}"},
            )
        except httpget.NotFound:
            raise FileNotFoundError(self.url) from None

    def _probe_size(self) -> int:
        """The file's size, from the answer to a request for its first byte."""
        try:
            answer = self._request(0, 0, WHEEL_LIMIT)
        except httpget.TooLarge as err:
            # Only a server that ignores Range sends more than the one byte asked for.
            size = f"{err.size / 2**20:.0f} MiB" if err.size else "too large"
            raise EnvironmentFailure(
                f"{redact(self.url)} cannot be read: its server does not serve parts of files "
                f"(it ignored an HTTP Range request), and the wheel ({size}) is larger than "
                f"the {WHEEL_LIMIT // 2**20} MiB cudalock downloads whole to read it",
                hint="Use an index that serves PEP 658 metadata files or HTTP Range requests "
                "(pypi.org does both).",
            ) from None
        data = answer.body
        self.fetched += len(data)
        if answer.status == 200:  # no range support: the whole file came back
            self._whole = data
            return len(data)
        total = (answer.content_range or "").rpartition("/")[2]
        if not total.isdigit():
            raise EnvironmentFailure(f"{redact(self.url)} answered a range without its size")
        return int(total)

    def _block(self, number: int) -> bytes:
        if number not in self._blocks:
            start = number * BLOCK
            end = min(self.size, start + BLOCK) - 1
            answer = self._request(start, end, end - start + 1)
            data = answer.body
            if answer.status != 206 or len(data) != end - start + 1:
                raise EnvironmentFailure(
                    f"{redact(self.url)} answered bytes {start}-{end} with HTTP {answer.status} "
                    f"and {len(data)} bytes"
                )
            self.fetched += len(data)
            self._blocks[number] = data
        return self._blocks[number]

    # -- io.RawIOBase -------------------------------------------------------------------------

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self.size}[whence]
        self._position = max(0, base + offset)
        return self._position

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        wanted = min(len(buffer), max(0, self.size - self._position))
        if wanted == 0:
            return 0
        if self._whole is not None:
            data = self._whole[self._position : self._position + wanted]
        else:
            first, last = self._position // BLOCK, (self._position + wanted - 1) // BLOCK
            joined = b"".join(self._block(n) for n in range(first, last + 1))
            skip = self._position - first * BLOCK
            data = joined[skip : skip + wanted]
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)


class MemberReader:
    """``read(offset, size)`` over one member of an open wheel, decompressed only as far as
    asked (what :func:`cudalock.sharedlibs.needed_libraries` reads)."""

    def __init__(self, archive: zipfile.ZipFile, name: str, limit: int) -> None:
        self._stream = archive.open(name)
        self._data = bytearray()
        self._limit = limit
        self._name = name

    def __call__(self, offset: int, size: int) -> bytes:
        end = offset + size
        if end > self._limit:
            raise EnvironmentFailure(
                f"{self._name}: reading it to byte {end} exceeds {self._limit // 2**20} MiB"
            )
        while len(self._data) < end:
            try:
                chunk = self._stream.read(max(BLOCK, end - len(self._data)))
            except (zlib.error, zipfile.BadZipFile) as err:
                raise EnvironmentFailure(f"{self._name} cannot be decompressed: {err}") from None
            if not chunk:
                break
            self._data += chunk
        return bytes(self._data[offset:end])

    def close(self) -> None:
        self._stream.close()


def open_wheel(
    url: str, *, indexes: Sequence[str] = (), timeout_s: float = 60, retries: int = 3
) -> tuple[zipfile.ZipFile, RemoteZip]:
    """The wheel at ``url`` as a zip archive read by range requests, and its remote file."""
    remote = RemoteZip(url, indexes=indexes, timeout_s=timeout_s, retries=retries)
    try:
        return zipfile.ZipFile(io.BufferedReader(remote, buffer_size=BLOCK)), remote
    except zipfile.BadZipFile:
        raise EnvironmentFailure(f"{redact(url)} is not a zip archive (a wheel)") from None
