//! Sharded queues (docs/clients.md, Sharded queues): one logical queue over
//! N sub-queues, each a queue of its own under its shard's tag. A scrape
//! reads every tag as it reads a single queue (on a cluster on the primary
//! owning the tag's slot, in that node's one pipeline), and this module
//! folds the shards' figures back into the one queue people asked about:
//! counts and spreads summed, release limits, groups and recurring
//! definitions merged as far as their bounded figures allow.

use crate::cluster;
use crate::snapshot::{
    merge_queues, Counts, Group, Groups, Limit, QueueStats, Release, Repeat, Repeats, Shard,
    GROUPS_LISTED, REPEATS_LISTED,
};

/// A queue as shown.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub name: String,
    /// None for a single queue; a sharded queue's tags in shard order.
    pub tags: Option<Vec<String>>,
}

/// The queues to show: the `--queue` ones, then the `--sharded` ones, then
/// those the servers name (ECHO.QUEUES) not already listed. A discovered
/// name that is a tag of a sharded queue is left out: its figures are in
/// that queue's. Discovered tags are never grouped into a sharded queue by
/// themselves: `mail` and `mail#1` may as well be two unrelated queues, and
/// a layout guessed from whatever shards have keys would miss the empty ones.
pub fn layout(cli: &[String], sharded: &[(String, u32)], from_servers: &[String]) -> Vec<Shown> {
    let sharded: Vec<Shown> = sharded
        .iter()
        .map(|(name, n)| Shown {
            name: name.clone(),
            tags: Some(cluster::shard_tags(name, *n)),
        })
        .collect();
    let is_shard = |name: &str| {
        sharded
            .iter()
            .flat_map(|s| s.tags.iter().flatten())
            .any(|t| t == name)
    };
    let mut out: Vec<Shown> = merge_queues(cli, &[])
        .into_iter()
        .map(|name| Shown { name, tags: None })
        .collect();
    out.extend(sharded.iter().cloned());
    for name in from_servers {
        if !is_shard(name) && !out.iter().any(|s| s.tags.is_none() && s.name == *name) {
            out.push(Shown {
                name: name.clone(),
                tags: None,
            });
        }
    }
    out
}

/// What a scrape reads: each single queue's name and each shard's tag, in
/// the order of `shown`.
pub fn tags(shown: &[Shown]) -> Vec<String> {
    shown
        .iter()
        .flat_map(|s| match &s.tags {
            Some(tags) => tags.clone(),
            None => vec![s.name.clone()],
        })
        .collect()
}

/// The queues of `shown` from the reads of [`tags`] (in that order, each
/// read on `nodes[i]`): a single queue as read, a sharded one with its
/// shards and their merged figures.
pub fn group(
    shown: &[Shown],
    reads: Vec<QueueStats>,
    nodes: Vec<Option<String>>,
) -> Vec<QueueStats> {
    let mut reads = reads.into_iter().zip(nodes);
    shown
        .iter()
        .map(|s| {
            let Some(tags) = &s.tags else {
                return reads.next().map_or_else(
                    || QueueStats::single(s.name.clone(), Err("missing reply".into())),
                    |(q, _)| q,
                );
            };
            let shards: Vec<Shard> = tags
                .iter()
                .map(|tag| match reads.next() {
                    Some((q, node)) => Shard {
                        tag: tag.clone(),
                        node,
                        counts: q.counts,
                    },
                    None => Shard {
                        tag: tag.clone(),
                        node: None,
                        counts: Err("missing reply".into()),
                    },
                })
                .collect();
            QueueStats {
                name: s.name.clone(),
                counts: merge(&shards),
                shards,
            }
        })
        .collect()
}

/// The logical queue's figures: Err when a shard could not be read (a sum
/// without it would understate the queue), naming the first such shard.
pub fn merge(shards: &[Shard]) -> Result<Counts, String> {
    let mut parts: Vec<&Counts> = Vec::with_capacity(shards.len());
    for s in shards {
        match &s.counts {
            Ok(c) => parts.push(c),
            Err(e) => return Err(format!("shard {}: {e}", s.tag)),
        }
    }
    let sum = |f: fn(&Counts) -> i64| parts.iter().fold(0i64, |a, c| a.saturating_add(f(c)));
    let buckets = parts.iter().map(|c| c.spread.len()).max().unwrap_or(0);
    let mut spread = vec![0i64; buckets];
    for c in &parts {
        for (total, v) in spread.iter_mut().zip(&c.spread) {
            *total = total.saturating_add(*v);
        }
    }
    Ok(Counts {
        scheduled: sum(|c| c.scheduled),
        due: sum(|c| c.due),
        pending: sum(|c| c.pending),
        in_flight: sum(|c| c.in_flight),
        dead: sum(|c| c.dead),
        spread,
        release: fold(parts.iter().map(|c| &c.release), merge_release),
        groups: fold(parts.iter().map(|c| &c.groups), merge_groups),
        repeats: fold(parts.iter().map(|c| &c.repeats), merge_repeats),
    })
}

