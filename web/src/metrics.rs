//! `GET /metrics`: a snapshot in the Prometheus text exposition format 0.0.4
//! (`text/plain; version=0.0.4`), every family with `# HELP` and `# TYPE`.
//!
//! Written by hand rather than with a client crate: the official Rust client
//! (`prometheus-client`) writes OpenMetrics only (a counter's `# TYPE` names
//! the family without `_total`, and `# EOF` ends the text), which a 0.0.4
//! parser reads as a family of untyped samples; and the instrumentation
//! crates model live metric objects in a registry, where this exporter only
//! prints a snapshot it just read. The format here is three line shapes and
//! two escaping rules, checked by the unit tests below and by `promtool check
//! metrics` in web/tests/web.

use std::fmt::Write;

use crate::snapshot::{Counts, Groups, Number, Release, Shard, Snapshot};

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The `INFO echomq` fields that count since the module loaded, with their
/// help; each is exported as `<field>_total`, a counter.
const COUNTERS: &[(&str, &str)] = &[
    (
        "echomq_retries",
        "ECHO.RETRY calls that did not dead-letter the job: it was scheduled, or kept as it was by NX, XX, GT or LT (dead-lettering calls count in echomq_dead_lettered_total only)",
    ),
    (
        "echomq_retries_jittered",
        "Of the echomq_retries_total calls, those under a jitter or equal-jitter policy",
    ),
    (
        "echomq_promote_calls",
        "ECHO.PROMOTE calls that completed, moving 0 or more",
    ),
    ("echomq_promoted", "Members moved by ECHO.PROMOTE"),
    (
        "echomq_dead_lettered",
        "Jobs ECHO.RETRY moved to a dead set",
    ),
    ("echomq_errors", "Calls the module answered with an error"),
    (
        "echomq_auto_promote_ticks",
        "Ticks of the auto-promotion timer",
    ),
    (
        "echomq_auto_promoted",
        "Members moved by the auto-promotion timer",
    ),
    (
        "echomq_auto_promote_errors",
        "Auto-promotion pairs that failed in a tick (e.g. WRONGTYPE)",
    ),
    (
        "echomq_scheduled",
        "ECHO.SCHEDULE calls that replied a fire time or -2, and ECHO.ADD calls that scheduled their job (runs scheduled, not failures)",
    ),
    (
        "echomq_added_direct",
        "ECHO.ADD calls that put their job straight into pending (reply 1)",
    ),
    (
        "echomq_release_limited",
        "ECHO.PROMOTE calls and timer ticks that left due members in a schedule because of a release limit or a hold",
    ),
    (
        "echomq_adaptive_decreases",
        "Times an adaptive release limit halved its rate in force",
    ),
    (
        "echomq_group_releases",
        "Jobs released from grouped schedules (ECHO.ADD ... GROUP), by ECHO.PROMOTE or the timer",
    ),
    (
        "echomq_group_limited",
        "Times a release found a group with due jobs and no room in its group limit (each time found)",
    ),
];

/// The `INFO echomq` fields that are gauges: the INFO field, the exported
/// name, the help, and the divisor from the INFO value to the exported one
/// (1000 for milliseconds to seconds: divided as a decimal, see `divided`).
/// The lag maximum only rises until the module is reloaded, yet it is a
/// gauge: a counter counts events, so `rate()` and `increase()` of it must
/// mean something, and the increase of a maximum is not a number of
/// anything; it is a level (watch it with `max_over_time` or `delta`).
/// It is exported in seconds, Prometheus's base unit, as
/// `echomq_auto_promote_lag_seconds_max`: `promtool check metrics` rejects a
/// name with an abbreviated unit such as `_ms_`.
const GAUGES: &[(&str, &str, &str, u32)] = &[
    (
        "echomq_eviction_policy_safe",
        "echomq_eviction_policy_safe",
        "1 when maxmemory-policy cannot evict queue keys (noeviction, volatile-*), 0 for allkeys-*",
        1,
    ),
    (
        "echomq_auto_promote_lag_ms_max",
        "echomq_auto_promote_lag_seconds_max",
        "Largest delay in seconds, fire time to move, of any member the timer moved since the module loaded (INFO echomq_auto_promote_lag_ms_max / 1000)",
        1000,
    ),
];

