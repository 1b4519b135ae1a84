"""``python -m lambdaml.cli`` is the ``lambdaml`` command too."""

import sys

from lambdaml.cli import main

sys.exit(main())
