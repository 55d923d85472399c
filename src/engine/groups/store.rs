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

/// How many members the first read of a group's head takes (the one to pop
/// and the next, whose fire time tells whether the group stays due), and the
/// most any later read takes: each read takes twice the last, so a group
/// giving k members in a release costs O(log k) searches, not k, and at
/// most about k members are read and not taken.
const FIRST_READ: usize = 2;
const MAX_READ: usize = 1024;
/// The most members a long run makes room for before it reads them.
const MAX_RESERVE: usize = 1024;

/// A group's members as one release pops them: removed from the set one by
/// one as they are popped (so every read of the set sees the pops), their
/// effects sent once for the group when the release ends
/// (`KeyStore::publish`).
pub(super) struct Head<'a> {
    /// The group's members key (`None`: the ungrouped members, in `S`).
    key: Option<Key<'a>>,
    ahead: Ahead,
}

/// A group's first members, read and not yet popped, in the set's order.
struct Ahead {
    members: VecDeque<(OwnedName, f64)>,
    /// The set may hold members after `members`.
    more: bool,
    next_read: usize,
}

impl Ahead {
    /// The set's first member not yet popped, reading ahead when needed.
    fn front(&mut self, members: &Key) -> Option<f64> {
        if self.members.is_empty() && self.more {
            self.more = members.zset_head(self.next_read, &mut self.members);
            self.next_read = self.next_read.saturating_mul(2).min(MAX_READ);
        }
        self.members.front().map(|(_, score)| *score)
    }
}

/// A member a release took out of its group: the head it came from (whose
/// key sends its removal). Its name is in the store's `taken`, at the
/// member's own position in the release: one array of the server's strings
/// that the removals, the push and its replication all read as it is, so a
/// released member costs a small record and one pointer, not a copy a step.
pub struct Taken {
    head: usize,
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
    /// The groups popped from in this release, each found not held (a hold
    /// cannot start within one, so its key is read once): their members
    /// key opened once, and members read ahead of the pops.
    heads: Vec<Head<'a>>,
    head_of: HashMap<Group, usize>,
    /// The names of the members taken, in release order (the `n`th
    /// member's at `n`), owned until pushed.
    pub(super) taken: Members,
    /// The earliest fire time among the members taken.
    pub(super) earliest_ms: Option<i64>,
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
            heads: Vec::new(),
            head_of: HashMap::new(),
            taken: Members::empty(ctx),
            earliest_ms: None,
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

