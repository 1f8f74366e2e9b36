"""Plants links in its run directory to what $CAPSTONE_TAMPER_TARGETS names (a folder and a
file it cannot read), hoping the suite, which is root, opens them up when it tidies the run."""

import os
from pathlib import Path

from _common import out_dir

out = out_dir()
for i, target in enumerate(p for p in os.environ.get("CAPSTONE_TAMPER_TARGETS", "").split(":")
                           if p):
    (out / f"link{i}").symlink_to(Path(target))
