"""``python -m connscale`` runs the command line."""

import sys

from connscale.cli.main import main

sys.exit(main())
