"""The clock reading during timed replays (runtime/gpu_monitor.py): sampling until the replay's
end event, the record field's medians, and a clean None where NVML is missing."""
from mla_var3.runtime import gpu_monitor


class FakeMonitor:
    def __init__(self, mhz, watts):
        self.mhz, self.watts = list(mhz), list(watts)

    def sm_mhz(self):
        return self.mhz.pop(0) if self.mhz else None

    def power_w(self):
        return self.watts.pop(0) if self.watts else None


def test_sample_while_reads_until_the_replay_ends_and_averages():
    left = [3]                                     # the event is reached after three polls

    def running():
        left[0] -= 1
        return left[0] > 0
    s = gpu_monitor.sample_while(running, FakeMonitor([1900, 1800, 1700, 1], [600, 650, 700, 1]), interval_s=0)
    assert (s.sm_mhz, s.power_w, s.readings) == (1800, 650, 3)


def test_sample_while_reads_once_even_when_the_replay_already_ended():
    s = gpu_monitor.sample_while(lambda: False, FakeMonitor([1965], []), interval_s=0)
    assert (s.sm_mhz, s.power_w, s.readings) == (1965, None, 1)


def test_summarize_takes_medians_over_replays_and_none_when_nothing_was_read():
    samples = [gpu_monitor.ClockSample(m, w, 5) for m, w in ((1700, 680), (1900, 600), (1750, 690))]
    assert gpu_monitor.summarize(samples) == {"sm_mhz": 1750, "power_w": 680, "sm_mhz_samples": [1700, 1900, 1750]}
    assert gpu_monitor.summarize([gpu_monitor.ClockSample(None, None, 0)]) is None
    assert gpu_monitor.summarize([]) is None


def test_kcycles_is_time_times_clock():
    assert gpu_monitor.kcycles(250.0, 1800.0) == 450.0
    assert gpu_monitor.kcycles(250.0, None) is None


def test_nvml_missing_library_reads_none():
    nv = gpu_monitor.Nvml(lib_name="libdefinitely-not-nvml.so")
    assert not nv.available
    assert nv.sm_mhz() is None and nv.power_w() is None
