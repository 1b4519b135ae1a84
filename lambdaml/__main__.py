"""``python -m lambdaml`` is the ``lambdaml`` command."""

import sys

from lambdaml.cli import main

sys.exit(main())
