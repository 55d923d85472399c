//! Recurring definitions in the keyspace, and the arming of their next
//! occurrence inside the one move of due jobs (`mover::move_due`), so that
//! exactly one occurrence of a definition is scheduled at any time, whatever
//! the number of promoters, workers and servers.
//!
//! The definitions of a schedule `S` live in the hash `S:echomq-repeats`
//! (`{S}:echomq-repeats` for a name without a hash tag, in `S`'s slot),
//! field the id, value `Definition::encode`. An occurrence is the member
//! `<id>@<nominal_ms>` of `S`, scored by its jittered fire time; with
//! `PAYLOAD key value`, `HSET key <occurrence> value` is written when it is
//! armed, so a worker that reads a job's payload by its id finds it. Every
//! write is an ordinary key's, replicated as the concrete `ZADD`, `ZREM`,
//! `HSET` and `HDEL`: a replica, the AOF, a failover and a slot migration
//! keep the definitions and the armed occurrence.

use redis_module::{Context, RedisError};

use crate::rules::errors::{ArgError, ReplyError};
use crate::rules::policy::uniform_inclusive;
use crate::rules::recurrence::definition::{
    occurrence, parse_occurrence, parsed, Definition, RepeatRequest, Stored,
};
use crate::rules::slots;
use crate::server::keys::{Arg, Deferred, Key, Kind, OwnedName, ZaddIf};
use crate::server::{clock, context};

/// What a schedule's definitions hash is named after.
pub const DEFS_SUFFIX: &[u8] = b":echomq-repeats";

/// The name of `schedule`'s definitions hash, `None` in a cluster when it
/// could not share the schedule's slot (a `}` in a name without a tag).
fn defs_name(ctx: &Context, schedule: &[u8]) -> Option<Vec<u8>> {
    let name = slots::derived_key(schedule, DEFS_SUFFIX);
    if context::in_cluster(ctx) && slots::key_slot(&name) != slots::key_slot(schedule) {
        return None;
    }
    Some(name)
}

/// A definition read back for `ECHO.REPEATS`: its id, what it says, and the
/// fire time of its armed occurrence (`None` when that member is gone).
pub struct Listed {
    pub id: Vec<u8>,
    pub definition: Definition,
    pub fire_at_ms: Option<i64>,
}

/// `ECHO.REPEAT`: stores the definition `id` of `schedule` and arms its
/// first occurrence; the reply is that occurrence's fire time. The same
/// definition again (spec, jitter, zone, bounds and payload alike) changes
/// nothing while its occurrence is armed, and answers that fire time: every
/// instance of an application may declare its recurring jobs at start. A
/// different one replaces it: the old armed occurrence (and its payload)
/// is removed and the new one armed from now.
pub fn define(
    ctx: &Context,
    schedule: &Arg,
    id: &Arg,
    request: &RepeatRequest,
    payload: Option<(&Arg, &Arg)>,
) -> Result<i64, RedisError> {
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let defs_name = defs_name(ctx, schedule.as_slice()).ok_or(ReplyError::RepeatNeedsTag)?;
    let defs = Key::open_write_owned(ctx, OwnedName::new(ctx, &defs_name));
    defs.require(Kind::Hash)?;
    if let Some((key, _)) = payload {
        // Checked, then closed: `arm` opens it again to write.
        Key::open_read(ctx, key).require(Kind::Hash)?;
    }
    let now_ms = clock::now_ms();
    let stored = payload.map(|(key, value)| (key.as_slice().to_vec(), value.as_slice().to_vec()));
    let new = Definition::first(request, stored, now_ms).ok_or(ArgError::NoOccurrence)?;
    let id = id.as_slice();
    let old = defs.hget(id).and_then(|text| Definition::decode(&text));
    if let Some(old) = &old {
        let armed = OwnedName::new(ctx, &occurrence(id, old.next_ms));
        if let Some(score) = schedule_key.zscore(armed.arg()) {
            if old.same_as(&new) {
                // `as` saturates; a score the module wrote is an integer.
                return Ok(score.floor() as i64);
            }
            schedule_key.zrem(armed.arg());
            if let Some((key, _)) = &old.payload {
                let name = OwnedName::new(ctx, key);
                Key::open_write(ctx, name.arg()).hdel(armed.arg().as_slice());
            }
        }
    }
    arm(ctx, &schedule_key, &defs, id, new)
}

