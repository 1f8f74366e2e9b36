"""A timeline (Chrome trace JSON, as tests/harness/run/timeline.py writes it, or anyone's)
drawn as a picture: one row of spans per rank, for a page that takes only images. Its names
are drawn as typed, never as mathtext (a run's call sites and messages are in them)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness.report.escape import mathtext_safe


def draw(trace: Path, png: Path, title: str = "") -> Path:
    """Draw a trace file (this format, anyone's) as one row of spans per rank: what the
    viewers show, for a page that takes only images. Its names (a run's, or anyone's) are
    drawn as typed, never as mathtext (escape.mathtext_safe)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["pid"]: mathtext_safe(str(e["args"]["name"])) for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    rows = {pid: i for i, pid in enumerate(sorted(names, key=lambda p: names[p]))}
    fig, ax = plt.subplots(figsize=(12, 0.6 * len(rows) + 1.6))
    try:
        colours = {"all_to_all_single": "#2980b9", "all_reduce": "#27ae60",
                   "broadcast": "#8e44ad"}
        for e in events:
            if e["pid"] not in rows:
                continue
            y = rows[e["pid"]]
            if e["ph"] == "X":
                colour = "#c0392b" if e.get("cname") == "terrible" else \
                    colours.get(e["name"].split("(")[0], "#7f8c8d")
                ax.barh(y, max(e["dur"], 50) / 1e3, left=e["ts"] / 1e3, height=0.5,
                        color=colour)
            elif e["ph"] == "i":
                ax.plot([e["ts"] / 1e3] * 2, [y + 0.3, y + 0.45], color="black", lw=0.6)
        for e in events:
            if e["ph"] == "i" and e.get("s") == "g":
                ax.axvline(e["ts"] / 1e3, color="black", ls="--")
                ax.text(e["ts"] / 1e3, -0.6, mathtext_safe(str(e["name"])) + " ", ha="right",
                        fontsize=8)
        ax.set_yticks(list(rows.values()), [names[p] for p in rows])
        ax.invert_yaxis()
        ax.set_xlabel("ms (ticks under a row: backward calls; red: blocked)")
        handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in [*colours.values(), "#c0392b"]]
        ax.legend(handles, [*colours, "blocked"], fontsize=7, loc="upper left",
                  bbox_to_anchor=(1.0, 1.0))
        ax.set_title(mathtext_safe(title or trace.name), fontsize=10)
        fig.tight_layout()
        fig.savefig(png, dpi=100)
    finally:  # a trace that fails to draw leaves no figure open
        plt.close(fig)
    return png


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        raise SystemExit("usage: python -m tests.harness.report.timeline_picture TRACE.json "
                         "OUT.png")
    print(draw(Path(sys.argv[1]), Path(sys.argv[2])))
