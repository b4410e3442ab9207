"""What a test run cost: the slowest tests and the worker-seconds per test file.

`make test` runs the suite in two passes, each appending every test's seconds (setup,
call and teardown summed) to one file (`EQXRL_TEST_COSTS`, see `tests/conftest.py`);
this script reports them together:

    python tests/costs.py .venv/test-costs.jsonl

Keep `tests/README.md`'s budget table current with its per-file lines.
"""

import argparse
import collections
import json
import re
from collections.abc import Mapping
from pathlib import Path

README = Path(__file__).parent / "README.md"


def per_file_lines(seconds: Mapping[str, float]) -> list[str]:
    """One line per test file, most expensive first, then the total: worker-seconds
    and the number of tests (`seconds` maps pytest node ids to seconds)."""
    file_seconds: dict[str, float] = collections.defaultdict(float)
    file_tests: dict[str, int] = collections.defaultdict(int)
    for nodeid, duration in seconds.items():
        path = nodeid.split("::")[0]
        file_seconds[path] += duration
        file_tests[path] += 1
    lines = [
        f"{file_seconds[path]:8.1f} s {file_tests[path]:5d} tests  {path}"
        for path in sorted(file_seconds, key=file_seconds.__getitem__, reverse=True)
    ]
    total = sum(file_seconds.values())
    lines.append(f"{total:8.1f} s {sum(file_tests.values()):5d} tests  in all")
    return lines


# A row of `tests/README.md`'s budget table: file, tests, budget, current cost.
BUDGET_ROW = re.compile(r"^\| `(test_\w+\.py)` \|[^|]*\| ([\d,]+) \| ([\d,.]+) \|$")


def _budget_rows(readme: Path) -> dict[str, tuple[float, float]]:
    rows = {}
    for match in map(BUDGET_ROW.match, readme.read_text().splitlines()):
        if match:
            budget, current = (float(g.replace(",", "")) for g in match.groups()[1:])
            rows[match.group(1)] = budget, current
    return rows


def budget_table_costs(readme: Path = README) -> dict[str, float]:
    """Each test file's current worker-seconds, as `tests/README.md`'s budget table
    records them (`{"test_ppo.py": 53.5, ...}`): what `conftest.py` orders the files
    by, so that the longest start first."""
    return {name: current for name, (_, current) in _budget_rows(readme).items()}


def budget_table(seconds: Mapping[str, float], readme: Path = README) -> list[str]:
    """The budget table's rows for a run's costs (`seconds` maps pytest node ids to
    seconds), most expensive first: each file's budget as the README has it (a new
    file's: its cost rounded up to 5 s), and its cost in this run."""
    budgets = {name: budget for name, (budget, _) in _budget_rows(readme).items()}
    file_seconds: dict[str, float] = collections.defaultdict(float)
    file_tests: dict[str, int] = collections.defaultdict(int)
    for nodeid, duration in seconds.items():
        name = Path(nodeid.split("::")[0]).name
        file_seconds[name] += duration
        file_tests[name] += 1
    for name in budgets:
        file_seconds.setdefault(name, 0.0)
    lines = []
    for name in sorted(file_seconds, key=file_seconds.__getitem__, reverse=True):
        cost = file_seconds[name]
        budget = budgets.get(name, 5 * -(-cost // 5))
        lines.append(f"| `{name}` | {file_tests[name]} | {budget:,.0f} | {cost:.1f} |")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("costs", help="the JSON-lines file the test passes wrote")
    parser.add_argument("--slowest", type=int, default=20)
    parser.add_argument(
        "--table",
        action="store_true",
        help="print tests/README.md's budget table rows for this run instead",
    )
    options = parser.parse_args(argv)
    seconds: dict[str, float] = collections.defaultdict(float)
    with open(options.costs) as file:
        for line in file:
            record = json.loads(line)
            seconds[record["test"]] += record["seconds"]
    if options.table:
        print("\n".join(budget_table(seconds)))
        return
    print(f"== the {options.slowest} slowest tests (seconds)")
    slowest = sorted(seconds, key=seconds.__getitem__, reverse=True)
    for nodeid in slowest[: options.slowest]:
        print(f"{seconds[nodeid]:8.1f} s  {nodeid}")
    print("== worker-seconds per test file")
    print("\n".join(per_file_lines(seconds)))


if __name__ == "__main__":
    main()
