"""``python -m lambdaml`` is the ``lambdaml`` command."""

import sys

from lambdaml.command import main

sys.exit(main())
