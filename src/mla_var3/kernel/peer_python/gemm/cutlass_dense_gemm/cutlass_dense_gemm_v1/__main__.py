"""python -m mla_var3.kernel.peer_python.gemm.cutlass_dense_gemm.cutlass_dense_gemm_v1 [flags]"""
import sys

from mla_var3.cli.kernel import main

raise SystemExit(main(["cutlass_dense_gemm_v1", *sys.argv[1:]]))
