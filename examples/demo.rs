//! The thundering herd made visible (`make demo`, through scripts/demo.sh).
//!
//! A cohort of 100 jobs fails at the same instant, at attempt 3, and each job
//! is retried with `ECHO.RETRY` inside one MULTI/EXEC: once with
//! `exponential:100:10000` (every job gets 400 ms: one herd), once with
//! `jitter:exponential:100:10000` (each job draws 0..=400 ms) and once with
//! `equal-jitter:exponential:100:10000` (each job draws 200..=400 ms: never
//! sooner than half the backoff). `ECHO.SPREAD` reads the fire times back as a
//! histogram; all three are drawn in the terminal and written as one SVG.
//!
//! Then the herd of the benchmark against a dependency (scene 2, from a
//! file the benchmark writes), and the calendar's herd (scene 3): 10,000
//! recurring definitions `cron:0 * * * *` (`ECHO.REPEAT`) fire in one
//! millisecond at the next full hour, and the same 10,000 with
//! `JITTER 300000` spread over its first five minutes, read back with
//! `ECHO.SPREAD` and drawn in the terminal and as an SVG.
//!
//! Usage: `demo [--url redis://127.0.0.1:6379/] [--svg target/demo/herd.svg]
//! [--calendar-svg target/demo/calendar-herd.svg]` (or ECHOMQ_DEMO_URL,
//! ECHOMQ_DEMO_SVG, ECHOMQ_DEMO_CALENDAR_SVG). It writes only its own keys,
//! and deletes them when done, so any server with the module will do.

use std::fmt::Write as _;
use std::path::PathBuf;

const JOBS: usize = 100;
const ATTEMPT: u64 = 3;
const PLAIN: &str = "exponential:100:10000";
const JITTERED: &str = "jitter:exponential:100:10000";
const EQUAL: &str = "equal-jitter:exponential:100:10000";
/// The window read back: [now, now + 401) ms covers every delay in 0..=400.
const WINDOW_MS: i64 = 401;
const BUCKETS: u64 = 10;

struct Cohort {
    title: &'static str,
    policy: &'static str,
    now_ms: i64,
    /// (start, end) of each bucket in ms after `now_ms`, end exclusive.
    bounds: Vec<(i64, i64)>,
    counts: Vec<i64>,
    /// From 1 ms buckets: how many distinct milliseconds the jobs re-fire
    /// at, and the most jobs in any one of them.
    distinct_ms: usize,
    busiest_ms: i64,
}

impl Cohort {
    fn peak(&self) -> i64 {
        self.counts.iter().copied().max().unwrap_or(0)
    }
}

fn arg_or_env(flag: &str, env: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
        .or_else(|| std::env::var(env).ok())
        .unwrap_or_else(|| default.to_string())
}

/// Fails `JOBS` jobs at attempt `ATTEMPT` inside one MULTI/EXEC, so they share
/// the server's `now` (TIME is frozen inside the transaction, as is the
/// module's clock), then reads the fire times back with ECHO.SPREAD.
fn run_cohort(
    con: &mut redis::Connection,
    key: &str,
    title: &'static str,
    policy: &'static str,
) -> redis::RedisResult<Cohort> {
    let mut pipe = redis::pipe();
    pipe.atomic().cmd("DEL").arg(key).ignore().cmd("TIME");
    for i in 0..JOBS {
        pipe.cmd("ECHO.RETRY")
            .arg(key)
            .arg(format!("job-{i:03}"))
            .arg(policy)
            .arg(ATTEMPT)
            .ignore();
    }
    let ((secs, micros),): ((i64, i64),) = pipe.query(con)?;
    let now_ms = secs * 1000 + micros / 1000;
    let counts: Vec<i64> = redis::cmd("ECHO.SPREAD")
        .arg(key)
        .arg(now_ms)
        .arg(now_ms + WINDOW_MS)
        .arg(BUCKETS)
        .query(con)?;
    let per_ms: Vec<i64> = redis::cmd("ECHO.SPREAD")
        .arg(key)
        .arg(now_ms)
        .arg(now_ms + WINDOW_MS)
        .arg(WINDOW_MS)
        .query(con)?;
    // The contract's bucket edges: floor(i * W / buckets).
    let edge = |i: i64| i * WINDOW_MS / BUCKETS as i64;
    let bounds = (0..BUCKETS as i64)
        .map(|i| (edge(i), edge(i + 1)))
        .collect();
    Ok(Cohort {
        title,
        policy,
        now_ms,
        bounds,
        counts,
        distinct_ms: per_ms.iter().filter(|&&n| n > 0).count(),
        busiest_ms: per_ms.iter().copied().max().unwrap_or(0),
    })
}

