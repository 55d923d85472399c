//! Keys and their effects, over the server's low-level key API.
//!
//! The low-level API is used instead of calling ZADD/ZREM/LPUSH through
//! `RedisModule_Call`, which would build an argument vector and a reply per
//! call. It sends no keyspace notifications and, with the module option
//! `NO_IMPLICIT_SIGNAL_MODIFIED`, no modified-key signals. So each write here
//! is one method that does all four legs of a native command's effect: the
//! write, the modified-key signal (WATCH, client-side caching), the keyspace
//! event, and the replication of the concrete command (never the module's
//! own, whose clock and random draw differ on a replica and an AOF reload).
//! A handler cannot forget a leg, and none is sent when nothing changed.

use std::collections::VecDeque;
use std::ffi::CStr;
use std::marker::PhantomData;
use std::os::raw::{c_int, c_longlong};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering::Relaxed};
use std::sync::{Mutex, PoisonError, TryLockError};

use redis_module::raw::{self, RedisModuleCtx, RedisModuleKey, RedisModuleString};
use redis_module::{Context, RedisError};

use crate::rules::errors::ReplyError;
use crate::rules::grammar::i64_text;

/// The key types the commands distinguish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Missing,
    String,
    SortedSet,
    List,
    Stream,
    Hash,
    Other,
}

/// ZADD's conditions, as the server's low-level ZsetAdd takes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZaddIf {
    Always,
    /// `NX`
    New,
    /// `XX`
    Existing,
    /// `GT`: a new member, or a greater score.
    Greater,
    /// `LT`: a new member, or a lower score.
    Less,
    /// `XX GT`
    ExistingGreater,
    /// `XX LT`
    ExistingLess,
}

/// What a conditional add did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Zadd {
    Added,
    Updated,
    /// Nothing written: the member kept its score (or, under `XX`, stayed
    /// out), or it was re-added at the score it had.
    Unchanged,
}

/// One argument of the running command, borrowed from the server's argv:
/// valid for the call, never retained or freed by the module. (The SDK's
/// `Vec<RedisString>` would allocate and retain every argument per call.)
#[repr(transparent)]
pub struct Arg(*mut RedisModuleString);

impl Arg {
    /// Views the server's `argv` of `argc` arguments.
    ///
    /// # Safety
    /// `argv` must point to `argc` live strings that outlive the returned
    /// slice: the server's arguments of the command now running.
    pub unsafe fn from_argv<'a>(argv: *mut *mut RedisModuleString, argc: c_int) -> &'a [Arg] {
        match usize::try_from(argc) {
            // Arg is a transparent wrapper of the pointer, so the layouts agree.
            Ok(len) if !argv.is_null() => unsafe {
                std::slice::from_raw_parts(argv.cast::<Arg>(), len)
            },
            _ => &[],
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        let mut len = 0usize;
        // SAFETY: a live argument string; the bytes stay valid while it does.
        unsafe {
            let bytes = api!(RedisModule_StringPtrLen)(self.0, &mut len);
            if bytes.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(bytes.cast::<u8>(), len)
        }
    }
}

/// A key name the module made (the auto-promote timer has no command
/// arguments), freed when dropped; `arg()` lends it as an argument.
pub struct OwnedName {
    ctx: *mut RedisModuleCtx,
    ptr: *mut RedisModuleString,
}

impl OwnedName {
    pub fn new(ctx: &Context, bytes: &[u8]) -> OwnedName {
        // SAFETY: CreateString copies the bytes; the string is freed in Drop
        // with the same context.
        let ptr =
            unsafe { api!(RedisModule_CreateString)(ctx.ctx, bytes.as_ptr().cast(), bytes.len()) };
        OwnedName { ctx: ctx.ctx, ptr }
    }

    pub fn arg(&self) -> &Arg {
        // SAFETY: Arg is a transparent wrapper of the same pointer type, and
        // the string lives as long as self.
        unsafe { &*ptr::from_ref(&self.ptr).cast::<Arg>() }
    }

    /// Another owner of the same string (the server counts its references):
    /// each is freed on its own, so one string can be an argument of two
    /// held commands.
    pub fn retained(&self) -> OwnedName {
        // SAFETY: a live string made with this context; RetainString adds a
        // reference that the new owner's Drop gives back.
        unsafe { api!(RedisModule_RetainString)(self.ctx, self.ptr) };
        OwnedName {
            ctx: self.ctx,
            ptr: self.ptr,
        }
    }

    /// The string, which the caller now frees (with this context).
    fn into_raw(self) -> *mut RedisModuleString {
        let this = std::mem::ManuallyDrop::new(self);
        this.ptr
    }
}

/// The effects of several writes to one key, made at once by
/// `Key::zadd_deferred` or `Key::hset_deferred` (so reads after them see
/// them), held back to go out together as the one native command that makes
/// them all, by `Key::flush`: one signal, one keyspace event, and one
/// replicated `ZADD key s1 m1 .. sk mk` or `HSET key f1 v1 .. fk vk`, the
/// arguments in the order of the writes. A release arming many occurrences
/// sends three commands instead of three per occurrence. Dropped unflushed,
/// its strings are freed and no effect is sent: always flush.
pub struct Deferred {
    ctx: *mut RedisModuleCtx,
    command: &'static CStr,
    class: c_int,
    event: &'static CStr,
    /// Owned strings: the command's arguments after the key.
    strings: Vec<*mut RedisModuleString>,
}

impl Deferred {
    /// For `ZADD key score member ...`.
    pub fn zadd(ctx: &Context) -> Deferred {
        Deferred::new(ctx, c"ZADD", raw::REDISMODULE_NOTIFY_ZSET as c_int, c"zadd")
    }

    /// For `HSET key field value ...`.
    pub fn hset(ctx: &Context) -> Deferred {
        Deferred::new(ctx, c"HSET", raw::REDISMODULE_NOTIFY_HASH as c_int, c"hset")
    }

    fn new(ctx: &Context, command: &'static CStr, class: c_int, event: &'static CStr) -> Deferred {
        Deferred {
            ctx: ctx.ctx,
            command,
            class,
            event,
            strings: Vec::new(),
        }
    }

    fn free(&mut self) {
        for s in self.strings.drain(..) {
            // SAFETY: each string is owned here, made with this context, and
            // freed once (drained).
            unsafe { api!(RedisModule_FreeString)(self.ctx, s) };
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        self.free();
    }
}

impl Drop for OwnedName {
    fn drop(&mut self) {
        // SAFETY: made by CreateString with this context, freed exactly once.
        unsafe { api!(RedisModule_FreeString)(self.ctx, self.ptr) };
    }
}

/// A key name kept from one call to the next, made anew only when the bytes
/// it is made from change: the hold key of the last schedule ECHO.ADD named
/// (a queue's producers name the same one again and again). Only the name
/// is kept; what the key holds is read at every use.
pub struct KeptName {
    kept: Mutex<Option<Kept>>,
}

struct Kept {
    from: Vec<u8>,
    /// Null: `from` has no such key (e.g. it cannot share its slot).
    name: *mut RedisModuleString,
}

// SAFETY: the string is a plain server string with no context, made, read
// and freed only under the mutex, by the server's main thread (the only one
// that runs commands).
unsafe impl Send for Kept {}

impl Drop for Kept {
    fn drop(&mut self) {
        if !self.name.is_null() {
            // SAFETY: made by `KeptName::with` with no context, freed once.
            unsafe { api!(RedisModule_FreeString)(ptr::null_mut(), self.name) };
        }
    }
}

impl KeptName {
    pub const fn new() -> KeptName {
        KeptName {
            kept: Mutex::new(None),
        }
    }

