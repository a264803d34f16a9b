import sys

from attnres.cli import main

sys.exit(main())
