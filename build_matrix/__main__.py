"""``python -m build_matrix`` (see build_matrix/cli.py)."""

import sys

from .cli import main

sys.exit(main())
