"""python -m mla_var3.kernel.cute_python.mla.flash_mla_decode.flash_mla_decode_v57 [flags]"""
import sys

from mla_var3.cli.kernel import main

raise SystemExit(main(["flash_mla_decode_v57", *sys.argv[1:]]))
