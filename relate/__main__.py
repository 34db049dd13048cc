"""``python -m relate`` is the ``relate`` console script (``relate.cli``)."""

import sys

from relate.cli import main

sys.exit(main())