    /// Calls `use_name` with the name `make` makes from `from` (`None`: no
    /// such key), kept from the last call when that was made from the same
    /// bytes. A call made while another holds the name (a re-entered
    /// command) makes its own.
    pub fn with<R>(
        &self,
        ctx: &Context,
        from: &[u8],
        make: impl FnOnce() -> Option<Vec<u8>>,
        use_name: impl FnOnce(Option<&Arg>) -> R,
    ) -> R {
        let mut kept = match self.kept.try_lock() {
            Ok(kept) => kept,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let name = make().map(|name| OwnedName::new(ctx, &name));
                return use_name(name.as_ref().map(OwnedName::arg));
            }
        };
        let kept = match kept.take() {
            Some(same) if same.from == from => kept.insert(same),
            _ => {
                let name = make().map_or(ptr::null_mut(), |name| {
                    // SAFETY: CreateString copies the bytes; no context: the
                    // string outlives the call, freed when replaced (Drop).
                    unsafe {
                        api!(RedisModule_CreateString)(
                            ptr::null_mut(),
                            name.as_ptr().cast(),
                            name.len(),
                        )
                    }
                });
                kept.insert(Kept {
                    from: from.to_vec(),
                    name,
                })
            }
        };
        // SAFETY: Arg is a transparent wrapper of the same pointer type, and
        // the string lives while the guard does, past this call.
        let name =
            (!kept.name.is_null()).then(|| unsafe { &*ptr::from_ref(&kept.name).cast::<Arg>() });
        use_name(name)
    }

    /// Frees the kept name (at load and unload).
    pub fn clear(&self) {
        let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
        *kept = None;
    }
}

/// The field of every stream entry a job makes, `job`: one string made at
/// load and kept to unload (`init`, `release`), not one a call. The server
/// copies it into each entry and takes a reference for each replicated
/// `XADD`, so sharing it is what the API expects of a retained string.
static JOB_FIELD: AtomicPtr<RedisModuleString> = AtomicPtr::new(ptr::null_mut());

/// Whether `OpenKey` takes `NOSTATS` and `NONOTIFY` (Valkey, Redis 7.2+),
/// read at load: then `open_probe` opens for reading, with no side effect.
static QUIET_PROBE: AtomicBool = AtomicBool::new(false);

/// At load: makes the `job` field and reads which open modes the server
/// takes.
pub fn init() {
    let modes = raw::REDISMODULE_OPEN_KEY_NOSTATS | raw::REDISMODULE_OPEN_KEY_NONOTIFY;
    // SAFETY: an optional API (Redis 7.2+, Valkey), called only when the
    // server has it; no arguments.
    let all = match unsafe { raw::RedisModule_GetOpenKeyModesAll } {
        Some(all) => (unsafe { all() }) as u32,
        None => 0,
    };
    QUIET_PROBE.store(all & modes == modes, Relaxed);
    // SAFETY: a static 3-byte string, copied; no context: a string kept
    // beyond any call, freed by `release`.
    let field = unsafe { api!(RedisModule_CreateString)(ptr::null_mut(), c"job".as_ptr(), 3) };
    free_job_field(JOB_FIELD.swap(field, Relaxed));
}

/// At unload: frees the `job` field.
pub fn release() {
    free_job_field(JOB_FIELD.swap(ptr::null_mut(), Relaxed));
}

fn free_job_field(field: *mut RedisModuleString) {
    if !field.is_null() {
        // SAFETY: made by `init` with no context, taken out of the static:
        // freed once.
        unsafe { api!(RedisModule_FreeString)(ptr::null_mut(), field) };
    }
}

/// The `job` field for one write: the kept one, or (before `init`, which
/// no command runs before) one made for the call and freed with it.
struct JobField<'a> {
    ctx: &'a Context,
    ptr: *mut RedisModuleString,
    made: bool,
}

impl<'a> JobField<'a> {
    fn get(ctx: &'a Context) -> JobField<'a> {
        let kept = JOB_FIELD.load(Relaxed);
        if !kept.is_null() {
            return JobField {
                ctx,
                ptr: kept,
                made: false,
            };
        }
        // SAFETY: a static 3-byte string; freed in Drop.
        let ptr = unsafe { api!(RedisModule_CreateString)(ctx.ctx, c"job".as_ptr(), 3) };
        JobField {
            ctx,
            ptr,
            made: true,
        }
    }
}

impl Drop for JobField<'_> {
    fn drop(&mut self) {
        if self.made {
            // SAFETY: made in `get` with this context; replicated commands
            // hold their own references.
            unsafe { api!(RedisModule_FreeString)(self.ctx.ctx, self.ptr) };
        }
    }
}

/// An open key and its name, closed when dropped.
pub struct Key<'a> {
    ctx: &'a Context,
    /// The name: borrowed for `'a`, or `owned`'s.
    name: *mut RedisModuleString,
    owned: Option<OwnedName>,
    borrowed: PhantomData<&'a Arg>,
    ptr: *mut RedisModuleKey,
}

