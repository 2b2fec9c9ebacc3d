"""``python -m benchmark.cli``: protobench from a source tree that was never installed."""
import sys

from benchmark.cli import main

sys.exit(main())
