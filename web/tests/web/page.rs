//! The page in headless Chromium: the numbers and the drawn histogram in the
//! rendered DOM, a screenshot, an outage shown and recovered from, and the
//! eviction warning.

use crate::common::*;
use crate::harness::*;
use crate::node;
use serde_json::{json, Value as Json};

#[test]
fn the_page_draws_counts_and_the_spread_in_chromium() {
    let test = "the_page_draws_counts_and_the_spread_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    // Hundreds of queues: the page must still show each of them.
    let many: Vec<String> = (0..300).map(|i| format!("q{i:03}")).collect();
    let mut args = vec!["--queue", "orders"];
    for name in &many {
        args.extend(["--queue", name.as_str()]);
    }
    for name in many.iter().take(3) {
        let _: i64 = q!(&mut con, "LPUSH", format!("{{{name}}}:pending"), "x");
    }
    // Started before the queue is built: its jobs must not become due while it starts.
    let web = Web::start(&server.url(), &args);
    let b = build_queue(&mut con, "orders");
    browser.open(&format!("{}/", web.base));
    let got = browser.wait(
        &format!(
            "(() => {{ const v = {}; return v && v.scheduled > 0 && v; }})()",
            card_js("orders")
        ),
        "the orders card",
    );
    let num = |f: &str| got[f].as_u64().unwrap_or_else(|| panic!("{f}: {got}")) as usize;
    assert_eq!(
        num("scheduled"),
        b.herd + b.jittered + b.beyond + b.due,
        "{got}"
    );
    assert_eq!(num("due"), b.due, "{got}");
    assert_eq!(num("pending"), b.pending, "{got}");
    assert_eq!(num("dead"), b.dead, "{got}");
    assert_eq!(num("cards"), 301, "{got}");
    assert_eq!(got["status"], json!("live"));
    // The histogram: 60 buckets holding the herd and the jittered cohort,
    // one bar per non-empty bucket, the herd's bucket at full height.
    let spread: Vec<i64> = serde_json::from_value(got["spread"].clone()).expect("spread");
    assert_eq!(spread.len(), 60);
    assert_eq!(
        spread.iter().sum::<i64>(),
        (b.herd + b.jittered) as i64,
        "{spread:?}"
    );
    let non_empty = spread.iter().filter(|&&v| v > 0).count();
    assert_eq!(num("bars"), non_empty, "{got}");
    assert!(non_empty >= 2, "{spread:?}");
    let peak = *spread.iter().max().unwrap_or(&0);
    assert!(peak >= b.herd as i64, "{spread:?}");
    assert_eq!(
        num("full_bars"),
        spread.iter().filter(|&&v| v == peak).count(),
        "{got}"
    );
    assert!(
        got["drawn"]["width"].as_f64() > Some(1.0) && got["drawn"]["height"].as_f64() > Some(50.0),
        "nothing drawn: {got}"
    );
    // And a queue of the hundreds, with what its list holds.
    let q0 = browser.wait(&card_js("q000"), "the q000 card");
    assert_eq!(q0["pending"], json!(1), "{q0}");
    assert_eq!(q0["bars"], json!(0), "{q0}");

    browser.screenshot(&node::target_dir().join("web/echomq-web.png"));

    // Among hundreds, the queues with work: "hide idle queues" keeps only those.
    let shown = browser.call(json!({"op": "eval", "js": "(() => { \
        document.getElementById('busy').click(); \
        return { names: [...document.querySelectorAll('section.queue')].filter(e => !e.hidden).map(e => e.dataset.queue), \
                 text: document.getElementById('shown').textContent }; })()"}));
    assert_eq!(
        shown,
        json!({"names": ["orders", "q000", "q001", "q002"], "text": "4 of 301 shown"})
    );
}

