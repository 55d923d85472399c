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

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use redis_module::{Context, RedisError, RedisValue};

use crate::rules::configs;
use crate::rules::errors::{ArgError, ReplyError};
use crate::rules::fairness::{self, Group, GroupLimit, GroupStore, Pop, Release, Tat};
use crate::rules::limiter::{self, Gcra};
use crate::rules::slots;
use crate::server::config::{self, ApplyConfigs, StringConfig};
use crate::server::keys::{Arg, Key, Kind, OwnedName, ZaddIf};
use crate::server::{clock, context};

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
    // `as` saturates; a sorted set never holds NaN.
    score.floor() as i64
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

/// What a grouped release did, for the mover.
pub struct Outcome {
    pub release: Release,
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
    Ok(Outcome { release })
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

/// The names of a grouped schedule's shared keys.
struct StoreNames {
    index: OwnedName,
    ring: OwnedName,
    cursor: OwnedName,
    names: OwnedName,
    ungrouped: OwnedName,
    marker: OwnedName,
}

impl StoreNames {
    fn new(ctx: &Context, schedule: &[u8]) -> StoreNames {
        StoreNames {
            index: OwnedName::new(ctx, &derived(schedule, INDEX_SUFFIX, b"")),
            ring: OwnedName::new(ctx, &derived(schedule, RING_SUFFIX, b"")),
            cursor: OwnedName::new(ctx, &derived(schedule, CURSOR_SUFFIX, b"")),
            names: OwnedName::new(ctx, &derived(schedule, NAMES_SUFFIX, b"")),
            ungrouped: OwnedName::new(ctx, b""),
            marker: OwnedName::new(ctx, MARKER),
        }
    }
}

/// The fair release's store over the keys of one grouped schedule.
struct KeyStore<'a> {
    ctx: &'a Context,
    schedule: &'a [u8],
    ungrouped: &'a Key<'a>,
    ungrouped_name: &'a Arg,
    index: Key<'a>,
    ring: Key<'a>,
    names: Key<'a>,
    limit: Option<GroupLimit>,
    /// The named groups found not held in this release (a hold cannot
    /// start within one): their hold key is read once.
    not_held: BTreeSet<Group>,
    /// The ungrouped members are in no index: their group may be admitted
    /// once `S`'s earliest member is due and not before this (its limit's
    /// room, or a wait set in this release).
    ungrouped_not_before_ms: i64,
}

impl<'a> KeyStore<'a> {
    fn open(
        ctx: &'a Context,
        schedule: &'a [u8],
        names: &'a StoreNames,
        ungrouped: &'a Key<'a>,
    ) -> Result<KeyStore<'a>, RedisError> {
        let index = Key::open_write(ctx, names.index.arg());
        let ring = Key::open_write(ctx, names.ring.arg());
        let directory = Key::open_write(ctx, names.names.arg());
        for key in [&index, &ring, &directory] {
            key.require(Kind::SortedSet)?;
        }
        let mut store = KeyStore {
            ctx,
            schedule,
            ungrouped,
            ungrouped_name: names.ungrouped.arg(),
            index,
            ring,
            names: directory,
            limit: default_limit(schedule),
            not_held: BTreeSet::new(),
            ungrouped_not_before_ms: i64::MIN,
        };
        if let Some(limit) = store.limit {
            let gcra = Gcra::fixed(limit.rate, limit.burst);
            let room_at_ms = store
                .tat(&Group::ungrouped())
                .filter(|tat| tat.under == limit)
                .map_or(i64::MIN, |tat| gcra.room_at_ms(tat.ticks));
            store.ungrouped_not_before_ms = room_at_ms;
        }
        Ok(store)
    }

    /// When the ungrouped group may enter the ring, if it is not there.
    fn ungrouped_ready_ms(&self) -> Option<i64> {
        if self.ring.zscore(self.ungrouped_name).is_some() {
            return None;
        }
        let (_, first) = self.ungrouped.zset_first(f64::INFINITY)?;
        Some(score_ms(first).max(self.ungrouped_not_before_ms))
    }
}

