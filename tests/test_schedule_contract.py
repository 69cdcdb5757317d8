"""Schedule contracts (KernelPlan.schedule_contract): what each plan answers (by default the MLA
layer, from the tiling's fields), what records carry,
and the report's note where one problem's rows mix per_call and per_step - the session-22 grid
compared v46's order kernel in every call with FlashMLA's metadata made once per step."""
import json
from dataclasses import replace

from mla_var3 import report
from mla_var3.layers.mla import decode as mla
from mla_var3.runtime import records, registry

RAGGED = mla.MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=300, varlen=True)
FIXED = mla.MlaDecodeProblem(b=8, s_q=1, h_q=16, seqlen=256)


def _contract(name, problem, **fields):
    plan = registry.get_plan(name)
    return plan.schedule_contract(replace(plan.default_tiling(problem), **fields), problem)


def test_v46_contract_follows_its_order_kernel():
    assert _contract("flash_mla_decode_v46", RAGGED) == "per_call"          # the default: order kernel in the call
    assert _contract("flash_mla_decode_v46", RAGGED, schedule="per_step") == "per_step"
    assert _contract("flash_mla_decode_v46", FIXED) == "none"                # equal lengths: grid order, no kernel
    assert _contract("flash_mla_decode_v46", FIXED, schedule="per_step") == "none"


def test_older_split_versions_follow_their_order_field():
    """v14-v35 have `order` and no `schedule`: the order kernel always runs in the call."""
    assert _contract("flash_mla_decode_v32", RAGGED, order="longest_first") == "per_call"
    assert _contract("flash_mla_decode_v32", RAGGED, order="grid") == "none"


def test_no_version_package_declares_it():
    """The MLA layer answers from the tiling fields, so declaring contracts changed no version's
    sources (those hash into its tuned winners and its compile cache)."""
    for name in ("flash_mla_decode_v46", "flashmla_decode_v1", "ct_flash_mla_decode_v8"):
        assert "schedule_contract" not in type(registry.get_plan(name)).__dict__


def test_peer_cutile_and_torch_contracts():
    assert _contract("flashmla_decode_v1", RAGGED) == "per_step"            # the peer's default
    assert _contract("flashmla_decode_v1", RAGGED, metadata="per_call") == "per_call"
    assert _contract("ct_flash_mla_decode_v8", RAGGED, schedule="balanced") == "per_call"
    assert _contract("ct_flash_mla_decode_v8", RAGGED, schedule="sequence") == "none"
    assert _contract("torch_mla_decode_v1", RAGGED) is None                 # nothing in its tiling says


def _bench(name, problem, us, **fields):
    plan = registry.get_plan(name)
    tiling = replace(plan.default_tiling(problem), **fields)
    return records.make_record("bench", plan, tiling, problem, time_us={"median": us, "min": us, "max": us, "n": 1},
                               tflops=1.0, gbps=1.0, pct_roofline=1.0, pct_datasheet=1.0, bound="memory",
                               flops=1, bytes=1)


def test_records_carry_the_contract():
    rec = _bench("flash_mla_decode_v46", RAGGED, 50.0, schedule="per_step")
    assert rec["schedule_contract"] == "per_step"
    records.validate_record(rec)


def test_mixed_contracts_get_one_note_naming_kernels_and_problems():
    recs = [_bench("flash_mla_decode_v46", RAGGED, 58.0), _bench("flashmla_decode_v1", RAGGED, 50.0),
            _bench("flash_mla_decode_v46", FIXED, 40.0), _bench("flashmla_decode_v1", FIXED, 40.0)]
    notes = report.contract_notes(recs)
    assert notes == [f"note: schedule contracts differ (per_call: flash_mla_decode_v46; per_step: flashmla_decode_v1) "
                     f"on 1 problem(s), whose ratios are not like for like: [{RAGGED.key()}]"]


def test_like_for_like_rows_get_no_note():
    recs = [_bench("flash_mla_decode_v46", RAGGED, 54.0, schedule="per_step"), _bench("flashmla_decode_v1", RAGGED, 51.0),
            _bench("torch_mla_decode_v1", RAGGED, 900.0)]              # no contract beside per_step: nothing to flag
    assert report.contract_notes(recs) == []


def test_old_records_get_their_contract_from_the_plan():
    """Records from before the field: the plan answers for the record's tiling and problem."""
    old = _bench("flash_mla_decode_v46", RAGGED, 58.0)
    del old["schedule_contract"]
    assert report.record_contract(old) == "per_call"
    gone = dict(old, kernel="no_such_kernel_v1")
    assert report.record_contract(gone) is None


def test_report_prints_the_note(tmp_path, capsys):
    path = tmp_path / "records.jsonl"
    recs = [_bench("flash_mla_decode_v46", RAGGED, 58.0), _bench("flashmla_decode_v1", RAGGED, 50.0)]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert report.main(["--records", str(path), "--ratios"]) == 0
    out = capsys.readouterr().out
    assert "note: schedule contracts differ (per_call: flash_mla_decode_v46; per_step: flashmla_decode_v1)" in out
