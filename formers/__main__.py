import sys

from formers.cli import main

sys.exit(main())
