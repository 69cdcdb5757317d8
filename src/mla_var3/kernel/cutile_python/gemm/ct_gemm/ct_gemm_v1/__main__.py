"""python -m mla_var3.kernel.cutile_python.gemm.ct_gemm.ct_gemm_v1 [flags]"""
import sys

from mla_var3.cli.kernel import main

raise SystemExit(main(["ct_gemm_v1", *sys.argv[1:]]))
