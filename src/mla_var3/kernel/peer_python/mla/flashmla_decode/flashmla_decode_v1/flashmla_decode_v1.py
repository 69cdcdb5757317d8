"""flashmla_decode_v1: FlashMLA's SM90 dense bf16 decode, called live beside our kernels (a peer).

The code is deepseek-ai/FlashMLA at commit 9241ae3 (`flash_mla_with_kvcache`, dense bf16, sm_90a),
not ours and not in this repository: `scripts/build_flashmla.sh` fetches it and builds the
extension `flashmla_dense_sm90` (its dense-decode sources plus our small binding). This plan finds
the extension through MLA_VAR3_FLASHMLA (the .so or its directory), else in
`third_party/FlashMLA/build/` under the current directory; without it the plan still loads,
`list` shows it unavailable with the build command and `build` refuses in one line.

What one timed call contains depends on the tiling's `metadata` (how FlashMLA is used):
- "per_step" (default): what every layer after the first of a decode step runs - FlashMLA's
  scheduling metadata was computed once for these lengths (here: in `prepare`, outside the timed
  region, by one full call) and each call passes it back: one `dense_decode_fwd(q, kv_cache, 512,
  cache_seqlens, block_table, scale, causal, sched, num_splits)`, i.e. its split-KV kernel and its
  combine kernel (chained by programmatic dependent launch). As in FlashMLA, that metadata is only
  valid while the lengths stay the same (a CUDA graph replayed with new lengths needs "per_call").
- "per_call": what `flash_mla_with_kvcache` runs with a fresh `get_mla_metadata()` (the first
  layer of a step): the same call with None, None, which also launches FlashMLA's
  scheduling-metadata kernel (the split schedule from the device lengths).
Either way it allocates its outputs and fp32 split accumulators (from the CUDA graph's pool when
the bench replays a graph); for s_q > 1 its returned lse is a transposed copy its API makes. Nothing of
ours runs in the call: the tensors FlashMLA returns are the outputs the check compares (the
harness's poisoned buffers stay untouched; runtime_kernel.py "Outputs"), and nothing is copied.
causal = s_q > 1, as in our problem kind (FlashMLA ignores causal for s_q = 1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from mla_var3.layers.mla.decode import D_V, MlaDecodeProblem, page_size_reasons
from mla_var3.runtime.kernel_plan import KernelPlan, Tiling
from mla_var3.runtime.peer_kernel import ExtensionSpec, PeerKernel, load_extension
from mla_var3.runtime.runtime_kernel import RuntimeKernel

FLASHMLA_COMMIT = "9241ae3"
EXTENSION = ExtensionSpec(module="flashmla_dense_sm90", env_var="MLA_VAR3_FLASHMLA",
                          default_dir="third_party/FlashMLA/build", build_command="scripts/build_flashmla.sh")

# FlashMLA's limits (csrc/sm90/decode/dense/splitkv_mla.cuh, csrc/api/dense_decode.h at 9241ae3)
MASK_VALUE, RUNNING_MAX_INIT = -1e33, -1e30     # MAX_INIT_VAL, MAX_INIT_VAL_SM
BLOCK_M = 64                                     # query rows (s_q * h_q) per block
SCHED_SMEM_LIMIT = 227 * 1024                    # dynamic smem of the 1-warp schedule kernel: 4 * (5b + 1)
INT32_MAX = 2**31 - 1
DEFAULT_SMS = 132                                # H100/H200 SXM, when no GPU is visible


def _num_sms() -> int:
    import torch
    if torch.cuda.is_available():
        return torch.cuda.get_device_properties(0).multi_processor_count
    return DEFAULT_SMS


def num_sm_parts(problem: MlaDecodeProblem, sms: int) -> int:
    """FlashMLA's split count per query block (dense_decode.h; h_kv = 1)."""
    return max(sms // math.ceil(problem.s_q * problem.h_q / BLOCK_M), 1)


METADATA_MODES = ("per_step", "per_call")


@dataclass(frozen=True)
class PeerTiling(Tiling):
    """FlashMLA chooses its own tiling; the one choice is when its scheduling metadata is made."""
    metadata: str = "per_step"      # "per_step": once per lengths, reused (module docstring); "per_call"

    def validate(self, problem, device) -> list[str]:
        if self.metadata not in METADATA_MODES:
            return [f"metadata must be one of {', '.join(METADATA_MODES)}, got {self.metadata!r}"]
        return []


class FlashMlaDecodeV1(KernelPlan):
    name = "flashmla_decode_v1"
    language = "peer"
    arch = ("sm_90a",)
    problem_kind = MlaDecodeProblem
    Tiling = PeerTiling
    summary = f"FlashMLA {FLASHMLA_COMMIT} SM90 dense bf16 decode (sched + split-KV + combine), called live"
    upstream = f"deepseek-ai/FlashMLA@{FLASHMLA_COMMIT}"

    def extension(self):
        """The imported extension module, or None (unavailable() says why)."""
        return load_extension(EXTENSION)[0]

    def unavailable(self) -> str | None:
        return load_extension(EXTENSION)[1]

    def supports(self, problem) -> list[str]:
        reasons = super().supports(problem)
        if reasons:
            return reasons
        reasons = page_size_reasons(problem, (64,), 'FlashMLA checks page_block_size == 64 '
                                    '("Currently page_block_size must be 64")')
        scale_log2 = problem.scale * math.log2(math.e)
        if not MASK_VALUE * scale_log2 < RUNNING_MAX_INIT:
            reasons.append(f"softmax_scale {problem.scale:g} is not above {-RUNNING_MAX_INIT / -MASK_VALUE / math.log2(math.e):.3g}: "
                           f"FlashMLA's mask value ({MASK_VALUE:g} x scale x log2 e) must stay below its running-max "
                           f"start ({RUNNING_MAX_INIT:g}), else masked keys count")
        if 4 * (5 * problem.b + 1) > SCHED_SMEM_LIMIT:
            reasons.append(f"b={problem.b}: FlashMLA's schedule kernel keeps 5 ints per sequence in shared memory "
                           f"(at most {(SCHED_SMEM_LIMIT // 4 - 1) // 5} sequences)")
        rows = problem.s_q * problem.h_q
        sms = _num_sms()
        splits = problem.b + num_sm_parts(problem, sms)
        if splits * rows * D_V > INT32_MAX:
            reasons.append(f"(b + {splits - problem.b} SM parts) x s_q*h_q={rows} x {D_V} fp32 split accumulators "
                           f"exceed FlashMLA's 32-bit element offsets ({sms} SMs)")
        return reasons

    def plan(self, inputs, tiling) -> RuntimeKernel:
        ext = self.extension()
        if ext is None:          # build() checks first; kept for direct callers
            from mla_var3.errors import PlanError
            raise PlanError(f"{self.name} is unavailable: {self.unavailable()}")
        causal = inputs.s_q > 1

        def call(inputs, sched, splits):
            return ext.dense_decode_fwd(inputs.q, inputs.kv_cache, D_V, inputs.cache_seqlens, inputs.block_table,
                                        float(inputs.softmax_scale), causal, sched, splits)

        def dense_decode_fwd(inputs, workspace):
            out, lse, _sched, _splits = call(inputs, workspace.get("sched"), workspace.get("num_splits"))
            return out, lse

        def metadata(inputs):
            """FlashMLA's schedule for these lengths, from one full call (outside the timed region)."""
            _out, _lse, sched, splits = call(inputs, None, None)
            return {"sched": sched, "num_splits": splits}

        return self.runtime(tiling, PeerKernel(dense_decode_fwd, name="dense_decode_fwd"),
                            workspace=metadata if tiling.metadata == "per_step" else None)

    def example_bad_tilings(self) -> list[PeerTiling]:
        return [PeerTiling(metadata="never")]

    def compile_only(self, problem, arch: str, tiling=None) -> dict:
        return {"compiled": False,
                "reason": f"a peer: built ahead by {EXTENSION.build_command}, nothing to compile here"}


Plan = FlashMlaDecodeV1
