"""Instructions per job under callgrind: steady where timings on a shared VM
are not (BENCHMARKS.md, the `add` and `groups` sections). Starts its own
valkey-server under `valgrind --tool=callgrind` with the module (127.0.0.1,
a free port, a temp dir), runs one workload, collects only inside the
functions named below (--toggle-collect), prints the events per job and the
output file (read it with callgrind_annotate --inclusive=yes). Needs valgrind.

usage: python3 scripts/callgrind.py MODULE.so WORKLOAD [JOBS (20000)] [valgrind options...]
  add-xadd     JOBS x (HSET + XADD pending * job <id>) in MULTIs of 1000
  add-echo     JOBS x (HSET + ECHO.ADD schedule pending <id>), the fast path
               (collected: hsetCommand, xaddCommand, the module dispatcher)
  promote-0    JOBS/1000 releases of 1000 due members of an ungrouped schedule
  promote-1    the same from one group of 1000; promote-10: 10 groups of 100
               (collected: the ECHO.PROMOTE handler; the fills are not)
  repeat-plain JOBS/1000 releases of 1000 plain due members, as the bench's
               `repeat` section's lanes (1000 not yet due beside)
  repeat-every the same of 1000 due occurrences of `every:60000 JITTER 1000`,
               each arming its next; repeat-cron: `cron:*/5 * * * * JITTER
               60000`; repeat-crontz: the same with TZ Europe/Berlin
               (collected: the ECHO.PROMOTE handler)
e.g. python3 scripts/callgrind.py target/release/libechomq.so promote-1 5000 --cache-sim=yes
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench.client import Conn  # noqa: E402

COLLECT = {
    "add": ["hsetCommand", "xaddCommand", "ValkeyModuleCommandDispatcher"],
    "promote": ["*echo_promote*"],
    "repeat": ["*echo_promote*"],
}


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    module, workload = os.path.abspath(sys.argv[1]), sys.argv[2]
    jobs = int(sys.argv[3]) if len(sys.argv) > 3 else 20_000
    kind = workload.split("-")[0]
    if kind not in COLLECT or jobs < 1000:
        sys.exit(__doc__)
    tmp = tempfile.mkdtemp(prefix="echomq-callgrind.")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    out = os.path.join(tmp, "callgrind.out")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out, "--collect-atstart=no"]
    cmd += ["--toggle-collect=" + f for f in COLLECT[kind]] + sys.argv[4:]
    cmd += ["valkey-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", tmp,
            "--save", "", "--appendonly", "no", "--loadmodule", module]
    with open(os.path.join(tmp, "valgrind.log"), "w") as log:
        server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    try:
        c = connect(port, server)
        run(c, workload, jobs)
    finally:
        server.terminate()
        server.wait()
    events, totals = [], []
    with open(out) as f:
        for line in f:
            if line.startswith("events:"):
                events = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                totals = [int(v) for v in line.split()[1:]]
                break
    print("%s %s: %s" % (os.path.basename(module), workload, " ".join(
        "%s/job %.1f" % (e, v / jobs) for e, v in zip(events, totals))))
    # Each collected function's own share (inclusive), per job.
    annotated = subprocess.run(["callgrind_annotate", "--inclusive=yes", out],
                               capture_output=True, text=True).stdout
    for name in COLLECT[kind]:
        own = re.compile(r"^\s*([\d,]+) .*:(?:\S*::)?%s \[" % re.escape(name.strip("*")))
        for line in annotated.splitlines():
            found = own.match(line)
            if found:
                print("  %s: %.1f Ir/job" % (name.strip("*"), int(found.group(1).replace(",", "")) / jobs))
                break
    print(out)


def connect(port, server):
    for _ in range(600):
        try:
            c = Conn(port)
            c.call("PING")
            return c
        except OSError:
            if server.poll() is not None:
                sys.exit("callgrind: the server exited")
            time.sleep(0.1)
    sys.exit("callgrind: no server")


def run(c, workload, jobs):
    if workload in ("add-xadd", "add-echo"):
        c.call("XGROUP", "CREATE", "{add}:pending", "workers", "0", "MKSTREAM")
        for lo in range(0, jobs - jobs % 1000, 1000):
            cmds = [["MULTI"]]
            for i in range(lo, lo + 1000):
                jid = "job:%012d" % i
                cmds.append(["HSET", "{add}:jobs", jid, "payload-0123456789"])
                if workload == "add-xadd":
                    cmds.append(["XADD", "{add}:pending", "*", "job", jid])
                else:
                    cmds.append(["ECHO.ADD", "{add}:schedule", "{add}:pending", jid])
            c.pipeline(cmds + [["EXEC"]])
    elif workload in ("promote-0", "promote-1", "promote-10"):
        groups = int(workload.split("-")[1])
        sched, pend = "{grp}:schedule", "{grp}:pending"
        for _ in range(jobs // 1000):
            c.call("DEL", sched, pend)
            fill = []
            for i in range(1000):
                cmd = ["ECHO.SCHEDULE", sched, "m%d" % i, 0]
                if groups:
                    cmd += ["GROUP", "g%d" % (i % groups)]
                fill.append(cmd)
            c.pipeline(fill)
            time.sleep(0.05)
            moved = c.call("ECHO.PROMOTE", sched, pend, "LIMIT", 1000)
            if moved != 1000:
                sys.exit("callgrind: moved %r, not 1000" % moved)
    elif workload in ("repeat-plain", "repeat-every", "repeat-cron", "repeat-crontz"):
        from bench import repeat
        from bench.harness import load_script
        lane = workload.split("-")[1]
        c.fill_sha = load_script(c, "fill.lua")
        repeat.setup(c, [x for x in repeat.LANES if x[0] == lane])
        sched, pend, _ = repeat.keys(lane)
        for _ in range(jobs // 1000):
            repeat.prepare(c, lane)
            moved = c.call("ECHO.PROMOTE", sched, pend, "LIMIT", 1000)
            if moved != 1000:
                sys.exit("callgrind: moved %r, not 1000" % moved)
            repeat.after(c, lane)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
