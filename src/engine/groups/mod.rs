//! Grouped schedules in the keyspace: the `echomq.group-limits` config, the
//! writes of `GROUP group` (ECHO.ADD, ECHO.SCHEDULE, ECHO.RETRY), and the
//! store over keys on which the fair release (`rules::fairness`) runs inside
//! the one move of due jobs (`mover::move_due`).
//!
//! The keys of a grouped schedule `S` (which must carry a hash tag, so that
//! every one shares its slot), `<g>` a group's name:
//!
//! - `S:echomq-g:<g>`: the group's members, a sorted set scored by fire time
//!   (the ungrouped members stay in `S` itself: the group with no name);
//! - `S:echomq-gidx`: the time index, a sorted set of the groups that have
//!   members and wait, scored by the first ms they may release, and a
//!   marker (`MARKER`) that keeps it while any group has members;
//! - `S:echomq-gring`: the ring, a sorted set of the groups with a due
//!   member, all scored 0, walked in name order;
//! - `S:echomq-gcur`: the rotation's cursor, the last group a release
//!   visited (a string);
//! - `S:echomq-gtat:<g>`: a limited group's theoretical arrival time, a
//!   string expiring when it no longer matters;
//! - `S:echomq-gnames`: the directory, a sorted set of every named group
//!   with members, all scored 0, so `ECHO.GROUPS` walks the groups in name
//!   order from a cursor (the time index is ordered by time, which a group
//!   changes as it releases, so no cursor over it is stable);
//! - `S:echomq-glim:<g>`: a group's limit override (`ECHO.GROUPLIMIT`), a
//!   string (`GroupLimit::encode`) with no expiry: configuration, kept while
//!   the group has no members too;
//! - `S:echomq-ghold:<g>`: a group's hold (`ECHO.HOLD ... GROUP g`), a
//!   string holding its end in server ms and expiring then, as the queue's
//!   hold key.
//!
//! Every one is an ordinary key written with the release it belongs to and
//! replicated as the concrete `ZADD`, `ZREM`, `SET` and `DEL`, so a replica,
//! the AOF, a failover and a slot migration keep the rotation and the
//! limits; an emptied group leaves no key (its TAT expires by itself).
//!
//! The ungrouped members are never in the index: the store reads `S`'s
//! earliest member instead, so a write without `GROUP` costs what it did.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::{Context, RedisError, RedisValue};

use crate::rules::configs;
use crate::rules::errors::{ArgError, ReplyError};
use crate::rules::fairness::{self, Group, GroupLimit, GroupStore, Pop, Release, Tat};
use crate::rules::limiter::{self, Gcra};
use crate::rules::slots;
use crate::server::config::{self, ApplyConfigs, StringConfig};
use crate::server::keys::{Arg, Key, Kind, Members, OwnedName, ZaddIf};
use crate::server::{clock, context};

mod listing;
mod settings;
mod store;

pub use listing::page;
pub use settings::{hold, set_limit};
pub use store::Taken;
use store::{held_until, limit_of, stored_tat, KeyStore, StoreNames};

const MEMBERS_INFIX: &[u8] = b":echomq-g:";
const INDEX_SUFFIX: &[u8] = b":echomq-gidx";
const RING_SUFFIX: &[u8] = b":echomq-gring";
const CURSOR_SUFFIX: &[u8] = b":echomq-gcur";
const TAT_INFIX: &[u8] = b":echomq-gtat:";
const NAMES_SUFFIX: &[u8] = b":echomq-gnames";
const LIMIT_INFIX: &[u8] = b":echomq-glim:";
const HOLD_INFIX: &[u8] = b":echomq-ghold:";

/// The one score of the ring and of the directory: both are walked in name
/// order.
const RING_SCORE: i64 = 0;
/// The index's marker: a member no group can be (the ungrouped members are
/// never indexed) at a score never due. It keeps the index key in being
/// while any group has members, in the index or in the ring, so that one
/// key lookup tells a grouped schedule from any other (`grouped`): a
/// release of an ungrouped schedule then costs one lookup more, not two.
const MARKER: &[u8] = b"";
const MARKER_SCORE: i64 = i64::MAX;

struct State {
    /// `echomq.group-limits` exactly as set.
    text: Vec<u8>,
    limits: BTreeMap<Vec<u8>, GroupLimit>,
}

static STATE: Mutex<State> = Mutex::new(State {
    text: Vec::new(),
    limits: BTreeMap::new(),
});

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Drops the config's table (at load and unload, as `release::reset`).
pub fn reset() {
    let mut state = state();
    state.text = Vec::new();
    state.limits = BTreeMap::new();
}

/// Registers `echomq.group-limits` (loaded with the others at load).
pub fn register(ctx: &Context) -> Result<(), String> {
    reset();
    config::register_string::<GroupLimits, Nothing>(ctx, c"group-limits", c"")
}

/// `echomq.group-limits`: `schedule rate burst` triples, the grammar of
/// `echomq.release-limits` with fixed rates only.
struct GroupLimits;

impl StringConfig for GroupLimits {
    fn get() -> Vec<u8> {
        state().text.clone()
    }

