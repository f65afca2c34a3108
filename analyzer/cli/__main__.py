"""`python -m analyzer.cli ...`: the `hlo-analyzer` command without the console script."""

import sys

from analyzer.cli import main

sys.exit(main())