fn draw_terminal(c: &Cohort) {
    const WIDTH: i64 = 50;
    println!(
        "{}: ECHO.RETRY ... {} {ATTEMPT}, {JOBS} jobs in one MULTI/EXEC",
        c.title, c.policy
    );
    println!(
        "  failed at server time {} ms; re-fire time in ms after that, and jobs per bucket:",
        c.now_ms
    );
    for (&(lo, hi), &n) in c.bounds.iter().zip(&c.counts) {
        let mut len = n * WIDTH / JOBS as i64;
        if n > 0 && len == 0 {
            len = 1;
        }
        println!(
            "  [{lo:>3}, {hi:>3}) ms  |{:<width$} {n:>3}",
            "#".repeat(len as usize),
            width = WIDTH as usize
        );
    }
    println!(
        "  total {}, tallest bucket {}; in 1 ms buckets: {} distinct instant(s), at most {} jobs in one ms",
        c.counts.iter().sum::<i64>(),
        c.peak(),
        c.distinct_ms,
        c.busiest_ms
    );
    println!();
}

/// The histograms side by side, on the same axes.
fn svg(cohorts: &[&Cohort]) -> String {
    let (pw, ph) = (460.0, 320.0); // one panel
    let (left, right, top, bottom) = (56.0, 16.0, 84.0, 52.0);
    let width = pw * cohorts.len() as f64;
    let height = ph + 40.0;
    let plot_w = pw - left - right;
    let plot_h = ph - top - bottom + 40.0;
    let y_max = JOBS as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##
    );
    for (p, c) in cohorts.iter().enumerate() {
        let x0 = pw * p as f64 + left;
        let y0 = top + plot_h; // the x axis
        let color = ["#d1495b", "#00798c", "#edae49"][p % 3];
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="24" font-size="16" font-weight="bold" text-anchor="middle">{}</text>"#,
            pw * p as f64 + pw / 2.0,
            c.title
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="44" font-size="12" text-anchor="middle" fill="#444">{} at attempt {ATTEMPT}, {JOBS} jobs: tallest bucket {}</text>"##,
            pw * p as f64 + pw / 2.0,
            c.policy,
            c.peak()
        );
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="62" font-size="12" text-anchor="middle" fill="#444">re-fire at {} distinct ms, at most {} jobs in one ms</text>"##,
            pw * p as f64 + pw / 2.0,
            c.distinct_ms,
            c.busiest_ms
        );
        // y grid and labels (same scale in both panels)
        for tick in [0, 25, 50, 75, 100] {
            let y = y0 - plot_h * tick as f64 / y_max;
            let _ = writeln!(
                s,
                r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e3e3e3"/>"##,
                x0 + plot_w
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#444">{tick}</text>"##,
                x0 - 6.0,
                y + 4.0
            );
        }
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" fill="#444" transform="rotate(-90 {:.1} {:.1})">jobs per bucket</text>"##,
            x0 - 38.0,
            top + plot_h / 2.0,
            x0 - 38.0,
            top + plot_h / 2.0
        );
        // bars: x is time in ms, each bar exactly its bucket's span
        let scale_x = plot_w / WINDOW_MS as f64;
        for (&(lo, hi), &n) in c.bounds.iter().zip(&c.counts) {
            let bx = x0 + lo as f64 * scale_x + 1.0;
            let bw = (hi - lo) as f64 * scale_x - 2.0;
            let bh = plot_h * n as f64 / y_max;
            let _ = writeln!(
                s,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{bw:.1}" height="{bh:.1}" fill="{color}"><title>[{lo}, {hi}) ms: {n} jobs</title></rect>"#,
                y0 - bh
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#222">{n}</text>"##,
                bx + bw / 2.0,
                y0 - bh - 4.0
            );
        }
        // x axis, ticks every 100 ms
        let _ = writeln!(
            s,
            r##"<line x1="{x0:.1}" y1="{y0:.1}" x2="{:.1}" y2="{y0:.1}" stroke="#222"/>"##,
            x0 + plot_w
        );
        for ms in [0, 100, 200, 300, 400] {
            let x = x0 + ms as f64 * scale_x;
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y0:.1}" x2="{x:.1}" y2="{:.1}" stroke="#222"/><text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#444">{ms}</text>"##,
                y0 + 5.0,
                y0 + 18.0
            );
        }
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" fill="#444">ms after the failure (re-fire time)</text>"##,
            x0 + plot_w / 2.0,
            y0 + 38.0
        );
    }
    s.push_str("</svg>\n");
    s
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = arg_or_env("--url", "ECHOMQ_DEMO_URL", "redis://127.0.0.1:6379/");
    let svg_path = PathBuf::from(arg_or_env(
        "--svg",
        "ECHOMQ_DEMO_SVG",
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/demo/herd.svg"),
    ));
    let mut con = redis::Client::open(url.as_str())?.get_connection()?;
    // Keys of this run only, hash-tagged so a cluster keeps them together.
    let prefix = format!("{{echomq-demo}}:{}", std::process::id());
    let plain_key = format!("{prefix}:plain");
    let jitter_key = format!("{prefix}:jittered");
    let equal_key = format!("{prefix}:equal");

    println!(
        "A dependency blinks: {JOBS} jobs fail at the same instant, all at attempt {ATTEMPT}."
    );
    println!(
        "Each cohort is retried in one MULTI/EXEC and read back with ECHO.SPREAD over [now, now+{WINDOW_MS}) ms in {BUCKETS} buckets."
    );
    println!();
    let plain = run_cohort(&mut con, &plain_key, "without jitter", PLAIN)?;
    let jittered = run_cohort(&mut con, &jitter_key, "with full jitter", JITTERED)?;
    let equal = run_cohort(&mut con, &equal_key, "with equal jitter", EQUAL)?;
    let _: i64 = redis::cmd("DEL")
        .arg(&plain_key)
        .arg(&jitter_key)
        .arg(&equal_key)
        .query(&mut con)?;

    let cohorts = [&plain, &jittered, &equal];
    for c in cohorts {
        draw_terminal(c);
    }
    for c in cohorts {
        let total: i64 = c.counts.iter().sum();
        if total != JOBS as i64 {
            return Err(format!("{}: {total} of {JOBS} jobs in the window", c.title).into());
        }
    }
    let info: String = redis::cmd("INFO").arg("echomq").query(&mut con)?;
    let fields: Vec<&str> = info
        .lines()
        .filter(|l| l.starts_with("echomq_"))
        .map(str::trim)
        .collect();
    println!("INFO echomq: {}", fields.join(" "));

    if let Some(dir) = svg_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&svg_path, svg(&cohorts))?;
    let shown = std::fs::canonicalize(&svg_path).unwrap_or(svg_path);
    println!("SVG (same picture): {}", shown.display());
    println!(
        "peak without jitter: {}, peak with full jitter: {}, peak with equal jitter: {}",
        plain.peak(),
        jittered.peak(),
        equal.peak()
    );
    herd_scene()?;
    calendar_scene(&mut con, &prefix)
}

