"""``python -m assignment.report``: what ``make report`` runs."""

import sys

from assignment.report.cli import main

sys.exit(main())
