"""Train from a YAML config: ``python scripts/train.py CONFIG [key=value ...]`` (same as ``llmgym train``)."""

import sys

from llmgym.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