// ---------------------------------------------------------------------------
// Scene 2: the herd against a dependency, from one real run of
// `make bench BENCH_ARGS="--only herd"` (scripts/bench/herd.py), which writes
// its per-100-ms series to target/bench/herd-limits.json. Drawn as one lane
// per strategy: the dependency's calls and, in red, the failed among them.

/// One strategy's lane, as the benchmark wrote it.
struct Lane {
    title: String,
    how: String,
    calls: u64,
    failed: u64,
    blink: u64,
    dead: u64,
    seconds: Option<f64>,
    stopped_after: f64,
    max_1s: u64,
    /// Per bin: calls, failed beyond the blink, failed in the blink.
    series: Vec<(u64, u64, u64)>,
    /// (seconds, rate in force per second), adaptive limits only.
    rate: Vec<(f64, f64)>,
    adaptive: bool,
}

struct HerdRun {
    jobs: u64,
    rate: u64,
    burst: u64,
    down_s: f64,
    bin_s: f64,
    ideal_s: f64,
    workers: u64,
    lanes: Vec<Lane>,
}

fn read_herd(path: &std::path::Path) -> Result<HerdRun, Box<dyn std::error::Error>> {
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let num = |v: &serde_json::Value, k: &str| -> Result<f64, String> {
        v[k].as_f64()
            .ok_or_else(|| format!("{}: no number '{k}'", path.display()))
    };
    let mut lanes = Vec::new();
    for s in v["strategies"].as_array().ok_or("no strategies")? {
        let list = |k: &str| -> Vec<u64> {
            s["series"][k]
                .as_array()
                .map(|a| a.iter().map(|x| x.as_u64().unwrap_or(0)).collect())
                .unwrap_or_default()
        };
        let (calls, failed, blink) = (list("calls"), list("failed"), list("blink"));
        let limit = s["limit"].as_str().unwrap_or("");
        let mut how = s["policy"].as_str().unwrap_or("").to_string();
        if !limit.is_empty() {
            how += &format!(", echomq.release-limits \"<schedule> {limit}\"");
        }
        if s["hold"].as_bool().unwrap_or(false) {
            how += ", ECHO.HOLD <schedule> <retry after>";
        }
        lanes.push(Lane {
            title: s["title"].as_str().unwrap_or("").to_string(),
            how,
            calls: num(s, "calls")? as u64,
            failed: num(s, "failed_beyond_blink")? as u64,
            blink: num(s, "blink_failures")? as u64,
            dead: num(s, "dead")? as u64,
            seconds: s["seconds"].as_f64(),
            stopped_after: s["stopped_after"].as_f64().unwrap_or(0.0),
            max_1s: num(s, "max_1s")? as u64,
            series: (0..calls.len())
                .map(|i| (calls[i], failed[i], blink[i]))
                .collect(),
            rate: s["rate_in_force"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
                        .collect()
                })
                .unwrap_or_default(),
            adaptive: limit.starts_with("adaptive"),
        });
    }
    Ok(HerdRun {
        jobs: num(&v, "jobs")? as u64,
        rate: num(&v, "rate")? as u64,
        burst: num(&v, "burst")? as u64,
        down_s: num(&v, "down_s")?,
        bin_s: num(&v, "bin_s")?,
        ideal_s: num(&v, "ideal_s")?,
        workers: num(&v, "workers")? as u64,
        lanes,
    })
}