impl GroupStore for KeyStore<'_> {
    fn admit_due(&mut self, now_ms: i64) -> Option<Group> {
        let indexed = self
            .index
            .zset_first(now_ms as f64)
            .map(|(name, score)| (score_ms(score), name));
        let ungrouped = self.ungrouped_ready_ms().filter(|&at| at <= now_ms);
        // The earlier first; the ungrouped group, sorting first, on a tie.
        let take_ungrouped = match (&indexed, ungrouped) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some((at, _)), Some(ready)) => ready <= *at,
        };
        if take_ungrouped {
            self.ring
                .zadd(RING_SCORE, self.ungrouped_name, ZaddIf::Always)
                .ok()?;
            return Some(Group::ungrouped());
        }
        let (_, name) = indexed?;
        let group = Group::from_stored(name)?;
        let member = OwnedName::new(self.ctx, group.as_bytes());
        self.index.zrem(member.arg());
        self.ring
            .zadd(RING_SCORE, member.arg(), ZaddIf::Always)
            .ok()?;
        Some(group)
    }

    fn index_earliest_ms(&mut self) -> Option<i64> {
        let indexed = self
            .index
            .zset_first(f64::INFINITY)
            .map(|(_, score)| score_ms(score));
        match (indexed, self.ungrouped_ready_ms()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn ring_after(&mut self, after: Option<&Group>) -> Option<Group> {
        let name = self.ring.zset_lex_after(after.map(Group::as_bytes))?;
        Group::from_stored(name)
    }

    fn pop_due(&mut self, group: &Group, now_ms: i64) -> Pop {
        // A held group has nothing due until its hold ends: the release then
        // puts it in the time index at that ms, out of the rotation.
        if !group.is_ungrouped() && !self.not_held.contains(group) {
            if let Some(until_ms) = held_until(self.ctx, self.schedule, group.as_bytes(), now_ms) {
                return Pop::NotDue {
                    fire_at_ms: until_ms,
                };
            }
            self.not_held.insert(group.clone());
        }
        let name = OwnedName::new(
            self.ctx,
            &derived(self.schedule, MEMBERS_INFIX, group.as_bytes()),
        );
        let named;
        let members: &Key = if group.is_ungrouped() {
            self.ungrouped
        } else {
            named = Key::open_write(self.ctx, name.arg());
            if named.kind() != Kind::SortedSet {
                return Pop::Empty;
            }
            &named
        };
        let Some((member, score)) = members.zset_first(f64::INFINITY) else {
            return Pop::Empty;
        };
        let fire_at_ms = score_ms(score);
        if fire_at_ms > now_ms {
            return Pop::NotDue { fire_at_ms };
        }
        let member_name = OwnedName::new(self.ctx, &member);
        members.zrem(member_name.arg());
        let next_fire_at_ms = members
            .zset_first(f64::INFINITY)
            .map(|(_, score)| score_ms(score));
        Pop::Due {
            member,
            fire_at_ms,
            next_fire_at_ms,
        }
    }

    fn leave_ring(&mut self, group: &Group, at_ms: Option<i64>) {
        if group.is_ungrouped() {
            self.ring.zrem(self.ungrouped_name);
            if let Some(at_ms) = at_ms {
                self.ungrouped_not_before_ms = self.ungrouped_not_before_ms.max(at_ms);
            }
            return;
        }
        let member = OwnedName::new(self.ctx, group.as_bytes());
        self.ring.zrem(member.arg());
        match at_ms {
            Some(at_ms) => {
                // The index is a sorted set (checked at open): ZADD cannot
                // fail on it.
                let _ = self.index.zadd(at_ms, member.arg(), ZaddIf::Always);
            }
            None => {
                // Empty: it leaves the directory too.
                self.index.zrem(member.arg());
                self.names.zrem(member.arg());
            }
        }
    }

    fn limit(&mut self, group: &Group) -> Option<GroupLimit> {
        limit_of(self.ctx, self.schedule, group, self.limit)
    }

    fn tat(&mut self, group: &Group) -> Option<Tat> {
        stored_tat(self.ctx, self.schedule, group)
    }
}

/// A group's stored TAT, if any.
fn stored_tat(ctx: &Context, schedule: &[u8], group: &Group) -> Option<Tat> {
    read_string(ctx, schedule, TAT_INFIX, group.as_bytes()).and_then(|b| Tat::decode(&b))
}

/// What the string key of `group` with `infix` holds (`None`: missing or
/// of another type).
fn read_string(ctx: &Context, schedule: &[u8], infix: &[u8], group: &[u8]) -> Option<Vec<u8>> {
    let name = OwnedName::new(ctx, &derived(schedule, infix, group));
    let key = Key::open_read(ctx, name.arg());
    key.string_bytes()
}

/// The limit in force for `group`: its override, else `default` (the
/// config's). The ungrouped members have no override (no name can name
/// them); an override key holding anything `GroupLimit::encode` did not
/// write is no override.
fn limit_of(
    ctx: &Context,
    schedule: &[u8],
    group: &Group,
    default: Option<GroupLimit>,
) -> Option<GroupLimit> {
    if group.is_ungrouped() {
        return default;
    }
    read_string(ctx, schedule, LIMIT_INFIX, group.as_bytes())
        .and_then(|bytes| GroupLimit::decode(&bytes))
        .or(default)
}

/// Until when (server ms) `group` is held, if it is at `now_ms`. A hold key
/// of another type, or holding no integer, holds nothing.
fn held_until(ctx: &Context, schedule: &[u8], group: &[u8], now_ms: i64) -> Option<i64> {
    let name = OwnedName::new(ctx, &derived(schedule, HOLD_INFIX, group));
    let key = Key::open_read(ctx, name.arg());
    key.string_i64().filter(|&until| until > now_ms)
}

/// A string key of one group (its override or its hold), opened for
/// writing with the group's own keys, every type checked before the first
/// write; `ERR a grouped schedule needs a {hash tag}` for a schedule without
/// one.
struct GroupSetting<'a> {
    keys: GroupKeys<'a>,
    key: Key<'a>,
}