    /// Sends the effects of the members a release took out of their groups:
    /// one `ZREM` a group, as `ZREM key m1..mk`.
    pub(super) fn publish<'s>(&'s self, released: &[fairness::Released<Taken>]) {
        let key_of =
            |head: &'s Head<'a>| -> &'s Key<'a> { head.key.as_ref().unwrap_or(self.ungrouped) };
        let names = self.taken.args();
        if let [head] = self.heads.as_slice() {
            // One group popped from (often the only one due): its members
            // are the names as they stand.
            key_of(head).removed_all(names);
            return;
        }
        let mut by_head: Vec<Vec<&Arg>> = Vec::new();
        by_head.resize_with(self.heads.len(), Vec::new);
        for (r, name) in released.iter().zip(names) {
            if let Some(members) = by_head.get_mut(r.member.head) {
                members.push(name);
            }
        }
        for (head, members) in self.heads.iter().zip(by_head) {
            key_of(head).removed_each(members.into_iter());
        }
    }

    /// The head of `group` in this release, opened at its first pop: what
    /// that pop tells instead when the group is held, or its key is not a
    /// sorted set.
    fn head_at(&mut self, group: &Group, now_ms: i64) -> Result<usize, Pop<()>> {
        if let Some(&at) = self.head_of.get(group) {
            return Ok(at);
        }
        let key = match group.is_ungrouped() {
            true => None,
            false => {
                // A held group has nothing due until its hold ends: the
                // release then puts it in the time index at that ms, out of
                // the rotation.
                if let Some(until_ms) =
                    held_until(self.ctx, self.schedule, group.as_bytes(), now_ms)
                {
                    return Err(Pop::NotDue {
                        fire_at_ms: until_ms,
                    });
                }
                let name = OwnedName::new(
                    self.ctx,
                    &derived(self.schedule, MEMBERS_INFIX, group.as_bytes()),
                );
                let key = Key::open_write_owned(self.ctx, name);
                if key.kind() != Kind::SortedSet {
                    return Err(Pop::Empty);
                }
                Some(key)
            }
        };
        self.heads.push(Head {
            key,
            ahead: Ahead {
                members: VecDeque::new(),
                more: true,
                next_read: FIRST_READ,
            },
        });
        let at = self.heads.len() - 1;
        self.head_of.insert(group.clone(), at);
        Ok(at)
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
    type Member = Taken;

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

    /// The member's name goes to `taken` as with a run: the caller puts the
    /// member in the release next, at the same position.
    fn pop_due(&mut self, group: &Group, now_ms: i64) -> Pop<Taken> {
        let mut out = Vec::with_capacity(1);
        match self.pop_due_run(group, now_ms, 1, &mut out) {
            Pop::Due {
                fire_at_ms,
                next_fire_at_ms,
                ..
            } => match out.pop() {
                Some(released) => Pop::Due {
                    member: released.member,
                    fire_at_ms,
                    next_fire_at_ms,
                },
                None => Pop::Empty,
            },
            Pop::NotDue { fire_at_ms } => Pop::NotDue { fire_at_ms },
            Pop::Empty => Pop::Empty,
        }
    }

    /// The run in one go: the group's key found once, each member removed
    /// as it is taken, the reads ahead sized to the run.
    fn pop_due_run(
        &mut self,
        group: &Group,
        now_ms: i64,
        max: u64,
        out: &mut Vec<fairness::Released<Taken>>,
    ) -> Pop<()> {
        let at = match self.head_at(group, now_ms) {
            Ok(at) => at,
            Err(pop) => return pop,
        };
        let Some(head) = self.heads.get_mut(at) else {
            return Pop::Empty;
        };
        let members = head.key.as_ref().map_or(self.ungrouped, |key| key);
        let ahead = &mut head.ahead;
        let names = &mut self.taken;
        let earliest = &mut self.earliest_ms;
        let max = usize::try_from(max.max(1)).unwrap_or(usize::MAX);
        let start = out.len();
        let mut stopped_at: Option<i64> = None;
        loop {
            let left = max - (out.len() - start);
            if left == 0 {
                break;
            }
            if ahead.members.is_empty() && ahead.more && left > FIRST_READ {
                // A long run: the rest read straight into `out`, as an
                // ungrouped release reads its due members (one search, one
                // step each), then removed; what follows is read afresh.
                let from = names.len();
                names.reserve(left.min(MAX_RESERVE));
                out.reserve(left.min(MAX_RESERVE));
                // now_ms is an integer far below 2^53: the bound is exact.
                members.zset_each(now_ms as f64, left, |name, score| {
                    take_into(out, names, earliest, group, at, name, score_ms(score));
                });
                let read = names.args().get(from..).unwrap_or_default();
                members.zrem_deferred_each(read.iter());
                ahead.next_read = FIRST_READ;
                break;
            }
            let Some(score) = ahead.front(members) else {
                break;
            };
            let fire_at_ms = score_ms(score);
            if fire_at_ms > now_ms {
                stopped_at = Some(fire_at_ms);
                break;
            }
            let Some((name, _)) = ahead.members.pop_front() else {
                break;
            };
            members.zrem_deferred_each(std::iter::once(name.arg()));
            take_into(out, names, earliest, group, at, name, fire_at_ms);
        }
        let next_fire_at_ms = stopped_at.or_else(|| ahead.front(members).map(score_ms));
        let Some(last) = out.get(start..).and_then(<[_]>::last) else {
            return match next_fire_at_ms {
                Some(fire_at_ms) => Pop::NotDue { fire_at_ms },
                None => Pop::Empty,
            };
        };
        let fire_at_ms = last.fire_at_ms;
        Pop::Due {
            member: (),
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

/// Records a member taken from head `at`: its record in `out`, its name at
/// the same position in `names` (which takes the string over), and the
/// earliest fire time.
#[inline]
fn take_into(
    out: &mut Vec<fairness::Released<Taken>>,
    names: &mut Members,
    earliest_ms: &mut Option<i64>,
    group: &Group,
    at: usize,
    name: OwnedName,
    fire_at_ms: i64,
) {
    names.push(name);
    if earliest_ms.is_none_or(|earliest| fire_at_ms < earliest) {
        *earliest_ms = Some(fire_at_ms);
    }
    out.push(fairness::Released {
        group: group.clone(),
        member: Taken { head: at },
        fire_at_ms,
    });
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
