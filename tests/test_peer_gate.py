"""Issue 8's targets against a peer measured in the same run (layers/mla/peer_gate.py): thresholds
per cell, pairing only records of one run, the cuTile bar on memory-bound cells, the CLI's errors."""
import json

from mla_var3.layers.mla import peer_gate


def _rec(kernel, us, b=128, seqlen=4096, varlen=False, bound="compute", ts="2026-12-02T10:00:00+00:00"):
    key = f"b={b},seqlen={seqlen}" + (",varlen" if varlen else "")
    return {"schema": 1, "kind": "bench", "kernel": kernel, "version": 1, "design": kernel[:-3],
            "language": "cute-dsl", "timestamp": ts, "tiling": {}, "env": {}, "problem_key": key,
            "problem": {"b": b, "seqlen": seqlen, "s_q": 1, "h_q": 64, "page_size": 64, "varlen": varlen,
                        "seqlens": None},
            "time_us": {"median": us, "min": us, "max": us, "n": 10}, "gbps": 1.0, "tflops": 1.0,
            "pct_roofline": 50.0, "pct_datasheet": 40.0, "bound": bound, "flops": 1, "bytes": 1}


def test_thresholds_follow_the_issue():
    assert peer_gate.thresholds({"b": 128, "seqlen": 4096, "varlen": False}) == (0.95, 1.0)
    assert peer_gate.thresholds({"b": 128, "seqlen": 1024, "varlen": False}) == (0.85, 1.0)
    assert peer_gate.thresholds({"b": 128, "seqlen": 1024, "varlen": True}) == (0.85, 1.05)
    assert peer_gate.thresholds({"b": 4, "seqlen": 32768, "varlen": False}) == (0.95, 1.0)
    assert peer_gate.thresholds({"b": 4, "seqlen": 1024, "varlen": False}) == (0.85, 1.0)   # not a small-batch row


def test_verdicts_pair_only_records_of_one_run():
    recs = [_rec("k_v1", 100.0), _rec("peer_v1", 96.0),                                    # 0.96: gate ok, goal miss
            _rec("k_v1", 50.0, seqlen=1024, varlen=True), _rec("peer_v1", 40.0, seqlen=1024, varlen=True),  # 0.80
            _rec("k_v1", 300.0, seqlen=8192), _rec("peer_v1", 330.0, seqlen=8192, ts="2026-12-01T10:00:00+00:00"),
            _rec("k_v1", 120.0, ts="2026-12-01T09:00:00+00:00")]                            # older: the later wins
    rows = {r["problem"]: r for r in peer_gate.peer_gate(recs, "k_v1", "peer_v1")}
    assert rows["b=128,seqlen=4096"]["us"] == 100.0 and rows["b=128,seqlen=4096"]["speed"] == 0.96
    assert rows["b=128,seqlen=4096"]["gate_ok"] is True and rows["b=128,seqlen=4096"]["goal_ok"] is False
    assert rows["b=128,seqlen=1024,varlen"]["gate_ok"] is False and rows["b=128,seqlen=1024,varlen"]["goal"] == 1.05
    far = rows["b=128,seqlen=8192"]
    assert far["together"] is False and far["speed"] is None and far["gate_ok"] is None
    text = peer_gate.format_gate(list(rows.values()), "k_v1", "peer_v1")
    assert text.splitlines()[0] == "peer gate for k_v1 vs peer_v1 (median times): gate 1/2 met, goal 0/2"
    assert "0.800 MISS (>= 0.85)" in text and "not measured together" in text


def test_cutile_bar_applies_to_memory_bound_cells_only():
    recs = [_rec("k_v1", 100.0, bound="memory"), _rec("peer_v1", 100.0), _rec("ct_v1", 160.0),
            _rec("k_v1", 200.0, seqlen=8192), _rec("peer_v1", 200.0, seqlen=8192), _rec("ct_v1", 250.0, seqlen=8192)]
    rows = {r["problem"]: r for r in peer_gate.peer_gate(recs, "k_v1", "peer_v1", cutile="ct_v1")}
    assert rows["b=128,seqlen=4096"]["cutile_speed"] == 100.0 / 160.0 and rows["b=128,seqlen=4096"]["cutile_ok"] is True
    assert rows["b=128,seqlen=8192"]["cutile_speed"] is None                 # compute-bound: no bar
    assert "ct_v1 >= 0.6x our speed on 1/1 memory-bound cells" in peer_gate.format_gate(
        list(rows.values()), "k_v1", "peer_v1", "ct_v1").splitlines()[0]


