"""The command line: one argparse parser, one module per command, the core imported lazily."""
