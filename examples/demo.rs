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
//! Usage: `demo [--url redis://127.0.0.1:6379/] [--svg target/demo/herd.svg]`
//! (or ECHOMQ_DEMO_URL / ECHOMQ_DEMO_SVG). It writes only its own keys, and
//! deletes them when done, so any server with the module will do.

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
    Ok(())
}
