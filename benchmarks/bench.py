"""Performance benchmarks of spherepde (issue 8): ratios measured side by side.

    python benchmarks/bench.py [--json] [--quick]

Same as ``spherepde bench``; see :mod:`spherepde.cli.bench` for what is measured.
"""

import sys

from spherepde.cli.bench import main

if __name__ == "__main__":
    sys.exit(main())
