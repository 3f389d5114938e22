"""Entry point for ``python -m cudalock`` and the ``cudalock`` console script."""

from __future__ import annotations


def main() -> None:
    from cudalock.cli.main import run

    run()


if __name__ == "__main__":
    main()
