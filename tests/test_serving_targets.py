"""The serving issue's speed targets from bench records (layers/mla/targets.py) and the `serving`
grid that measures them."""
import json

from mla_var3.layers.mla import decode as mla
from mla_var3.layers.mla import targets


def _rec(h_q, page, us, gbps, s_q=1, kernel="k_v1", ts="2026-12-01T10:00:00"):
    """A complete bench record (records.validate_record accepts it) with only what matters set."""
    return {"schema": 1, "kind": "bench", "kernel": kernel, "version": 1, "design": kernel[:-3],
            "language": "cute-dsl", "timestamp": ts, "tiling": {}, "env": {}, "problem_key": f"h_q={h_q},p={page}",
            "problem": {"b": 128, "seqlen": 4096, "s_q": s_q, "h_q": h_q, "page_size": page, "varlen": False,
                        "seqlens": None},
            "time_us": {"median": us, "min": us, "max": us, "n": 10}, "gbps": gbps, "tflops": 1.0,
            "pct_roofline": 50.0, "pct_datasheet": 40.0, "bound": "memory", "flops": 1, "bytes": 1}


def test_serving_grid_covers_the_issue_cells():
    grid = mla.grid("serving")
    assert len(grid) == 20
    assert {(p.s_q, p.h_q, p.page_size) for p in grid} == {(s, h, pg) for s in (1, 4) for h in (8, 16, 32, 64, 128)
                                                           for pg in (16, 64)}
    assert {(p.b, p.seqlen, p.varlen) for p in grid} == {(128, 4096, False)}


def test_ratios_and_verdicts():
    recs = [_rec(64, 64, 180.0, 3400.0), _rec(64, 16, 240.0, 2550.0),          # page 16: 1.33x -> miss
            _rec(16, 64, 165.0, 3300.0), _rec(16, 16, 175.0, 3100.0),          # 1.06x ok; 3300/3400 ok
            _rec(8, 64, 170.0, 2900.0),                                         # 2900/3400 = 0.85 -> miss
            _rec(64, 64, 999.0, 1.0, kernel="other"),                           # another kernel: ignored
            _rec(64, 64, 200.0, 3000.0, ts="2026-11-30T00:00:00")]              # older: the later one wins
    rows = {(r["h_q"], r["page_size"]): r for r in targets.serving_targets(recs, "k_v1")}
    assert rows[(64, 16)]["page_ratio"] == 240.0 / 180.0 and rows[(64, 16)]["page_ok"] is False
    assert rows[(16, 16)]["page_ratio"] == 175.0 / 165.0 and rows[(16, 16)]["page_ok"] is True
    assert rows[(16, 64)]["heads_ratio"] == 3300.0 / 3400.0 and rows[(16, 64)]["heads_ok"] is True
    assert rows[(16, 16)]["heads_ratio"] == 3100.0 / 2550.0                   # same page size: 16 vs 16
    assert rows[(8, 64)]["heads_ok"] is False and rows[(8, 64)]["page_ratio"] is None
    assert rows[(64, 64)]["us"] == 180.0 and rows[(64, 64)]["heads_ratio"] is None
    text = targets.format_targets(list(rows.values()), "k_v1")
    assert text.splitlines()[0] == "serving targets for k_v1: 3/5 met"
    assert "1.33x MISS" in text and "0.85 MISS" in text


def test_cli_reads_records_and_says_what_is_missing(tmp_path, capsys):
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [_rec(64, 64, 180.0, 3400.0), _rec(64, 16, 190.0, 3200.0)]))
    assert targets.main(["--records", str(path), "--kernel", "k_v1"]) == 0
    assert "1/1 met" in capsys.readouterr().out
    assert targets.main(["--records", str(path), "--kernel", "nope_v1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no fixed-length bench records of nope_v1") and "--grid=serving" in err
    assert targets.main(["--records", str(tmp_path / "missing"), "--kernel", "k_v1"]) == 2
    assert capsys.readouterr().err.startswith("error: records:")


def test_a_tiling_override_is_left_out_of_a_registered_versions_cells(tmp_path, capsys):
    """A record measured with `--tiling` other than the version's own (tuned winner, else default)
    is an experiment, not what the op serves: the targets skip it and say so on stderr."""
    from mla_var3.runtime import registry
    name = "flash_mla_decode_v44"
    plan = registry.get_plan(name)
    prob = mla.MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, page_size=16)
    own = plan.default_tiling(prob)
    other = type(own)(**{**own.to_dict(), "refill_warps": 1 if own.refill_warps != 1 else 2})

    def rec(tiling, us, ts, page=16):
        r = _rec(16, page, us, 3000.0, kernel=name, ts=ts)
        p = mla.MlaDecodeProblem(b=128, s_q=1, h_q=16, seqlen=4096, page_size=page)
        t = plan.default_tiling(p) if tiling is None else tiling
        r.update(version=44, design="flash_mla_decode", problem=p.to_dict(), problem_key=p.key(),
                 tiling=t.to_dict(), tiling_key=t.key(), env={"gpu": "NVIDIA H200"})
        return r
    recs = [rec(own, 160.0, "2026-12-03T10:00:00"), rec(other, 999.0, "2026-12-03T11:00:00"),
            rec(None, 150.0, "2026-12-03T10:00:00", page=64)]
    rows = {r["page_size"]: r for r in targets.serving_targets(recs, name)}
    assert rows[16]["us"] == 160.0 and rows[16]["page_ratio"] == 160.0 / 150.0     # the later override is not read
    assert targets.overridden(recs[1]) and not targets.overridden(recs[0])
    assert targets.served_tiling_key("k_v1", recs[0]["problem"], "NVIDIA H200") is None    # not registered: all count
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in recs))
    assert targets.main(["--records", str(path), "--kernel", name]) == 0
    out = capsys.readouterr()
    assert "1/1 met" in out.out and out.err.startswith(f"note: 1 record(s) of {name} measured with another tiling")