/// The per-queue gauges: name, help, and the count they show.
type Field = fn(&Counts) -> i64;
const QUEUE_GAUGES: &[(&str, &str, Field)] = &[
    (
        "echomq_queue_scheduled",
        "Members of {NAME}:schedule, due or not",
        |c| c.scheduled,
    ),
    (
        "echomq_queue_due",
        "Members of {NAME}:schedule whose fire time has come, not yet promoted",
        |c| c.due,
    ),
    (
        "echomq_queue_pending",
        "Jobs in {NAME}:pending (LLEN of a list, XLEN of a stream)",
        |c| c.pending,
    ),
    (
        "echomq_queue_in_flight",
        "Stream entries delivered to a consumer and not yet acknowledged, over all groups (0 for a list)",
        |c| c.in_flight,
    ),
    (
        "echomq_queue_dead",
        "Members of {NAME}:dead",
        |c| c.dead,
    ),
];

/// The per-queue series of the release limits, for the queues ECHO.LIMITS
/// reports limited or held: the family, its type, its help, and the value
/// (None: no sample for this queue, e.g. the rates of a queue only held).
type ReleaseField = fn(&Release) -> Option<f64>;
const RELEASE_SERIES: &[(&str, &str, &str, ReleaseField)] = &[
    (
        "echomq_release_rate_per_second",
        "gauge",
        "Members per second the release limit of {NAME}:schedule allows now (the rate in force: below the ceiling after an adaptive decrease)",
        |r| r.limit.as_ref().map(|l| l.in_force_per_second),
    ),
    (
        "echomq_release_rate_ceiling_per_second",
        "gauge",
        "Members per second configured for {NAME}:schedule in echomq.release-limits (the ceiling of an adaptive limit)",
        |r| r.limit.as_ref().map(|l| l.rate_per_second),
    ),
    (
        "echomq_release_held_until_seconds",
        "gauge",
        "Unix time in seconds until which ECHO.HOLD keeps every member in {NAME}:schedule; 0 when not held",
        |r| Some(r.held_until_ms as f64 / 1000.0),
    ),
    (
        "echomq_release_released_total",
        "counter",
        "Members released from {NAME}:schedule through its limit since its echomq.release-limits entry was set",
        |r| r.limit.as_ref().map(|l| l.released as f64),
    ),
    (
        "echomq_release_failures_total",
        "counter",
        "ECHO.RETRY calls naming {NAME}:schedule (failures, dead-lettering included) since its echomq.release-limits entry was set",
        |r| r.limit.as_ref().map(|l| l.failures as f64),
    ),
];

/// The per-queue gauges of the groups, for the queues whose ECHO.GROUPS
/// answered: name, help, and the count they show. No series per group: a
/// queue may have any number of groups (the largest and the limited are in
/// the JSON and the page).
type GroupsField = fn(&Groups) -> i64;
const GROUP_GAUGES: &[(&str, &str, GroupsField)] = &[
    (
        "echomq_groups",
        "Groups of {NAME}:schedule with members (ECHO.GROUPS; of the first 100000 by name when it has more)",
        |g| g.count,
    ),
    (
        "echomq_groups_limited",
        "Of echomq_groups, those held back now: due members and no room in their group limit, or their own ECHO.HOLD ... GROUP",
        |g| g.limited_count,
    ),
];

/// A label value as the format requires: `\`, `"` and newline escaped.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Help text: `\` and newline escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// `[a-zA-Z_:][a-zA-Z0-9_:]*`: what the format accepts as a metric name.
fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {}", escape_help(help));
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn number(n: &Number) -> String {
    match n {
        Number::Int(i) => i.to_string(),
        // Finite by construction (parse_info drops the rest); Display gives
        // the shortest form that reads back the same, which the format takes.
        Number::Float(f) => f.to_string(),
    }
}

