"""python -m mla_var3.kernel.torch_python.mla.torch_mla_decode.torch_mla_decode_v1 [flags]"""
import sys

from mla_var3.cli.kernel import main

raise SystemExit(main(["torch_mla_decode_v1", *sys.argv[1:]]))
