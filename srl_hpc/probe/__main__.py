"""`python -m srl_hpc.probe`: one task of `srl-launch doctor --probe`'s job."""

import sys

from srl_hpc.probe.task import main

sys.exit(main())