def test_cli_says_what_is_missing(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [_rec("k_v1", 100.0), _rec("flashmla_decode_v1", 97.0)]))
    assert peer_gate.main(["--records", str(path), "--kernel", "k_v1"]) == 0
    assert "gate 1/1 met" in capsys.readouterr().out
    assert peer_gate.main(["--records", str(path), "--kernel", "nope_v1"]) == 2
    assert capsys.readouterr().err.startswith("error: no bench records of nope_v1")
    assert peer_gate.main(["--records", str(path), "--kernel", "k_v1", "--peer", "other_v1"]) == 2
    assert "has a other_v1 record from the same run" in capsys.readouterr().err
    assert peer_gate.main(["--records", str(tmp_path / "missing"), "--kernel", "k_v1"]) == 2
    assert capsys.readouterr().err.startswith("error: records:")


def test_cli_judges_the_cutile_bar_without_a_peer(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    recs = [_rec("k_v1", 100.0, bound="memory"), _rec("ct_v1", 160.0, bound="memory"),
            _rec("k_v1", 100.0, seqlen=8192, bound="memory"), _rec("ct_v1", 180.0, seqlen=8192, bound="memory")]
    path.write_text("\n".join(json.dumps(r) for r in recs))
    assert peer_gate.main(["--records", str(path), "--kernel", "k_v1", "--cutile", "ct_v1"]) == 0
    out = capsys.readouterr().out
    assert "ct_v1 >= 0.6x our speed on 1/2 memory-bound cells" in out and "gate 0/0 met" in out
    assert "0.625 ok" in out and "0.556 MISS" in out
    assert "note: no flashmla_decode_v1 record from the same run: only the cuTile bar is judged" in out
    # without --cutile the missing peer is still an error
    assert peer_gate.main(["--records", str(path), "--kernel", "k_v1"]) == 2


def test_stat_p10_judges_the_fast_mode(tmp_path, capsys):
    """--stat p10: each record's 10th-percentile sample instead of its median; a verdict that holds
    by the median can fail by the fast mode (the peer's replays split into a fast and a slow mode)."""
    ours, peer = _rec("k_v1", 100.0), _rec("flashmla_decode_v1", 100.0)
    ours["time_us"]["samples"] = [98.0] + [100.0] * 9
    peer["time_us"]["samples"] = [90.0] + [100.0] * 9
    (row,) = peer_gate.peer_gate([ours, peer], "k_v1", "flashmla_decode_v1", stat="p10")
    assert (row["us"], row["peer_us"]) == (98.0, 90.0) and row["gate_ok"] is False
    (row,) = peer_gate.peer_gate([ours, peer], "k_v1", "flashmla_decode_v1")
    assert row["speed"] == 1.0 and row["gate_ok"] is True
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [ours, peer]))
    assert peer_gate.main(["--records", str(path), "--kernel", "k_v1", "--stat", "p10"]) == 0
    assert "(p10 times): gate 0/1 met" in capsys.readouterr().out
    del ours["time_us"]["samples"]
    path.write_text("\n".join(json.dumps(r) for r in [ours, peer]))
    assert peer_gate.main(["--records", str(path), "--kernel", "k_v1", "--stat", "p10"]) == 2
    assert "--stat=p10: a record of k_v1 (b=128,seqlen=4096) keeps no samples" in capsys.readouterr().err


def test_cutile_bar_takes_the_best_of_several_versions_per_cell():
    recs = [_rec("k_v1", 100.0, bound="memory"), _rec("ct_v1", 180.0), _rec("ct_v2", 150.0),
            _rec("k_v1", 100.0, seqlen=8192, bound="memory"), _rec("ct_v1", 160.0, seqlen=8192),
            _rec("ct_v2", 170.0, seqlen=8192),
            _rec("k_v1", 100.0, seqlen=1024, bound="memory"), _rec("ct_v1", 140.0, seqlen=1024),
            _rec("ct_v2", 120.0, seqlen=1024, ts="2026-12-01T10:00:00+00:00")]     # another run: not paired
    rows = {r["problem"]: r for r in peer_gate.peer_gate(recs, "k_v1", "peer_v1", cutile="ct_v1,ct_v2")}
    assert rows["b=128,seqlen=4096"]["cutile_best"] == "ct_v2" and rows["b=128,seqlen=4096"]["cutile_speed"] == 100 / 150
    assert rows["b=128,seqlen=8192"]["cutile_best"] == "ct_v1" and rows["b=128,seqlen=8192"]["cutile_ok"] is True
    assert rows["b=128,seqlen=1024"]["cutile_best"] == "ct_v1"
    text = peer_gate.format_gate(list(rows.values()), "k_v1", "peer_v1", "ct_v1,ct_v2")
    assert "cuTile's best of ct_v1, ct_v2 >= 0.6x our speed on 3/3 memory-bound cells" in text.splitlines()[0]
    assert "0.667 ok (>= 0.60) ct_v2" in text
    assert peer_gate.cutile_names(" ct_v1, ct_v2 ") == ["ct_v1", "ct_v2"] and peer_gate.cutile_names(None) == []