/// Text for SVG: the five characters XML reserves, escaped.
fn xml(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

fn lane_totals(l: &Lane, ideal_s: f64) -> String {
    let took = match l.seconds {
        Some(s) => format!("done in {s:.1} s ({:.2}x the ideal)", s / ideal_s),
        None => format!("not done after {:.0} s", l.stopped_after),
    };
    let dead = if l.dead > 0 {
        format!(", {} dead", l.dead)
    } else {
        String::new()
    };
    format!(
        "{} calls, {} failed beyond the blink's {}, {took}{dead}, at most {} retried calls in 1 s",
        l.calls, l.failed, l.blink, l.max_1s
    )
}

/// The lanes, one above the other, on the same axes: time in seconds after
/// the blink, calls per bin on a square-root scale (so that a lane of 50
/// calls per 100 ms stays readable beside a herd of thousands).
fn herd_svg(run: &HerdRun) -> String {
    let (width, left, right) = (1280.0, 70.0, 30.0);
    let (lane_h, head, plot_h) = (196.0, 62.0, 106.0);
    let top = 90.0;
    let height = top + lane_h * run.lanes.len() as f64 + 20.0;
    let plot_w = width - left - right;
    // x: up to the last finishing lane (rounded up to 5 s), at least twice the ideal
    let finished = run
        .lanes
        .iter()
        .filter_map(|l| l.seconds)
        .fold(2.0 * run.ideal_s, f64::max);
    let x_max = (finished / 5.0).ceil() * 5.0;
    let y_max = run
        .lanes
        .iter()
        .flat_map(|l| l.series.iter().map(|&(c, _, b)| c - b))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let y_top = y_max.sqrt();
    let sx = |t: f64| left + plot_w * t.min(x_max) / x_max;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="28" font-size="18" font-weight="bold" text-anchor="middle">The herd against a dependency: {} jobs fail in a blink; it is down {:.0} s, then serves {}/s (bucket {})</text>"#,
        width / 2.0,
        run.jobs,
        run.down_s,
        run.rate,
        run.burst
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="50" font-size="12" text-anchor="middle" fill="#444">the dependency's calls per {:.0} ms after the blink: green served, red failed (the blink's own {} first calls, at 0 s, are left out); ideal finish {:.0} s</text>"##,
        width / 2.0,
        run.bin_s * 1000.0,
        run.jobs,
        run.ideal_s
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="68" font-size="12" text-anchor="middle" fill="#444">{} worker threads on the stream protocol, the server's own promotion every 10 ms; one real run of make bench BENCH_ARGS="--only herd"</text>"##,
        width / 2.0,
        run.workers
    );
    let capacity = run.rate as f64 * run.bin_s;
    for (i, l) in run.lanes.iter().enumerate() {
        let y_lane = top + lane_h * i as f64;
        let y0 = y_lane + head + plot_h; // the x axis
        let sy = |n: f64| y0 - plot_h * n.max(0.0).sqrt() / y_top;
        let _ = writeln!(
            s,
            r#"<text x="{left:.1}" y="{:.1}" font-size="15" font-weight="bold">{}. {}</text>"#,
            y_lane + 16.0,
            i + 1,
            xml(&l.title)
        );
        let _ = writeln!(
            s,
            r##"<text x="{left:.1}" y="{:.1}" font-size="12" fill="#444">{}</text>"##,
            y_lane + 33.0,
            xml(&l.how)
        );
        let _ = writeln!(
            s,
            r##"<text x="{left:.1}" y="{:.1}" font-size="12" fill="#222">{}</text>"##,
            y_lane + 50.0,
            xml(&lane_totals(l, run.ideal_s))
        );
        // y grid (square-root scale) and labels
        for tick in [0.0, capacity, 200.0, 500.0, 1000.0, 2000.0, 5000.0] {
            if tick > y_max * 1.02 && tick != capacity {
                continue;
            }
            let y = sy(tick);
            let (stroke, dash) = if tick == capacity {
                ("#2b6cb0", r#" stroke-dasharray="5 4""#)
            } else {
                ("#e3e3e3", "")
            };
            let _ = writeln!(
                s,
                r#"<line x1="{left:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{stroke}"{dash}/>"#,
                left + plot_w
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="10" text-anchor="end" fill="#444">{tick:.0}</text>"##,
                left - 6.0,
                y + 3.5
            );
        }
        // the dependency comes back up
        let xu = sx(run.down_s);
        let _ = writeln!(
            s,
            r##"<line x1="{xu:.1}" y1="{:.1}" x2="{xu:.1}" y2="{y0:.1}" stroke="#888" stroke-dasharray="2 3"/>"##,
            y0 - plot_h
        );
        // areas: calls (served + failed, blink left out), then the failed over them
        let step = |pick: &dyn Fn(&(u64, u64, u64)) -> u64, color: &str| -> String {
            let mut d = format!("M{left:.1},{y0:.1}");
            for (b, bin) in l.series.iter().enumerate() {
                let t0 = b as f64 * run.bin_s;
                if t0 >= x_max {
                    break;
                }
                let y = sy(pick(bin) as f64);
                let _ = write!(
                    d,
                    " L{:.1},{y:.1} L{:.1},{y:.1}",
                    sx(t0),
                    sx(t0 + run.bin_s)
                );
            }
            let last = (l.series.len() as f64 * run.bin_s).min(x_max);
            let _ = write!(d, " L{:.1},{y0:.1} Z", sx(last));
            format!(r#"<path d="{d}" fill="{color}"/>"#)
        };
        let _ = writeln!(s, "{}", step(&|&(c, _, b)| c - b, "#3a9d5d"));
        let _ = writeln!(s, "{}", step(&|&(_, f, _)| f, "#d1495b"));
        if l.adaptive && !l.rate.is_empty() {
            let mut d = String::new();
            for (j, &(t, r)) in l.rate.iter().enumerate() {
                if t > x_max {
                    break;
                }
                let _ = write!(
                    d,
                    "{}{:.1},{:.1}",
                    if j == 0 { "M" } else { " L" },
                    sx(t),
                    sy(r * run.bin_s)
                );
            }
            let _ = writeln!(
                s,
                r##"<path d="{d}" fill="none" stroke="#6b3fa0" stroke-width="1.5"/>"##
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#6b3fa0">purple line: the adaptive rate in force (per {:.0} ms), from ECHO.LIMITS</text>"##,
                left + plot_w,
                y0 - plot_h + 10.0,
                run.bin_s * 1000.0
            );
        }
        // where the lane runs past the axis
        let end = l.series.len() as f64 * run.bin_s;
        if end > x_max {
            let after: u64 = l
                .series
                .iter()
                .skip((x_max / run.bin_s) as usize)
                .map(|&(c, _, _)| c)
                .sum();
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#d1495b">off the axis: {after} more calls, the last at {end:.0} s &#8594;</text>"##,
                left + plot_w,
                y0 - plot_h + 10.0
            );
        }
        // x axis, ticks every 5 s
        let _ = writeln!(
            s,
            r##"<line x1="{left:.1}" y1="{y0:.1}" x2="{:.1}" y2="{y0:.1}" stroke="#222"/>"##,
            left + plot_w
        );
        let mut t = 0.0;
        while t <= x_max + 1e-9 {
            let x = sx(t);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y0:.1}" x2="{x:.1}" y2="{:.1}" stroke="#222"/><text x="{x:.1}" y="{:.1}" font-size="10" text-anchor="middle" fill="#444">{t:.0} s</text>"##,
                y0 + 4.0,
                y0 + 15.0
            );
            t += 5.0;
        }
    }
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#444" transform="rotate(-90 {:.1} {:.1})" text-anchor="middle">calls per {:.0} ms (square-root scale; dashed blue: the dependency's {}/s)</text>"##,
        18.0,
        top + lane_h * run.lanes.len() as f64 / 2.0,
        18.0,
        top + lane_h * run.lanes.len() as f64 / 2.0,
        run.bin_s * 1000.0,
        run.rate
    );
    s.push_str("</svg>\n");
    s
}

