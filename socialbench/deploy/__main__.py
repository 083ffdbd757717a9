"""``python -m socialbench.deploy generate|check``."""

import sys

from socialbench.deploy.generate import main

sys.exit(main())
