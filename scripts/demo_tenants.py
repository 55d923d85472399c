#!/usr/bin/env python3
"""`make demo`'s tenants scene: the tenants' herd from one real run of the benchmark.

`make bench BENCH_ARGS="--only tenants"` (scripts/bench/tenants.py) writes every lane's every round
to target/bench/tenants.json, with its per-job data. This draws one round of each lane (the first,
or --round N) as an SVG in the style of the herd scene (examples/demo.rs): per lane, on the left
the dependency's calls per 250 ms (the small tenants' served, t0's served, the failed) beside the
small tenants' arrivals; on the right every small tenant's job, its wait from add to start against
its add time (log scale; a job not started by the run's end at its lower bound). Without the JSON
it says how to make it and exits 0, so the demo goes on.

  demo_tenants.py [--json PATH] [--svg PATH] [--round N]

ECHOMQ_DEMO_TENANTS_JSON and ECHOMQ_DEMO_TENANTS_SVG stand for --json and --svg. Standard library
only; no server needed.
"""

import argparse
import json
import math
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
JSON_DEFAULT = os.path.join(ROOT, "target", "bench", "tenants.json")
SVG_DEFAULT = os.path.join(ROOT, "target", "demo", "tenants.svg")

GREEN, GREY, RED, BLUE, INK, SOFT = "#3a9d5d", "#8c96a8", "#d1495b", "#2b6cb0", "#222", "#444"
WAIT_MIN, WAIT_MAX = 0.001, 100.0  # the wait axis, s (log scale; a shorter wait is drawn at 1 ms)


def xml(text):
    """Text for SVG: the five characters XML reserves, escaped."""
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ('"', "&quot;"), ("'", "&apos;")):
        text = text.replace(a, b)
    return text


def percentile(waits, q):
    """(wait, lower bound?) at quantile q: a job not started sorts by its bound, and every
    percentile from the first such job on is only a bound (as the benchmark reports it)."""
    i = min(len(waits) - 1, int(len(waits) * q))
    return waits[i][0], not all(started for _, started in waits[:i + 1])


def lane_summary(r):
    """The lane's small-tenant waits and calls, as one line."""
    d = r["detail"]
    end = r["run_s"]
    waits = sorted((w, True) if w is not None else (end - at, False) for at, w in d["small"])
    p50, c50 = percentile(waits, 0.5)
    p99, c99 = percentile(waits, 0.99)
    show = lambda x, c: ("≥ %.1f" if c else "%.2f") % x  # noqa: E731
    unstarted = sum(1 for _, started in waits if not started)
    return ("t1..t9's wait from add to start: p50 %s s, p99 %s s, %s of %s not started by the end; "
            "%s calls, %s %% failed; t0 served %.1f/s; run %.1f s"
            % (show(p50, c50), show(p99, c99), f"{unstarted:,}", f"{len(waits):,}",
               f"{r['calls']:,}", ("%.2f" if r["failed_pct"] < 1 else "%.1f") % r["failed_pct"],
               r["big_per_s"], end))


def how(lane, run):
    """The lane's settings, as the benchmark set them."""
    parts = ["ECHO.ADD ... GROUP <tenant>" if lane["grouped"] else "ECHO.ADD without GROUP"]
    if lane["group_limit"]:
        parts.append('echomq.group-limits "<schedule> %s"' % lane["group_limit"])
    if lane["queue_limit"]:
        parts.append('echomq.release-limits "<schedule> %s"' % lane["queue_limit"])
    if not lane["group_limit"] and not lane["queue_limit"]:
        parts.append("no limit")
    parts.append("over quota: ECHO.RETRY ... fixed:<retry after>%s"
                 % (" GROUP <tenant>" if lane["grouped"] else ""))
    return "; ".join(parts)


