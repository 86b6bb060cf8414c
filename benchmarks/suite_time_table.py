"""The per-file table of a test run's log, as docs/benchmarks.md keeps it ("Where the test time goes").

    CI=true GPTSCOPE_PRECISION=fp32 python -m pytest > run.log 2>&1
    python benchmarks/suite_time_table.py run.log

prints the run's summary line, its time-per-file section as a Markdown table (seconds, share, tests,
file), and each worker's peak memory: the figures tests/run_guard.py printed, unchanged.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROW = re.compile(r"^\s*([\d,.]+) s\s+([\d.]+)%\s+(\d+) tests\s+(.+?)\s*$")


def table(log: str) -> str:
    lines = log.splitlines()
    # the run's own section (the last one: a failed test's output may quote an inner run's)
    start = max(i for i, line in enumerate(lines) if line.startswith("=") and "time per file (setup + call" in line)
    out = [lines[start].strip("= "), "", "| seconds | share | tests | file |", "| ---: | ---: | ---: | --- |"]
    for line in lines[start + 1 :]:
        m = ROW.match(line)
        if not m:
            break
        seconds, share, tests, name = m.groups()
        out.append(f"| {seconds} | {share}% | {tests} | `{name}` |")
    out.append("")
    out += [line for line in lines if line.startswith("peak memory (")]
    out += [line.strip("= ") for line in lines if re.search(r"\d+ passed.* in [\d.]+s", line)][-1:]
    return "\n".join(out)


if __name__ == "__main__":
    print(table(Path(sys.argv[1]).read_text(encoding="utf-8", errors="replace")))