    fn set(value: &[u8]) -> Result<(), String> {
        let specs = configs::parse_group_limits(value).map_err(|why| why.to_string())?;
        let mut limits = BTreeMap::new();
        for spec in specs {
            let limit = GroupLimit {
                rate: spec.rate,
                burst: spec.burst,
            };
            limits.insert(spec.schedule, limit);
        }
        let mut state = state();
        state.text = value.to_vec();
        state.limits = limits;
        Ok(())
    }
}

struct Nothing;

impl ApplyConfigs for Nothing {
    fn apply(_ctx: &Context) {}
}

/// Whether `schedule` is listed in `echomq.group-limits`: then even a run
/// due now passes its release (ECHO.ADD's fast path is closed).
pub fn limited(schedule: &[u8]) -> bool {
    default_limit(schedule).is_some()
}

/// The limit every group of `schedule` gets (`None`: not listed).
fn default_limit(schedule: &[u8]) -> Option<GroupLimit> {
    state().limits.get(schedule).copied()
}

fn derived(schedule: &[u8], suffix: &[u8], group: &[u8]) -> Vec<u8> {
    slots::derived_key(schedule, &[suffix, group].concat())
}

/// The names of one group's keys, made before the keys are opened (a key
/// borrows its name).
pub struct GroupNames {
    group: OwnedName,
    members: OwnedName,
    index: OwnedName,
    ring: OwnedName,
    names: OwnedName,
}

impl GroupNames {
    /// `GROUP group` of `schedule`: refused when the schedule has no hash tag.
    pub fn new(ctx: &Context, schedule: &[u8], group: &[u8]) -> Result<GroupNames, ArgError> {
        if !slots::has_tag(schedule) {
            return Err(ArgError::GroupNeedsTag);
        }
        Ok(GroupNames {
            group: OwnedName::new(ctx, group),
            members: OwnedName::new(ctx, &derived(schedule, MEMBERS_INFIX, group)),
            index: OwnedName::new(ctx, &derived(schedule, INDEX_SUFFIX, b"")),
            ring: OwnedName::new(ctx, &derived(schedule, RING_SUFFIX, b"")),
            names: OwnedName::new(ctx, &derived(schedule, NAMES_SUFFIX, b"")),
        })
    }

    /// Opens the group's keys for writing; `WRONGTYPE` (before anything is
    /// written) when one is not a sorted set.
    pub fn open<'a>(&'a self, ctx: &'a Context) -> Result<GroupKeys<'a>, RedisError> {
        let keys = GroupKeys {
            group: self.group.arg(),
            marker: OwnedName::new(ctx, MARKER),
            members: Key::open_write(ctx, self.members.arg()),
            index: Key::open_write(ctx, self.index.arg()),
            ring: Key::open_write(ctx, self.ring.arg()),
            names: Key::open_write(ctx, self.names.arg()),
        };
        for key in [&keys.members, &keys.index, &keys.ring, &keys.names] {
            key.require(Kind::SortedSet)?;
        }
        Ok(keys)
    }
}

/// The names of the group a write's `GROUP group` names (`at`: the group's
/// position among the command's `options`), if it names one.
pub fn names_for(
    ctx: &Context,
    schedule: &Arg,
    options: &[Arg],
    at: Option<usize>,
) -> Result<Option<GroupNames>, RedisError> {
    let Some(at) = at else {
        return Ok(None);
    };
    let group = options.get(at).ok_or(ArgError::Syntax)?;
    Ok(Some(GroupNames::new(
        ctx,
        schedule.as_slice(),
        group.as_slice(),
    )?))
}

/// One group's open keys: its members (written as the schedule is written
/// without `GROUP`), and the index and ring it must be found in.
pub struct GroupKeys<'a> {
    group: &'a Arg,
    marker: OwnedName,
    pub members: Key<'a>,
    index: Key<'a>,
    ring: Key<'a>,
    names: Key<'a>,
}

/// Deletes the index once it holds only its marker and the ring is gone:
/// the schedule has no group left.
fn forget_if_empty(index: &Key, ring: &Key, marker: &Arg) {
    if ring.kind() == Kind::Missing && index.zcard() == 1 && index.zscore(marker).is_some() {
        index.delete();
    }
}

impl GroupKeys<'_> {
    /// After a write to the group's members: an emptied group leaves the
    /// index, the ring and the directory; any other is in the directory and
    /// in the index at its earliest fire time (`ZADD ... LT`, so a limited
    /// or held group's later score is pulled only earlier, which costs one
    /// visit that puts it back), unless the ring already has it.
    pub fn reindex(&self) -> Result<(), RedisError> {
        match self.members.zset_first(f64::INFINITY) {
            None => {
                self.index.zrem(self.group);
                self.ring.zrem(self.group);
                self.names.zrem(self.group);
                forget_if_empty(&self.index, &self.ring, self.marker.arg());
            }
            Some((_, fire_at_ms)) => {
                self.names.zadd(RING_SCORE, self.group, ZaddIf::New)?;
                self.index
                    .zadd(MARKER_SCORE, self.marker.arg(), ZaddIf::New)?;
                if self.ring.zscore(self.group).is_none() {
                    self.index
                        .zadd(score_ms(fire_at_ms), self.group, ZaddIf::Less)?;
                }
            }
        }
        Ok(())
    }
}