/// Arms `definition`'s occurrence at its `next_ms` with a fresh jitter
/// draw: `ZADD schedule`, the payload's `HSET`, and the definition stored
/// with it. The fire time.
fn arm(
    ctx: &Context,
    schedule_key: &Key,
    defs: &Key,
    id: &[u8],
    definition: Definition,
) -> Result<i64, RedisError> {
    let jitter_ms = uniform_inclusive(&mut rand::rng(), definition.jitter_ms);
    let fire_at_ms = definition
        .next_ms
        .saturating_add(i64::try_from(jitter_ms).unwrap_or(i64::MAX));
    let member = OwnedName::new(ctx, &occurrence(id, definition.next_ms));
    schedule_key.zadd(fire_at_ms, member.arg(), ZaddIf::Always)?;
    if let Some((key, value)) = &definition.payload {
        let name = OwnedName::new(ctx, key);
        let key = Key::open_write(ctx, name.arg());
        // A payload key someone made another type is left alone: the
        // occurrence still runs, as a job whose payload is missing.
        if matches!(key.kind(), Kind::Hash | Kind::Missing) {
            key.hset(member.arg().as_slice(), value);
        }
    }
    defs.hset(id, &definition.encode());
    Ok(fire_at_ms)
}

/// `ECHO.UNREPEAT`: removes the definition `id` and its armed occurrence
/// (with its payload); `false` when there was none.
pub fn remove(ctx: &Context, schedule: &Arg, id: &[u8]) -> Result<bool, RedisError> {
    let schedule_key = Key::open_write(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let Some(defs_name) = defs_name(ctx, schedule.as_slice()) else {
        return Ok(false);
    };
    let defs = Key::open_write_owned(ctx, OwnedName::new(ctx, &defs_name));
    defs.require(Kind::Hash)?;
    let Some(text) = defs.hget(id) else {
        return Ok(false);
    };
    if let Some(old) = Definition::decode(&text) {
        let armed = OwnedName::new(ctx, &occurrence(id, old.next_ms));
        if schedule_key.zrem(armed.arg()) {
            if let Some((key, _)) = &old.payload {
                let name = OwnedName::new(ctx, key);
                Key::open_write(ctx, name.arg()).hdel(armed.arg().as_slice());
            }
        }
    }
    defs.hdel(id);
    Ok(true)
}

/// `ECHO.REPEATS`: every definition of `schedule`, by id.
pub fn list(ctx: &Context, schedule: &Arg) -> Result<Vec<Listed>, RedisError> {
    let schedule_key = Key::open_read(ctx, schedule);
    schedule_key.require(Kind::SortedSet)?;
    let Some(defs_name) = defs_name(ctx, schedule.as_slice()) else {
        return Ok(Vec::new());
    };
    let name = OwnedName::new(ctx, &defs_name);
    let defs = Key::open_read(ctx, name.arg());
    defs.require(Kind::Hash)?;
    let mut listed: Vec<Listed> = defs
        .hash_entries()
        .into_iter()
        .filter_map(|(id, text)| {
            let definition = Definition::decode(&text)?;
            let armed = OwnedName::new(ctx, &occurrence(&id, definition.next_ms));
            let fire_at_ms = schedule_key.zscore(armed.arg()).map(|s| s.floor() as i64);
            Some(Listed {
                id,
                definition,
                fire_at_ms,
            })
        })
        .collect();
    listed.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(listed)
}

/// The arming of one release: the members it moved are noted only when the
/// schedule has recurring definitions, which is looked up once, at the
/// first member moved, so a schedule without them, and a release that moves
/// nothing, pay nothing per member and no lookup at all.
pub struct Arming<'a> {
    ctx: &'a Context,
    schedule: &'a [u8],
    /// `None` until looked up; then the definitions hash, if any.
    defs: Option<Option<Key<'a>>>,
    released: Vec<Vec<u8>>,
}

impl<'a> Arming<'a> {
    pub fn new(ctx: &'a Context, schedule: &'a [u8]) -> Arming<'a> {
        Arming {
            ctx,
            schedule,
            defs: None,
            released: Vec::new(),
        }
    }

    /// Whether the members a release moves must be noted: the schedule has
    /// definitions.
    pub fn wanted(&mut self) -> bool {
        let (ctx, schedule) = (self.ctx, self.schedule);
        self.defs
            .get_or_insert_with(|| {
                let name = defs_name(ctx, schedule)?;
                let defs = Key::open_write_owned(ctx, OwnedName::new(ctx, &name));
                (defs.kind() == Kind::Hash).then_some(defs)
            })
            .is_some()
    }

    /// Notes members moved to pending.
    pub fn note(&mut self, released: impl Iterator<Item = Vec<u8>>) {
        self.released.extend(released);
    }

    /// Arms what the noted members call for (`arm_after_release`), after
    /// the release's own effects.
    pub fn arm(self, schedule_key: &Key, now_ms: i64) {
        if let Some(Some(defs)) = &self.defs {
            arm_after_release(self.ctx, schedule_key, defs, &self.released, now_ms);
        }
    }
}

