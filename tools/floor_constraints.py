"""Print pip constraints that pin every floor in pyproject.toml: `name==version` for
each `name>=version` among the core dependencies and the given extras (default
`test`). `make test-floors` installs with them, so the quick pass runs on the
oldest versions pyproject.toml claims to support.

    python tools/floor_constraints.py [extra ...] > floors.txt
"""

import re
import sys
import tomllib
from pathlib import Path

FLOOR = re.compile(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)")


def floors(extras: list[str]) -> list[str]:
    project = tomllib.loads(
        (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    )["project"]
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += project["optional-dependencies"][extra]
    pins = {}
    for requirement in requirements:
        match = FLOOR.match(requirement)
        if match:
            pins[match.group(1).lower()] = f"{match.group(1)}=={match.group(3)}"
    return sorted(pins.values())


if __name__ == "__main__":
    print("\n".join(floors(sys.argv[1:] or ["test"])))