impl<'a> GroupSetting<'a> {
    fn open(
        ctx: &'a Context,
        names: &'a GroupNames,
        name: &'a OwnedName,
    ) -> Result<GroupSetting<'a>, RedisError> {
        let keys = names.open(ctx)?;
        let key = Key::open_write(ctx, name.arg());
        key.require(Kind::String)?;
        Ok(GroupSetting { keys, key })
    }
}

/// `ECHO.GROUPLIMIT`: sets (`Some`) or removes (`None`, `DEFAULT`) the
/// override of `group`'s limit: `SET S:echomq-glim:<g> <GroupLimit::encode>`
/// (nothing when it already holds that) or `DEL`. A group waiting in the
/// time index is pulled back to its earliest fire time, so the limit in
/// force from now is the one its next visit reads. A new override while
/// used memory is over maxmemory is refused as a hold is (changing and
/// removing one always work).
pub fn set_limit(
    ctx: &Context,
    schedule: &[u8],
    group: &[u8],
    limit: Option<GroupLimit>,
) -> Result<(), RedisError> {
    let names = GroupNames::new(ctx, schedule, group)?;
    let name = OwnedName::new(ctx, &derived(schedule, LIMIT_INFIX, group));
    let setting = GroupSetting::open(ctx, &names, &name)?;
    match limit {
        None => {
            if !setting.key.delete() {
                return Ok(());
            }
        }
        Some(limit) => {
            let text = limit.encode();
            if setting.key.string_bytes().as_deref() == Some(text.as_bytes()) {
                return Ok(());
            }
            if setting.key.kind() == Kind::Missing && context::out_of_memory(ctx) {
                return Err(ReplyError::NewKeyOutOfMemory.into());
            }
            setting.key.set_text(text.as_bytes());
        }
    }
    setting.keys.reindex()
}

/// `ECHO.HOLD schedule ms GROUP group`: the group's hold in force after it
/// (0 for none), by `ECHO.HOLD`'s rule (`limiter::hold_until`): `SET
/// S:echomq-ghold:<g> <until> PXAT <until>` when the hold grows, `DEL` for
/// `ms = 0`, which also pulls the group back from the hold's end in the time
/// index to its earliest fire time. A new hold of a group with no members
/// while used memory is over maxmemory is refused, as `ECHO.HOLD` refuses
/// one of a schedule that does not exist.
pub fn hold(ctx: &Context, schedule: &[u8], group: &[u8], ms: u64) -> Result<i64, RedisError> {
    let names = GroupNames::new(ctx, schedule, group)?;
    let name = OwnedName::new(ctx, &derived(schedule, HOLD_INFIX, group));
    let setting = GroupSetting::open(ctx, &names, &name)?;
    if ms == 0 {
        if setting.key.delete() {
            setting.keys.reindex()?;
        }
        return Ok(0);
    }
    let now_ms = clock::wall_ms();
    let in_force = setting.key.string_i64().filter(|&until| until > now_ms);
    let Some(until) = limiter::hold_until(in_force, ms, now_ms) else {
        return Ok(in_force.unwrap_or(0));
    };
    if in_force.is_none()
        && context::out_of_memory(ctx)
        && setting.keys.members.kind() == Kind::Missing
    {
        return Err(ReplyError::NewKeyOutOfMemory.into());
    }
    setting.key.set_i64_expiring(until, until);
    Ok(until)
}

/// One group as `ECHO.GROUPS` shows it.
pub struct GroupView {
    /// Empty for the ungrouped members.
    pub name: Vec<u8>,
    pub members: u64,
    pub due: u64,
    pub limit: Option<GroupLimit>,
    /// What its limit lets leave now (`None`: not limited).
    pub available: Option<u64>,
    /// The first ms it may release while it waits in the time index; 0 in
    /// the ring.
    pub waiting_until_ms: i64,
    /// The end of its own hold, 0 when not held.
    pub held_until_ms: i64,
}

/// One page of `ECHO.GROUPS`.
pub struct Page {
    pub groups: Vec<GroupView>,
    /// The last group the page passed (empty: the ungrouped, or none), when
    /// more follow; `None` at the end.
    pub next_after: Option<Vec<u8>>,
}

