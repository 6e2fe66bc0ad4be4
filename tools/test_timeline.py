"""Where a `make test` run's time went, from TFDIST_TEST_TIMELINE's lines (tests/conftest.py):

    TFDIST_TEST_TIMELINE=/tmp/timeline.jsonl make test
    python tools/test_timeline.py /tmp/timeline.jsonl

Prints each pytest worker's busy seconds and when it ran out of work, then the longest modules (the seconds
one worker spent on each, setup included): keep tests/conftest.py's LONGEST_FIRST in that order."""

import collections
import json
import sys


def main(path: str) -> None:
    with open(path) as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    if not rows:
        sys.exit(f"{path}: no tests recorded")
    start = min(r["start"] for r in rows)
    workers: dict[str, list[dict]] = collections.defaultdict(list)
    modules: collections.Counter = collections.Counter()
    for row in rows:
        workers[row["worker"]].append(row)
        modules[row["test"].split("::")[0]] += row["end"] - row["start"]
    end = max(r["end"] for r in rows)
    print(f"{len(rows)} tests, {end - start:.0f} s from the first start to the last end")
    for name in sorted(workers):
        busy = sum(r["end"] - r["start"] for r in workers[name])
        done = max(r["end"] for r in workers[name]) - start
        print(f"  {name}: busy {busy:6.0f} s, out of work at {done:6.0f} s ({len(workers[name])} tests)")
    print("longest modules:")
    for module, seconds in modules.most_common(15):
        print(f"  {seconds:6.0f} s  {module}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/timeline.jsonl")
