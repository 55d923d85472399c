"""Section `web_scrape`: echomq-web's /metrics and /api/queues over 500 queues."""

import http.client
import json
import os
import subprocess
import time

from .client import cmdstats
from .harness import med, now_ms, rotate


def run(bench):
    """echomq-web scraping 500 queues: half list queues, half
    stream queues (group `workers`, entries delivered and not acked),
    each with future and due members in its schedule, pending jobs and a
    dead set. One echomq-web process (target/release/echomq-web) on a free
    127.0.0.1 port, started by this script with --queue for each, and
    timed from here over one keep-alive HTTP connection: each round
    `k` GETs of /metrics and `k` of /api/queues (order rotating), wall
    time per request (HTTP + the scrape + rendering), median over all.
    Round trips per scrape: what echomq-web reports (`round_trips`, the
    pipelines it sent); commands and server time per scrape: INFO
    commandstats reset right before one /metrics scrape, read after."""
    web = bench.web
    if not web or not os.path.exists(web):
        raise RuntimeError("%s not found: cargo build --release --workspace" % web)
    n_queues = 100 if bench.quick else 500
    k = 5 if bench.quick else 20
    bench.c.call("FLUSHALL", "SYNC")
    now = now_ms()
    names = ["q%03d" % i for i in range(n_queues)]
    for i, q in enumerate(names):
        s, p, d = "{%s}:schedule" % q, "{%s}:pending" % q, "{%s}:dead" % q
        cmds = [["ZADD", s] + [x for j in range(20) for x in (now + 30_000 + 1000 * j, "f%d" % j)],
                ["ZADD", s, now - 5000, "due0", now - 4000, "due1"],
                ["ZADD", d, now - 9000, "dead0"]]
        if i % 2:
            cmds += [["XGROUP", "CREATE", p, "workers", "$", "MKSTREAM"]]
            cmds += [["XADD", p, "*", "job", "j%d" % j] for j in range(4)]
            cmds += [["XREADGROUP", "GROUP", "workers", "c1", "COUNT", 2, "STREAMS", p, ">"]]
        else:
            cmds += [["LPUSH", p, "j0", "j1", "j2"]]
        bench.c.pipeline(cmds)
    args = [web, "--url", "redis://127.0.0.1:%d/" % bench.port, "--listen", "127.0.0.1:0"]
    for q in names:
        args += ["--queue", q]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        url = next((w for w in line.split() if w.startswith("http://")), None)
        if not url:
            raise RuntimeError("echomq-web did not start: %r" % line)
        hostport = url[len("http://"):].rstrip("/")
        host, port = hostport.rsplit(":", 1)
        hc = http.client.HTTPConnection(host, int(port), timeout=30)

        def get(path):
            t = time.perf_counter()
            hc.request("GET", path)
            r = hc.getresponse()
            body = r.read()
            ms = (time.perf_counter() - t) * 1000
            if r.status != 200:
                raise RuntimeError("GET %s: %d %r" % (path, r.status, body[:200]))
            return ms, body

        # Checked once: every queue in both, nothing in error.
        _, body = get("/metrics")
        text = body.decode()
        if "echomq_up 1" not in text.splitlines():
            raise RuntimeError("echomq_up is not 1")
        samples = sum(1 for l in text.splitlines() if l.startswith("echomq_queue_"))
        if samples != 5 * n_queues:
            raise RuntimeError("%d queue samples for %d queues" % (samples, n_queues))
        _, body = get("/api/queues")
        api = json.loads(body)
        if len(api["queues"]) != n_queues or any("error" in q for q in api["queues"]):
            raise RuntimeError("the API does not show every queue")
        round_trips = api["round_trips"]
        in_flight = sum(q["in_flight"] for q in api["queues"])
        if in_flight != 2 * (n_queues // 2):
            raise RuntimeError("in_flight %d" % in_flight)
        for _ in range(3):
            get("/metrics")
            get("/api/queues")
        times = {"/metrics": [], "/api/queues": []}
        for r in range(bench.rounds):
            for path in rotate(list(times), r):
                for _ in range(k):
                    times[path].append(get(path)[0])
        # Commands and server time of one scrape, per endpoint.
        srv = {p: [] for p in times}
        spread_us = {p: [] for p in times}
        cmds = {p: [] for p in times}
        for _, path in ((r, p) for r in range(bench.rounds) for p in times):
            bench.c.call("CONFIG", "RESETSTAT")
            get(path)
            st = cmdstats(bench.c)
            st.pop("config|resetstat", None)
            # ECHO.SPREAD runs one ZCOUNT per bucket inside the server
            # (60 buckets by default): counted by commandstats, not sent.
            nested = st.get("echo.spread", (0, 0))[0] * 60
            cmds[path].append(sum(c for c, _ in st.values()) - nested)
            # The nested ZCOUNTs' time is inside ECHO.SPREAD's already:
            # of ZCOUNT's, only the scrape's own calls (one per queue) count.
            zc_calls, zc_us = st.pop("zcount", (0, 0))
            own = zc_calls - nested
            srv[path].append(sum(u for _, u in st.values())
                             + (zc_us * own / zc_calls if zc_calls else 0))
            spread_us[path].append(st.get("echo.spread", (0, 0))[1])
        hc.close()
    finally:
        proc.terminate()
        proc.wait()
    bench.c.call("FLUSHALL", "SYNC")
    section = ("echomq-web scrape of %d queues (%d list, %d stream), %d rounds × %d GETs"
               % (n_queues, n_queues - n_queues // 2, n_queues // 2, bench.rounds, k))
    for path, xs in times.items():
        m = med(xs)
        bench.add(section, "GET %s, wall time per request" % path, "%.1f" % m, "ms",
                  goal="< 100 ms: %s" % ("yes" if m < 100 else "NO"), samples=xs, fmt="%.1f")
    bench.add(section, "round trips to the server per scrape (echomq-web's round_trips)",
              round_trips, "round trips",
              goal="a handful: %s" % ("yes" if round_trips <= 5 else "NO"))
    for path in times:
        bench.add(section, "GET %s: commands sent per scrape (INFO commandstats, less the "
                  "ZCOUNTs run inside ECHO.SPREAD); server µs per scrape (nested ZCOUNTs "
                  "counted once, inside ECHO.SPREAD)" % path, "%d" % med(cmds[path]),
                  "commands", server_us="%.0f" % med(srv[path]), samples=cmds[path])
    sp, total = med(spread_us["/api/queues"]), med(srv["/api/queues"])
    bench.add(section, "GET /api/queues: of which ECHO.SPREAD (one per queue, 60 buckets: 60 "
              "range counts each; /metrics sends none)", "%.0f" % sp, "server µs per scrape",
              server_us="%.0f" % sp,
              ratio="%.0f%% of the server time" % (100 * sp / total) if total else "",
              samples=spread_us["/api/queues"])
