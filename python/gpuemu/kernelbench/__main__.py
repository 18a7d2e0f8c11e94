"""python -m gpuemu.kernelbench: what `gpuemu kernelbench` runs."""

import sys

from ._cli import main

sys.exit(main())
