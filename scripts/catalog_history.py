"""Regenerate kindex_etl/catalog/history.json, harness.json and baselines.json from a Liger-Kernel
checkout.

    python scripts/catalog_history.py /path/to/Liger-Kernel [--ref main] [--out DIR]

The rule and the format are in kindex_etl/catalog/upstream_git.py; the same head gives the same
bytes, so a diff of the files after a run shows exactly what upstream's new commits changed.
"""

import sys

from kindex_etl.catalog.upstream_git import main

if __name__ == "__main__":
    sys.exit(main())
