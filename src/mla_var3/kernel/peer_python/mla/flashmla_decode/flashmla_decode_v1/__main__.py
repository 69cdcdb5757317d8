"""python -m mla_var3.kernel.peer_python.mla.flashmla_decode.flashmla_decode_v1 [flags]"""
import sys

from mla_var3.cli.kernel import main

raise SystemExit(main(["flashmla_decode_v1", *sys.argv[1:]]))
