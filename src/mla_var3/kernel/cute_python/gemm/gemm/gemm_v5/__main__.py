"""python -m mla_var3.kernel.cute_python.gemm.gemm.gemm_v5 [flags]"""
import sys

from mla_var3.cli.kernel import main

raise SystemExit(main(["gemm_v5", *sys.argv[1:]]))
