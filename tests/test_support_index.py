"""The local test index behaves like the real ones for pip (the e2e tests rely on it)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.index import PEP691_JSON, offline_env, serve_indexes
from tests.support.wheels import StandIn, torch_standin

TORCH = torch_standin("2.1.0+cu121", "12.1")


def _get(url: str, accept: str = "") -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as err:
        return err.code, "", b""


def test_pep503_and_pep691_pages_advertise_hashes_and_metadata(tmp_path: Path) -> None:
    with serve_indexes(tmp_path, pytorch={"cu121": [TORCH]}) as srv:
        status, ctype, body = _get(srv.pytorch_url + "/cu121/torch/")
        page = body.decode()
        assert status == 200 and ctype == "text/html"
        assert "/whl/cu121/torch-2.1.0%2Bcu121-py3-none-any.whl#sha256=" in page
        assert 'data-core-metadata="sha256=' in page and "data-dist-info-metadata=" in page

        status, ctype, body = _get(srv.pytorch_url + "/cu121/torch/", PEP691_JSON)
        document = json.loads(body)
        assert ctype == PEP691_JSON
        (entry,) = document["files"]
        assert entry["filename"] == "torch-2.1.0+cu121-py3-none-any.whl"
        assert entry["hashes"]["sha256"] == srv.sha256(entry["filename"])

        _s, _c, metadata = _get(srv.base_url + entry["url"] + ".metadata")
        assert b"Version: 2.1.0+cu121" in metadata
        assert _get(srv.pypi_url + "/torch/")[0] == 404


def test_faults_are_injected_then_clear(tmp_path: Path) -> None:
    with serve_indexes(tmp_path, pytorch={"cu121": [TORCH]}) as srv:
        srv.fail("/whl/cu121/torch/", status=503, times=1)
        assert _get(srv.pytorch_url + "/cu121/torch/")[0] == 503
        assert _get(srv.pytorch_url + "/cu121/torch/")[0] == 200
        wheel = srv.file_path(TORCH.filename)
        srv.tamper(wheel, times=1)
        body = _get(srv.base_url + wheel)[2]
        assert hashlib.sha256(body).hexdigest() != srv.sha256(TORCH.filename)


@pytest.mark.slow
def test_pip_installs_the_labelled_build_from_the_local_index(tmp_path: Path) -> None:
    newer = torch_standin("2.15.0", "13.2")
    with serve_indexes(
        tmp_path,
        pytorch={"cu121": [TORCH]},
        pypi=[newer, StandIn("finetunekit", "1.0", requires_dist=["torch>=2.0"])],
    ) as srv:
        subprocess.run(
            [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "v")], check=True
        )
        python = str(tmp_path / "v" / "bin" / "python")
        pip = [sys.executable, "-m", "pip", "--python", python, "install", "--no-input"]
        subprocess.run(
            [*pip, "--index-url", srv.pytorch_url + "/cu121", "torch==2.1.0+cu121"],
            check=True,
            env=offline_env(),
            capture_output=True,
        )
        # Unpinned, the PyPI-like index offers the newer unlabelled torch: what cudalock prevents.
        done = subprocess.run(
            [
                *pip,
                "--index-url",
                srv.pypi_url,
                "--dry-run",
                "--quiet",
                "--report",
                "-",
                "--upgrade",
                "finetunekit",
                "torch",
            ],
            env=offline_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        chosen = {
            i["metadata"]["name"]: i["metadata"]["version"]
            for i in json.loads(done.stdout)["install"]
        }
        assert chosen["torch"] == "2.15.0"
        # pip read the dependencies from the PEP 658 file next to the wheel.
        assert srv.requested("/pypi/files/torch-2.15.0-py3-none-any.whl.metadata")
