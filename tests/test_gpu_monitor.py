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
    assert gpu_monitor.summarize(samples) == {"sm_mhz": 1750, "power_w": 680, "sm_mhz_samples": [1700, 1900, 1750],
                                              "mj_per_call": None, "power_w_energy": None, "energy_replays": 0}
    assert gpu_monitor.summarize([gpu_monitor.ClockSample(None, None, 0)]) is None
    assert gpu_monitor.summarize([]) is None


def test_kcycles_is_time_times_clock():
    assert gpu_monitor.kcycles(250.0, 1800.0) == 450.0
    assert gpu_monitor.kcycles(250.0, None) is None


def test_nvml_missing_library_reads_none():
    nv = gpu_monitor.Nvml(lib_name="libdefinitely-not-nvml.so")
    assert not nv.available
    assert nv.sm_mhz() is None and nv.power_w() is None



class EnergyMonitor(FakeMonitor):
    """A fake NVML whose cumulative energy counter (mJ) gives the next value at each read."""

    def __init__(self, mhz, watts, energy):
        super().__init__(mhz, watts)
        self.energy = list(energy)

    def energy_mj(self):
        return self.energy.pop(0) if self.energy else None


def test_counter_power_is_the_energy_between_the_first_and_last_update_over_their_time():
    updates = [(0.125, 71_000.0), (0.25, 141_000.0), (0.375, 211_000.0), (0.5, 281_000.0)]
    assert gpu_monitor.counter_power(updates) == 560.0              # 210 J over 0.375 s
    assert gpu_monitor.counter_power(updates[:1]) is None           # one update: no interval inside
    assert gpu_monitor.counter_power([]) is None
    assert gpu_monitor.counter_power([(0.1, 71_000.0), (0.2, 1_000.0)]) is None   # the counter went back


def test_sample_while_times_the_energy_counters_updates_not_its_first_value():
    """The counter steps every ~100 ms on the H200: the first value read is only a baseline (it
    counts an interval that began before the replay), the power is over the updates seen."""
    left = [6]

    def running():
        left[0] -= 1
        return left[0] > 0
    times = iter([0.0, 0.0625, 0.125, 0.1875, 0.25, 0.375])
    mon = EnergyMonitor([1700] * 6, [690] * 6, [0.0, 0.0, 70_500.0, 70_500.0, 140_500.0, 210_500.0])
    s = gpu_monitor.sample_while(running, mon, interval_s=0, clock=lambda: next(times))
    assert (s.sm_mhz, s.power_w, s.readings) == (1700, 690, 6)
    assert s.power_w_energy == 560.0                 # 140 J from 0.125 to 0.375 s (not 210.5 J over 0.375 s)
    assert s.mj_per_call is None                     # known once the replay's time per call is
    s = gpu_monitor.with_energy(s, ms_per_call=1.5)
    assert s.mj_per_call == 840.0                    # 560 W x 1.5 ms


def test_sample_while_without_an_energy_counter_or_with_one_update_reads_no_energy():
    s = gpu_monitor.sample_while(lambda: False, FakeMonitor([1965], [600]), interval_s=0)
    assert (s.sm_mhz, s.power_w_energy) == (1965, None)
    left = [3]

    def running():
        left[0] -= 1
        return left[0] > 0
    times = iter([0.0, 0.05, 0.09])
    s = gpu_monitor.sample_while(running, EnergyMonitor([1700] * 3, [690] * 3, [0.0, 0.0, 70_000.0]),
                                 interval_s=0, clock=lambda: next(times))
    assert (s.sm_mhz, s.power_w_energy) == (1700, None)            # a replay shorter than two updates
    assert gpu_monitor.with_energy(s, ms_per_call=1.6).mj_per_call is None


def test_summarize_energy_is_the_median_over_the_replays_that_read_it():
    samples = [gpu_monitor.ClockSample(1700, 690, 40, power_w_energy=w, mj_per_call=e)
               for w, e in ((690.0, 1104.0), (None, None), (701.23, 1121.968), (695.5, 1112.8))]
    assert gpu_monitor.summarize(samples) == {
        "sm_mhz": 1700, "power_w": 690, "sm_mhz_samples": [1700] * 4,
        "mj_per_call": 1113.0, "power_w_energy": 695.5, "energy_replays": 3}  # 1112.8 to 4 digits


def test_graph_replay_records_energy_per_launch_over_one_set(monkeypatch):
    """GraphReplay.__call__ without a GPU (torch.cuda stubbed): the counter's updates during the
    replay give its power, times the time per call as per_call_stats counts it (one launch over
    one set: elapsed / (n_repeat x sets))."""
    import contextlib
    import types

    import torch

    from mla_var3.runtime import bench

    records = iter([0.0, 50.0])                      # start, end: a replay of 50 ms
    polls = [3]                                      # the end event is reached at the 4th poll

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = next(records)

        def query(self):
            polls[0] -= 1
            return polls[0] < 0

        def elapsed_time(self, other):
            return other.t - self.t

    times = iter([0.0, 0.125, 0.25, 0.375])
    monkeypatch.setattr(gpu_monitor, "time", types.SimpleNamespace(perf_counter=lambda: next(times),
                                                                   sleep=lambda s: None))
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    replay = object.__new__(bench.GraphReplay)
    replay.sets, replay.stream, replay.n_repeat, replay.clocks = [object()] * 4, None, 10, []
    replay.graph = types.SimpleNamespace(replay=lambda: None)
    replay.monitor = EnergyMonitor([1800] * 4, [600] * 4, [10_000.0, 64_000.0, 128_000.0, 192_000.0])
    assert replay() == 5.0                           # 50 ms over 10 repeats
    (s,) = replay.clocks
    assert (s.sm_mhz, s.readings, s.power_w_energy) == (1800, 4, 512.0)   # 128 J from 0.125 to 0.375 s
    assert s.mj_per_call == 640.0                    # 512 W x 50 ms / (10 x 4) calls
    assert gpu_monitor.summarize(replay.clocks)["mj_per_call"] == 640.0


def test_nvml_energy_reads_the_counter_and_none_on_an_error():
    class Lib:
        def __init__(self, rc):
            self.rc = rc

        def nvmlDeviceGetTotalEnergyConsumption(self, handle, ref):
            ref._obj.value = 123_456_789
            return self.rc

    nv = gpu_monitor.Nvml(lib_name="libdefinitely-not-nvml.so")
    assert nv.energy_mj() is None
    nv._lib = Lib(0)
    assert nv.energy_mj() == 123_456_789.0
    nv._lib = Lib(3)                                 # NVML_ERROR_NOT_SUPPORTED
    assert nv.energy_mj() is None
    nv._lib = object()                               # a library without the call
    assert nv.energy_mj() is None