/// An optional figure over the shards: the first error if any shard's
/// server refused it, None when no shard's server has it (an older module),
/// else `merge` of those that have it.
fn fold<'a, T: 'a + Clone>(
    each: impl Iterator<Item = &'a Option<Result<T, String>>>,
    merge: fn(&[&T]) -> T,
) -> Option<Result<T, String>> {
    let mut got: Vec<&T> = Vec::new();
    for v in each {
        match v {
            Some(Err(e)) => return Some(Err(e.clone())),
            Some(Ok(t)) => got.push(t),
            None => {}
        }
    }
    (!got.is_empty()).then(|| Ok(merge(&got)))
}

/// The shards' release limits as one: the libraries split a queue's limit
/// over its shards (`rate / N` each), so the sum of the shards' rates,
/// bursts, what may leave now and their counters is the queue's; a hold is
/// on every shard, so the queue is held until the last shard's ends. Only
/// the limited shards are summed (a queue half limited shows the half).
fn merge_release(parts: &[&Release]) -> Release {
    let limits: Vec<&Limit> = parts.iter().filter_map(|r| r.limit.as_ref()).collect();
    let limit = (!limits.is_empty()).then(|| {
        let sum_f = |f: fn(&Limit) -> f64| limits.iter().map(|l| f(l)).sum::<f64>();
        let sum_i = |f: fn(&Limit) -> i64| limits.iter().fold(0i64, |a, l| a.saturating_add(f(l)));
        Limit {
            rate_per_second: sum_f(|l| l.rate_per_second),
            in_force_per_second: sum_f(|l| l.in_force_per_second),
            burst: sum_i(|l| l.burst),
            adaptive: limits.iter().any(|l| l.adaptive),
            available: sum_i(|l| l.available),
            released: sum_i(|l| l.released),
            failures: sum_i(|l| l.failures),
        }
    });
    Release {
        limit,
        held_until_ms: parts.iter().map(|r| r.held_until_ms).max().unwrap_or(0),
    }
}

/// The due members held back over the shards: each shard's limit or hold
/// keeps its own due members, so the queue's is the sum (not the summed
/// limit applied to the summed due, which a shard with room would hide).
pub fn held_back(q: &QueueStats) -> Option<i64> {
    if q.shards.is_empty() {
        return None;
    }
    Some(q.shards.iter().fold(0i64, |a, s| match &s.counts {
        Ok(Counts {
            release: Some(Ok(r)),
            due,
            ..
        }) => a.saturating_add(r.held_back(*due)),
        _ => a,
    }))
}

/// The same group on several shards, as one: its members and due summed,
/// its split limit summed back, held until its last shard's hold ends.
fn union(lists: &[&Vec<Group>]) -> Vec<Group> {
    let mut out: Vec<Group> = Vec::new();
    for g in lists.iter().copied().flatten() {
        let Some(o) = out.iter_mut().find(|o| o.name == g.name) else {
            out.push(g.clone());
            continue;
        };
        let add = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.saturating_add(b)),
            (a, b) => a.or(b),
        };
        o.members = o.members.saturating_add(g.members);
        o.due = o.due.saturating_add(g.due);
        o.limit_rate_per_second = match (o.limit_rate_per_second, g.limit_rate_per_second) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        o.limit_burst = add(o.limit_burst, g.limit_burst);
        o.available = add(o.available, g.available);
        o.waiting_until_ms = o.waiting_until_ms.max(g.waiting_until_ms);
        o.held_until_ms = o.held_until_ms.max(g.held_until_ms);
    }
    out
}