/// `n / divisor` as the exposition prints it. An integer is divided as a
/// decimal, digit for digit (9 ms is `0.009` seconds, where `9.0 * 0.001`
/// would print `0.009000000000000001`); a float is divided once, which
/// rounds correctly, and printed in the shortest form that reads back the
/// same.
fn divided(n: &Number, divisor: u32) -> String {
    match n {
        _ if divisor == 1 => number(n),
        Number::Int(i) => {
            let (sign, magnitude) = (if *i < 0 { "-" } else { "" }, i.unsigned_abs());
            let (whole, rest) = (
                magnitude / u64::from(divisor),
                magnitude % u64::from(divisor),
            );
            if rest == 0 {
                return format!("{sign}{whole}");
            }
            let width = divisor.to_string().len() - 1;
            let fraction = format!("{rest:0width$}");
            format!("{sign}{whole}.{}", fraction.trim_end_matches('0'))
        }
        Number::Float(f) => (f / f64::from(divisor)).to_string(),
    }
}

/// `value` of each queue that has one, by queue name.
fn per_queue<T>(s: &Snapshot, value: impl Fn(&Counts) -> Option<T>) -> Vec<(&str, T)> {
    s.queues
        .iter()
        .filter_map(|q| Some((q.name.as_str(), value(q.counts.as_ref().ok()?)?)))
        .collect()
}

/// A per-queue family and its samples; nothing at all without samples.
fn queue_family<T: std::fmt::Display>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: Vec<(&str, T)>,
) {
    if samples.is_empty() {
        return;
    }
    family(out, name, kind, help);
    for (queue, v) in samples {
        let _ = writeln!(out, "{name}{{queue=\"{}\"}} {v}", escape_label(queue));
    }
}

