"""Index URL policy (https, or loopback, or --allow-insecure-index) and credential redaction."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from cudalock.envfiles.render import RenderOptions, render_files
from cudalock.errors import UsageError
from cudalock.urls import (
    holds_credentials,
    redact,
    strip_credentials,
    strip_credentials_in,
    validate_index_url,
)
from tests.envfiles.test_render import make_plan


@pytest.mark.parametrize(
    "url",
    [
        "https://download.pytorch.org/whl/",
        "http://127.0.0.1:8080/whl",
        "http://127.9.9.9/whl",
        "http://[::1]:3141/simple",
        "http://localhost/simple",
        "https://user:tok@mirror.example/simple",
    ],
)
def test_accepted(url: str) -> None:
    assert validate_index_url(url, flag="--pypi-index") == url.rstrip("/")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://mirror.example/whl", "plain http to a non-loopback host"),
        ("http://10.0.0.1/whl", "plain http to a non-loopback host"),
        ("http://localhost.evil.example/whl", "plain http to a non-loopback host"),
        ("ftp://mirror.example/whl", "not an http(s) URL"),
        ("file:///srv/whl", "not an http(s) URL"),
        ("mirror.example/whl", "not an http(s) URL"),
        ("https://mirror.example/whl?x=1", "must not have a query or fragment"),
        ("https://mirror.example/a b", "whitespace or control characters"),
        ("https://mirror.example/a\nb", "whitespace or control characters"),
        ("https://mirror.example:99999/", "not a valid URL"),
    ],
)
def test_refused(url: str, problem: str) -> None:
    with pytest.raises(UsageError, match=re.escape(problem)):
        validate_index_url(url, flag="--pytorch-index")


def test_insecure_flag_allows_plain_http() -> None:
    assert (
        validate_index_url("http://mirror.example/whl", flag="--pytorch-index", allow_insecure=True)
        == "http://mirror.example/whl"
    )


def test_refusal_message_does_not_show_credentials() -> None:
    with pytest.raises(UsageError) as caught:
        validate_index_url("http://bob:hunter2@mirror.example/whl", flag="--pytorch-index")
    assert "hunter2" not in caught.value.message
    assert "http://***@mirror.example/whl" in caught.value.message


def test_redact_and_strip() -> None:
    text = "from https://u:p@a.example/x and http://tok@b.example:8/y, not mail@c.example"
    assert redact(text) == (
        "from https://***@a.example/x and http://***@b.example:8/y, not mail@c.example"
    )
    assert strip_credentials("https://u:p@a.example:8/x") == "https://a.example:8/x"
    assert strip_credentials("https://a.example/x") == "https://a.example/x"


@given(
    st.text(alphabet=st.characters(blacklist_characters="/@"), min_size=1, max_size=20).filter(
        lambda s: not any(ch.isspace() for ch in s)
    )
)
def test_redact_never_leaves_the_secret(secret: str) -> None:
    # (URLs with whitespace are refused before they get anywhere: validate_index_url.)
    assert redact(f"https://{secret}@mirror.example/simple") == "https://***@mirror.example/simple"


def test_hostile_but_valid_index_url_is_quoted_in_install_sh(tmp_path: Path) -> None:
    url = "https://mirror.example/$(touch$IFS'pwned');(touch$IFS'pwned2')&'q/simple"
    valid = validate_index_url(url, flag="--pypi-index")
    options = RenderOptions(name="ft", output_format="venv", pypi_index=valid)
    script = render_files(make_plan(), options)["install.sh"]
    # The mirror is the default index: --index-url, before the PyTorch index.
    line = next(ln for ln in script.splitlines() if "--index-url 'https://mirror" in ln)
    quoted = line.split("--index-url ", 1)[1].split(" --extra-index-url", 1)[0].rstrip(" \\")
    echoed = subprocess.run(
        ["bash", "-c", f"printf %s {quoted}"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    assert echoed.stdout == url
    assert not (tmp_path / "pwned").exists() and not (tmp_path / "pwned2").exists()


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("https://user:ab/SECRET@host.example/simple", "https://***@host.example/simple"),
        ("https://user:a@b@host.example/simple", "https://***@host.example/simple"),
        ("https://user:a?b#c@host.example/simple", "https://***@host.example/simple"),
        ("'https://host.example/simple?token=SECRET'", "'https://host.example/simple?***'"),
        ("https://host.example/simple#SECRET.", "https://host.example/simple#***."),
        ("git+https://u:SECRET@github.com/o/r@v1", "git+https://***@github.com/o/r@v1"),
        ("git+https://github.com/o/r@v1", "git+https://github.com/o/r@v1"),
        ("http://evil.example\\@127.0.0.1/whl", "http://***@127.0.0.1/whl"),
    ],
)
def test_redact_hides_every_form_of_secret(text: str, shown: str) -> None:
    assert redact(text) == shown
    assert "SECRET" not in redact(f"error: {text}, and more")


@given(st.text(alphabet=st.characters(blacklist_categories=("Z", "C")), min_size=1, max_size=30))
def test_no_password_survives_redaction(secret: str) -> None:
    message = "cannot reach 'https://user:{}@mirror.example/simple': refused"
    assume(secret not in message.format("***"))  # "@" is in the redacted text itself
    shown = redact(message.format(secret))
    assert secret not in shown.replace("mirror.example/simple", "")
    if "@" not in secret:
        assert "'https://***@mirror.example/simple'" in shown


def test_stripping_credentials_for_committed_files() -> None:
    assert strip_credentials_in("name @ git+https://u:tok@github.com/o/r@v1") == (
        "name @ git+https://github.com/o/r@v1"
    )
    assert strip_credentials("https://user:ab/SECRET@host.example/x") == "https://host.example/x"
    assert holds_credentials("--index-url https://u:p@host.example/simple")
    assert holds_credentials("--index-url https://host.example/simple?token=x")
    assert not holds_credentials("--index-url https://host.example/simple\n# see mail@x.example")
    # What redact left holds no secret: a redacted record is no reason to hide a file.
    for secret in ("https://u:p@host.example/simple?token=x#frag", "git+https://u:t@h.example/r"):
        assert holds_credentials(secret)
        assert not holds_credentials(redact(secret))


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://evil.example\\@127.0.0.1/whl", "backslash"),
        ("https://mirror.example/wh`l", "percent-encode them"),
        ("https://mirror.example/wh{l}", "percent-encode them"),
        ("https://mirrör.example/whl", "percent-encode them"),
        ("https://mirror.example/\udcffwhl", "percent-encode them"),
        ("https://mirror.example/%zz", "not a %XX escape"),
        ("http://a@b@127.0.0.1/whl", "more than one '@'"),
        ("http://%31%32%37.0.0.1/whl", "percent-encoded host"),
    ],
)
def test_urls_pip_or_uv_could_read_differently_are_refused(url: str, problem: str) -> None:
    with pytest.raises(UsageError, match=re.escape(problem)):
        validate_index_url(url, flag="--pytorch-index")


def test_redact_takes_linear_time_on_long_lines() -> None:
    import time

    started = time.monotonic()
    line = "x" * 300_000 + "https://user:pw@host/simple"
    assert redact(line) == "x" * 300_000 + "https://***@host/simple"
    assert time.monotonic() - started < 5
