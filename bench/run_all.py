"""Run every benchmark in turn and print their tables: ``make bench``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPTS = [
    ["core_throughput.py"],
    ["memory_vs_k.py", "--ks", "1,2,4,8,16"],
    ["metrics_cost.py"],
    ["data_scaling.py", "--rows", "25000,100000"],
    ["checkpoint_stall.py"],
    ["core_vs_loop.py"],
    ["packing.py"],  # packing vs length grouping vs padding, uneven chat rows
    ["vs_trl_dpo.py", "--repeats", "2"],  # TRL's rows need the bench extra; ours run without it
    ["serve.py", "--repeats", "2"],
]


def main() -> int:
    extra = sorted(p.name for p in HERE.glob("service_*.py"))
    failed = 0
    for script, *args in SCRIPTS + [[name] for name in extra]:
        print(f"\n## {script} {' '.join(args)}".rstrip(), flush=True)
        failed += (
            subprocess.run([sys.executable, str(HERE / script), *args], check=False).returncode != 0
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
