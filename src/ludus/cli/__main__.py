"""``python -m ludus.cli`` runs the ``ludus`` command."""

import sys

from ludus.cli import main

sys.exit(main())
