"""`python -m qtts.cli`: the same as qtts-cli."""
import sys

from . import main

sys.exit(main())
