#!/usr/bin/env python3
"""The per-file figures of a scripts/record-vllm-tests.sh run, as a Markdown table.

    scripts/vllm-tests-table.py OUT

OUT is the run's --out directory: it reads OUT/summary.json (tests collected per file),
OUT/tests.jsonl (one line per test: its outcome and, per scheduler it built, "log NAME",
"no step" or why kvmc does not model it) and OUT/conform.txt (the verdict per log). Prints
one row per test file and a total, then the reasons schedulers gave no log, most frequent
first.
"""

import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = Path(sys.argv[1])
    summary = json.loads((out / "summary.json").read_text())
    verdict = {}
    conform = out / "conform.txt"
    if conform.exists():
        for line in conform.read_text().splitlines():
            m = re.match(r"(conforms|FAILS \(\d+\)): (.*)\.jsonl$", line)
            if m:
                verdict[m.group(2)] = m.group(1) == "conforms"
    rows = defaultdict(Counter)
    reasons = Counter()
    for f, n in summary.get("collected_of", {}).items():
        rows[f]["collected"] = n
    for line in (out / "tests.jsonl").read_text().splitlines():
        t = json.loads(line)
        row = rows[t["test"].split("::", 1)[0]]
        o = t["outcome"]
        row["reached"] += 1
        row[o] += 1
        if o in ("passed", "failed"):
            row["ran"] += 1
        for s in t["schedulers"]:
            row["schedulers"] += 1
            cut = "(last schedule() unrecorded)" in s
            closed = "(last step closed)" in s
            if s.startswith("log "):
                s = s.split(" (", 1)[0]
            if s.startswith("log cache-aware-window/"):
                row["window logs"] += 1
                row["window closed"] += closed
                row["window conform"] += verdict.get(s[4:]) is True
            elif s.startswith("log "):
                row["logs"] += 1
                row["cut"] += cut
                row["closed"] += closed
                v = verdict.get(s[4:])
                row["conform" if v else ("diverge" if v is False else "not conformed")] += 1
            else:
                reasons[s] += 1
                row["no log"] += 1
    cols = ["collected", "reached", "ran", "passed", "failed", "did not run", "skipped",
            "schedulers", "no log", "logs", "closed", "cut", "conform", "diverge",
            "window logs", "window closed", "window conform"]
    print("| file | " + " | ".join(cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    total = Counter()
    for f in sorted(rows):
        total.update(rows[f])
        name = f.removeprefix("tests/")
        print(f"| {name} | " + " | ".join(str(rows[f][c]) for c in cols) + " |")
    print("| **total** | " + " | ".join(f"**{total[c]}**" for c in cols) + " |")
    print()
    print("Schedulers without a log, by reason:")
    for why, n in reasons.most_common():
        print(f"- {n:4d}  {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