def svg(data, round_index):
    lanes = [lane for lane in data["lanes"] if data["rounds"].get(lane["name"])]
    rounds = {lane["name"]: data["rounds"][lane["name"]][round_index] for lane in lanes}
    width, left, right = 1280.0, 70.0, 30.0
    gap = 80.0
    plot_w = width - left - right
    calls_w = plot_w * 0.6
    waits_x = left + calls_w + gap
    waits_w = plot_w - calls_w - gap
    lane_h, head, plot_h = 222.0, 62.0, 120.0
    top = 92.0
    height = top + lane_h * len(lanes) + 4.0
    bin_s = rounds[lanes[0]["name"]]["detail"]["bin_s"]
    x_max = math.ceil(round(max(r["run_s"] for r in rounds.values()), 1) / 5.0) * 5.0
    arrivals_s = data["arrivals_s"]

    def totals(r):
        s = r["detail"]["series"]
        return [s["big_served"][i] + s["small_served"][i] + s["big_failed"][i] + s["small_failed"][i]
                for i in range(len(s["big_served"]))]

    y_max = max(max(totals(r) or [1]) for r in rounds.values())
    y_max = max(10, math.ceil(y_max / 25.0) * 25)
    sx = lambda t: left + calls_w * min(t, x_max) / x_max  # noqa: E731
    wx = lambda t: waits_x + waits_w * min(t, arrivals_s) / arrivals_s  # noqa: E731
    log_lo, log_hi = math.log10(WAIT_MIN), math.log10(WAIT_MAX)

    out = []
    w = out.append
    w('<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" '
      'font-family="DejaVu Sans, Helvetica, Arial, sans-serif">' % (width, height, width, height))
    w('<rect width="%.0f" height="%.0f" fill="#ffffff"/>' % (width, height))
    w('<text x="%.1f" y="28" font-size="18" font-weight="bold" text-anchor="middle">The tenants\' '
      'herd: t0 adds %s jobs at once, t1..t9 add %d a second each for %.0f s; each tenant\'s quota '
      'is %d calls/s</text>'
      % (width / 2, f"{data['big_jobs']:,}", data["small_rate"], arrivals_s, data["quota"]))
    w('<text x="%.1f" y="50" font-size="12" text-anchor="middle" fill="%s">left: the dependency\'s '
      'calls per %.0f ms: green t1..t9\'s served, grey t0\'s served, red the failed (over quota, '
      'retried); dashed blue: t1..t9\'s adds. right: each t1..t9 job\'s wait</text>'
      % (width / 2, SOFT, bin_s * 1000))
    info = data.get("run", {})
    w('<text x="%.1f" y="68" font-size="12" text-anchor="middle" fill="%s">%d worker threads, '
      '%.0f ms a call; one real run of make bench BENCH_ARGS="--only tenants"%s: round %d of %d of '
      'each lane</text>'
      % (width / 2, SOFT, data["workers"], data["service_s"] * 1000,
         xml(" (%s, %s UTC, %s)" % (info["commit"], info["utc"], info["server"]))
         if info.get("commit") else "",
         round_index + 1, len(data["rounds"][lanes[0]["name"]])))

    for k, lane in enumerate(lanes):
        r = rounds[lane["name"]]
        d = r["detail"]
        s = d["series"]
        y_lane = top + lane_h * k
        y0 = y_lane + head + plot_h
        sy = lambda n: y0 - plot_h * min(n, y_max) / y_max  # noqa: E731,B023
        w('<text x="%.1f" y="%.1f" font-size="15" font-weight="bold">%s</text>'
          % (left, y_lane + 16, xml(lane["title"])))
        w('<text x="%.1f" y="%.1f" font-size="12" fill="%s">%s</text>'
          % (left, y_lane + 33, SOFT, xml(how(lane, data))))
        w('<text x="%.1f" y="%.1f" font-size="12" fill="%s">%s</text>'
          % (left, y_lane + 50, INK, xml(lane_summary(r))))

        # left: the calls per bin, stacked: small served, t0 served, failed
        step = 25 if y_max <= 150 else 50
        for tick in range(0, int(y_max) + 1, step):
            y = sy(tick)
            w('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e3e3e3"/>'
              % (left, y, left + calls_w, y))
            w('<text x="%.1f" y="%.1f" font-size="10" text-anchor="end" fill="%s">%d</text>'
              % (left - 6, y + 3.5, SOFT, tick))

        def area(values, color):
            path = ["M%.1f,%.1f" % (left, y0)]
            for b, v in enumerate(values):
                t = b * bin_s
                if t >= x_max:
                    break
                y = sy(v)
                path.append("L%.1f,%.1f L%.1f,%.1f" % (sx(t), y, sx(t + bin_s), y))
            path.append("L%.1f,%.1f Z" % (sx(min(len(values) * bin_s, x_max)), y0))
            w('<path d="%s" fill="%s"/>' % (" ".join(path), color))

        n = len(s["big_served"])
        served_small = s["small_served"]
        served = [s["small_served"][i] + s["big_served"][i] for i in range(n)]
        area(totals(r), RED)
        area(served, GREY)
        area(served_small, GREEN)
        # the small tenants' adds per bin
        adds = [0] * n
        for at, _ in d["small"]:
            adds[min(n - 1, int(at / bin_s))] += 1
        path = []
        for b, v in enumerate(adds):
            t = b * bin_s
            if t >= x_max:
                break
            path.append("%s%.1f,%.1f L%.1f,%.1f" % ("M" if b == 0 else " L", sx(t), sy(v),
                                                     sx(t + bin_s), sy(v)))
        w('<path d="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-dasharray="5 4"/>'
          % ("".join(path), BLUE))
        w('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>'
          % (left, y0, left + calls_w, y0, INK))
        t = 0.0
        while t <= x_max + 1e-9:
            x = sx(t)
            w('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/><text x="%.1f" y="%.1f" '
              'font-size="10" text-anchor="middle" fill="%s">%.0f s</text>'
              % (x, y0, x, y0 + 4, INK, x, y0 + 15, SOFT, t))
            t += 5.0

        # right: each small tenant's job, its wait against its add time
        wy = lambda v: y0 - plot_h * (math.log10(min(max(v, WAIT_MIN), WAIT_MAX)) - log_lo) / (log_hi - log_lo)  # noqa: E731,E501,B023
        for tick, label in ((0.001, "≤ 1 ms"), (0.01, "10 ms"), (0.1, "0.1 s"), (1.0, "1 s"),
                            (10.0, "10 s"), (100.0, "100 s")):
            y = wy(tick)
            goal = tick == 1.0
            w('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"%s/>'
              % (waits_x, y, waits_x + waits_w, y, BLUE if goal else "#e3e3e3",
                 ' stroke-dasharray="5 4"' if goal else ""))
            w('<text x="%.1f" y="%.1f" font-size="10" text-anchor="end" fill="%s">%s</text>'
              % (waits_x - 6, y + 3.5, SOFT, label))
        # one mark per pixel: a dense band of jobs would repeat the same mark thousands of times
        dots, bounds = {}, {}
        end = r["run_s"]
        for at, wait in d["small"]:
            if wait is None:
                xy = (round(wx(at)), round(wy(end - at)))
                bounds[xy] = "M%d,%d l-2.5,4 h5 z" % xy
            else:
                xy = (round(wx(at)), round(wy(wait)))
                dots[xy] = '<circle cx="%d" cy="%d" r="1.6"/>' % xy
        dots, bounds = list(dots.values()), list(bounds.values())
        if dots:
            w('<g fill="%s" fill-opacity="0.45">%s</g>' % (GREEN, "".join(dots)))
        if bounds:
            w('<path d="%s" fill="none" stroke="%s" stroke-width="0.8"/>' % (" ".join(bounds), RED))
        w('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>'
          % (waits_x, y0, waits_x + waits_w, y0, INK))
        t = 0.0
        while t <= arrivals_s + 1e-9:
            x = wx(t)
            w('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/><text x="%.1f" y="%.1f" '
              'font-size="10" text-anchor="middle" fill="%s">%.0f s</text>'
              % (x, y0, x, y0 + 4, INK, x, y0 + 15, SOFT, t))
            t += 5.0
        w('<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle" fill="%s">t1..t9\'s wait '
          'by its add time (log scale; dashed: 1 s)</text>'
          % (waits_x + waits_w / 2, y0 + 30, SOFT))
        if bounds:
            w('<text x="%.1f" y="%.1f" font-size="11" text-anchor="end" fill="%s">red: not started '
              'by the run\'s end, drawn at that lower bound</text>'
              % (waits_x + waits_w, y0 - plot_h + 12, RED))
        w('<text x="%.1f" y="%.1f" font-size="11" text-anchor="middle" fill="%s">calls per %.0f ms '
          'against the time from the first add</text>'
          % (left + calls_w / 2, y0 + 30, SOFT, bin_s * 1000))

    mid = top + lane_h * len(lanes) / 2
    w('<text x="18" y="%.1f" font-size="11" fill="%s" transform="rotate(-90 18 %.1f)" '
      'text-anchor="middle">the dependency\'s calls per %.0f ms</text>'
      % (mid, SOFT, mid, bin_s * 1000))
    w("</svg>")
    return "\n".join(out) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="demo_tenants.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", default=os.environ.get("ECHOMQ_DEMO_TENANTS_JSON", JSON_DEFAULT))
    p.add_argument("--svg", default=os.environ.get("ECHOMQ_DEMO_TENANTS_SVG", SVG_DEFAULT))
    p.add_argument("--round", type=int, default=1, help="which round of each lane (1 = first)")
    a = p.parse_args(argv)
    print()
    print("Scene: the tenants' herd (from one run of the benchmark).")
    if not os.path.exists(a.json):
        print('  %s is missing: run make bench BENCH_ARGS="--only tenants" (about 4 minutes, or '
              'BENCH_ARGS="--only tenants --tenants-rounds 1", under 2), then make demo again.'
              % a.json)
        return 0
    with open(a.json) as f:
        data = json.load(f)
    lanes = [lane for lane in data.get("lanes", []) if data["rounds"].get(lane["name"])]
    if not lanes or "detail" not in data["rounds"][lanes[0]["name"]][0]:
        print("  %s has no per-job data (written by an older benchmark): run make bench "
              'BENCH_ARGS="--only tenants" again.' % a.json)
        return 0
    n_rounds = min(len(data["rounds"][lane["name"]]) for lane in lanes)
    if not 1 <= a.round <= n_rounds:
        print("demo_tenants: --round %d: the run has rounds 1..%d" % (a.round, n_rounds),
              file=sys.stderr)
        return 2
    print("  t0 adds %s jobs at once, t1..t9 %d/s each for %.0f s; quota %d/s a tenant; round %d."
          % (f"{data['big_jobs']:,}", data["small_rate"], data["arrivals_s"], data["quota"],
             a.round))
    for lane in lanes:
        r = data["rounds"][lane["name"]][a.round - 1]
        print("  %-46s %s" % (lane["title"], lane_summary(r)))
    os.makedirs(os.path.dirname(os.path.abspath(a.svg)), exist_ok=True)
    with open(a.svg, "w") as f:
        f.write(svg(data, a.round - 1))
    print("  SVG: %s" % os.path.realpath(a.svg))
    return 0


if __name__ == "__main__":
    sys.exit(main())
