"""``python -m pidurable.shell.cli``: the ``pidurable`` command."""

import sys

from . import main

sys.exit(main())
