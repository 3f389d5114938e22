"""Entry point for ``python -m cudalock`` and the ``cudalock`` console script."""

from __future__ import annotations

import gc


def main() -> None:
    from cudalock.cli.main import run

    try:
        run()
    finally:
        # The process ends next: what the command built is left to the operating system
        # instead of the interpreter's last garbage collection (about 60 ms after a lock).
        gc.freeze()


if __name__ == "__main__":
    main()
