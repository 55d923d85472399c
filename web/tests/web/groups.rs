//! The groups of a grouped schedule (ECHO.ADD ... GROUP): their count, the
//! ten largest backlogs and the groups held back now, in the JSON, on the
//! page and as two gauges per queue in /metrics (no series per group).

use crate::common::*;
use crate::harness::*;
use crate::node;
use serde_json::{json, Value as Json};

/// The groups of [`grouped_queue`], by name: members and due members.
pub struct Seeded {
    pub groups: Vec<(String, i64, i64)>,
    /// The groups held back now, most due first: name, due.
    pub limited: Vec<(String, i64)>,
}

/// `{shops}`: 30 groups `g00`..`g29` of 1..=30 members (group i has
/// `7i mod 30 + 1`, so size and name order differ), and 2 ungrouped jobs
/// (not a group). Nothing is released but by the one ECHO.PROMOTE here
/// (no timer: the queue is not in echomq.auto-promote):
/// - g02, g05, g11, g20, g23: due jobs under their own limit of 1/h burst
///   1, which the promote drained (one job each left): due jobs, nothing
///   available, so held back;
/// - g08: due jobs and its own hold (ECHO.HOLD ... GROUP) of ten minutes:
///   held back, nothing released;
/// - g14: the same limit, but nothing due: not held back;
/// - the others: due in ten minutes, no limit.
pub fn grouped_queue(con: &mut Connection) -> Seeded {
    let (s, p) = ("{shops}:schedule", "{shops}:pending");
    let limited = [2, 5, 11, 20, 23];
    let due_now = |i: usize| limited.contains(&i) || i == 8;
    for i in [2, 5, 11, 14, 20, 23] {
        let _: () = q!(con, "ECHO.GROUPLIMIT", s, format!("g{i:02}"), "1/h", 1);
    }
    let _: i64 = q!(con, "ECHO.HOLD", s, 600_000, "GROUP", "g08");
    let mut pipe = redis::pipe();
    let mut groups = Vec::new();
    for i in 0..30 {
        let (name, size) = (format!("g{i:02}"), (7 * i % 30 + 1) as i64);
        for j in 0..size {
            let add = pipe
                .cmd("ECHO.ADD")
                .arg(s)
                .arg(p)
                .arg(format!("{name}-{j}"));
            if !due_now(i) {
                add.arg("DELAY").arg(600_000);
            }
            add.arg("GROUP").arg(&name).ignore();
        }
        groups.push((name, size, if due_now(i) { size } else { 0 }));
    }
    for j in 0..2 {
        pipe.cmd("ECHO.ADD")
            .arg(s)
            .arg(p)
            .arg(format!("ungrouped-{j}"))
            .arg("DELAY")
            .arg(600_000)
            .ignore();
    }
    let _: () = pipe.query(con).expect("the jobs added");
    // One job of each limited group leaves, then their limits are empty.
    assert_eq!(promote(con, s, p), limited.len() as i64);
    for &i in &limited {
        groups[i].1 -= 1;
        groups[i].2 -= 1;
    }
    let mut held: Vec<(String, i64)> = groups
        .iter()
        .enumerate()
        .filter(|(i, _)| due_now(*i))
        .map(|(_, (name, _, due))| (name.clone(), *due))
        .collect();
    held.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    Seeded {
        groups,
        limited: held,
    }
}

/// `field` of `group` in ECHO.GROUPS of `{shops}:schedule`, over RESP2.
fn raw_field(con: &mut Connection, group: &str, field: &str) -> redis::Value {
    let v: redis::Value = q!(con, "ECHO.GROUPS", "{shops}:schedule", "COUNT", 1000);
    let redis::Value::Array(parts) = v else {
        panic!("ECHO.GROUPS: {v:?}");
    };
    let Some(redis::Value::Array(entries)) = parts.get(1) else {
        panic!("ECHO.GROUPS: {parts:?}");
    };
    let name = |v: &redis::Value| match v {
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("a field name: {other:?}"),
    };
    for e in entries {
        let redis::Value::Array(kv) = e else {
            panic!("an entry: {e:?}");
        };
        let pairs: Vec<(String, &redis::Value)> =
            kv.chunks_exact(2).map(|p| (name(&p[0]), &p[1])).collect();
        if pairs.iter().any(|(k, v)| k == "group" && name(v) == group) {
            if let Some((_, v)) = pairs.iter().find(|(k, _)| k == field) {
                return (*v).clone();
            }
        }
    }
    panic!("no {field} of {group} in {entries:?}")
}

impl Seeded {
    /// The ten largest: most members first, then by name.
    pub fn largest(&self) -> Vec<(String, i64, i64)> {
        let mut all = self.groups.clone();
        all.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        all.truncate(10);
        all
    }
}