impl<'a> Key<'a> {
    /// Opens `name` for reading and writing. Nothing is written, and no key is
    /// created, until a write is made.
    pub fn open_write(ctx: &'a Context, name: &'a Arg) -> Key<'a> {
        Key::open(ctx, name, raw::REDISMODULE_READ | raw::REDISMODULE_WRITE)
    }

    /// Opens `name` for reading. A missing key gives a null handle, which the
    /// methods below treat as empty.
    pub fn open_read(ctx: &'a Context, name: &'a Arg) -> Key<'a> {
        Key::open(ctx, name, raw::REDISMODULE_READ)
    }

    /// Opens `name` only to learn its type, with the side effects of a
    /// write open, that is none (no keyspace hit or miss, no `keymiss`
    /// event): for reading with `NOSTATS` and `NONOTIFY` where the server
    /// takes them, so a missing key costs its lookup and no handle; for
    /// writing elsewhere (Redis 7.0).
    pub fn open_probe(ctx: &'a Context, name: &'a Arg) -> Key<'a> {
        let mode = match QUIET_PROBE.load(Relaxed) {
            true => {
                raw::REDISMODULE_READ
                    | raw::REDISMODULE_OPEN_KEY_NOSTATS
                    | raw::REDISMODULE_OPEN_KEY_NONOTIFY
            }
            false => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        };
        Key::open(ctx, name, mode)
    }

    /// Opens the key a name the module made names, for reading and writing,
    /// keeping the name as long as the key: a key opened once and used for a
    /// whole release (a group's members) need not outlive a borrowed name.
    pub fn open_write_owned(ctx: &'a Context, name: OwnedName) -> Key<'a> {
        let mode = raw::REDISMODULE_READ | raw::REDISMODULE_WRITE;
        // SAFETY: ctx and name are live for this call; OpenKey copies what it keeps.
        let ptr = unsafe { api!(RedisModule_OpenKey)(ctx.ctx, name.ptr, mode as c_int) };
        Key {
            ctx,
            name: name.ptr,
            owned: Some(name),
            borrowed: PhantomData,
            ptr,
        }
    }

    fn open(ctx: &'a Context, name: &'a Arg, mode: u32) -> Key<'a> {
        // SAFETY: ctx and name are live for this call; OpenKey copies what it keeps.
        let ptr = unsafe { api!(RedisModule_OpenKey)(ctx.ctx, name.0, mode as c_int) };
        Key {
            ctx,
            name: name.0,
            owned: None,
            borrowed: PhantomData,
            ptr,
        }
    }

    pub fn kind(&self) -> Kind {
        if self.ptr.is_null() {
            return Kind::Missing;
        }
        // SAFETY: a live handle.
        let kind = unsafe { api!(RedisModule_KeyType)(self.ptr) } as isize;
        match kind {
            raw::REDISMODULE_KEYTYPE_EMPTY => Kind::Missing,
            raw::REDISMODULE_KEYTYPE_STRING => Kind::String,
            raw::REDISMODULE_KEYTYPE_ZSET => Kind::SortedSet,
            raw::REDISMODULE_KEYTYPE_LIST => Kind::List,
            raw::REDISMODULE_KEYTYPE_STREAM => Kind::Stream,
            raw::REDISMODULE_KEYTYPE_HASH => Kind::Hash,
            _ => Kind::Other,
        }
    }

    /// Fails with `WRONGTYPE` unless the key is missing or of kind `want`.
    pub fn require(&self, want: Kind) -> Result<(), RedisError> {
        match self.kind() {
            Kind::Missing => Ok(()),
            kind if kind == want => Ok(()),
            _ => Err(RedisError::WrongType),
        }
    }

    /// The score of `member`, or `None` when it is not in the set (or the
    /// key is missing).
    pub fn zscore(&self, member: &Arg) -> Option<f64> {
        if self.kind() != Kind::SortedSet {
            return None;
        }
        let mut score = 0.0;
        // SAFETY: a live handle of a sorted set; ZsetScore fails only for a
        // member that is not there.
        let status = unsafe { api!(RedisModule_ZsetScore)(self.ptr, member.0, &mut score) };
        (status == raw::REDISMODULE_OK as c_int).then_some(score)
    }

    /// Copies out the members with score `<= max_score`, lowest first (ties in
    /// the set's own order), at most `limit` of them, with the lowest score.
    pub fn zset_due(&self, max_score: f64, limit: u64) -> Members {
        let mut members = Members::new(self.ctx.ctx);
        if self.kind() != Kind::SortedSet {
            return members;
        }
        // Room for a typical batch; a larger one grows as it is found, so a
        // huge LIMIT on a huge set with little due allocates little.
        members
            .ptrs
            .reserve(usize::try_from(limit.min(self.zcard()).min(1024)).unwrap_or(0));
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        self.zset_range(max_score, limit, |member, score| {
            members.earliest_score.get_or_insert(score);
            members.ptrs.push(member);
        });
        members
    }

    /// Hands `each` the members with score `<= max_score`, lowest first
    /// (ties in the set's own order), at most `limit` of them, each a new
    /// string the caller then owns, with its score. The caller has checked
    /// that the key is a sorted set.
    fn zset_range(
        &self,
        max_score: f64,
        limit: usize,
        mut each: impl FnMut(*mut RedisModuleString, f64),
    ) {
        let mut taken = 0;
        // SAFETY: a live handle of a sorted set. The range iterator is stopped
        // before returning, and each member handed out is a new string, so the
        // set may be changed afterwards.
        unsafe {
            let first = api!(RedisModule_ZsetFirstInScoreRange)(
                self.ptr,
                f64::NEG_INFINITY,
                max_score,
                0,
                0,
            );
            if first != raw::REDISMODULE_OK as c_int {
                return;
            }
            while taken < limit && api!(RedisModule_ZsetRangeEndReached)(self.ptr) == 0 {
                let mut score = 0.0f64;
                let member = api!(RedisModule_ZsetRangeCurrentElement)(self.ptr, &mut score);
                if member.is_null() {
                    break;
                }
                each(member, score);
                taken += 1;
                if api!(RedisModule_ZsetRangeNext)(self.ptr) == 0 {
                    break;
                }
            }
            api!(RedisModule_ZsetRangeStop)(self.ptr);
        }
    }

    /// How many members a sorted set has (0 when the key is missing or of
    /// another type).
    pub fn zcard(&self) -> u64 {
        if self.kind() != Kind::SortedSet {
            return 0;
        }
        // SAFETY: a live handle of a sorted set.
        unsafe { api!(RedisModule_ValueLength)(self.ptr) as u64 }
    }

    /// The first member with a score `<= max_score` (lowest score first,
    /// ties in the set's own order) and its score, copied out.
    pub fn zset_first(&self, max_score: f64) -> Option<(Vec<u8>, f64)> {
        if self.kind() != Kind::SortedSet {
            return None;
        }
        // SAFETY: a live handle of a sorted set; the range is stopped before
        // returning and the element copied, then freed.
        unsafe {
            let status = api!(RedisModule_ZsetFirstInScoreRange)(
                self.ptr,
                f64::NEG_INFINITY,
                max_score,
                0,
                0,
            );
            if status != raw::REDISMODULE_OK as c_int {
                return None;
            }
            let mut score = 0.0f64;
            let member = api!(RedisModule_ZsetRangeCurrentElement)(self.ptr, &mut score);
            let first = take_string(self.ctx.ctx, member).map(|bytes| (bytes, score));
            api!(RedisModule_ZsetRangeStop)(self.ptr);
            first
        }
    }

    /// Appends to `out` the first `limit` members (any score, lowest first,
    /// ties in the set's own order) with their scores, as owned strings
    /// (not copied out): one search, then one step per member. Whether the
    /// set may hold more than it gave.
    pub fn zset_head(&self, limit: usize, out: &mut VecDeque<(OwnedName, f64)>) -> bool {
        if limit == 0 || self.kind() != Kind::SortedSet {
            return false;
        }
        out.reserve(limit.min(self.zcard_usize()));
        let mut taken = 0;
        self.zset_each(f64::INFINITY, limit, |name, score| {
            out.push_back((name, score));
            taken += 1;
        });
        taken == limit
    }

    fn zcard_usize(&self) -> usize {
        usize::try_from(self.zcard()).unwrap_or(usize::MAX)
    }

    /// Calls `each` with the members with score `<= max_score`, lowest
    /// first (ties in the set's own order), at most `limit` of them, each as
    /// an owned string (not copied out) with its score.
    pub fn zset_each(&self, max_score: f64, limit: usize, mut each: impl FnMut(OwnedName, f64)) {
        if limit == 0 || self.kind() != Kind::SortedSet {
            return;
        }
        let ctx = self.ctx.ctx;
        self.zset_range(max_score, limit, |ptr, score| {
            each(OwnedName { ctx, ptr }, score)
        });
    }

    /// Removes each member from the set now, leaving the signal, events and
    /// replication to one `removed` call for all the members taken so: how
    /// many were there.
    pub fn zrem_deferred_each<'m>(&self, members: impl Iterator<Item = &'m Arg>) -> usize {
        if self.kind() != Kind::SortedSet {
            return 0;
        }
        let mut removed = 0;
        for member in members {
            let mut deleted: c_int = 0;
            // SAFETY: a live write handle of a sorted set (removing its last
            // member deletes the key: ZsetRem then finds no set, and fails
            // with nothing done).
            unsafe { api!(RedisModule_ZsetRem)(self.ptr, member.0, &mut deleted) };
            removed += usize::from(deleted != 0);
        }
        removed
    }

    /// The effects of `ZREM key m1..mk` for members `zrem_deferred_each`
    /// took out: the signal, the events (`del` when the set emptied) and
    /// the replication, once.
    pub fn removed_all(&self, members: &[Arg]) {
        if members.is_empty() {
            return;
        }
        self.zrem_events();
        self.replicate_strings(c"ZREM", arg_ptrs(members));
    }

    /// `removed_all` of members found one by one.
    pub fn removed_each<'m>(&self, members: impl Iterator<Item = &'m Arg>) {
        let strings: Vec<*mut RedisModuleString> = members.map(|m| m.0).collect();
        if strings.is_empty() {
            return;
        }
        self.zrem_events();
        self.replicate_strings(c"ZREM", &strings);
    }

    /// The first member after `after` in lexicographic order (the first of
    /// all for `None`), as `ZRANGEBYLEX key (<after> + LIMIT 0 1` finds it
    /// in a set whose scores are all equal.
    pub fn zset_lex_after(&self, after: Option<&[u8]>) -> Option<Vec<u8>> {
        self.zset_lex_range(after, 1).pop()
    }

    /// The first `limit` members after `after` in lexicographic order, as
    /// `ZRANGEBYLEX key (<after> + LIMIT 0 <limit>` gives them in a set whose
    /// scores are all equal: one search, then one step per member.
    pub fn zset_lex_range(&self, after: Option<&[u8]>, limit: usize) -> Vec<Vec<u8>> {
        let mut found = Vec::new();
        if limit == 0 || self.kind() != Kind::SortedSet {
            return found;
        }
        let min = match after {
            Some(after) => [b"(".as_slice(), after].concat(),
            None => b"-".to_vec(),
        };
        let min = OwnedName::new(self.ctx, &min);
        let max = OwnedName::new(self.ctx, b"+");
        // SAFETY: a live handle of a sorted set and two live strings, which
        // the server parses into its own copies; the range is stopped before
        // returning and each element copied, then freed.
        unsafe {
            let status = api!(RedisModule_ZsetFirstInLexRange)(self.ptr, min.ptr, max.ptr);
            if status != raw::REDISMODULE_OK as c_int {
                return found;
            }
            while found.len() < limit && api!(RedisModule_ZsetRangeEndReached)(self.ptr) == 0 {
                let mut score = 0.0f64;
                let member = api!(RedisModule_ZsetRangeCurrentElement)(self.ptr, &mut score);
                let Some(bytes) = take_string(self.ctx.ctx, member) else {
                    break;
                };
                found.push(bytes);
                if api!(RedisModule_ZsetRangeNext)(self.ptr) == 0 {
                    break;
                }
            }
            api!(RedisModule_ZsetRangeStop)(self.ptr);
        }
        found
    }

    /// The key's name.
    pub fn name(&self) -> &Arg {
        match &self.owned {
            Some(owned) => owned.arg(),
            // SAFETY: Arg is a transparent wrapper of the same pointer type,
            // and the borrowed name lives for 'a, longer than self.
            None => unsafe { &*ptr::from_ref(&self.name).cast::<Arg>() },
        }
    }

    /// `ZADD key [cond] score_ms member`: adds `member`, or replaces its
    /// score, as ZADD with the condition does; when that changed the set,
    /// signals, sends `zadd` and replicates `ZADD key score_ms member`. The
    /// caller has checked the key's type.
    pub fn zadd(&self, score_ms: i64, member: &Arg, when: ZaddIf) -> Result<Zadd, RedisError> {
        let mut flags: c_int = match when {
            ZaddIf::Always => 0,
            ZaddIf::New => raw::REDISMODULE_ZADD_NX as c_int,
            ZaddIf::Existing => raw::REDISMODULE_ZADD_XX as c_int,
            ZaddIf::Greater => raw::REDISMODULE_ZADD_GT as c_int,
            ZaddIf::Less => raw::REDISMODULE_ZADD_LT as c_int,
            ZaddIf::ExistingGreater => {
                (raw::REDISMODULE_ZADD_XX | raw::REDISMODULE_ZADD_GT) as c_int
            }
            ZaddIf::ExistingLess => (raw::REDISMODULE_ZADD_XX | raw::REDISMODULE_ZADD_LT) as c_int,
        };
        // Scores are Unix-ms integers far below 2^53: the double is exact.
        let score = score_ms as f64;
        // SAFETY: a live write handle of a missing key or a sorted set (checked
        // by the caller); ZsetAdd refuses NaN and wrong types with an error.
        let status = unsafe { api!(RedisModule_ZsetAdd)(self.ptr, score, member.0, &mut flags) };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(ReplyError::ZsetAdd.into());
        }
        // ADDED or UPDATED only for a real change. A member re-added at its
        // own score sets neither (a native ZADD then writes nothing); NOP
        // means the condition kept the member as it was, or kept it out.
        let done = if flags & raw::REDISMODULE_ZADD_ADDED as c_int != 0 {
            Zadd::Added
        } else if flags & raw::REDISMODULE_ZADD_UPDATED as c_int != 0 {
            Zadd::Updated
        } else {
            Zadd::Unchanged
        };
        if done != Zadd::Unchanged {
            self.signal();
            self.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zadd");
            // SAFETY: "sls" names exactly the three arguments passed, with
            // their C types (string, long long, string).
            unsafe {
                api!(RedisModule_Replicate)(
                    self.ctx.ctx,
                    c"ZADD".as_ptr(),
                    c"sls".as_ptr(),
                    self.name,
                    score_ms as c_longlong,
                    member.0,
                )
            };
        }
        Ok(done)
    }

    /// `ZADD key score member` (no condition) applied now, its effects held
    /// in `effects` (a `Deferred::zadd`) for `flush`; only a member added
    /// or moved is replicated, as `zadd` does. Errors as `zadd`.
    pub fn zadd_deferred(
        &self,
        score_ms: i64,
        member: OwnedName,
        effects: &mut Deferred,
    ) -> Result<Zadd, RedisError> {
        let mut flags: c_int = 0;
        // SAFETY: a live write handle of a missing key or a sorted set
        // (checked by the caller); the member is a live string.
        let status =
            unsafe { api!(RedisModule_ZsetAdd)(self.ptr, score_ms as f64, member.ptr, &mut flags) };
        if status != raw::REDISMODULE_OK as c_int {
            return Err(ReplyError::ZsetAdd.into());
        }
        if flags & raw::REDISMODULE_ZADD_ADDED as c_int != 0 {
            effects.strings.push(self.i64_string(score_ms));
            effects.strings.push(member.into_raw());
            Ok(Zadd::Added)
        } else if flags & raw::REDISMODULE_ZADD_UPDATED as c_int != 0 {
            effects.strings.push(self.i64_string(score_ms));
            effects.strings.push(member.into_raw());
            Ok(Zadd::Updated)
        } else {
            Ok(Zadd::Unchanged)
        }
    }

    /// `HSET key field value` applied now, its effects held in `effects` (a
    /// `Deferred::hset`) for `flush`, which frees `field` (a string the
    /// caller may share with another held command, `OwnedName::retained`).
    /// The caller has checked the type.
    pub fn hset_deferred(&self, field: OwnedName, value: &[u8], effects: &mut Deferred) {
        let v = self.bytes_string(value);
        // SAFETY: a live write handle of a missing key or a hash; one
        // field/value pair of live strings (copied) then the ending NULL.
        unsafe {
            api!(RedisModule_HashSet)(
                self.ptr,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.ptr,
                v,
                ptr::null_mut::<RedisModuleString>(),
            );
        }
        effects.strings.push(field.into_raw());
        effects.strings.push(v);
    }

    /// Sends the effects `effects` holds for this key (made by this key's
    /// `*_deferred` writes): the signal, the event and one replicated
    /// command; then it is empty again.
    pub fn flush(&self, effects: &mut Deferred) {
        if effects.strings.is_empty() {
            return;
        }
        self.signal();
        self.notify(effects.class, effects.event);
        self.replicate_strings(effects.command, &effects.strings);
        effects.free();
    }

    fn i64_string(&self, value: i64) -> *mut RedisModuleString {
        let mut digits = [0u8; 20];
        self.bytes_string(i64_text(value, &mut digits))
    }

    /// `ZREM key member`: `true` when it was there, and then signalled, sent
    /// as `zrem` (and `del` when the set emptied and the server deleted it)
    /// and replicated.
    pub fn zrem(&self, member: &Arg) -> bool {
        if self.kind() != Kind::SortedSet {
            return false;
        }
        let mut deleted: c_int = 0;
        // SAFETY: a live write handle of a sorted set.
        unsafe { api!(RedisModule_ZsetRem)(self.ptr, member.0, &mut deleted) };
        if deleted == 0 {
            return false;
        }
        self.zrem_events();
        // SAFETY: "ss" names exactly the two string arguments passed.
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx.ctx,
                c"ZREM".as_ptr(),
                c"ss".as_ptr(),
                self.name,
                member.0,
            )
        };
        true
    }

    /// `ZREM key m1..mk` of members just read from this set, with its
    /// signal, events and replication.
    pub fn zrem_all(&self, members: &Members) {
        if members.is_empty() {
            return;
        }
        for &member in &members.ptrs {
            let mut deleted: c_int = 0;
            // SAFETY: a live write handle; member is an owned live string.
            // ZsetRem fails only for a key not open for writing or not a
            // sorted set, which the caller has ruled out.
            unsafe { api!(RedisModule_ZsetRem)(self.ptr, member, &mut deleted) };
        }
        self.zrem_events();
        self.replicate_strings(c"ZREM", &members.ptrs);
    }

    fn zrem_events(&self) {
        self.signal();
        self.notify(raw::REDISMODULE_NOTIFY_ZSET, c"zrem");
        if self.kind() == Kind::Missing {
            self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
        }
    }

    /// `LPUSH key m1..mk`: each pushed at the head, in order, with the signal,
    /// the `lpush` event and the replication. The caller has checked the type.
    pub fn lpush_all(&self, members: &Members) {
        self.lpush_strings(&members.ptrs);
    }

    /// `LPUSH key job`: a command's own argument pushed at the head, with the
    /// effects of `lpush_all`. The caller has checked the type.
    pub fn lpush(&self, job: &Arg) {
        self.lpush_strings(std::slice::from_ref(&job.0));
    }

    fn lpush_strings(&self, strings: &[*mut RedisModuleString]) {
        if strings.is_empty() {
            return;
        }
        for &member in strings {
            // SAFETY: a live write handle of a missing key or a list (checked
            // by the caller); ListPush copies the element. It fails only for a
            // key not open for writing or of another type: ruled out.
            unsafe {
                api!(RedisModule_ListPush)(self.ptr, raw::REDISMODULE_LIST_HEAD as c_int, member)
            };
        }
        self.signal();
        self.notify(raw::REDISMODULE_NOTIFY_LIST, c"lpush");
        self.replicate_strings(c"LPUSH", strings);
    }

    /// The write half of `XADD key * job <member>` per member, in order: the
    /// entries go in, with IDs the server chooses. Stops at the first entry
    /// the stream refuses (its IDs exhausted) and drops the members it did
    /// not take, so `members` ends as exactly what was appended. The effects
    /// are `publish`ed apart, after whatever the caller sends before them.
    pub fn xadd_jobs(&self, members: &mut Members) -> Appended {
        let appended = self.append_entries(&members.ptrs);
        members.truncate(appended.ids.len());
        appended
    }

    /// `xadd_jobs` that keeps the members the stream refused (the caller
    /// then copies what it needs of them and drops them with `keep_first`
    /// before `publish`).
    pub fn xadd_jobs_keeping(&self, members: &Members) -> Appended {
        self.append_entries(&members.ptrs)
    }

    /// `XADD key * job <job>` of a command's own argument, with the effects
    /// of `xadd_jobs` then `publish`; `StreamFull` (nothing written) when the
    /// stream's IDs have run out. The caller has checked the type.
    pub fn xadd_job(&self, job: &Arg) -> Result<(), ReplyError> {
        let field = JobField::get(self.ctx);
        let id = self
            .append_entry(field.ptr, job.0)
            .ok_or(ReplyError::StreamFull)?;
        self.publish_entries(field.ptr, std::iter::once((id, job.0)));
        Ok(())
    }

    /// Appends one entry `job <string>` per string, in order, until the
    /// stream refuses one: the IDs of those it took, whose effects are still
    /// to be sent.
    fn append_entries(&self, strings: &[*mut RedisModuleString]) -> Appended {
        let mut ids = Vec::with_capacity(strings.len());
        let field = JobField::get(self.ctx);
        for &member in strings {
            let Some(id) = self.append_entry(field.ptr, member) else {
                break;
            };
            ids.push(id);
        }
        Appended { ids }
    }

    /// Appends the entry `<field> <member>`: its ID, or `None` when the
    /// stream refused it (its IDs exhausted), nothing written.
    fn append_entry(
        &self,
        field: *mut RedisModuleString,
        member: *mut RedisModuleString,
    ) -> Option<StreamId> {
        let mut fields = [field, member];
        let mut id = raw::RedisModuleStreamID { ms: 0, seq: 0 };
        // SAFETY: a live write handle of a stream (checked by the caller);
        // `fields` holds one field-value pair of live strings, which the
        // server copies.
        let status = unsafe {
            api!(RedisModule_StreamAdd)(
                self.ptr,
                raw::REDISMODULE_STREAM_ADD_AUTOID as c_int,
                &mut id,
                fields.as_mut_ptr(),
                1,
            )
        };
        (status == raw::REDISMODULE_OK as c_int).then_some(StreamId {
            ms: id.ms,
            seq: id.seq,
        })
    }

    /// The effects of `xadd_jobs`: the signal (closing the key then wakes
    /// XREAD/XREADGROUP), one `xadd` event per entry, and one
    /// `XADD key <ms>-<seq> job <member>` per entry with the very ID the
    /// primary chose, so a replica holds the same entries and last ID.
    pub fn publish(&self, appended: Appended, members: &Members) {
        if appended.is_empty() {
            return;
        }
        let field = JobField::get(self.ctx);
        self.publish_entries(
            field.ptr,
            appended
                .ids
                .iter()
                .copied()
                .zip(members.ptrs.iter().copied()),
        );
    }

    /// `publish` of entries, each its ID and member, at least one.
    fn publish_entries(
        &self,
        field: *mut RedisModuleString,
        entries: impl ExactSizeIterator<Item = (StreamId, *mut RedisModuleString)>,
    ) {
        self.signal();
        for _ in 0..entries.len() {
            self.notify(raw::REDISMODULE_NOTIFY_STREAM, c"xadd");
        }
        // On the stack: a heap string per entry was a tenth of a promote of 1000.
        let mut ids = IdPrinter::new();
        for (id, member) in entries {
            let text = ids.print(id);
            // SAFETY: "sbss": a string, a buffer as pointer and length, and
            // two strings, all live for the call, which copies the buffer and
            // takes references to the strings (the field as one string for
            // all entries, not "c", which made a new string object and
            // measured its C string for each).
            unsafe {
                api!(RedisModule_Replicate)(
                    self.ctx.ctx,
                    c"XADD".as_ptr(),
                    c"sbss".as_ptr(),
                    self.name,
                    text.as_ptr(),
                    text.len(),
                    field,
                    member,
                )
            };
        }
    }

    /// The integer a string key holds: `None` when the key is missing, of
    /// another type, or not a canonical decimal integer.
    pub fn string_i64(&self) -> Option<i64> {
        let bytes = self.string_bytes()?;
        let text = std::str::from_utf8(&bytes).ok()?;
        let value: i64 = text.parse().ok()?;
        (value.to_string() == text).then_some(value)
    }

    /// A copy of what a string key holds: `None` when the key is missing or
    /// of another type.
    pub fn string_bytes(&self) -> Option<Vec<u8>> {
        if self.kind() != Kind::String {
            return None;
        }
        let mut len = 0usize;
        // SAFETY: a live handle of a string key; READ access gives a view of
        // its bytes, valid until the key is closed or written (neither
        // happens before the copy below ends).
        unsafe {
            let p = api!(RedisModule_StringDMA)(self.ptr, &mut len, raw::REDISMODULE_READ as c_int);
            if p.is_null() {
                return None;
            }
            Some(std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec())
        }
    }

    /// `SET key <value> PXAT <at_ms>` of an integer.
    pub fn set_i64_expiring(&self, value: i64, at_ms: i64) {
        self.set_expiring(value.to_string().as_bytes(), at_ms);
    }

    /// `SET key <text>`: the key becomes a string holding `text` with no
    /// expiry, with the signal, the `set` event and the replication of that
    /// very command. The caller has checked that the key is missing or a
    /// string.
    pub fn set_text(&self, text: &[u8]) {
        // SAFETY: as in set_expiring: the string is copied by StringSet
        // (which also drops an expiry: it deletes the key first) and freed.
        unsafe {
            let s = api!(RedisModule_CreateString)(self.ctx.ctx, text.as_ptr().cast(), text.len());
            api!(RedisModule_StringSet)(self.ptr, s);
            api!(RedisModule_FreeString)(self.ctx.ctx, s);
        }
        self.signal();
        self.notify(raw::REDISMODULE_NOTIFY_STRING, c"set");
        // SAFETY: "sb": a string and a buffer as pointer and length, live
        // for the call, which copies them.
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx.ctx,
                c"SET".as_ptr(),
                c"sb".as_ptr(),
                self.name,
                text.as_ptr(),
                text.len(),
            )
        };
    }

    /// `SET key <text> PXAT <at_ms>`: the key becomes a string holding
    /// `text` that expires at `at_ms` (server time), with the signal, the
    /// `set` and `expire` events and the replication of that very command.
    /// The caller has checked that the key is missing or a string.
    pub fn set_expiring(&self, text: &[u8], at_ms: i64) {
        // SAFETY: CreateString copies the bytes; the string is freed below,
        // after StringSet (which copies it) and Replicate (which copies it).
        unsafe {
            let s = api!(RedisModule_CreateString)(self.ctx.ctx, text.as_ptr().cast(), text.len());
            // A write handle of a missing key or a string: StringSet cannot
            // fail then, nor SetAbsExpire on the key it just wrote.
            api!(RedisModule_StringSet)(self.ptr, s);
            api!(RedisModule_SetAbsExpire)(self.ptr, at_ms);
            api!(RedisModule_FreeString)(self.ctx.ctx, s);
        }
        self.signal();
        self.notify(raw::REDISMODULE_NOTIFY_STRING, c"set");
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"expire");
        // SAFETY: "sbcl": a string, a buffer as pointer and length, a C string
        // and a long long, all live for the call, which copies them.
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx.ctx,
                c"SET".as_ptr(),
                c"sbcl".as_ptr(),
                self.name,
                text.as_ptr(),
                text.len(),
                c"PXAT".as_ptr(),
                at_ms as c_longlong,
            )
        };
    }

    /// `DEL key`: `true` when it existed, and then signalled, sent as `del`
    /// and replicated.
    pub fn delete(&self) -> bool {
        if self.kind() == Kind::Missing {
            return false;
        }
        // SAFETY: a live write handle of an existing key.
        unsafe { api!(RedisModule_DeleteKey)(self.ptr) };
        self.signal();
        self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
        // SAFETY: "s" names the one string argument passed.
        unsafe {
            api!(RedisModule_Replicate)(self.ctx.ctx, c"DEL".as_ptr(), c"s".as_ptr(), self.name)
        };
        true
    }

    /// `HGET key field` read in place: `read` sees the value's bytes, which
    /// are freed after it; `None` when the field (or the hash) is missing.
    pub fn hget_with<R>(&self, field: &Arg, read: impl FnOnce(&[u8]) -> R) -> Option<R> {
        if self.kind() != Kind::Hash {
            return None;
        }
        let mut value: *mut RedisModuleString = ptr::null_mut();
        // SAFETY: a live handle of a hash; one field/value-pointer pair then
        // the NULL that ends the variadic list. The value, when set, is a
        // new string (a copy: writes to the hash leave it alone) freed below.
        unsafe {
            api!(RedisModule_HashGet)(
                self.ptr,
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                &mut value as *mut *mut RedisModuleString,
                ptr::null_mut::<RedisModuleString>(),
            );
        }
        if value.is_null() {
            return None;
        }
        let out = read(Arg(value).as_slice());
        // SAFETY: made by HashGet for this call, freed once.
        unsafe { api!(RedisModule_FreeString)(self.ctx.ctx, value) };
        Some(out)
    }

    /// The value of `field` in a hash key: `None` when the key is missing,
    /// not a hash, or has no such field.
    pub fn hget(&self, field: &[u8]) -> Option<Vec<u8>> {
        if self.kind() != Kind::Hash {
            return None;
        }
        let name = self.bytes_string(field);
        let mut value: *mut RedisModuleString = ptr::null_mut();
        // SAFETY: a live handle of a hash; one field/value-pointer pair then
        // the NULL that ends the variadic list. The value, when set, is a
        // new string this module frees (no automatic memory here).
        unsafe {
            api!(RedisModule_HashGet)(
                self.ptr,
                raw::REDISMODULE_HASH_NONE as c_int,
                name,
                &mut value as *mut *mut RedisModuleString,
                ptr::null_mut::<RedisModuleString>(),
            );
            api!(RedisModule_FreeString)(self.ctx.ctx, name);
        }
        if value.is_null() {
            return None;
        }
        let copy = string_bytes(value);
        // SAFETY: made by HashGet for this call, freed once.
        unsafe { api!(RedisModule_FreeString)(self.ctx.ctx, value) };
        Some(copy)
    }

    /// `HSET key field value`, with the signal, the `hset` event and the
    /// replication of that very command. The caller has checked that the
    /// key is missing or a hash.
    pub fn hset(&self, field: &[u8], value: &[u8]) {
        let f = self.bytes_string(field);
        let v = self.bytes_string(value);
        // SAFETY: a live write handle of a missing key or a hash; one
        // field/value pair of live strings (copied) then the ending NULL.
        unsafe {
            api!(RedisModule_HashSet)(
                self.ptr,
                raw::REDISMODULE_HASH_NONE as c_int,
                f,
                v,
                ptr::null_mut::<RedisModuleString>(),
            );
        }
        self.signal();
        self.notify(raw::REDISMODULE_NOTIFY_HASH, c"hset");
        // SAFETY: "sss" names exactly the three live strings passed.
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx.ctx,
                c"HSET".as_ptr(),
                c"sss".as_ptr(),
                self.name,
                f,
                v,
            );
            api!(RedisModule_FreeString)(self.ctx.ctx, f);
            api!(RedisModule_FreeString)(self.ctx.ctx, v);
        }
    }

    /// `HDEL key field`: `true` when it was there, and then signalled, sent
    /// as `hdel` (and `del` when the hash emptied) and replicated.
    pub fn hdel(&self, field: &[u8]) -> bool {
        if self.kind() != Kind::Hash {
            return false;
        }
        let f = self.bytes_string(field);
        // SAFETY: a live write handle of a hash; the field then the delete
        // marker, then the ending NULL. The server deletes an emptied key.
        let removed = unsafe {
            api!(RedisModule_HashSet)(
                self.ptr,
                raw::REDISMODULE_HASH_NONE as c_int,
                f,
                raw::REDISMODULE_HASH_DELETE,
                ptr::null_mut::<RedisModuleString>(),
            )
        };
        if removed > 0 {
            self.signal();
            self.notify(raw::REDISMODULE_NOTIFY_HASH, c"hdel");
            if self.kind() == Kind::Missing {
                self.notify(raw::REDISMODULE_NOTIFY_GENERIC, c"del");
            }
            // SAFETY: "ss" names exactly the two live strings passed.
            unsafe {
                api!(RedisModule_Replicate)(
                    self.ctx.ctx,
                    c"HDEL".as_ptr(),
                    c"ss".as_ptr(),
                    self.name,
                    f,
                )
            };
        }
        // SAFETY: made above, freed once, after its last use.
        unsafe { api!(RedisModule_FreeString)(self.ctx.ctx, f) };
        removed > 0
    }

    /// Every field and value of a hash key, copied, in the hash's order
    /// (none when missing or not a hash).
    pub fn hash_entries(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        if self.kind() != Kind::Hash {
            return out;
        }
        extern "C" fn collect(
            _key: *mut RedisModuleKey,
            field: *mut RedisModuleString,
            value: *mut RedisModuleString,
            out: *mut std::os::raw::c_void,
        ) {
            // SAFETY: `out` is the vector passed below, alive and not
            // otherwise borrowed while ScanKey runs; the strings are live
            // for this call.
            let out = unsafe { &mut *out.cast::<Vec<(Vec<u8>, Vec<u8>)>>() };
            out.push((string_bytes(field), string_bytes(value)));
        }
        // SAFETY: a cursor made here and destroyed below; ScanKey calls
        // `collect` with the vector as its private data, only during the
        // call, and returns 0 once the whole hash was seen.
        unsafe {
            let cursor = api!(RedisModule_ScanCursorCreate)();
            let data = ptr::from_mut(&mut out).cast::<std::os::raw::c_void>();
            while api!(RedisModule_ScanKey)(self.ptr, cursor, Some(collect), data) != 0 {}
            api!(RedisModule_ScanCursorDestroy)(cursor);
        }
        out
    }

    /// A new string of `bytes`, which the caller frees.
    fn bytes_string(&self, bytes: &[u8]) -> *mut RedisModuleString {
        // SAFETY: CreateString copies the bytes.
        unsafe { api!(RedisModule_CreateString)(self.ctx.ctx, bytes.as_ptr().cast(), bytes.len()) }
    }

    /// Tells the server the key was written: WATCH on it fails, client-side
    /// caching invalidates. Once per written key, as native commands do.
    fn signal(&self) {
        // SAFETY: live context and key name.
        unsafe { api!(RedisModule_SignalModifiedKey)(self.ctx.ctx, self.name) };
    }

    /// The keyspace notification a native command sends, e.g. `zadd`.
    fn notify(&self, class: c_int, event: &CStr) {
        // SAFETY: live context and key name; the event string is static.
        unsafe {
            api!(RedisModule_NotifyKeyspaceEvent)(self.ctx.ctx, class, event.as_ptr(), self.name)
        };
    }

    /// Sends `command key m1..mk` to replicas and the AOF (ZREM, LPUSH).
    fn replicate_strings(&self, command: &CStr, strings: &[*mut RedisModuleString]) {
        // SAFETY: "sv" is a string then a vector given as pointer and count;
        // the vector's strings (members owned by a `Members`, or the running
        // command's arguments) are live for the call, which copies them.
        unsafe {
            api!(RedisModule_Replicate)(
                self.ctx.ctx,
                command.as_ptr(),
                c"sv".as_ptr(),
                self.name,
                strings.as_ptr(),
                strings.len(),
            )
        };
    }
}

