"""`python -m cloudlet.agent`: the node agent (standard library only)."""

import sys

from cloudlet.agent.main import main

sys.exit(main())
