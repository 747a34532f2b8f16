"""``PYTHONPATH=tests python -m chaos [--mode short|full|load] [--seed N]``: see ``chaos``."""

import sys

from chaos.runner import main

sys.exit(main())
