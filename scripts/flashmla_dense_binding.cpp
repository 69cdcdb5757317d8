// flashmla_dense_sm90: FlashMLA's SM90 dense decode alone, as one torch extension module.
//
// This file is mla_var3's, not FlashMLA's. FlashMLA's own binding (csrc/api/api.cpp) exposes every
// kernel family it has (sparse decode and prefill, SM100 prefill and backward), so building it
// compiles all of them. This one exposes only what `flash_mla_with_kvcache` calls on its dense
// path - `dense_decode_fwd`, i.e. FlashMLA's `dense_attn_decode_interface` from its header
// csrc/api/dense_decode.h (input checks, scheduling metadata when none is given, split-KV
// kernel, combine kernel) - so a build needs four sources: this file,
// smxx/decode/get_decoding_sched_meta/get_decoding_sched_meta.cu, smxx/decode/combine/combine.cu
// and sm90/decode/dense/instantiations/bf16.cu (scripts/build_flashmla.sh, which also defines
// FLASH_MLA_DISABLE_FP16: bf16 only, and FLASHMLA_COMMIT).
//
// Python: dense_decode_fwd(q, kcache, head_size_v, seqlens_k, block_table, softmax_scale,
//                          is_causal, tile_scheduler_metadata, num_splits)
//         -> (out, lse, tile_scheduler_metadata, num_splits)
// with the same arguments and results as FlashMLA's `flash_mla.cuda.dense_decode_fwd`.

#include <pybind11/pybind11.h>

#include "api/dense_decode.h"   // FlashMLA (from the fetched tree; include path <FlashMLA>/csrc)

#define MLA_VAR3_STRINGIFY_(x) #x
#define MLA_VAR3_STRINGIFY(x) MLA_VAR3_STRINGIFY_(x)

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.doc() = "FlashMLA SM90 dense bf16 decode (deepseek-ai/FlashMLA), built by mla_var3's "
              "scripts/build_flashmla.sh";
    m.def("dense_decode_fwd", &dense_attn_decode_interface,
          "(q, kcache, head_size_v, seqlens_k, block_table, softmax_scale, is_causal, "
          "tile_scheduler_metadata, num_splits) -> (out, lse, tile_scheduler_metadata, num_splits); "
          "FlashMLA computes the scheduling metadata itself when the last two are None");
#ifdef FLASHMLA_COMMIT
    m.attr("flashmla_commit") = MLA_VAR3_STRINGIFY(FLASHMLA_COMMIT);
#endif
}
