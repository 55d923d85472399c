#!/usr/bin/env python3
"""Folds `perf script -F ip,sym --no-inline` output (call graphs recorded with
--call-graph dwarf) into a per-command breakdown: of the samples spent inside
the server's call() (the time INFO commandstats measures), how much is under
each direct callee of the command's handler, and the top leaf functions.
With --usec-per-call (from INFO commandstats) shares become µs per call.

usage: perf script -i X.data -F ip,sym --no-inline | perf_fold.py HANDLER --proc P [--usec-per-call U]
       perf script ... | perf_fold.py --summary --calls N --sample-us S
         (µs per call of every command function right below the outermost
          call(), from sample counts: for workloads that mix commands)
"""

import argparse
import collections
import sys


def samples(stream):
    frames = []
    for line in stream:
        line = line.strip()
        if not line:
            if frames:
                yield frames
            frames = []
            continue
        parts = line.split(None, 1)
        sym = parts[1] if len(parts) > 1 else "[unknown]"
        sym = sym.split("+0x")[0]
        frames.append(sym)
    if frames:
        yield frames


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("handler", nargs="?", help="the command's handler function, e.g. echo_retry")
    ap.add_argument("--summary", action="store_true")
    ap.add_argument("--calls", type=int)
    ap.add_argument("--sample-us", type=float)
    ap.add_argument("--proc",
                    help="the function call() runs for this command, e.g. zaddCommand, "
                         "ValkeyModuleCommandDispatcher, evalShaCommand")
    ap.add_argument("--usec-per-call", type=float)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    if a.summary:
        per = collections.Counter()
        for frames in samples(sys.stdin):
            calls = [i for i, f in enumerate(frames) if f == "call"]
            if calls and calls[-1] > 0:
                per[frames[calls[-1] - 1]] += 1
        for name, n in per.most_common(a.top):
            print("  %8.1f µs/call  %6d samples  %s" % (n * a.sample_us / a.calls, n, name))
        return

    total = in_call = in_handler = 0
    child = collections.Counter()
    leaf = collections.Counter()
    nested = collections.Counter()
    for frames in samples(sys.stdin):
        total += 1
        # leaf first; the outermost call() is the last one in the list
        calls = [i for i, f in enumerate(frames) if f == "call"]
        if not calls:
            continue
        inner = frames[:calls[-1]]
        # only samples of this command: the frame right below call()
        if not inner or inner[-1] != a.proc:
            continue
        in_call += 1
        # a command the handler runs itself (RM_Call, redis.call): the
        # innermost call() and the function right below it
        if len(calls) >= 2 and calls[0] > 0:
            nested["nested " + frames[calls[0] - 1]] += 1
        else:
            nested["(not inside a nested call())"] += 1
        name = frames[0]
        if name.startswith("[unknown]") or name.startswith("0x"):
            # a static function of the server: name it by its nearest known caller
            known = [f for f in inner if not (f.startswith("[unknown]") or f.startswith("0x"))]
            name = "[static fn] in %s" % (known[0] if known else "?")
        leaf[name] += 1
        hs = [i for i, f in enumerate(inner)
              if f == a.handler or f.endswith("::" + a.handler)]
        if not hs:
            child["(in %s, outside the handler)" % a.proc] += 1
            continue
        in_handler += 1
        h = hs[-1]
        child[inner[h - 1] if h > 0 else "(handler self)"] += 1

    def fmt(n):
        pct = 100.0 * n / in_call if in_call else 0
        if a.usec_per_call:
            return "%6.2f µs %5.1f%%" % (a.usec_per_call * n / in_call, pct)
        return "%5.1f%%" % pct

    print("samples: %d, inside call() -> %s: %d (%.0f%%), inside %s: %d" % (
        total, a.proc, in_call, 100.0 * in_call / max(total, 1), a.handler, in_handler))
    if a.usec_per_call:
        print("shares scaled to the command's %.2f µs/call (INFO commandstats)" % a.usec_per_call)
    print("-- inclusive time by direct callee of %s:" % a.handler)
    for name, n in child.most_common(a.top):
        print("  %s  %s" % (fmt(n), name))
    if len(nested) > 1:
        print("-- time inside nested commands (RM_Call / redis.call), by command function:")
        for name, n in nested.most_common(a.top):
            print("  %s  %s" % (fmt(n), name))
    print("-- self time (leaf function) inside the command:")
    for name, n in leaf.most_common(a.top):
        print("  %s  %s" % (fmt(n), name))


if __name__ == "__main__":
    main()
