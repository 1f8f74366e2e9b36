#!/bin/sh
# Not a Python program: writes a summary and nothing else, so no observer ever loads.
while [ $# -gt 0 ]; do [ "$1" = "--out" ] && out="$2"; shift; done
mkdir -p "$out" && echo '{"contract": 1, "n_params": 30080, "world_size": 4, "steps": 20}' > "$out/summary.json"