/// Scene 2: draws target/bench/herd-limits.json (or --herd-json) when it
/// exists; says how to make it otherwise.
fn herd_scene() -> Result<(), Box<dyn std::error::Error>> {
    let json = PathBuf::from(arg_or_env(
        "--herd-json",
        "ECHOMQ_DEMO_HERD_JSON",
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/bench/herd-limits.json"),
    ));
    let svg_path = PathBuf::from(arg_or_env(
        "--herd-svg",
        "ECHOMQ_DEMO_HERD_SVG",
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/demo/herd-limits.svg"),
    ));
    println!();
    println!("Scene 2: the herd against a dependency (from one run of the benchmark).");
    if !json.exists() {
        println!(
            "  {} is missing: run make bench BENCH_ARGS=\"--only herd\" (about 4 minutes, or BENCH_ARGS=\"--only herd --quick\", about 1), then make demo again.",
            json.display()
        );
        return Ok(());
    }
    let run = read_herd(&json)?;
    println!(
        "  {} jobs fail in a blink; the dependency is down {:.0} s, then serves {}/s; ideal finish {:.0} s.",
        run.jobs, run.down_s, run.rate, run.ideal_s
    );
    for (i, l) in run.lanes.iter().enumerate() {
        println!(
            "  {}. {:<44} {}",
            i + 1,
            l.title,
            lane_totals(l, run.ideal_s)
        );
    }
    if let Some(dir) = svg_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&svg_path, herd_svg(&run))?;
    let shown = std::fs::canonicalize(&svg_path).unwrap_or(svg_path);
    println!("  SVG: {}", shown.display());
    Ok(())
}