#[test]
fn the_page_shows_an_outage_and_recovers_in_chromium() {
    let test = "the_page_shows_an_outage_and_recovers_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let mut server = Server::start();
    let port = server.port;
    let mut con = server.conn();
    let _: i64 = q!(&mut con, "LPUSH", "{q}:pending", "a", "b");
    let web = Web::start(&server.url(), &["--queue", "q"]);
    browser.open(&format!("{}/", web.base));
    let live = browser.wait(&card_js("q"), "the q card");
    assert_eq!(
        (live["status"].clone(), live["pending"].clone()),
        (json!("live"), json!(2))
    );

    server.stop();
    let down = browser.wait(
        "(() => { const s = document.getElementById('status'); \
          return s.dataset.state === 'error' && s.textContent; })()",
        "an error on the page",
    );
    let text = down.as_str().unwrap_or_default();
    assert!(text.contains("Cannot read the server"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("Retrying"), "{text}");
    // The last numbers stay, dimmed, while it retries.
    let stale = browser.call(json!({"op": "eval",
        "js": "document.getElementById('main').classList.contains('stale')"}));
    assert_eq!(stale, json!(true));
    browser.screenshot(&node::target_dir().join("web/echomq-web-outage.png"));

    let back = restarted_on(port);
    let mut con = back.conn();
    let _: i64 = q!(&mut con, "LPUSH", "{q}:pending", "c", "d", "e");
    let again = browser.wait(
        &format!("(() => {{ const v = {}; return v && v.status === 'live' && v.pending === 3 && v; }})()", card_js("q")),
        "the page live again with the new server's numbers",
    );
    assert_eq!(again["pending"], json!(3));
    let stale = browser.call(json!({"op": "eval",
        "js": "document.getElementById('main').classList.contains('stale')"}));
    assert_eq!(stale, json!(false));
}

#[test]
fn the_page_warns_while_the_eviction_policy_is_unsafe_in_chromium() {
    let test = "the_page_warns_while_the_eviction_policy_is_unsafe_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let (_, in_flight) = stream_queue(&mut con, "s", 4, 3, 0, 0);
    let web = Web::start(&server.url(), &["--queue", "s"]);
    browser.open(&format!("{}/", web.base));
    const WARNING: &str = "(() => { const w = document.getElementById('eviction'); \
        return { shown: !w.hidden && w.getBoundingClientRect().height > 0, text: w.textContent, \
                 status: document.getElementById('status').dataset.state }; })()";
    // Safe (noeviction, the default): the stream card, and no warning.
    let card = browser.wait(
        &format!(
            "(() => {{ const v = {}; return v && v.status === 'live' && v; }})()",
            card_js("s")
        ),
        "the s card",
    );
    assert_eq!(
        (card["pending"].clone(), card["in_flight"].clone()),
        (json!(4), json!(in_flight))
    );
    assert_eq!(in_flight, 3);
    let w = browser.call(json!({"op": "eval", "js": WARNING}));
    assert_eq!(w["shown"], json!(false), "{w}");

    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru");
    let w = browser.wait(
        &format!("(() => {{ const w = {WARNING}; return w.shown && w; }})()"),
        "the eviction warning",
    );
    let text = w["text"].as_str().unwrap_or_default();
    assert!(text.contains("allkeys-lru"), "{text}");
    assert!(text.contains("noeviction"), "{text}");
    assert!(text.contains("evict"), "{text}");
    browser.screenshot(&node::target_dir().join("web/echomq-web-eviction.png"));

    let _: () = q!(&mut con, "CONFIG", "SET", "maxmemory-policy", "noeviction");
    let w = browser.wait(
        &format!(
            "(() => {{ const w = {WARNING}; return !w.shown && w.status === 'live' && w; }})()"
        ),
        "the warning gone after noeviction",
    );
    assert_eq!(w["text"], json!(""), "{w}");
}

#[test]
fn the_page_shows_release_limits_and_holds_in_chromium() {
    let test = "the_page_shows_release_limits_and_holds_in_chromium";
    let Some(mut browser) = Browser::start(test) else {
        return;
    };
    let server = Server::start();
    let mut con = server.conn();
    let mut args = Vec::new();
    for q in LIMITED {
        args.extend(["--queue", q]);
    }
    let web = Web::start(&server.url(), &args);
    let built = limited_queues(&mut con);
    browser.open(&format!("{}/", web.base));
    // Each card's release line: its parts by name, as shown.
    const RELEASE_JS: &str = r#"(() => {
      const out = {};
      for (const c of document.querySelectorAll("section.queue")) {
        const r = c.querySelector(".release");
        const parts = {};
        for (const p of r.querySelectorAll("[data-release]")) parts[p.dataset.release] = p.textContent;
        out[c.dataset.queue] = { shown: !r.hidden && r.getBoundingClientRect().height > 0,
                                 text: r.textContent, parts, held_until: r.dataset.heldUntil };
      }
      return out.lim && out.lim.shown && document.getElementById("status").dataset.state === "live" && out;
    })()"#;
    let got = browser.wait(RELEASE_JS, "the release lines");
    let digits = |s: &Json| -> i64 {
        s.as_str()
            .unwrap_or_default()
            .chars()
            .filter(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap_or(-1)
    };
    assert_eq!(
        got["lim"]["parts"],
        json!({"rate": "limit 100/s", "burst": "burst 10", "held_back": "40 due held back"}),
        "{got}"
    );
    assert_eq!(
        got["lim"]["text"],
        json!("limit 100/s · burst 10 · 40 due held back")
    );
    assert_eq!(
        got["ada"]["parts"],
        json!({"rate": "adaptive 5/h of 10/h", "burst": "burst 5", "held_back": "3 due held back"}),
        "{got}"
    );
    // The hold: for how long from the server time the scrape read, and
    // until when (the exact end, in the line's data).
    let held = &got["held"]["parts"];
    assert_eq!(held["rate"], json!("no release limit"), "{got}");
    assert_eq!(held["held_back"], json!("4 due held back"), "{got}");
    let hold = held["hold"].as_str().unwrap_or_default();
    assert!(
        hold.starts_with("held for ") && hold.ends_with(" ms"),
        "{hold}"
    );
    let ms = digits(&held["hold"]);
    assert!((1..=600_000).contains(&ms), "{hold}");
    assert_eq!(
        got["held"]["held_until"],
        json!(built.held_until_ms.to_string()),
        "{got}"
    );
    assert_eq!(
        got["free"]["parts"],
        json!({"rate": "no release limit"}),
        "{got}"
    );
    for q in ["lim", "ada", "free"] {
        assert_eq!(got[q]["held_until"], json!("0"), "{q}: {got}");
    }
    browser.screenshot(&node::target_dir().join("web/echomq-web-limits.png"));

    // The hold lifted (ECHO.HOLD 0): the page says so on its next poll.
    let _: i64 = q!(&mut con, "ECHO.HOLD", "{held}:schedule", 0);
    let lifted = browser.wait(
        "(() => { const r = document.querySelector('section.queue[data-queue=\"held\"] .release'); \
          return r.dataset.heldUntil === '0' && r.textContent; })()",
        "the hold lifted",
    );
    assert_eq!(lifted, json!("no release limit"));
}
