"""Evaluate a run's checkpoint: ``python scripts/evaluate.py RUN_DIR [--episodes N]`` (same as ``llmgym eval``)."""

import sys

from llmgym.cli import main

if __name__ == "__main__":
    sys.exit(main(["eval", *sys.argv[1:]]))