/// A copy of a live string's bytes.
fn string_bytes(s: *mut RedisModuleString) -> Vec<u8> {
    if s.is_null() {
        return Vec::new();
    }
    let mut len = 0usize;
    // SAFETY: a live string; its bytes stay valid while it does.
    unsafe {
        let p = api!(RedisModule_StringPtrLen)(s, &mut len);
        if p.is_null() {
            return Vec::new();
        }
        std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec()
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        // SAFETY: CloseKey accepts null and each handle is closed once.
        unsafe { api!(RedisModule_CloseKey)(self.ptr) };
    }
}

/// The entries `xadd_jobs` appended, whose effects are still to be sent.
#[must_use = "the entries are in the stream: publish their effects"]
pub struct Appended {
    ids: Vec<StreamId>,
}

impl Appended {
    /// How many entries went in.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

/// A stream entry ID, `<ms>-<seq>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct StreamId {
    ms: u64,
    seq: u64,
}

/// `<ms>-<seq>` is at most 20 digits, a dash and 20 digits.
const STREAM_ID_MAX_LEN: usize = 41;

/// Prints stream IDs as `<ms>-<seq>` into one stack buffer, keeping the
/// `<ms>-` part while the ms stays the same: the entries of one promotion
/// mostly share it, so only the sequence number is printed for each.
struct IdPrinter {
    buffer: [u8; STREAM_ID_MAX_LEN],
    /// The ms whose digits and dash start the buffer, and their length.
    ms: Option<u64>,
    prefix: usize,
}

