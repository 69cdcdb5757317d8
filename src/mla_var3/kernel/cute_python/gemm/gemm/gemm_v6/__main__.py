"""python -m mla_var3.kernel.cute_python.gemm.gemm.gemm_v6 [flags]"""
import sys

from mla_var3.cli.kernel import main

raise SystemExit(main(["gemm_v6", *sys.argv[1:]]))
