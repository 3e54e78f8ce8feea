"""`python -m kcoord_admin ...`: the `kcoord` command without the installed script."""

import sys

from kcoord_admin.main import main

sys.exit(main())
