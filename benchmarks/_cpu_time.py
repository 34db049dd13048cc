"""Wall time and CPU time of a command and every process it starts (Ray's raylet, GCS and
workers included), for comparing benchmark runs on a machine other jobs are loading, where wall
time says little. CPU time is sampled from /proc every 0.2 s (the last value seen per process),
so a process living under 0.2 s may be missed.

``python -m benchmarks._cpu_time COMMAND...``  e.g.
``python -m benchmarks._cpu_time python -m benchmarks.serve_overhead --quick``
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def _table() -> dict[int, tuple[int, float, str]]:
    """pid -> (parent pid, CPU seconds so far, name) for every readable process."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:  # gone meanwhile
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on
        out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick, name)
    return out


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit("usage: python -m benchmarks._cpu_time COMMAND...")
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv)
    seen: dict[int, tuple[float, str]] = {}
    while proc.poll() is None:
        table, tree = _table(), {proc.pid}
        grew = True
        while grew:
            grew = False
            for pid, (parent, _, _) in table.items():
                if parent in tree and pid not in tree:
                    tree.add(pid)
                    grew = True
        seen.update({pid: table[pid][1:] for pid in tree if pid in table})
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    by_name: dict[str, float] = {}
    for cpu, name in seen.values():
        by_name[name] = by_name.get(name, 0.0) + cpu
    top = ", ".join(f"{n} {v:.1f}" for n, v in sorted(by_name.items(), key=lambda kv: -kv[1])[:8])
    print(f"[cpu_time] exit {proc.returncode}: wall {wall:.1f} s, cpu {sum(by_name.values()):.1f} s over "
          f"{len(seen)} processes ({top}); load average {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