impl IdPrinter {
    fn new() -> IdPrinter {
        IdPrinter {
            buffer: [0; STREAM_ID_MAX_LEN],
            ms: None,
            prefix: 0,
        }
    }

    /// The bytes of `<ms>-<seq>`, valid until the next call.
    fn print(&mut self, id: StreamId) -> &[u8] {
        if self.ms != Some(id.ms) {
            let digits = write_decimal(id.ms, &mut self.buffer[..20]);
            self.buffer.copy_within(20 - digits..20, 0);
            self.buffer[digits] = b'-';
            self.ms = Some(id.ms);
            self.prefix = digits + 1;
        }
        // a u64 has at most 20 digits: they fit after a prefix of at most 21
        let end = self.prefix + 20;
        let digits = write_decimal(id.seq, &mut self.buffer[self.prefix..end]);
        self.buffer.copy_within(end - digits..end, self.prefix);
        &self.buffer[..self.prefix + digits]
    }
}

/// Writes `n` in decimal at the end of `out` (20 bytes, room for any u64);
/// gives the number of digits written. Two digits a step, from a table: an
/// ID is printed for every XADD an add or a promote replicates.
fn write_decimal(mut n: u64, out: &mut [u8]) -> usize {
    const PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
        2021222324252627282930313233343536373839\
        4041424344454647484950515253545556575859\
        6061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899";
    let mut at = out.len();
    while n >= 10 {
        let pair = (n % 100) as usize * 2;
        n /= 100;
        at -= 2;
        out[at..at + 2].copy_from_slice(&PAIRS[pair..pair + 2]);
    }
    if n > 0 || at == out.len() {
        at -= 1;
        out[at] = b'0' + n as u8;
    }
    out.len() - at
}

