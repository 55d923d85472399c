//! Which server the module runs in, told from two fields of the server's own
//! `INFO server` (read once at load, by `lib.rs`): Valkey reports
//! `valkey_version` (and `server_name:valkey`), Redis only `redis_version`.
//! `RedisModule_GetServerVersion` cannot tell the two apart: Valkey returns
//! its own version there (9.1.2 is 0x090102), so a Redis 8 and a Valkey 8
//! look the same. Pure: the fields come in as text.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Server {
    Valkey(Version),
    Redis(Version),
    Unknown,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// The server that reports these `INFO server` fields.
pub fn classify(valkey_version: Option<&str>, redis_version: Option<&str>) -> Server {
    match (valkey_version, redis_version) {
        (Some(v), _) => parse(v).map_or(Server::Unknown, Server::Valkey),
        (None, Some(v)) => parse(v).map_or(Server::Unknown, Server::Redis),
        (None, None) => Server::Unknown,
    }
}

/// "9.1.2" (a suffix such as "-rc1" on the last part is ignored).
fn parse(text: &str) -> Option<Version> {
    let mut parts = text.trim().splitn(3, '.');
    let mut number = |required: bool| -> Option<u32> {
        match parts.next() {
            Some(part) => {
                let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            }
            None if required => None,
            None => Some(0),
        }
    };
    Some(Version {
        major: number(true)?,
        minor: number(false)?,
        patch: number(false)?,
    })
}

impl Server {
    /// Valkey 9.0 introduced atomic slot migration (`CLUSTER MIGRATESLOTS`),
    /// its module option (1 << 5) and its server event (19). On Valkey 8.x
    /// and Redis bit 5 means nothing yet, and a later Redis may give it
    /// another meaning: declared on Valkey 9 and later only.
    pub fn handles_atomic_slot_migration(self) -> bool {
        matches!(self, Server::Valkey(v) if v.major >= 9)
    }
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Server::Valkey(v) => write!(f, "Valkey {}.{}.{}", v.major, v.minor, v.patch),
            Server::Redis(v) => write!(f, "Redis {}.{}.{}", v.major, v.minor, v.patch),
            Server::Unknown => write!(f, "an unknown server"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32, patch: u32) -> Version {
        Version {
            major,
            minor,
            patch,
        }
    }

    #[test]
    fn valkey_is_told_by_its_own_field() {
        // Valkey 8 also reports a redis_version (7.2.4) for old clients.
        assert_eq!(
            classify(Some("8.0.1"), Some("7.2.4")),
            Server::Valkey(v(8, 0, 1))
        );
        assert_eq!(
            classify(Some("9.1.2"), Some("7.2.4")),
            Server::Valkey(v(9, 1, 2))
        );
        assert_eq!(classify(None, Some("7.0.15")), Server::Redis(v(7, 0, 15)));
        assert_eq!(classify(None, None), Server::Unknown);
        assert_eq!(classify(Some("x"), None), Server::Unknown);
        assert_eq!(parse("9.0.0-rc1"), Some(v(9, 0, 0)));
        assert_eq!(parse("10"), Some(v(10, 0, 0)));
    }

    #[test]
    fn atomic_slot_migration_only_on_valkey_9_and_later() {
        assert!(!Server::Valkey(v(8, 0, 1)).handles_atomic_slot_migration());
        assert!(!Server::Valkey(v(8, 1, 1)).handles_atomic_slot_migration());
        assert!(Server::Valkey(v(9, 0, 0)).handles_atomic_slot_migration());
        assert!(Server::Valkey(v(9, 1, 2)).handles_atomic_slot_migration());
        assert!(!Server::Redis(v(7, 0, 15)).handles_atomic_slot_migration());
        assert!(!Server::Redis(v(9, 0, 0)).handles_atomic_slot_migration());
        assert!(!Server::Unknown.handles_atomic_slot_migration());
    }
}
