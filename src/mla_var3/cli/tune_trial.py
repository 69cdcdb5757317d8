"""One isolated autotune trial: python -m mla_var3.cli.tune_trial '<json spec>'.

Spawned by `runtime.autotune.run_trial` under a timeout, so a config that hangs or crashes the
process cannot take the caller with it. Prints one JSON line: {"status": "ok", "time_us": ...}
or {"status": "wrong"|"failed", "error": ...}.
"""
from __future__ import annotations

import json
import sys


def main(argv=None) -> int:
    from mla_var3.layers import problem_kind
    from mla_var3.runtime import autotune, registry
    spec = json.loads((sys.argv[1:] if argv is None else argv)[0])
    plan = registry.get_plan(spec["kernel"])
    problem = problem_kind(spec["kind"]).from_dict(spec["problem"])
    tiling = plan.Tiling(**spec["tiling"])
    trial = autotune.trial_in_process(plan, problem, tiling, rep_ms=spec["rep_ms"], seed=spec["seed"])
    print(json.dumps(trial), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