/// Owned copies of sorted-set members, freed when dropped.
pub struct Members {
    ctx: *mut RedisModuleCtx,
    ptrs: Vec<*mut RedisModuleString>,
    /// The score of the first (earliest-due) member: the timer's lag.
    earliest_score: Option<f64>,
}

impl Members {
    fn new(ctx: *mut RedisModuleCtx) -> Members {
        Members {
            ctx,
            ptrs: Vec::new(),
            earliest_score: None,
        }
    }

    pub fn earliest_score(&self) -> Option<f64> {
        self.earliest_score
    }

    pub fn len(&self) -> usize {
        self.ptrs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ptrs.is_empty()
    }

    /// Copies of the members' names, in order.
    pub fn names(&self) -> impl Iterator<Item = Vec<u8>> + '_ {
        self.ptrs.iter().map(|&member| string_bytes(member))
    }

    /// Keeps the first `len` members, freeing the rest.
    fn truncate(&mut self, len: usize) {
        for &member in self.ptrs.get(len..).unwrap_or(&[]) {
            // SAFETY: returned by the range iterator, freed once: it leaves the vector.
            unsafe { api!(RedisModule_FreeString)(self.ctx, member) };
        }
        self.ptrs.truncate(len);
        if len == 0 {
            self.earliest_score = None;
        }
    }
}

