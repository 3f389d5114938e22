"""The default Python is the newest the whole closure installs on, proved by real uv.

Stand-ins on 127.0.0.1, for the shipped matrix's torch 2.11.0 (CPython 3.10-3.14 on
linux-x86_64), CPU build: torch has wheels up to this interpreter's Python and one newer (so
not 3.14 here), and ``tokenkit``, a binary package, has wheels up to this interpreter's Python
and an sdist. So the newest Python torch ships has no torch wheel, the next ones no tokenkit
wheel, and this interpreter's Python is the newest the whole stack installs on: what ``lock``
and ``bootstrap`` choose, say and record, and what ``--create`` builds the venv with.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cudalock.lock.pylock import parse_lock
from tests.support.cli import cudalock
from tests.support.index import IndexServer, offline_env, serve_indexes
from tests.support.realstack import load_recording
from tests.support.wheels import StandIn, torch_standin

pytestmark = pytest.mark.slow

RUNNING = f"{sys.version_info[0]}.{sys.version_info[1]}"
MINOR = sys.version_info[1]
TORCH = "2.11.0"
LINUX = "manylinux_2_28_x86_64"
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")

#: The stand-in stacks below need an interpreter older than torch 2.11.0's newest Python.
older_than_torchs_newest = pytest.mark.skipif(
    not 10 <= MINOR <= 13,
    reason="needs an interpreter older than the newest Python torch 2.11.0 ships (3.14)",
)


def _tag(minor: int) -> str:
    return f"cp3{minor}-cp3{minor}-{LINUX}"


#: Python minors torch has wheels for: to one above this interpreter's, never 3.14.
TORCH_MINORS = range(10, min(MINOR + 1, 13) + 1)


def _stand_ins(torch: str, torch_minors: range) -> tuple[list[StandIn], list[StandIn]]:
    pytorch = [torch_standin(f"{torch}+cpu", None, tag=_tag(m)) for m in torch_minors]
    pypi = [
        *(StandIn("tokenkit", "1.0", tag=_tag(m)) for m in range(10, MINOR + 1)),
        StandIn("tokenkit", "1.0", kind="sdist"),
        StandIn("purekit", "2.0", kind="sdist"),  # pure, sdist only: rejects no Python
    ]
    return pytorch, pypi


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexServer]:
    pytorch, pypi = _stand_ins(TORCH, TORCH_MINORS)
    with serve_indexes(
        tmp_path_factory.mktemp("index"), pytorch={"cpu": pytorch}, pypi=pypi
    ) as server:
        yield server


def _args(index: IndexServer, torch: str = TORCH) -> list[str]:
    pytorch, pypi = index
    return [
        "--no-gpu",
        "--platform",
        "linux-x86_64",
        "--torch",
        f"=={torch}",
        "--with",
        "none",
        "--framework",
        "tokenkit",
        "--framework",
        "purekit",
        "--pytorch-index",
        pytorch,
        "--pypi-index",
        pypi,
    ]


def _expected_reason() -> list[str]:
    """What the plan must say passed over each newer Python."""
    said = [f"3.{m} has no wheel of tokenkit" for m in range(MINOR + 1, 14) if m in TORCH_MINORS]
    if 14 not in TORCH_MINORS:
        said.insert(0, f"3.14 has no wheel of torch {TORCH}+cpu")
    return said


@older_than_torchs_newest
def test_lock_takes_the_newest_python_the_whole_stack_installs_on(
    index: IndexServer, tmp_path: Path
) -> None:
    out = tmp_path / "lock"
    done = cudalock("lock", "-o", out, *_args(index), cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"for Python {RUNNING} on linux-x86_64" in done.stdout
    assert f"Python {RUNNING}: the newest for which the whole stack installs" in done.stdout
    for passed_over in _expected_reason():
        assert passed_over in done.stdout
    lock, data = parse_lock((out / "pylock.toml").read_text(), source="pylock.toml")
    assert data["requires-python"] == f"=={RUNNING}.*"
    record = data["tool"]["cudalock"]
    assert record["python"] == RUNNING
    assert "the newest for which the whole stack installs" in record["plan"]["python_reason"]
    packages = {str(p.name): p for p in lock.packages}
    # tokenkit comes as the wheel for this Python; the pure sdist-only package stays an sdist.
    wheels = [str(w.url).rsplit("/", 1)[-1] for w in packages["tokenkit"].wheels or ()]
    assert wheels == [f"tokenkit-1.0-{_tag(MINOR)}.whl"]
    assert packages["purekit"].sdist is not None

    # The choice is recorded: --check plans for it, and a plain lock keeps it in one run.
    check = cudalock("lock", "-o", out, "--check", *_args(index), cwd=tmp_path, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    again = cudalock("lock", "-o", out, *_args(index), cwd=tmp_path, timeout=300)
    assert again.returncode == 0, again.stderr
    assert again.stderr.count("resolving the closure for Python") == 1, again.stderr
    assert f"resolving the closure for Python {RUNNING}" in again.stderr
    assert f"for Python {RUNNING} on" in again.stdout


@older_than_torchs_newest
def test_python_flag_overrides_the_default(index: IndexServer, tmp_path: Path) -> None:
    older_than_torch = f"3.{max(TORCH_MINORS)}"
    out = tmp_path / "lock"
    done = cudalock(
        "lock", "-o", out, *_args(index), "--python", older_than_torch, "--json", cwd=tmp_path
    )
    if older_than_torch == RUNNING:
        # torch's newest wheel is this Python's: the override is the default itself.
        assert done.returncode == 0, done.stderr
        return
    # Asked for: kept, though tokenkit must then be built from its sdist.
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["python"] == older_than_torch
    assert "as asked" in result["python_reason"]
    lock, _data = parse_lock((out / "pylock.toml").read_text(), source="pylock.toml")
    tokenkit = next(p for p in lock.packages if p.name == "tokenkit")
    assert not tokenkit.wheels and tokenkit.sdist is not None


@older_than_torchs_newest
def test_bootstrap_json_and_every_format_carry_the_same_python(
    index: IndexServer, tmp_path: Path
) -> None:
    for fmt in ("conda", "pixi"):
        out = tmp_path / fmt
        done = cudalock(
            "bootstrap",
            "-o",
            out,
            "--format",
            fmt,
            *_args(index),
            "--json",
            cwd=tmp_path,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        plan = json.loads(done.stdout)["plan"]
        assert plan["python"] == RUNNING
        assert plan["python_reason"].startswith(f"Python {RUNNING}: the newest for which")
        assert any(plan["python_reason"] == line for line in plan["explanation"])
    assert f"python={RUNNING}" in (tmp_path / "conda" / "environment.yml").read_text()
    assert f'python = "{RUNNING}.*"' in (tmp_path / "pixi" / "pixi.toml").read_text()
    # lock --check finds bootstrap's lock current: the Python it chose is recorded there.
    check = cudalock("lock", "-o", tmp_path / "conda", "--check", cwd=tmp_path, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def _create(
    index: IndexServer, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """``bootstrap --format venv --create`` of the stand-in stack into ``tmp_path/env``, which
    must succeed; the directory and the run."""
    out = tmp_path / "env"
    done = cudalock(
        "bootstrap",
        "-o",
        out,
        "--format",
        "venv",
        "--create",
        *_args(index),
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done


@older_than_torchs_newest
def test_create_builds_the_venv_with_the_plans_python(index: IndexServer, tmp_path: Path) -> None:
    out, done = _create(index, tmp_path)
    assert f"with Python {RUNNING}" in done.stdout
    version = subprocess.run(
        [str(out / ".venv" / "bin" / "python"), "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
        env=offline_env(),
    ).stdout.strip()
    assert version == f"(3, {MINOR})"


@older_than_torchs_newest
def test_create_downloads_ahead_for_each_python_tried_and_keeps_the_chosen_ones(
    index: IndexServer, tmp_path: Path
) -> None:
    # Without --python the torch wheels still download while uv resolves: for each Python
    # tried, the download begun for the one passed over stopped; the chosen Python's torch
    # wheel is in uv's cache before install.sh, which installs it from there.
    (tmp_path / "tmp").mkdir()
    env = offline_env() | {
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "TMPDIR": str(tmp_path / "tmp"),
    }
    del env["UV_NO_CACHE"]
    wheel = f"torch-{TORCH}+cpu-{_tag(MINOR)}.whl"
    before = len(index.requested(index.file_path(wheel)))
    out, done = _create(index, tmp_path, env)
    log = (out / "cudalock-bootstrap.log").read_text()
    heading = "### the torch and CUDA wheels, downloading since the resolution began"
    sections = log.split(heading)[1:]
    assert len(sections) >= 2
    for passed_over in sections[:-1]:
        assert "stopped: the closure is resolved for Python 3." in passed_over
    chosen = sections[-1].split("\n### ", 1)[0]
    assert f"--python-version {RUNNING} " in chosen and "stopped" not in chosen
    assert log.index(heading) < log.index("### install.sh")
    assert len(index.requested(index.file_path(wheel))) - before == 1
    assert "ahead failed" not in done.stdout
    assert not list((tmp_path / "tmp").iterdir())


def test_create_refuses_when_the_plans_python_is_not_here(tmp_path: Path) -> None:
    """torch 2.15.0 ships 3.11-3.15, and the whole stack installs on 3.15, which no
    interpreter here is: exit 3 naming the next steps, and nothing written."""
    if UV is not None:
        found = subprocess.run(
            [UV, "python", "find", "--no-python-downloads", "3.15"],
            capture_output=True,
            env=offline_env(),
            check=False,
        )
        if found.returncode == 0:
            pytest.skip("a Python 3.15 is installed here")
    pytorch = [torch_standin("2.15.0+cpu", None, tag=_tag(m)) for m in range(11, 16)]
    pypi = [StandIn("tokenkit", "1.0"), StandIn("purekit", "2.0", kind="sdist")]
    with serve_indexes(tmp_path / "index", pytorch={"cpu": pytorch}, pypi=pypi) as server:
        out = tmp_path / "env"
        done = cudalock(
            "bootstrap",
            "-o",
            out,
            "--format",
            "venv",
            "--create",
            *_args(server, "2.15.0"),
            cwd=tmp_path,
            timeout=300,
        )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "the plan is for Python 3.15, and no Python 3.15 is here" in done.stderr
    assert "uv python install 3.15" in done.stderr or "install Python 3.15" in done.stderr
    assert "--python" in done.stderr
    assert "Traceback" not in done.stderr
    assert not out.exists() or not any(p for p in out.iterdir() if p.name != ".cudalock.lock")


def test_no_python_with_every_wheel_keeps_the_newest_and_says_what_is_built(
    tmp_path: Path,
) -> None:
    """oldkit has wheels for CPython 3.9 alone: no Python torch 2.11.0 ships installs it from
    a wheel, so the newest is kept, saying that oldkit is built from its sdist."""
    pytorch = [torch_standin(f"{TORCH}+cpu", None, tag=_tag(m)) for m in range(10, 15)]
    pypi = [StandIn("oldkit", "1.0", tag=_tag(9)), StandIn("oldkit", "1.0", kind="sdist")]
    with serve_indexes(tmp_path / "index", pytorch={"cpu": pytorch}, pypi=pypi) as server:
        pytorch_url, pypi_url = server
        done = cudalock(
            "lock",
            "-o",
            tmp_path / "lock",
            "--no-gpu",
            "--platform",
            "linux-x86_64",
            "--torch",
            f"=={TORCH}",
            "--with",
            "none",
            "--framework",
            "oldkit",
            "--pytorch-index",
            pytorch_url,
            "--pypi-index",
            pypi_url,
            "--json",
            cwd=tmp_path,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["python"] == "3.14"
    reason = result["python_reason"]
    assert "no Python torch 2.11.0 ships installs the whole stack from wheels" in reason
    assert "3.14 has no wheel of oldkit 1.0" in reason
    assert "oldkit 1.0 is built from its sdist" in reason


def _real_lock(
    server: IndexServer, tmp_path: Path, torch: str, driver: str, framework: str
) -> subprocess.CompletedProcess[str]:
    return cudalock(
        "lock",
        "-o",
        tmp_path / "lock",
        "--driver-version",
        driver,
        "--gpu",
        "A100",
        "--platform",
        "linux-x86_64",
        "--torch",
        torch,
        "--framework",
        framework,
        "--pytorch-index",
        server.pytorch_url,
        "--pypi-index",
        server.pypi_url,
        "--json",
        cwd=tmp_path,
        timeout=600,
    )


def test_the_recorded_closure_steps_down_where_a_family_build_lacks_the_wheel(
    real_stack: IndexServer, tmp_path: Path
) -> None:
    """torch 2.5.1 ships 3.9-3.13; the recording's torchvision 0.20.1 has no cp313 wheel: the
    llamafactory + DeepSpeed closure is locked for 3.12."""
    files = load_recording().release("torchvision", "0.20.1").files
    assert not any("-cp313-" in f for f in files)  # the recorded fact this test rests on
    done = _real_lock(
        real_stack, tmp_path, "2.5.1", "550.54.14", "llamafactory[metrics,deepspeed]==0.9.4"
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["python"] == "3.12"
    assert result["python_reason"] == (
        "Python 3.12: the newest for which the whole stack installs; 3.13 has no wheel of "
        "torchvision 0.20.1+cu124 (--python chooses another)."
    )
    assert result["packages"]["deepspeed"]


def test_a_closure_without_a_solution_on_the_newest_python_is_tried_on_the_next(
    real_stack: IndexServer, tmp_path: Path
) -> None:
    """On 3.13 gradio requires audioop-lts<1.0, which the recording (made for 3.11 and 3.12)
    lacks: uv finds no solution there, and one on 3.12, which is chosen, saying why."""
    done = _real_lock(real_stack, tmp_path, "2.8.0", "570.86.15", "llamafactory[metrics]==0.9.5")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["python"] == "3.12"
    assert "3.13 has no solution for the closure (uv: because" in result["python_reason"].lower()
    assert "audioop-lts" in result["python_reason"]


def test_a_conflict_of_the_request_is_not_blamed_on_the_python(
    real_stack: IndexServer, tmp_path: Path
) -> None:
    """llamafactory 0.9.4's deepspeed extra caps DeepSpeed below what --with pins: no Python
    changes that: after one more Python fails the same way, the first conflict stands (exit 1)."""
    done = cudalock(
        "lock",
        "-o",
        tmp_path / "lock",
        "--driver-version",
        "550.54.14",
        "--gpu",
        "A100",
        "--platform",
        "linux-x86_64",
        "--torch",
        "2.5.1",
        "--framework",
        "llamafactory[metrics,deepspeed]==0.9.4",
        "--with",
        "deepspeed==0.19.8",
        "--pytorch-index",
        real_stack.pytorch_url,
        "--pypi-index",
        real_stack.pypi_url,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 1, done.stderr
    assert "deepspeed" in done.stderr.rsplit("cudalock: error:", 1)[-1]
    assert not (tmp_path / "lock" / "pylock.toml").exists()


def test_a_release_without_wheels_gives_way_to_one_with_a_wheel_on_the_same_python(
    tmp_path: Path,
) -> None:
    """tokenkit 2.0 is an sdist alone, 1.0 has wheels for every Python: the Python stays the
    newest, and tokenkit is taken at 1.0, which installs from a wheel; the plan says so."""
    pytorch = [torch_standin(f"{TORCH}+cpu", None, tag=_tag(m)) for m in range(10, 15)]
    pypi = [
        *(StandIn("tokenkit", "1.0", tag=_tag(m)) for m in range(10, 15)),
        StandIn("tokenkit", "2.0", kind="sdist"),
    ]
    with serve_indexes(tmp_path / "index", pytorch={"cpu": pytorch}, pypi=pypi) as server:
        pytorch_url, pypi_url = server
        args = ["--no-gpu", "--platform", "linux-x86_64", "--torch", f"=={TORCH}"]
        args += ["--with", "none", "--framework", "tokenkit"]
        args += ["--pytorch-index", pytorch_url, "--pypi-index", pypi_url, "--json"]
        done = cudalock("lock", "-o", tmp_path / "lock", *args, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert (result["python"], result["packages"]["tokenkit"]) == ("3.14", "1.0")
    assert "tokenkit (not 2.0) taken at a version with a wheel for it" in result["python_reason"]
