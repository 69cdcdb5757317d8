"""Test helper: one call captured in a CUDA graph, the lengths changed in place, replayed (the
check that a split schedule is computed on the device, not frozen at capture time)."""
import dataclasses


def replay_with_new_lengths(problem, kern, inputs, new_lens):
    """Warm `kern` up outside the graph, capture one call, write `new_lens` into
    inputs.cache_seqlens (same shapes), poison the outputs with NaN and replay. Returns the
    outputs the replay wrote (a peer's own tensors when its launch returns them) and the inputs
    as the new lengths describe them, for `problem.reference`."""
    import torch
    outputs, ws = problem.make_outputs(inputs), kern.prepare(inputs)
    kern.launch(inputs, outputs, ws)                     # warm up outside the graph
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        own = kern.launch(inputs, outputs, ws)
    if own is not None:        # a peer's own outputs: tensors of the graph's pool that each replay rewrites
        outputs = own
    inputs.cache_seqlens.copy_(torch.tensor(new_lens, dtype=torch.int32))
    for t in outputs:
        t.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return outputs, dataclasses.replace(inputs, seqlens=tuple(new_lens))
