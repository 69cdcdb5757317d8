"""scripts/split_length_sweep.py on the CPU: its one-line refusals (bad --chunks, a version without a
split length, no GPU) before anything is built."""
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = str(Path(__file__).resolve().parents[1] / "scripts" / "split_length_sweep.py")
BASE = ["--b=2", "--s_q=1", "--h_q=16", "--seqlen=300", "--varlen", "--out=/dev/null"]


def _run(argv, capsys):
    old = sys.argv
    sys.argv = [SCRIPT, *argv]
    try:
        with pytest.raises(SystemExit) as e:
            runpy.run_path(SCRIPT, run_name="__main__")
    finally:
        sys.argv = old
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    (["flash_mla_decode_v36", "--chunks=8,x"], "--chunks: expected comma-separated KV tile counts"),
    (["flash_mla_decode_v1", "--chunks=8"], "flash_mla_decode_v1: its Tiling has no `chunk` field"),
])
def test_refusals_are_one_line(argv, message, capsys):
    code, err = _run(argv + BASE, capsys)
    assert code == 2 and message in err


def test_without_a_gpu_it_says_where_to_run(capsys, monkeypatch):
    from mla_var3.runtime import devices
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    code, err = _run(["flash_mla_decode_v36", "--chunks=8,12"] + BASE, capsys)
    assert code == 2 and "needs an NVIDIA GPU" in err
