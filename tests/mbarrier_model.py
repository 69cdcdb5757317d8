"""Test helper: a CPU model of an mbarrier for the item-ring models (test_counter_ring_model.py,
test_pair_claim_model.py): an arrival count and transaction bytes per phase; a phase completes
when both reach zero (bytes may land before they are expected), and a wait on parity p passes
whenever the current phase's parity differs from p (aliasing included)."""


class MBarrier:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _complete_if_done(self):
        if self.pending == 0 and self.tx == 0:
            self.phase, self.pending = self.phase + 1, self.count

    def arrive(self, expect_tx=0):
        self.tx += expect_tx
        self.pending -= 1
        assert self.pending >= 0
        self._complete_if_done()

    def complete_tx(self, n):
        self.tx -= n
        self._complete_if_done()

    def passed(self, parity):
        return self.phase % 2 != parity
