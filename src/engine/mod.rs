//! The engine: the module's own state and the moves it makes, over the rules
//! and through the server floor. The one move of due jobs (`mover`), the
//! release limits and holds (`release`), grouped schedules and their
//! fair release (`groups`), promotion on a timer (`ticker`),
//! the writes of ECHO.RETRY, ECHO.SCHEDULE and ECHO.ADD (`scheduling`), the
//! slots an atomic migration imports (`imports`), the counters of `INFO
//! echomq` (`stats`) and the eviction guard (`eviction`). Uses `rules` and
//! `server`, never `commands`.

pub mod eviction;
pub mod groups;
pub mod imports;
pub mod mover;
pub mod recurring;
pub mod release;
pub mod scheduling;
pub mod stats;
pub mod ticker;