/// The shards' groups as one. A group's jobs spread over the shards, so
/// most groups are on every shard: `count` and `limited_count` are the
/// largest of any shard (at least that many distinct groups; a sum would
/// count each group once per shard). The two lists are those of each shard's
/// ten, merged by name (a group's figures summed over the shards that list
/// it), sorted and cut to ten again.
fn merge_groups(parts: &[&Groups]) -> Groups {
    let by = |key: fn(&Group) -> i64| {
        move |a: &Group, b: &Group| key(b).cmp(&key(a)).then_with(|| a.name.cmp(&b.name))
    };
    let mut largest = union(&parts.iter().map(|g| &g.largest).collect::<Vec<_>>());
    largest.sort_by(by(|g| g.members));
    largest.truncate(GROUPS_LISTED);
    let mut limited = union(&parts.iter().map(|g| &g.limited).collect::<Vec<_>>());
    limited.sort_by(by(|g| g.due));
    limited.truncate(GROUPS_LISTED);
    Groups {
        count: parts.iter().map(|g| g.count).max().unwrap_or(0),
        limited_count: parts.iter().map(|g| g.limited_count).max().unwrap_or(0),
        largest,
        limited,
        pages: parts.iter().map(|g| g.pages).sum(),
        // Truncated when any shard's groups were.
        cursor: parts
            .iter()
            .find(|g| g.truncated())
            .map_or_else(|| "0".to_string(), |g| g.cursor.clone()),
    }
}