#[test]
fn api_shows_the_largest_and_the_held_back_groups_of_a_queue() {
    let server = Server::start();
    let mut con = server.conn();
    // `}x`: its schedule `{}x}:schedule` has no hash tag, so no groups (and
    // no ECHO.GROUPS sent, which would fail).
    let web = Web::start(
        &server.url(),
        &["--queue", "shops", "--queue", "plain", "--queue", "}x"],
    );
    let seeded = grouped_queue(&mut con);
    let _: i64 = q!(&mut con, "LPUSH", "{plain}:pending", "a");
    let errors_before = info_field(&mut con, "stats", "total_error_replies");
    let (status, got) = web.api();
    assert_eq!(status, 200, "{got}");
    let now = got["now_ms"].as_i64().expect("now_ms");
    // The hold's end and the limit's rate, as ECHO.GROUPS says them.
    let hold = match raw_field(&mut con, "g08", "held-until-ms") {
        redis::Value::Int(ms) => ms,
        other => panic!("g08's hold: {other:?}"),
    };
    let rate: f64 = match raw_field(&mut con, "g02", "limit-rate") {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).parse().expect("a double"),
        other => panic!("g02's rate: {other:?}"),
    };
    assert!((rate * 3600.0 - 1.0).abs() < 1e-9, "{rate}");
    assert!(
        hold > now + 590_000 && hold <= now + 600_000,
        "{hold} {now}"
    );
    let largest: Vec<Json> = seeded
        .largest()
        .into_iter()
        .map(|(group, members, due)| json!({"group": group, "members": members, "due": due}))
        .collect();
    let limited: Vec<Json> = seeded
        .limited
        .iter()
        .map(|(group, due)| {
            let members = seeded.groups.iter().find(|g| &g.0 == group).map(|g| g.1);
            if group == "g08" {
                json!({"group": group, "members": members, "due": due,
                       "limit_rate_per_second": null, "limit_burst": null, "available": null,
                       "held_until_ms": hold, "held_for_ms": hold - now})
            } else {
                json!({"group": group, "members": members, "due": due,
                       "limit_rate_per_second": rate, "limit_burst": 1, "available": 0,
                       "held_until_ms": 0, "held_for_ms": 0})
            }
        })
        .collect();
    assert_eq!(
        got["queues"][0]["groups"],
        json!({"count": 30, "truncated": false, "largest": largest,
               "limited_count": 6, "limited": limited}),
        "{got}"
    );
    // The figures themselves: 30 members down to 21 (g20 gave one), the
    // held group first among the held back.
    let names = |l: &Json| -> Vec<String> {
        l.as_array()
            .into_iter()
            .flatten()
            .map(|g| g["group"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let groups = &got["queues"][0]["groups"];
    assert_eq!(
        names(&groups["largest"]),
        ["g17", "g04", "g21", "g08", "g25", "g12", "g29", "g16", "g03", "g07"]
    );
    assert_eq!(
        names(&groups["limited"]),
        ["g08", "g20", "g11", "g02", "g23", "g05"]
    );
    assert_eq!(got["queues"][0]["scheduled"], json!(2), "{got}");
    // A queue without groups, and one whose schedule cannot have any.
    assert_eq!(got["queues"][1]["groups"], no_groups(), "{got}");
    assert_eq!(got["queues"][2]["name"], json!("}x"), "{got}");
    assert_eq!(got["queues"][2]["groups"], Json::Null, "{got}");
    // 30 groups are one page: the scrape is three round trips, and sends
    // nothing that fails.
    assert_eq!(got["round_trips"], json!(3));
    assert_eq!(
        info_field(&mut con, "stats", "total_error_replies"),
        errors_before
    );
}

#[test]
fn metrics_count_groups_per_queue_with_no_series_per_group() {
    let test = "metrics_count_groups_per_queue_with_no_series_per_group";
    let Some(tool) = node::or_skip(test, promtool()) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(&server.url(), &["--queue", "shops", "--queue", "plain"]);
    grouped_queue(&mut con);
    let (status, text) = web.get("/metrics");
    assert_eq!(status, 200, "{text}");
    promtool_check(&tool, &text);
    let lines: Vec<&str> = text.lines().collect();
    for want in [
        r#"echomq_groups{queue="shops"} 30"#,
        r#"echomq_groups{queue="plain"} 0"#,
        r#"echomq_groups_limited{queue="shops"} 6"#,
        r#"echomq_groups_limited{queue="plain"} 0"#,
        "# TYPE echomq_groups gauge",
        "# TYPE echomq_groups_limited gauge",
        // The promote released one job of each of five groups, and found
        // none of them limited yet.
        "echomq_group_releases_total 5",
        "# TYPE echomq_group_releases_total counter",
        "# TYPE echomq_group_limited_total counter",
    ] {
        assert!(lines.contains(&want), "{want}\n{text}");
    }
    // No series names a group: no label but `queue`, no group's name.
    for l in lines.iter().filter(|l| !l.starts_with('#')) {
        assert!(!l.contains("g0") && !l.contains("g1"), "{l}");
        if let Some((_, labels)) = l.split_once('{') {
            assert!(labels.starts_with("queue=\""), "{l}");
            assert_eq!(labels.matches('=').count(), 1, "{l}");
        }
    }
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("echomq_groups"))
            .count(),
        4,
        "{text}"
    );
}

