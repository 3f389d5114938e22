"""The command line: thin typer commands that import their implementation lazily."""
