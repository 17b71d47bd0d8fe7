"""`python -m trainer run|compare ...`: see trainer/cli.py."""

import sys

from trainer.cli import main

sys.exit(main())
