//! The fair release's store over the keys of one grouped schedule: what
//! `rules::fairness` asks of its groups, answered with the sorted sets and
//! strings beside the schedule (see the parent module for the layout).

use super::*;

/// The names of a grouped schedule's shared keys.
pub(super) struct StoreNames {
    pub(super) index: OwnedName,
    pub(super) ring: OwnedName,
    pub(super) cursor: OwnedName,
    pub(super) names: OwnedName,
    pub(super) ungrouped: OwnedName,
    pub(super) marker: OwnedName,
}

impl StoreNames {
    pub(super) fn new(ctx: &Context, schedule: &[u8]) -> StoreNames {
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
pub(super) struct KeyStore<'a> {
    pub(super) ctx: &'a Context,
    pub(super) schedule: &'a [u8],
    pub(super) ungrouped: &'a Key<'a>,
    pub(super) ungrouped_name: &'a Arg,
    pub(super) index: Key<'a>,
    pub(super) ring: Key<'a>,
    pub(super) names: Key<'a>,
    pub(super) limit: Option<GroupLimit>,
    /// The named groups found not held in this release (a hold cannot
    /// start within one): their hold key is read once.
    pub(super) not_held: BTreeSet<Group>,
    /// The ungrouped members are in no index: their group may be admitted
    /// once `S`'s earliest member is due and not before this (its limit's
    /// room, or a wait set in this release).
    pub(super) ungrouped_not_before_ms: i64,
}

impl<'a> KeyStore<'a> {
    pub(super) fn open(
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
pub(super) fn stored_tat(ctx: &Context, schedule: &[u8], group: &Group) -> Option<Tat> {
    read_string(ctx, schedule, TAT_INFIX, group.as_bytes()).and_then(|b| Tat::decode(&b))
}

/// What the string key of `group` with `infix` holds (`None`: missing or
/// of another type).
pub(super) fn read_string(
    ctx: &Context,
    schedule: &[u8],
    infix: &[u8],
    group: &[u8],
) -> Option<Vec<u8>> {
    let name = OwnedName::new(ctx, &derived(schedule, infix, group));
    let key = Key::open_read(ctx, name.arg());
    key.string_bytes()
}

/// The limit in force for `group`: its override, else `default` (the
/// config's). The ungrouped members have no override (no name can name
/// them); an override key holding anything `GroupLimit::encode` did not
/// write is no override.
pub(super) fn limit_of(
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
pub(super) fn held_until(ctx: &Context, schedule: &[u8], group: &[u8], now_ms: i64) -> Option<i64> {
    let name = OwnedName::new(ctx, &derived(schedule, HOLD_INFIX, group));
    let key = Key::open_read(ctx, name.arg());
    key.string_i64().filter(|&until| until > now_ms)
}
