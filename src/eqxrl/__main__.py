"""`python -m eqxrl ...`: the `eqxrl` command line."""

import sys

if __name__ == "__main__":
    from eqxrl.training import main

    sys.exit(main())