#[test]
fn the_page_lists_the_largest_and_the_held_back_groups_in_chromium() {
    let test = "the_page_lists_the_largest_and_the_held_back_groups_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(&server.url(), &["--queue", "shops", "--queue", "plain"]);
    let seeded = grouped_queue(&mut con);
    let _: i64 = q!(&mut con, "LPUSH", "{plain}:pending", "a");
    browser.open(&format!("{}/", web.base));
    const GROUPS_JS: &str = r#"(() => {
      const out = {};
      for (const c of document.querySelectorAll("section.queue")) {
        const g = c.querySelector(".groups");
        const list = (name) => [...g.querySelectorAll(`[data-groups="${name}"] li`)]
          .map(li => ({ group: li.dataset.group, text: li.textContent }));
        const summary = g.querySelector('[data-groups="summary"]');
        out[c.dataset.queue] = { shown: !g.hidden && g.getBoundingClientRect().height > 0,
                                 summary: summary ? summary.textContent : null,
                                 largest: list("largest"), limited: list("limited") };
      }
      return out.shops && out.shops.shown && out.plain && out;
    })()"#;
    let got = browser.wait(GROUPS_JS, "the groups of shops");
    let shops = &got["shops"];
    assert_eq!(shops["summary"], json!("30 groups · 6 held back"), "{got}");
    let largest: Vec<Json> = seeded
        .largest()
        .into_iter()
        .map(|(g, members, due)| json!({"group": g, "text": format!("{g} {members} ({due} due)")}))
        .collect();
    assert_eq!(shops["largest"], json!(largest), "{got}");
    let limited: Vec<String> = shops["limited"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| g["text"].as_str().unwrap_or_default().to_string())
        .collect();
    let want: Vec<&str> = seeded.limited.iter().map(|(g, _)| g.as_str()).collect();
    assert_eq!(limited.len(), want.len(), "{got}");
    for (text, (group, due)) in limited.iter().zip(&seeded.limited) {
        let head = format!("{group} {due} due: ");
        assert!(text.starts_with(&head), "{text}");
        if group == "g08" {
            assert!(text.contains("held ") && text.ends_with(" ms"), "{text}");
        } else {
            assert!(
                text.ends_with("limit 1/h burst 1, none available"),
                "{text}"
            );
        }
    }
    // A queue without groups shows none.
    assert_eq!(got["plain"]["shown"], json!(false), "{got}");
    browser.screenshot(&node::target_dir().join("web/echomq-web-groups.png"));
}

#[test]
fn past_the_bound_the_figures_are_of_the_first_100000_groups() {
    let server = Server::start();
    let mut con = server.conn();
    let web = Web::start(&server.url(), &["--queue", "many"]);
    // 100,001 groups of one job each, not due; the last by name, `z`, has 5.
    let (s, p) = ("{many}:schedule", "{many}:pending");
    for chunk in 0..100 {
        let mut pipe = redis::pipe();
        for i in chunk * 1000..(chunk + 1) * 1000 {
            pipe.cmd("ECHO.ADD")
                .arg(s)
                .arg(p)
                .arg(format!("j{i}"))
                .arg("DELAY")
                .arg(600_000)
                .arg("GROUP")
                .arg(format!("g{i:06}"))
                .ignore();
        }
        let _: () = pipe.query(&mut con).expect("the jobs added");
    }
    for j in 0..5 {
        let _: i64 = q!(
            &mut con,
            "ECHO.ADD",
            s,
            p,
            format!("z{j}"),
            "DELAY",
            600_000,
            "GROUP",
            "z"
        );
    }
    let started = std::time::Instant::now();
    let (status, got) = web.api();
    let took = started.elapsed();
    assert_eq!(status, 200, "{got}");
    let groups = &got["queues"][0]["groups"];
    assert_eq!(groups["count"], json!(100_000), "{groups}");
    assert_eq!(groups["truncated"], json!(true), "{groups}");
    // `z`, the largest, is past the bound: the ten largest of the first
    // 100,000 are ties of one member, by name.
    assert_eq!(
        groups["largest"][0],
        json!({"group": "g000000", "members": 1, "due": 0})
    );
    assert_eq!(groups["largest"].as_array().map(Vec::len), Some(10));
    // 100 pages: the first in the third round trip, 99 more.
    assert_eq!(got["round_trips"], json!(3 + 99));
    eprintln!("a scrape of 100,000 groups took {took:?}");
    let (_, text) = web.get("/metrics");
    assert!(
        text.lines()
            .any(|l| l == r#"echomq_groups{queue="many"} 100000"#),
        "{text}"
    );
}