/// `ECHO.GROUPS`: from the start (`after` `None`: the ungrouped members
/// first, when `schedule` has any), or after the named group `after` (empty:
/// after the ungrouped), at most `count` groups in name order, read from
/// the directory with one range walk: O(log G + count). A directory entry
/// whose set is empty (emptied by hand) is passed over, so a page may hold
/// fewer. `WRONGTYPE` when `schedule` or a shared key is of another type.
pub fn page(
    ctx: &Context,
    schedule: &Arg,
    after: Option<&[u8]>,
    count: u64,
    now_ms: i64,
) -> Result<Page, RedisError> {
    let bytes = schedule.as_slice();
    if !slots::has_tag(bytes) {
        return Err(ArgError::GroupNeedsTag.into());
    }
    let ungrouped = Key::open_read(ctx, schedule);
    ungrouped.require(Kind::SortedSet)?;
    let names = StoreNames::new(ctx, bytes);
    let index = Key::open_read(ctx, names.index.arg());
    let ring = Key::open_read(ctx, names.ring.arg());
    let directory = Key::open_read(ctx, names.names.arg());
    for key in [&index, &ring, &directory] {
        key.require(Kind::SortedSet)?;
    }
    let viewer = Viewer {
        ctx,
        schedule: bytes,
        index: &index,
        ring: &ring,
        default: default_limit(bytes),
        now_ms,
    };
    let mut budget = usize::try_from(count).unwrap_or(usize::MAX);
    let mut groups = Vec::new();
    if after.is_none() && ungrouped.kind() == Kind::SortedSet {
        groups.push(viewer.view(&Group::ungrouped(), &ungrouped)?);
        budget = budget.saturating_sub(1);
    }
    let found = directory.zset_lex_range(after, budget.saturating_add(1));
    let mut last = after.unwrap_or_default().to_vec();
    for name in found.iter().take(budget) {
        last.clone_from(name);
        let Some(group) = Group::named(name) else {
            continue;
        };
        let members_name = OwnedName::new(ctx, &derived(bytes, MEMBERS_INFIX, name));
        let members = Key::open_read(ctx, members_name.arg());
        if members.kind() != Kind::SortedSet {
            continue;
        }
        groups.push(viewer.view(&group, &members)?);
    }
    Ok(Page {
        groups,
        next_after: (found.len() > budget).then_some(last),
    })
}

/// What `page` reads every group's state with.
struct Viewer<'a> {
    ctx: &'a Context,
    schedule: &'a [u8],
    index: &'a Key<'a>,
    ring: &'a Key<'a>,
    default: Option<GroupLimit>,
    now_ms: i64,
}

impl Viewer<'_> {
    fn view(&self, group: &Group, members: &Key) -> Result<GroupView, RedisError> {
        let ctx = self.ctx;
        let now_ms = self.now_ms;
        let limit = limit_of(ctx, self.schedule, group, self.default);
        // The TAT as the next visit reads it: converted to the limit in force.
        let ticks = limit.map(|limit| match stored_tat(ctx, self.schedule, group) {
            Some(tat) if tat.under == limit => tat.ticks,
            Some(tat) => tat.under.gcra().rescale(tat.ticks, limit.gcra(), now_ms),
            None => 0,
        });
        let bucket = limit.zip(ticks);
        let name = OwnedName::new(ctx, group.as_bytes());
        let waiting_until_ms = if self.ring.zscore(name.arg()).is_some() {
            0
        } else if group.is_ungrouped() {
            // In no index: it may enter the ring at its earliest fire time,
            // or when its limit has room, whichever is later.
            let first = members
                .zset_first(f64::INFINITY)
                .map_or(0, |(_, s)| score_ms(s));
            let room = bucket.map_or(i64::MIN, |(l, t)| l.gcra().room_at_ms(t));
            first.max(room)
        } else {
            self.index.zscore(name.arg()).map_or(0, score_ms)
        };
        Ok(GroupView {
            name: group.as_bytes().to_vec(),
            members: members.zcard(),
            due: due_count(ctx, members.name(), now_ms)?,
            limit,
            available: bucket.map(|(l, t)| l.gcra().available(t, now_ms)),
            waiting_until_ms,
            held_until_ms: match group.is_ungrouped() {
                true => 0,
                false => held_until(ctx, self.schedule, group.as_bytes(), now_ms).unwrap_or(0),
            },
        })
    }
}

/// `ZCOUNT key -inf now_ms`: O(log N) through the set's rank index.
fn due_count(ctx: &Context, key: &Arg, now_ms: i64) -> Result<u64, RedisError> {
    let now = now_ms.to_string();
    match ctx.call("ZCOUNT", &[key.as_slice(), b"-inf", now.as_bytes()])? {
        RedisValue::Integer(n) => Ok(n.unsigned_abs()),
        _ => Err(ReplyError::ZcountReply.into()),
    }
}
