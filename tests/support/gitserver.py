"""A git repository served over HTTP on 127.0.0.1, behind a user and a token, the way a private
Git host serves one: for framework URLs such as ``git+http://USER:TOKEN@127.0.0.1:PORT/fw.git@v1``.

The repository is real (made with ``git``) and served with git's "dumb" HTTP protocol: static
files after ``git update-server-info``, so ``git fetch`` (which uv runs) needs nothing but this
server. Requests without the right Basic credentials get 401, so a URL that lost its token on
the way to git fails.

Usage::

    with serve_git_repository(tmp_path, source_dir, tag="v1.0", auth=("alice", "TOKEN")) as url:
        url   # "http://127.0.0.1:PORT/finetunekit.git" (no credentials in it)
"""

from __future__ import annotations

import base64
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(
        ["git", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        env={
            "GIT_AUTHOR_NAME": "test",
            "GIT_AUTHOR_EMAIL": "test@127.0.0.1",
            "GIT_COMMITTER_NAME": "test",
            "GIT_COMMITTER_EMAIL": "test@127.0.0.1",
            "GIT_CONFIG_GLOBAL": "/dev/null",
            "GIT_CONFIG_NOSYSTEM": "1",
            "PATH": "/usr/local/bin:/usr/bin:/bin",
        },
    )


def bare_repository(source: Path, where: Path, *, tag: str) -> Path:
    """A bare repository at ``where`` holding ``source``'s files in one commit tagged ``tag``,
    ready for dumb HTTP."""
    _git("init", "-q", cwd=source)
    _git("add", "-A", cwd=source)
    _git("commit", "-q", "-m", "release", cwd=source)
    _git("tag", tag, cwd=source)
    _git("clone", "-q", "--bare", str(source), str(where), cwd=source.parent)
    _git("update-server-info", cwd=where)
    return where


@contextmanager
def serve_git_repository(
    tmp_path: Path, source: Path, *, tag: str, auth: tuple[str, str]
) -> Iterator[str]:
    """Serve ``source`` as ``/NAME.git`` (NAME: the directory's name) until the block ends."""
    root = tmp_path / "git-root"
    root.mkdir()
    bare_repository(source, root / f"{source.name}.git", tag=tag)
    expected = "Basic " + base64.b64encode(":".join(auth).encode()).decode()

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, format: str, *args: object) -> None:
            return

        def do_GET(self) -> None:
            if self.headers.get("Authorization", "") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/{source.name}.git"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)