// ---------------------------------------------------------------------------
// Scene 3: the calendar's herd. Every tenant's hourly job fires at :00, so
// 10,000 of them are one millisecond; `JITTER` on the definition draws each
// occurrence anew over a window after its nominal time.

const TENANTS: usize = 10_000;
const CALENDAR_SPEC: &str = "cron:0 * * * *";
const CALENDAR_JITTER_MS: i64 = 300_000;
const HOUR_MS: i64 = 3_600_000;
/// The hour from the next full hour, in 1-minute buckets.
const MINUTE_BUCKETS: i64 = 60;
/// The jitter's five minutes, in 1-second buckets.
const SECOND_BUCKETS: i64 = 300;

struct Calendar {
    title: &'static str,
    jitter_ms: i64,
    /// The next full hour, the nominal time of every occurrence.
    top_ms: i64,
    /// ECHO.SPREAD of the hour from `top_ms` in 1-minute buckets.
    minutes: Vec<i64>,
    /// ECHO.SPREAD of [top, top + 5 min) in 1-second buckets.
    seconds: Vec<i64>,
    /// From the fire times ECHO.REPEAT replied: distinct ms, and the most
    /// occurrences in one of them.
    distinct_ms: usize,
    busiest_ms: usize,
}

impl Calendar {
    fn peak_minute(&self) -> i64 {
        self.minutes.iter().copied().max().unwrap_or(0)
    }

    fn peak_second(&self) -> i64 {
        self.seconds.iter().copied().max().unwrap_or(0)
    }
}

fn server_ms(con: &mut redis::Connection) -> redis::RedisResult<i64> {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(con)?;
    Ok(secs * 1000 + micros / 1000)
}

/// 10,000 definitions `tenant-NNNNN` of `cron:0 * * * *` in `key`, with
/// `JITTER jitter_ms` unless 0, pipelined; then read back.
fn run_calendar(
    con: &mut redis::Connection,
    key: &str,
    title: &'static str,
    jitter_ms: i64,
    top_ms: i64,
) -> Result<Calendar, Box<dyn std::error::Error>> {
    let mut fire_times: Vec<i64> = Vec::with_capacity(TENANTS);
    for chunk in 0..TENANTS / 1000 {
        let mut pipe = redis::pipe();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            let cmd = pipe
                .cmd("ECHO.REPEAT")
                .arg(key)
                .arg(format!("tenant-{i:05}"))
                .arg(CALENDAR_SPEC);
            if jitter_ms > 0 {
                cmd.arg("JITTER").arg(jitter_ms);
            }
        }
        let replies: Vec<i64> = pipe.query(con)?;
        fire_times.extend(replies);
    }
    if let Some(t) = fire_times
        .iter()
        .find(|&&t| t < top_ms || t > top_ms + jitter_ms)
    {
        return Err(
            format!("{title}: a fire time {t} outside [{top_ms}, {top_ms} + {jitter_ms}]").into(),
        );
    }
    let spread =
        |con: &mut redis::Connection, end: i64, buckets: i64| -> redis::RedisResult<Vec<i64>> {
            redis::cmd("ECHO.SPREAD")
                .arg(key)
                .arg(top_ms)
                .arg(end)
                .arg(buckets)
                .query(con)
        };
    let minutes = spread(con, top_ms + HOUR_MS, MINUTE_BUCKETS)?;
    let seconds = spread(con, top_ms + CALENDAR_JITTER_MS, SECOND_BUCKETS)?;
    fire_times.sort_unstable();
    let mut distinct_ms = 0;
    let mut busiest_ms = 0;
    for run in fire_times.chunk_by(|a, b| a == b) {
        distinct_ms += 1;
        busiest_ms = busiest_ms.max(run.len());
    }
    Ok(Calendar {
        title,
        jitter_ms,
        top_ms,
        minutes,
        seconds,
        distinct_ms,
        busiest_ms,
    })
}

