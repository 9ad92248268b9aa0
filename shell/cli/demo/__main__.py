"""``python -m pidurable.shell.cli.demo child PART ...`` is one process life
of a demo part (the parent spawns these); anything else is ``pidurable demo``."""

import sys

if len(sys.argv) > 1 and sys.argv[1] == "child":
    from .child import child_main

    sys.exit(child_main(sys.argv[2:]))

from .. import main

sys.exit(main(["demo", *sys.argv[1:]]))
