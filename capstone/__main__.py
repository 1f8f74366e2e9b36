import sys

from capstone.cli import main

sys.exit(main())