fn draw_calendar(c: &Calendar) {
    const WIDTH: i64 = 50;
    let how = if c.jitter_ms > 0 {
        format!("{CALENDAR_SPEC} JITTER {}", c.jitter_ms)
    } else {
        CALENDAR_SPEC.to_string()
    };
    println!("{}: {TENANTS} x ECHO.REPEAT ... \"{how}\"", c.title);
    println!(
        "  ECHO.SPREAD over the hour from the next full hour ({} ms), occurrences per minute:",
        c.top_ms
    );
    let last = c.minutes.iter().rposition(|&n| n > 0).unwrap_or(0);
    let shown = (last + 2).min(c.minutes.len());
    for (m, &n) in c.minutes.iter().enumerate().take(shown) {
        let mut len = n * WIDTH / TENANTS as i64;
        if n > 0 && len == 0 {
            len = 1;
        }
        println!(
            "  [{m:>2}, {:>2}) min  |{:<width$} {n:>5}",
            m + 1,
            "#".repeat(len as usize),
            width = WIDTH as usize
        );
    }
    println!(
        "  [{shown:>2}, 60) min  |{:<width$} {:>5} each",
        "",
        0,
        width = WIDTH as usize
    );
    let total: i64 = c.seconds.iter().sum();
    let mean = total as f64 / c.seconds.len() as f64;
    let min = c.seconds.iter().copied().min().unwrap_or(0);
    println!(
        "  in 1 s buckets of the first five minutes: {} to {} (mean {mean:.1}, the fullest {:.2}x the mean); {} distinct ms, at most {} in one ms",
        min,
        c.peak_second(),
        c.peak_second() as f64 / mean,
        c.distinct_ms,
        c.busiest_ms
    );
    println!();
}