/// After a release moved `released` out of the schedule at `now_ms`: for
/// each that is the armed occurrence of a definition in `defs`, arms the
/// next one (or, past `UNTIL`, removes the definition), in the same atomic
/// step. A member that only looks like an occurrence (a retry of an older
/// one, a name with an `@`) arms nothing.
///
/// The writes are those of `arm` for each, made in the same order, but
/// their effects go out per key as one command each (`Deferred`): one
/// `ZADD schedule s1 o1 ..`, one `HSET key o1 v1 ..` per payload key and
/// one `HSET <definitions> id1 d1 ..`, in the order of the writes. A
/// payload written into the definitions hash itself joins that hash's
/// command, and a definition's removal sends what is held first, so each
/// key's commands replay its writes in order. The stored text is read in
/// place and written back with only its next occurrence changed; specs and
/// zones are parsed once and remembered (`definition::parsed`).
fn arm_after_release(
    ctx: &Context,
    schedule_key: &Key,
    defs: &Key,
    released: &[Vec<u8>],
    now_ms: i64,
) {
    let mut writes = Writes::new(ctx, schedule_key, defs);
    for member in released {
        let Some((id, nominal_ms)) = parse_occurrence(member) else {
            continue;
        };
        // One string of the id for the read and the definition's write.
        let id_name = OwnedName::new(ctx, id);
        let done = defs.hget_with(id_name.arg(), |text| {
            let stored = Stored::read(text).filter(|s| s.next_ms == nominal_ms)?;
            let (spec, zone) = parsed(stored.spec, stored.zone)?;
            match stored.after_release(&spec, &zone, nominal_ms, now_ms) {
                Some(next_ms) => {
                    writes.arm(id, &id_name, &stored, next_ms);
                    Some(false)
                }
                None => Some(true),
            }
        });
        if done == Some(Some(true)) {
            writes.flush();
            defs.hdel(id);
        }
    }
    writes.flush();
}

/// The occurrences one release arms, their effects held per key.
struct Writes<'k, 'a> {
    ctx: &'a Context,
    schedule: &'k Key<'a>,
    defs: &'k Key<'a>,
    zadds: Deferred,
    def_sets: Deferred,
    /// Each payload key written, open, with its held effects.
    payloads: Vec<(Vec<u8>, Key<'a>, Deferred)>,
}

impl<'k, 'a> Writes<'k, 'a> {
    fn new(ctx: &'a Context, schedule: &'k Key<'a>, defs: &'k Key<'a>) -> Self {
        Writes {
            ctx,
            schedule,
            defs,
            zadds: Deferred::zadd(ctx),
            def_sets: Deferred::hset(ctx),
            payloads: Vec::new(),
        }
    }

    /// `arm`'s writes for the definition `stored` of `id` armed at
    /// `next_ms`: the occurrence with a fresh jitter draw, its payload, the
    /// definition.
    fn arm(&mut self, id: &[u8], id_name: &OwnedName, stored: &Stored, next_ms: i64) {
        let jitter_ms = uniform_inclusive(&mut rand::rng(), stored.jitter_ms);
        let fire_at_ms = next_ms.saturating_add(i64::try_from(jitter_ms).unwrap_or(i64::MAX));
        // One string of the occurrence for the schedule and the payload.
        let member = OwnedName::new(self.ctx, &occurrence(id, next_ms));
        let field = stored.payload.map(|_| member.retained());
        // The schedule is a sorted set or, emptied by the release, missing:
        // the add cannot be refused.
        let _ = self
            .schedule
            .zadd_deferred(fire_at_ms, member, &mut self.zadds);
        if let (Some((key, value)), Some(field)) = (stored.payload, field) {
            if key == self.defs.name().as_slice() {
                if matches!(self.defs.kind(), Kind::Hash | Kind::Missing) {
                    self.defs.hset_deferred(field, value, &mut self.def_sets);
                }
            } else {
                let at = match self.payloads.iter().position(|(k, _, _)| k == key) {
                    Some(at) => at,
                    None => {
                        let open = Key::open_write_owned(self.ctx, OwnedName::new(self.ctx, key));
                        self.payloads
                            .push((key.to_vec(), open, Deferred::hset(self.ctx)));
                        self.payloads.len() - 1
                    }
                };
                let (_, key, effects) = &mut self.payloads[at];
                // A payload key someone made another type is left alone: the
                // occurrence still runs, as a job whose payload is missing.
                if matches!(key.kind(), Kind::Hash | Kind::Missing) {
                    key.hset_deferred(field, value, effects);
                }
            }
        }
        self.defs.hset_deferred(
            id_name.retained(),
            &stored.with_next(next_ms),
            &mut self.def_sets,
        );
    }

    /// Sends the held effects: the schedule's, each payload key's, the
    /// definitions'.
    fn flush(&mut self) {
        self.schedule.flush(&mut self.zadds);
        for (_, key, effects) in &mut self.payloads {
            key.flush(effects);
        }
        self.defs.flush(&mut self.def_sets);
    }
}