/// Copies out and frees a string the server handed over (`None` for null).
///
/// # Safety
/// `string` is null or a live string owned by the caller, made with `ctx`.
unsafe fn take_string(ctx: *mut RedisModuleCtx, string: *mut RedisModuleString) -> Option<Vec<u8>> {
    if string.is_null() {
        return None;
    }
    let mut len = 0usize;
    // SAFETY: a live string (the caller's promise); freed once, after the copy.
    unsafe {
        let bytes = api!(RedisModule_StringPtrLen)(string, &mut len);
        let copy = (!bytes.is_null())
            .then(|| std::slice::from_raw_parts(bytes.cast::<u8>(), len).to_vec());
        api!(RedisModule_FreeString)(ctx, string);
        copy
    }
}

impl Members {
    /// No members yet: `push` takes them over.
    pub fn empty(ctx: &Context) -> Members {
        Members::new(ctx.ctx)
    }

    /// Takes over `name` (released from a group), after the others, without
    /// a copy.
    pub fn push(&mut self, name: OwnedName) {
        let name = std::mem::ManuallyDrop::new(name);
        self.ptrs.push(name.ptr);
    }

    /// Makes room for `more` members.
    pub fn reserve(&mut self, more: usize) {
        self.ptrs.reserve(more);
    }

