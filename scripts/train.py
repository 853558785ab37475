"""Train from a config: ``python scripts/train.py CONFIG [key=value ...]``, CONFIG a YAML file or a shipped name (same as ``llmgym train``)."""

import sys

from llmgym.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