/// The two hours side by side, on the same axes: occurrences per minute.
fn calendar_svg(cals: &[&Calendar]) -> String {
    let (pw, ph) = (520.0, 340.0);
    let (left, right, top, bottom) = (64.0, 16.0, 84.0, 56.0);
    let width = pw * cals.len() as f64;
    let height = ph;
    let plot_w = pw - left - right;
    let plot_h = ph - top - bottom;
    let y_max = TENANTS as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">"#
    );
    let _ = writeln!(
        s,
        r##"<rect width="{width}" height="{height}" fill="#ffffff"/>"##
    );
    for (p, c) in cals.iter().enumerate() {
        let x0 = pw * p as f64 + left;
        let y0 = top + plot_h;
        let color = ["#d1495b", "#00798c"][p % 2];
        let mid = pw * p as f64 + pw / 2.0;
        let how = if c.jitter_ms > 0 {
            format!("\"{CALENDAR_SPEC}\" JITTER {}", c.jitter_ms)
        } else {
            format!("\"{CALENDAR_SPEC}\"")
        };
        let _ = writeln!(
            s,
            r#"<text x="{mid:.1}" y="24" font-size="16" font-weight="bold" text-anchor="middle">{}</text>"#,
            xml(c.title)
        );
        let _ = writeln!(
            s,
            r##"<text x="{mid:.1}" y="44" font-size="12" text-anchor="middle" fill="#444">{TENANTS} x ECHO.REPEAT {}: fullest minute {}</text>"##,
            xml(&how),
            c.peak_minute()
        );
        let _ = writeln!(
            s,
            r##"<text x="{mid:.1}" y="62" font-size="12" text-anchor="middle" fill="#444">fullest second {}, {} distinct ms, at most {} in one ms</text>"##,
            c.peak_second(),
            c.distinct_ms,
            c.busiest_ms
        );
        for tick in [0, 2500, 5000, 7500, 10000] {
            let y = y0 - plot_h * tick as f64 / y_max;
            let _ = writeln!(
                s,
                r##"<line x1="{x0:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e3e3e3"/>"##,
                x0 + plot_w
            );
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end" fill="#444">{tick}</text>"##,
                x0 - 6.0,
                y + 4.0
            );
        }
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" fill="#444" transform="rotate(-90 {:.1} {:.1})">jobs per minute</text>"##,
            x0 - 46.0,
            top + plot_h / 2.0,
            x0 - 46.0,
            top + plot_h / 2.0
        );
        let bar = plot_w / MINUTE_BUCKETS as f64;
        for (m, &n) in c.minutes.iter().enumerate() {
            if n == 0 {
                continue;
            }
            let bh = plot_h * n as f64 / y_max;
            let bx = x0 + m as f64 * bar + 0.5;
            let _ = writeln!(
                s,
                r#"<rect x="{bx:.1}" y="{:.1}" width="{:.1}" height="{bh:.1}" fill="{color}"><title>minute {m}: {n} jobs</title></rect>"#,
                y0 - bh,
                bar - 1.0
            );
        }
        // One label over the bars: the bars are too narrow for one each.
        let full: Vec<(usize, i64)> = c
            .minutes
            .iter()
            .copied()
            .enumerate()
            .filter(|&(_, n)| n > 0)
            .collect();
        if let (Some(&(first, _)), Some(&(last, _))) = (full.first(), full.last()) {
            let low = full.iter().map(|&(_, n)| n).min().unwrap_or(0);
            let label = if first == last {
                format!("{} in minute {first}", c.peak_minute())
            } else {
                format!(
                    "{low} to {} a minute, minutes {first} to {last}",
                    c.peak_minute()
                )
            };
            let _ = writeln!(
                s,
                r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#222">{label}</text>"##,
                x0 + first as f64 * bar,
                y0 - plot_h * c.peak_minute() as f64 / y_max - 6.0
            );
        }
        let _ = writeln!(
            s,
            r##"<line x1="{x0:.1}" y1="{y0:.1}" x2="{:.1}" y2="{y0:.1}" stroke="#222"/>"##,
            x0 + plot_w
        );
        for m in (0..=60).step_by(10) {
            let x = x0 + m as f64 * bar;
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{y0:.1}" x2="{x:.1}" y2="{:.1}" stroke="#222"/><text x="{x:.1}" y="{:.1}" font-size="11" text-anchor="middle" fill="#444">{m}</text>"##,
                y0 + 5.0,
                y0 + 18.0
            );
        }
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle" fill="#444">minutes after the full hour (fire time)</text>"##,
            x0 + plot_w / 2.0,
            y0 + 38.0
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Scene 3: the calendar's herd, without and with JITTER.
fn calendar_scene(
    con: &mut redis::Connection,
    prefix: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let svg_path = PathBuf::from(arg_or_env(
        "--calendar-svg",
        "ECHOMQ_DEMO_CALENDAR_SVG",
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/demo/calendar-herd.svg"),
    ));
    println!();
    println!(
        "Scene 3: the calendar's herd. {TENANTS} tenants each have an hourly job, \"{CALENDAR_SPEC}\"."
    );
    // Every occurrence of both cohorts must share one next full hour: not
    // within the last 30 s before one.
    let mut now = server_ms(con)?;
    let to_top = HOUR_MS - now.rem_euclid(HOUR_MS);
    if to_top < 30_000 {
        println!(
            "  (waiting {:.1} s for the full hour to pass, so both cohorts share the next one)",
            (to_top + 1000) as f64 / 1000.0
        );
        std::thread::sleep(std::time::Duration::from_millis((to_top + 1000) as u64));
        now = server_ms(con)?;
    }
    let top_ms = now - now.rem_euclid(HOUR_MS) + HOUR_MS;
    println!();
    let plain_key = format!("{prefix}:calendar");
    let jittered_key = format!("{prefix}:calendar-jittered");
    let plain = run_calendar(con, &plain_key, "without jitter", 0, top_ms);
    let jittered = run_calendar(
        con,
        &jittered_key,
        "with JITTER 300000",
        CALENDAR_JITTER_MS,
        top_ms,
    );
    // The definitions live in a hash beside each schedule.
    let _: i64 = redis::cmd("DEL")
        .arg(&plain_key)
        .arg(format!("{plain_key}:echomq-repeats"))
        .arg(&jittered_key)
        .arg(format!("{jittered_key}:echomq-repeats"))
        .query(con)?;
    let (plain, jittered) = (plain?, jittered?);
    draw_calendar(&plain);
    draw_calendar(&jittered);
    if let Some(dir) = svg_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&svg_path, calendar_svg(&[&plain, &jittered]))?;
    let shown = std::fs::canonicalize(&svg_path).unwrap_or(svg_path);
    println!("  SVG: {}", shown.display());
    println!(
        "calendar peak without jitter: {} in one ms; with JITTER 300000: at most {} in one second",
        plain.busiest_ms,
        jittered.peak_second()
    );
    Ok(())
}
