import sys

from gbatch.cli._main import main

sys.exit(main())
