//! The rules: pure code, no server calls and no state. Backoff and jitter,
//! the release limiter, the fair release of groups, ECHO.SPREAD's buckets,
//! recurring schedules (their grammar, zones and next occurrence),
//! cluster slots, the grammar of arguments and configs, every error text,
//! which server this is. The clock and randomness come in as arguments, so
//! unit and property tests pin every rule without a server. Nothing here
//! imports another layer.

pub mod buckets;
pub mod configs;
pub mod errors;
pub mod fairness;
pub mod grammar;
pub mod limiter;
pub mod policy;
pub mod recurrence;
pub mod slots;
pub mod versions;
