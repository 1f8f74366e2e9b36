"""Who submitted what: a class's submissions and their students.

Two layouts:
- a plain folder, one subfolder per student: the folder's name is the student;
- Gradescope's "Export Submissions": one folder per submission, named by its id, and
  `submission_metadata.yml` mapping each id to its submitters (`:name:`, `:sid:`,
  `:email:`; several for a group) and its time (`:created_at:`). Its keys are Ruby
  symbols and some values carry Ruby tags (`!ruby/object:...`): read as plain data.

Reading YAML needs PyYAML, the `class` extra (`pip install -c constraints.txt -e ".[class]"`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METADATA = "submission_metadata.yml"


@dataclass(frozen=True)
class Student:
    """One submitter: a name, and the school's id and email where the platform gives them."""

    name: str
    sid: str = ""
    email: str = ""


@dataclass(frozen=True)
class Submission:
    """One folder to grade (`name`: its folder's name) and the students it counts for."""

    name: str
    folder: Path
    students: tuple[Student, ...] = field(default_factory=tuple)
    submitted_at: str = ""


def read_roster(submissions: Path) -> list[Submission]:
    """The submissions under `submissions` (a Gradescope export or a plain folder)."""
    if not submissions.is_dir():
        raise SystemExit(f"{submissions}: not a folder of submissions (one subfolder per "
                         f"student, or a Gradescope export with {METADATA})")
    folders = sorted(p for p in submissions.iterdir()
                     if p.is_dir() and not p.name.startswith((".", "__")))
    meta = submissions / METADATA
    if not meta.is_file():
        return [Submission(p.name, p, (Student(p.name),)) for p in folders]
    data = _load_yaml(meta)
    if not isinstance(data, dict):
        raise SystemExit(f"{meta}: expected a mapping of submission ids to their submitters")
    out = []
    for p in folders:
        entry = data.get(p.name)
        if not isinstance(entry, dict):
            raise SystemExit(f"{meta}: no entry for the folder {p.name}: is this the export's "
                             "own metadata file?")
        people = tuple(Student(str(s.get(":name") or p.name), str(s.get(":sid") or ""),
                               str(s.get(":email") or ""))
                       for s in entry.get(":submitters") or [] if isinstance(s, dict))
        out.append(Submission(p.name, p, people or (Student(p.name),),
                              str(entry.get(":created_at") or "")))
    return out


def _load_yaml(path: Path) -> Any:
    try:
        import yaml
    except ImportError:
        raise SystemExit(f"{path}: reading a Gradescope export needs PyYAML: pip install -c "
                         "constraints.txt -e \".[class]\"") from None

    class Loader(yaml.SafeLoader):
        """SafeLoader that reads Ruby-tagged nodes as the plain data under the tag."""

    def plain(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return loader.construct_scalar(node)

    Loader.add_multi_constructor("!", plain)
    return yaml.load(path.read_text(), Loader=Loader)  # a SafeLoader: plain data only
