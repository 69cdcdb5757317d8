"""python -m mla_var3.kernel.cutile_python.mla.ct_flash_mla_decode.ct_flash_mla_decode_v8 [flags]"""
import sys

from mla_var3.cli.kernel import main

raise SystemExit(main(["ct_flash_mla_decode_v8", *sys.argv[1:]]))
