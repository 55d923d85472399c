//! The list layout, which the client libraries do not offer: `{NAME}:pending`
//! is a Valkey list of job ids, and the module's scheduling works on it as on
//! a stream (`ECHO.PROMOTE` pushes due jobs onto a list). Kept as the
//! baseline of `make bench`'s worker_layouts section and tested by
//! clients/tests/workers.rs.
//!
//! ```text
//! list_worker --url URL --queue NAME --jobs N [--consumers 4] [--fail-first K]
//!             [--policy P] [--max-attempts M]
//! ```
//!
//! Each consumer thread, on its own connection: `ECHO.PROMOTE` (due retries
//! back onto the list) pipelined with `BLMOVE pending taken`, then `job-<i>`
//! fails its first `i % (K+1)` attempts (counted in `{NAME}:attempts`); the
//! outcome in one MULTI/EXEC with `LREM taken`: `HINCRBY {NAME}:done job 1`,
//! or `ECHO.RETRY` (the server schedules the retry, or after the last attempt
//! moves the job to `{NAME}:dead`). Exits 0 once `HLEN done + ZCARD dead`
//! reaches N. A job in `{NAME}:taken` when its worker dies stays there: no
//! takeover, unlike the libraries' stream layout.
use std::collections::HashMap;

fn main() {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let opts: HashMap<&str, &str> = argv
        .chunks(2)
        .map(|kv| (kv[0].trim_start_matches("--"), kv.get(1).map_or("", |v| v)))
        .collect();
    let get = |k: &str, d: &'static str| opts.get(k).copied().unwrap_or(d).to_string();
    let num = |k: &str, d: &'static str| get(k, d).parse::<u64>().expect("a number");
    let client = redis::Client::open(get("url", "redis://127.0.0.1:6379/")).expect("--url");
    let q = get("queue", "jobs");
    let (jobs, fail_first) = (num("jobs", "100"), num("fail-first", "0"));
    let (policy, max_attempts) = (get("policy", "fixed:0"), num("max-attempts", "5"));
    let threads: Vec<_> = (0..num("consumers", "4"))
        .map(|_| {
            let mut con = client.get_connection().expect("connect");
            let (q, policy) = (q.clone(), policy.clone());
            let keys = ["pending", "taken", "schedule", "attempts", "done", "dead"]
                .map(|s| format!("{{{q}}}:{s}"));
            std::thread::spawn(move || loop {
                let [pend, taken, sched, attempts, done, dead] =
                    keys.each_ref().map(String::as_str);
                let (_, job): (i64, Option<String>) = redis::pipe()
                    .cmd("ECHO.PROMOTE")
                    .arg(&[sched, pend, "LIMIT", "1000"])
                    .cmd("BLMOVE")
                    .arg(&[pend, taken, "RIGHT", "LEFT", "0.1"])
                    .query(&mut con)
                    .expect("take");
                let mut tx = redis::pipe();
                tx.atomic();
                if let Some(job) = job.as_deref() {
                    let attempt: u64 = redis::cmd("HINCRBY")
                        .arg(&[attempts, job, "1"])
                        .query(&mut con)
                        .expect("attempts");
                    let digits = job.trim_start_matches(|c: char| !c.is_ascii_digit());
                    if attempt <= digits.parse::<u64>().unwrap_or(0) % (fail_first + 1) {
                        let (n, m) = (attempt.to_string(), max_attempts.to_string());
                        let how: [&str; 8] =
                            [sched, job, &policy, &n, "MAXATTEMPTS", &m, "DEAD", dead];
                        tx.cmd("ECHO.RETRY").arg(&how).ignore();
                    } else {
                        tx.cmd("HINCRBY").arg(&[done, job, "1"]).ignore();
                    }
                    tx.cmd("LREM").arg(&[taken, "1", job]).ignore();
                }
                tx.cmd("HLEN").arg(done).cmd("ZCARD").arg(dead);
                let (done, dead): (u64, u64) = tx.query(&mut con).expect("outcome");
                if done + dead >= jobs {
                    return;
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("a consumer panicked");
    }
    println!("{jobs} jobs done or dead on queue '{q}'");
}
