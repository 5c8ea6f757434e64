"""`python -m srl_hpc.worker`: one worker process (process.py), as srun and the local launcher start it."""

import sys

from srl_hpc.worker.process import main

sys.exit(main())
