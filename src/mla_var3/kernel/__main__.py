"""python -m mla_var3.kernel: a shim over the CLI package (mla_var3/cli/kernel.py)."""
import sys

from mla_var3.cli.kernel import main

if __name__ == "__main__":
    sys.exit(main())