    /// The members as arguments, in order.
    pub fn args(&self) -> &[Arg] {
        // SAFETY: Arg is a transparent wrapper of the same pointer type, and
        // the strings live as long as self.
        unsafe { std::slice::from_raw_parts(self.ptrs.as_ptr().cast::<Arg>(), self.ptrs.len()) }
    }

    /// Keeps the first `len` members, freeing the rest (what a stream
    /// refused, once the caller has copied what it needs of them).
    pub fn keep_first(&mut self, len: usize) {
        self.truncate(len);
    }
}

/// Arguments as the pointers the server takes.
fn arg_ptrs(args: &[Arg]) -> &[*mut RedisModuleString] {
    // SAFETY: Arg is a transparent wrapper of the pointer: same layout.
    unsafe { std::slice::from_raw_parts(args.as_ptr().cast(), args.len()) }
}

impl Drop for Members {
    fn drop(&mut self) {
        for &member in &self.ptrs {
            // SAFETY: each string was returned to us by the range iterator
            // and is freed exactly once.
            unsafe { api!(RedisModule_FreeString)(self.ctx, member) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_ids_print_as_the_server_prints_them() {
        let mut printer = IdPrinter::new();
        // in turn through one printer: the ms kept, changed, shorter, longer
        for (ms, seq, want) in [
            (0, 0, "0-0"),
            (1, 2, "1-2"),
            (1_796_100_416_178, 0, "1796100416178-0"),
            (1_796_100_416_178, 9, "1796100416178-9"),
            (1_796_100_416_178, 10, "1796100416178-10"),
            (
                1_796_100_416_178,
                18_446_744_073_709_551_615,
                "1796100416178-18446744073709551615",
            ),
            (1_796_100_416_178, 7, "1796100416178-7"),
            (1_796_100_416_179, 0, "1796100416179-0"),
            (10, 10, "10-10"),
            (
                u64::MAX,
                u64::MAX,
                "18446744073709551615-18446744073709551615",
            ),
            (u64::MAX, 0, "18446744073709551615-0"),
            (5, u64::MAX, "5-18446744073709551615"),
        ] {
            let id = StreamId { ms, seq };
            assert_eq!(printer.print(id), want.as_bytes());
            assert_eq!(IdPrinter::new().print(id), want.as_bytes());
        }
    }
}
