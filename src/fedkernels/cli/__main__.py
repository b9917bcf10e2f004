"""``python -m fedkernels.cli``: the ``fedkernels`` command."""

import sys

from fedkernels_cli.main import main

if __name__ == "__main__":
    sys.exit(main())
