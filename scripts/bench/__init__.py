"""Side-by-side benchmark of echomq against native commands and Lua.

Run by scripts/bench.sh (`make bench`), which starts and stops the server.
Every row is measured in the same run as the rows it is compared with:
each section runs ROUNDS interleaved rounds (the order of the variants
rotates from round to round) and reports the median per row, so a burst of
load from other work on the machine hits all variants alike.

Python 3 standard library only. Usage, from scripts/ (or with scripts/ on
PYTHONPATH):
  python3 -m bench --port PORT [--rounds N] [--quick] [--only SECTION,...]
  python3 -m bench --port PORT --workload NAME --seconds S   (for profiling)
  python3 -m bench --port PORT --only versions --servers BIN,... [--modules SO,...]
    (starts its own servers, one per binary and module build, interleaved)

client.py is the RESP client, harness.py what the sections share and the
table, one module per section (its name is the --only name), workloads.py
the profiling workloads.
"""
