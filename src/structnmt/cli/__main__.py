"""``python -m structnmt.cli ...`` is ``structnmt ...``."""

import sys

from .commands import main

if __name__ == "__main__":
    sys.exit(main())
