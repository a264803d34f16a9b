import sys

from hf_attnres.cli import main

sys.exit(main())