/// The exposition for one scrape: `Some(snapshot)` when the server answered,
/// `None` when it did not (then only `echomq_up 0`).
pub fn exposition(s: Option<&Snapshot>) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "echomq_up",
        "gauge",
        "1 when echomq-web's last query of the server succeeded, else 0",
    );
    let _ = writeln!(out, "echomq_up {}", u8::from(s.is_some()));
    let Some(s) = s else {
        return out;
    };
    // Only on a cluster: one series per primary.
    if !s.nodes.is_empty() {
        family(
            &mut out,
            "echomq_node_up",
            "gauge",
            "On a cluster: 1 when the primary answered this scrape, else 0 (its queues then have no samples)",
        );
        for n in &s.nodes {
            let _ = writeln!(
                out,
                "echomq_node_up{{node=\"{}\"}} {}",
                escape_label(&n.addr),
                u8::from(n.error.is_none())
            );
        }
    }
    for (name, help, field) in QUEUE_GAUGES {
        family(&mut out, name, "gauge", help);
        // A queue whose keys cannot be read (e.g. WRONGTYPE) has no samples.
        for q in &s.queues {
            if let Ok(c) = &q.counts {
                let _ = writeln!(
                    out,
                    "{name}{{queue=\"{}\"}} {}",
                    escape_label(&q.name),
                    field(c)
                );
            }
        }
    }
    // Each shard of a sharded queue in families of their own, so that a sum
    // over echomq_queue_* never counts a job twice. Their number is that of
    // the --sharded counts (at most 1024 per queue), fixed by the command
    // line whatever the servers hold; none without a sharded queue.
    let shards: Vec<(&str, &Shard)> = s
        .queues
        .iter()
        .flat_map(|q| q.shards.iter().map(move |sh| (q.name.as_str(), sh)))
        .collect();
    if !shards.is_empty() {
        for (name, help, field) in QUEUE_GAUGES {
            let name = name.replacen("echomq_queue_", "echomq_shard_", 1);
            let help = format!(
                "{}; of one shard of a sharded queue (queue: the queue, shard: the shard's tag)",
                help.replace("{NAME}", "{TAG}")
            );
            family(&mut out, &name, "gauge", &help);
            for (queue, sh) in &shards {
                if let Ok(c) = &sh.counts {
                    let _ = writeln!(
                        out,
                        "{name}{{queue=\"{}\",shard=\"{}\"}} {}",
                        escape_label(queue),
                        escape_label(&sh.tag),
                        field(c)
                    );
                }
            }
        }
    }
    // A family only when it has samples: with no limit or hold configured,
    // or a module without groups, /metrics is what it was.
    for (name, kind, help, value) in RELEASE_SERIES {
        let samples = per_queue(s, |c| match &c.release {
            Some(Ok(r)) if r.applies() => value(r),
            _ => None,
        });
        queue_family(&mut out, name, kind, help, samples);
    }
    for (name, help, value) in GROUP_GAUGES {
        let samples = per_queue(s, |c| match &c.groups {
            Some(Ok(g)) => Some(value(g)),
            _ => None,
        });
        queue_family(&mut out, name, "gauge", help, samples);
    }
    // One series per queue whose ECHO.REPEATS answered, none per definition.
    let samples = per_queue(s, |c| match &c.repeats {
        Some(Ok(r)) => Some(r.count),
        _ => None,
    });
    queue_family(
        &mut out,
        "echomq_repeats",
        "gauge",
        "Recurring definitions of {NAME}:schedule (ECHO.REPEATS)",
        samples,
    );
    for (field, value) in &s.info {
        if let Some((_, help)) = COUNTERS.iter().find(|(f, _)| f == field) {
            let name = format!("{field}_total");
            family(&mut out, &name, "counter", help);
            let _ = writeln!(out, "{name} {}", number(value));
        } else if let Some((_, name, help, divisor)) = GAUGES.iter().find(|g| g.0 == field) {
            family(&mut out, name, "gauge", help);
            let _ = writeln!(out, "{name} {}", divided(value, *divisor));
        } else if valid_name(field) {
            // A field a later module adds: its kind is not known here.
            let help = format!("INFO echomq field {field}, not known to this echomq-web");
            family(&mut out, field, "untyped", &help);
            let _ = writeln!(out, "{field} {}", number(value));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{Limit, QueueStats, Window};

    /// A snapshot of these queues and INFO fields, its other fields fixed.
    fn snapshot(queues: Vec<QueueStats>, info: Vec<(String, Number)>) -> Snapshot {
        Snapshot {
            now_ms: 1,
            window: Window {
                start_ms: 1,
                end_ms: 2,
                buckets: 1,
            },
            queues,
            info,
            maxmemory_policy: "noeviction".into(),
            round_trips: 1,
            nodes: Vec::new(),
        }
    }

    fn counts(n: i64) -> Counts {
        Counts {
            scheduled: n,
            due: n + 1,
            pending: n + 2,
            in_flight: n + 3,
            dead: n + 4,
            spread: vec![],
            release: None,
            groups: None,
            repeats: None,
        }
    }

    fn with_release(n: i64, release: Release) -> Counts {
        Counts {
            release: Some(Ok(release)),
            ..counts(n)
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape_label("x\ny"), "x\\ny");
        assert_eq!(escape_label("plain é"), "plain é");
        assert_eq!(escape_help("a\\b\nc"), "a\\\\b\\nc");
    }

    #[test]
    fn metric_names_are_checked() {
        assert!(valid_name("echomq_x:y_1"));
        assert!(!valid_name("1x"));
        assert!(!valid_name("a-b"));
        assert!(!valid_name(""));
    }

    #[test]
    fn on_a_cluster_each_primary_has_its_up_series() {
        use crate::snapshot::NodeStatus;
        let mut s = snapshot(vec![], vec![]);
        assert!(!exposition(Some(&s)).contains("echomq_node_up"));
        s.nodes = vec![
            NodeStatus {
                addr: "10.0.0.1:7000".into(),
                queues: 2,
                error: None,
            },
            NodeStatus {
                addr: "10.0.0.2:7001".into(),
                queues: 0,
                error: Some("Connection refused".into()),
            },
        ];
        let text = exposition(Some(&s));
        assert!(text.contains("# TYPE echomq_node_up gauge\n"), "{text}");
        assert!(
            text.contains("echomq_node_up{node=\"10.0.0.1:7000\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("echomq_node_up{node=\"10.0.0.2:7001\"} 0\n"),
            "{text}"
        );
        assert!(text.starts_with("# HELP echomq_up"), "{text}");
    }

    #[test]
    fn recurring_definitions_are_one_gauge_per_queue() {
        use crate::snapshot::Repeats;
        let repeats = |count| {
            Some(Ok(Repeats {
                count,
                unarmed: 0,
                next: Vec::new(),
            }))
        };
        let q = |name: &str, repeats| QueueStats {
            name: name.into(),
            counts: Ok(Counts {
                repeats,
                ..counts(0)
            }),
            shards: Vec::new(),
        };
        let s = snapshot(
            vec![
                q("cal", repeats(10_000)),
                q("none", repeats(0)),
                q("old", None),
                q("refused", Some(Err("NOPERM".into()))),
            ],
            vec![],
        );
        let text = exposition(Some(&s));
        let lines: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("echomq_repeats"))
            .collect();
        assert_eq!(
            lines,
            [
                r#"echomq_repeats{queue="cal"} 10000"#,
                r#"echomq_repeats{queue="none"} 0"#
            ]
        );
        assert!(text.contains("# TYPE echomq_repeats gauge\n"), "{text}");
        // A module without ECHO.REPEATS: no family at all.
        let s = snapshot(vec![q("old", None)], vec![]);
        assert!(!exposition(Some(&s)).contains("echomq_repeats"));
    }

    #[test]
    fn down_is_echomq_up_0_alone() {
        assert_eq!(
            exposition(None),
            "# HELP echomq_up 1 when echomq-web's last query of the server succeeded, else 0\n\
             # TYPE echomq_up gauge\n\
             echomq_up 0\n"
        );
    }

    #[test]
    fn milliseconds_print_as_exact_seconds() {
        // 9 * 0.001 is 0.009000000000000001 in binary floating point.
        let cases = [
            (0, "0"),
            (9, "0.009"),
            (10, "0.01"),
            (999, "0.999"),
            (1000, "1"),
            (1250, "1.25"),
            (86_400_001, "86400.001"),
            (-9, "-0.009"),
            (i64::MIN, "-9223372036854775.808"),
            (i64::MAX, "9223372036854775.807"),
        ];
        for (ms, seconds) in cases {
            assert_eq!(divided(&Number::Int(ms), 1000), seconds, "{ms} ms");
            // What Prometheus reads back is the exact quotient.
            let parsed: f64 = seconds.parse().unwrap();
            assert_eq!(parsed, ms as f64 / 1000.0, "{ms} ms");
        }
        assert_eq!(divided(&Number::Float(9.0), 1000), "0.009");
        assert_eq!(divided(&Number::Float(2.5), 1), "2.5");
        assert_eq!(divided(&Number::Int(9), 1), "9");
        let s = snapshot(
            vec![],
            vec![("echomq_auto_promote_lag_ms_max".into(), Number::Int(9))],
        );
        assert!(exposition(Some(&s)).contains("\nechomq_auto_promote_lag_seconds_max 0.009\n"));
    }

    #[test]
    fn a_snapshot_as_families() {
        let mut s = snapshot(
            vec![
                QueueStats {
                    name: "a\"b\\c".into(),
                    counts: Ok(counts(10)),
                    shards: Vec::new(),
                },
                QueueStats {
                    name: "broken".into(),
                    counts: Err("WRONGTYPE".into()),
                    shards: Vec::new(),
                },
                QueueStats {
                    name: "lim".into(),
                    counts: Ok(with_release(
                        0,
                        Release {
                            limit: Some(Limit {
                                rate_per_second: 200.0,
                                in_force_per_second: 12.5,
                                burst: 20,
                                adaptive: true,
                                available: 4,
                                released: 30,
                                failures: 6,
                            }),
                            held_until_ms: 0,
                        },
                    )),
                    shards: Vec::new(),
                },
                QueueStats {
                    name: "held".into(),
                    counts: Ok(with_release(
                        0,
                        Release {
                            limit: None,
                            held_until_ms: 1_795_987_450_887,
                        },
                    )),
                    shards: Vec::new(),
                },
                QueueStats {
                    name: "free".into(),
                    counts: Ok(with_release(
                        0,
                        Release {
                            limit: None,
                            held_until_ms: 0,
                        },
                    )),
                    shards: Vec::new(),
                },
            ],
            vec![
                ("echomq_retries".into(), Number::Int(5)),
                ("echomq_eviction_policy_safe".into(), Number::Int(0)),
                ("echomq_auto_promote_lag_ms_max".into(), Number::Int(1250)),
                ("echomq_new_thing".into(), Number::Float(1.5)),
            ],
        );
        s.maxmemory_policy = "allkeys-lru".into();
        s.round_trips = 3;
        let text = exposition(Some(&s));
        let lines: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            lines,
            [
                "echomq_up 1",
                r#"echomq_queue_scheduled{queue="a\"b\\c"} 10"#,
                r#"echomq_queue_scheduled{queue="lim"} 0"#,
                r#"echomq_queue_scheduled{queue="held"} 0"#,
                r#"echomq_queue_scheduled{queue="free"} 0"#,
                r#"echomq_queue_due{queue="a\"b\\c"} 11"#,
                r#"echomq_queue_due{queue="lim"} 1"#,
                r#"echomq_queue_due{queue="held"} 1"#,
                r#"echomq_queue_due{queue="free"} 1"#,
                r#"echomq_queue_pending{queue="a\"b\\c"} 12"#,
                r#"echomq_queue_pending{queue="lim"} 2"#,
                r#"echomq_queue_pending{queue="held"} 2"#,
                r#"echomq_queue_pending{queue="free"} 2"#,
                r#"echomq_queue_in_flight{queue="a\"b\\c"} 13"#,
                r#"echomq_queue_in_flight{queue="lim"} 3"#,
                r#"echomq_queue_in_flight{queue="held"} 3"#,
                r#"echomq_queue_in_flight{queue="free"} 3"#,
                r#"echomq_queue_dead{queue="a\"b\\c"} 14"#,
                r#"echomq_queue_dead{queue="lim"} 4"#,
                r#"echomq_queue_dead{queue="held"} 4"#,
                r#"echomq_queue_dead{queue="free"} 4"#,
                "echomq_release_rate_per_second{queue=\"lim\"} 12.5",
                "echomq_release_rate_ceiling_per_second{queue=\"lim\"} 200",
                "echomq_release_held_until_seconds{queue=\"lim\"} 0",
                "echomq_release_held_until_seconds{queue=\"held\"} 1795987450.887",
                "echomq_release_released_total{queue=\"lim\"} 30",
                "echomq_release_failures_total{queue=\"lim\"} 6",
                "echomq_retries_total 5",
                "echomq_eviction_policy_safe 0",
                "echomq_auto_promote_lag_seconds_max 1.25",
                "echomq_new_thing 1.5",
            ]
        );
        assert!(text.contains("# TYPE echomq_retries_total counter\n"));
        assert!(text.contains("# TYPE echomq_eviction_policy_safe gauge\n"));
        assert!(text.contains("# TYPE echomq_new_thing untyped\n"));
        assert!(text.contains("# TYPE echomq_release_released_total counter\n"));
        assert!(text.contains("# TYPE echomq_release_held_until_seconds gauge\n"));
        // Every family has its HELP and TYPE, each once.
        for l in &lines {
            let name = l.split(['{', ' ']).next().unwrap_or_default();
            assert_eq!(
                text.matches(&format!("# HELP {name} ")).count(),
                1,
                "{name}"
            );
            assert_eq!(
                text.matches(&format!("# TYPE {name} ")).count(),
                1,
                "{name}"
            );
        }
    }
}
