"""One error base class for everything a user can get wrong.

Every entry point (`python -m mla_var3.kernel`, `mla_var3.report`, `mla_var3.sweep`, the main
job) catches `MlaVar3Error` and prints it as one `error:` line; anything else is a bug and keeps
its traceback. The subclasses say which part refused, and also derive from the builtin a caller
would expect (ValueError for bad values, RuntimeError for the environment, KeyError for names).
"""
from __future__ import annotations

import sys


class MlaVar3Error(Exception):
    """Base of every error the harness reports as one line; the message names the argument."""

    def __str__(self):          # KeyError subclasses would quote the message otherwise
        return str(self.args[0]) if self.args else ""


class ProblemError(MlaVar3Error, ValueError):
    """A problem that is out of range or inconsistent."""


class InputError(MlaVar3Error, ValueError):
    """Inputs that break a problem kind's contract (dtype, shape, device)."""


class PlanError(MlaVar3Error, ValueError):
    """A plan cannot run what it was given (problem, tiling, workspace)."""


class DeviceError(MlaVar3Error, RuntimeError):
    """No usable GPU, or the wrong one."""


class RegistryError(MlaVar3Error, KeyError):
    """An unknown kernel, design or problem kind."""


class RecordError(MlaVar3Error, ValueError):
    """A run record that is missing a field or has the wrong type."""


class ProfilerError(MlaVar3Error, RuntimeError):
    """A profiling tool is missing or failed."""


class UsageError(MlaVar3Error, ValueError):
    """A bad command-line flag, setting or output path."""


def guarded(fn, *args, **kw) -> int:
    """Run an entry point; an MlaVar3Error becomes `error: <message>` on stderr and exit code 2."""
    try:
        return fn(*args, **kw)
    except MlaVar3Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:            # `... | head` closed the pipe: not an error of the run
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
