"""Command-line front ends: `python -m mla_var3.kernel` (kernel.py), profiling (profile.py),
devlogs (devlog.py). They parse, call mla_var3.jobs / runtime, print, and turn every
MlaVar3Error into one `error:` line. Nothing in runtime/, layers/ or report imports them."""
