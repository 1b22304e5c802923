"""``python -m raydp.local_cluster``: the command line (:mod:`raydp.local_cluster.command`)."""

import sys

from .command import main

sys.exit(main())