/// A sorted-set score as whole ms (rounded down, clamped): scores written by
/// echomq are integers; one written by hand may not be.
fn score_ms(score: f64) -> i64 {
    // `as` truncates toward zero and saturates (a sorted set never holds
    // NaN); one less when that dropped a fraction below zero: the floor,
    // without the libm call `floor` is on this target, once per member.
    let truncated = score as i64;
    if (truncated as f64) > score {
        truncated.saturating_sub(1)
    } else {
        truncated
    }
}

/// Whether `schedule`'s releases are grouped: it has a hash tag and groups
/// with members (its index exists: see `MARKER`), or its groups are
/// limited. `WRONGTYPE` when the index is not a sorted set.
pub fn grouped(ctx: &Context, schedule: &[u8]) -> Result<bool, RedisError> {
    if !slots::has_tag(schedule) {
        return Ok(false);
    }
    let name = OwnedName::new(ctx, &derived(schedule, INDEX_SUFFIX, b""));
    let kind = Key::open_read(ctx, name.arg()).kind();
    match kind {
        Kind::SortedSet => Ok(true),
        Kind::Missing => Ok(default_limit(schedule).is_some()),
        _ => Err(RedisError::WrongType),
    }
}

/// What a grouped release did, for the mover: the members already out of
/// their groups, with their names as the server's strings, in release
/// order (`names` at `n` is `release.released`'s `n`th member's).
pub struct Outcome {
    pub release: Release<Taken>,
    pub names: Members,
    /// The earliest fire time among the members released.
    pub earliest_ms: Option<i64>,
}

/// One fair release of at most `want` members of the grouped `schedule`
/// (whose key `ungrouped` is open), in at most `max_steps` admissions and
/// visits: the members are out of their groups when this returns, in the
/// order to push them; the cursor and the TATs are written. `WRONGTYPE`
/// before anything is written when the cursor is not a string.
pub fn release(
    ctx: &Context,
    schedule: &[u8],
    ungrouped: &Key,
    now_ms: i64,
    want: u64,
    max_steps: usize,
) -> Result<Outcome, RedisError> {
    let names = StoreNames::new(ctx, schedule);
    let cursor_key = Key::open_write(ctx, names.cursor.arg());
    cursor_key.require(Kind::String)?;
    let mut store = KeyStore::open(ctx, schedule, &names, ungrouped)?;
    let cursor = cursor_key.string_bytes().and_then(Group::from_stored);
    let release = fairness::release(&mut store, now_ms, want, cursor.as_ref(), max_steps);
    store.publish(&release.released);
    forget_if_empty(&store.index, &store.ring, names.marker.arg());
    if release.visits > 0 {
        match &release.cursor {
            Some(group) => cursor_key.set_text(group.as_bytes()),
            None => {
                cursor_key.delete();
            }
        }
    }
    for update in &release.tats {
        let name = OwnedName::new(ctx, &derived(schedule, TAT_INFIX, update.group.as_bytes()));
        let key = Key::open_write(ctx, name.arg());
        // A TAT key of another type is left alone: the group then goes
        // unlimited for as long, which only its owner could have caused.
        if matches!(key.kind(), Kind::Missing | Kind::String) && update.until_ms > now_ms {
            key.set_expiring(update.tat.encode().as_bytes(), update.until_ms);
        }
    }
    let names = std::mem::replace(&mut store.taken, Members::empty(ctx));
    Ok(Outcome {
        release,
        names,
        earliest_ms: store.earliest_ms,
    })
}

/// Puts members a stream refused back in their groups (its IDs ran out):
/// what moved stays moved, the rest stays scheduled.
pub fn put_back(
    ctx: &Context,
    schedule: &[u8],
    ungrouped: &Key,
    refused: &[fairness::Released],
) -> Result<(), RedisError> {
    for member in refused {
        let name = OwnedName::new(ctx, &member.member);
        if member.group.is_ungrouped() {
            ungrouped.zadd(member.fire_at_ms, name.arg(), ZaddIf::Always)?;
            continue;
        }
        let names = GroupNames::new(ctx, schedule, member.group.as_bytes())?;
        let keys = names.open(ctx)?;
        keys.members
            .zadd(member.fire_at_ms, name.arg(), ZaddIf::Always)?;
        keys.reindex()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::score_ms;

    #[test]
    fn a_score_in_ms_is_its_floor() {
        for score in [
            0.0,
            -0.0,
            5.0,
            5.7,
            -5.7,
            -5.0,
            -0.5,
            1_800_000_000_000.25,
            -1_800_000_000_000.25,
            9.2e18,
            9_223_372_036_854_775_807.0,
            1e19,
            -1e19,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ] {
            assert_eq!(score_ms(score), score.floor() as i64, "{score}");
        }
    }
}
