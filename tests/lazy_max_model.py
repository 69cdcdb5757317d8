"""Test helper: the lazy softmax max's rule (flash_mla_decode_v19+ lazy_rescale.exp_against_lazy_max)
per row in PyTorch, for the float64 models of the seesaw's exchange (v49's speculative softmax, v50's
statistics-first order)."""
import math

import torch

THR = 8.0       # lazy_rescale.RESCALE_THRESHOLD (log2 units)


def lazy(m_old, tile_max):
    """The reference max moves only when the tile's max beats it by more than THR (or it was -inf);
    returns (m_ref, the offset exponentials use: m_ref, or 0 where m_ref is -inf)."""
    m_hi = torch.maximum(m_old, tile_max)
    m_ref = torch.where((m_hi - m_old) > THR, m_hi, m_old)      # -inf old: +inf > 8; both -inf: NaN > 8 is False
    return m_ref, torch.where(m_ref == -math.inf, torch.zeros_like(m_ref), m_ref)
