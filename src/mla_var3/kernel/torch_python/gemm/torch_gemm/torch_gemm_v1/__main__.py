"""python -m mla_var3.kernel.torch_python.gemm.torch_gemm.torch_gemm_v1 [flags]"""
import sys

from mla_var3.cli.kernel import main

raise SystemExit(main(["torch_gemm_v1", *sys.argv[1:]]))
