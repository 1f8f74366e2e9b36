"""docs/figures.md, written from the benches' records (docs/figures/*.json, bench/record.py):
every measured figure the guide shows, with the machine, the date and the command that
measured it. Nothing in the page is typed by hand; a bench run again replaces its record.

    python bench/figures.py            # write docs/figures.md
    python bench/figures.py --check    # exit 1 if docs/figures.md is not what the records say
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "figures"
PAGE = ROOT / "docs" / "figures.md"
# The page's order: the lesson's demo first, then what an instructor's grading costs, then
# the suite's own; a record of another bench comes after these, by name.
ORDER = ("speed", "collectives", "grading", "grading_exercises", "grading_floor", "boxes",
         "observer", "pictures", "suite", "tiers")

HEADER = """# Measured figures

Written by `python bench/figures.py` from the benches' records in `docs/figures/` (each
bench under `bench/` writes its own when it runs, with the machine and the date); do not
edit this page by hand. Each figure is a ratio or a time measured side by side in one script:
this kind of machine is shared and noisy (`import torch` alone varies 2x from one hour to
the next), so only figures of one record compare. A bench run again replaces its record.
"""


def _machine(m: dict[str, Any]) -> str:
    return (f"{m['cpus']} CPUs ({m['cpu']}), {m['memory_gib']} GiB, Python {m['python']}, "
            f"torch {m['torch']}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def records(where: Path = RECORDS) -> list[dict[str, Any]]:
    """The benches' records, in the page's order."""
    found = [json.loads(p.read_text()) for p in sorted(where.glob("*.json"))]
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(found, key=lambda r: (rank.get(r["bench"], len(ORDER)), r["bench"]))


def render(found: list[dict[str, Any]]) -> str:
    """The page for `found` records."""
    lines = [HEADER]
    for r in found:
        lines += [f"## `{r['bench']}`", "",
                  f"Measured {r['date']} on `{r['commit']}`: {_machine(r['machine'])}, "
                  f"{r['machine']['system']}.", "", f"    {r['command']}", "",
                  "| figure | target | measured |", "|---|---|---|"]
        lines += [f"| {_cell(f['what'])} | {_cell(f['target'])} | {_cell(f['value'])} |"
                  for f in r["figures"]]
        lines.append("")
    if not found:
        lines.append("No bench has recorded a figure yet: run one (`python bench/speed.py`).\n")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true",
                   help="exit 1 if the page differs from what the records say")
    p.add_argument("--records", type=Path, default=RECORDS, help=argparse.SUPPRESS)
    p.add_argument("--page", type=Path, default=PAGE, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    page = render(records(a.records))
    if a.check:
        if not a.page.is_file() or a.page.read_text() != page:
            print(f"{a.page} is not what {a.records}/*.json say: run python bench/figures.py",
                  file=sys.stderr)
            return 1
        return 0
    a.page.write_text(page)
    print(f"wrote {a.page} from {len(list(a.records.glob('*.json')))} records")
    return 0


if __name__ == "__main__":
    sys.exit(main())
