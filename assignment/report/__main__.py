"""``python -m assignment.report``: what ``make report`` runs."""

import sys

from assignment.report.steps import main

sys.exit(main())