/// The shards' recurring definitions as one: a definition lives on its
/// id's shard alone, so the counts add up, and the first ten to fire of the
/// queue are among the shards' first tens.
fn merge_repeats(parts: &[&Repeats]) -> Repeats {
    let mut next: Vec<Repeat> = parts.iter().flat_map(|r| r.next.iter().cloned()).collect();
    next.sort_by(|a, b| {
        let key = |r: &Repeat| (r.fire_at_ms.is_some(), r.fire_at_ms.unwrap_or(r.next_ms));
        key(a).cmp(&key(b)).then_with(|| a.id.cmp(&b.id))
    });
    next.truncate(REPEATS_LISTED);
    Repeats {
        count: parts.iter().fold(0i64, |a, r| a.saturating_add(r.count)),
        unarmed: parts.iter().fold(0i64, |a, r| a.saturating_add(r.unarmed)),
        next,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(n: i64, spread: Vec<i64>) -> Counts {
        Counts {
            scheduled: n,
            due: n + 1,
            pending: n + 2,
            in_flight: n + 3,
            dead: n + 4,
            spread,
            release: None,
            groups: None,
            repeats: None,
        }
    }

    fn names(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    #[test]
    fn the_layout_shows_a_shard_found_on_the_server_within_its_queue() {
        let cli = vec!["a".to_string(), "mail#1".to_string()];
        let found: Vec<String> = ["mail", "mail#2", "b", "a", "mail#3"]
            .map(String::from)
            .to_vec();
        let shown = layout(&cli, &[("mail".into(), 3)], &found);
        let got: Vec<(&str, bool)> = shown
            .iter()
            .map(|s| (s.name.as_str(), s.tags.is_some()))
            .collect();
        // mail#3 is not a shard of a 3-shard layout: a queue of its own.
        assert_eq!(
            got,
            [
                ("a", false),
                ("mail#1", false),
                ("mail", true),
                ("b", false),
                ("mail#3", false)
            ]
        );
        assert_eq!(
            names(&tags(&shown)),
            ["a", "mail#1", "mail", "mail#1", "mail#2", "b", "mail#3"]
        );
    }

    #[test]
    fn shards_are_summed_and_an_unreadable_shard_is_named() {
        let shown = layout(&["x".to_string()], &[("q".into(), 3)], &[]);
        let read = |name: &str, c: Result<Counts, String>| QueueStats::single(name.into(), c);
        let reads = vec![
            read("x", Ok(counts(100, vec![]))),
            read("q", Ok(counts(1, vec![1, 0, 2]))),
            read("q#1", Ok(counts(10, vec![0, 5, 0]))),
            read("q#2", Ok(counts(20, vec![3, 0, 0]))),
        ];
        let nodes = vec![
            None,
            Some("n1".into()),
            Some("n2".into()),
            Some("n1".into()),
        ];
        let got = group(&shown, reads, nodes);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].counts, Ok(counts(100, vec![])));
        let q = &got[1];
        let c = q.counts.as_ref().expect("summed");
        assert_eq!(
            (
                c.scheduled,
                c.due,
                c.pending,
                c.in_flight,
                c.dead,
                &c.spread
            ),
            (31, 34, 37, 40, 43, &vec![4, 5, 2])
        );
        let tags: Vec<(&str, Option<&str>)> = q
            .shards
            .iter()
            .map(|s| (s.tag.as_str(), s.node.as_deref()))
            .collect();
        assert_eq!(
            tags,
            [("q", Some("n1")), ("q#1", Some("n2")), ("q#2", Some("n1"))]
        );
        let mut broken = q.shards.clone();
        broken[1].counts = Err("WRONGTYPE x".into());
        assert_eq!(merge(&broken), Err("shard q#1: WRONGTYPE x".into()));
    }

    #[test]
    fn limits_add_up_and_held_back_is_each_shards() {
        let limit = |rate: f64, available: i64| Limit {
            rate_per_second: rate,
            in_force_per_second: rate,
            burst: 2,
            adaptive: false,
            available,
            released: 5,
            failures: 1,
        };
        let shard = |tag: &str, due: i64, r: Release| Shard {
            tag: tag.into(),
            node: None,
            counts: Ok(Counts {
                release: Some(Ok(r)),
                ..counts(due - 1, vec![])
            }),
        };
        let shards = vec![
            // 10 due, 2 may leave: 8 held back.
            shard(
                "q",
                10,
                Release {
                    limit: Some(limit(1.5, 2)),
                    held_until_ms: 0,
                },
            ),
            // 1 due, 2 may leave: none held back (the summed view would hide 1).
            shard(
                "q#1",
                1,
                Release {
                    limit: Some(limit(1.5, 2)),
                    held_until_ms: 0,
                },
            ),
            // Held: its 3 due held back.
            shard(
                "q#2",
                3,
                Release {
                    limit: None,
                    held_until_ms: 900,
                },
            ),
        ];
        let c = merge(&shards).expect("merged");
        let r = match c.release {
            Some(Ok(r)) => r,
            other => panic!("{other:?}"),
        };
        assert_eq!(r.held_until_ms, 900);
        assert_eq!(
            r.limit,
            Some(Limit {
                rate_per_second: 3.0,
                in_force_per_second: 3.0,
                burst: 4,
                adaptive: false,
                available: 4,
                released: 10,
                failures: 2
            })
        );
        let q = QueueStats {
            name: "q".into(),
            counts: merge(&shards),
            shards,
        };
        assert_eq!(held_back(&q), Some(11));
        assert_eq!(
            held_back(&QueueStats::single("s".into(), Err("x".into()))),
            None
        );
    }

    #[test]
    fn groups_merge_by_name_and_repeats_add_up() {
        let g = |name: &str, members: i64| Group {
            name: name.into(),
            members,
            due: members,
            limit_rate_per_second: Some(1.0),
            limit_burst: Some(1),
            available: Some(0),
            waiting_until_ms: 0,
            held_until_ms: 0,
        };
        let a = Groups {
            count: 3,
            limited_count: 1,
            largest: vec![g("t1", 5), g("t2", 4)],
            limited: vec![g("t1", 5)],
            pages: 1,
            cursor: "0".into(),
        };
        let b = Groups {
            count: 2,
            limited_count: 2,
            largest: vec![g("t2", 7), g("t3", 1)],
            limited: vec![g("t2", 7), g("t3", 1)],
            pages: 1,
            cursor: "0".into(),
        };
        let m = merge_groups(&[&a, &b]);
        assert_eq!((m.count, m.limited_count, m.pages), (3, 2, 2));
        assert!(!m.truncated());
        let listed: Vec<(&str, i64)> = m
            .largest
            .iter()
            .map(|g| (g.name.as_str(), g.members))
            .collect();
        assert_eq!(listed, [("t2", 11), ("t1", 5), ("t3", 1)]);
        assert_eq!(m.limited[0].limit_rate_per_second, Some(1.0));
        let r = |id: &str, at: Option<i64>| Repeat {
            id: id.into(),
            spec: "every:60000".into(),
            jitter_ms: 0,
            tz: "UTC".into(),
            from_ms: None,
            until_ms: None,
            next_ms: 0,
            fire_at_ms: at,
            payload_key: None,
        };
        let one = Repeats {
            count: 2,
            unarmed: 0,
            next: vec![r("b", Some(5)), r("d", Some(9))],
        };
        let two = Repeats {
            count: 12,
            unarmed: 1,
            next: vec![r("z", None), r("a", Some(7))],
        };
        let m = merge_repeats(&[&one, &two]);
        assert_eq!((m.count, m.unarmed), (14, 1));
        let ids: Vec<&str> = m.next.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["z", "b", "a", "d"]);
    }
}
