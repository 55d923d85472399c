//! Cluster slots, pure: a key's hash slot, the name of a key the module
//! keeps beside another in its slot, and which slots a node serves without a
//! migration in progress, read from its `CLUSTER NODES` line. What the
//! auto-promote timer needs to know about a cluster; the slots an atomic
//! import is bringing in are followed in `engine/imports.rs`.
//!
//! The module API tells a node's role and flags but not the state of a slot
//! (`MIGRATING`/`IMPORTING` are visible only in `CLUSTER NODES`), so the timer
//! reads this node's own line of `CLUSTER NODES`. `RedisModule_ClusterKeySlot`
//! is missing on Redis 7.0, hence the slot function here (the cluster spec's
//! CRC16 with hash tags).

pub const SLOTS: usize = 16384;

/// The hash slot of `key`: CRC16 of the key, or of its `{tag}` when the key
/// has a non-empty one, modulo 16384.
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) & (SLOTS as u16 - 1)
}

/// The name of a key the module keeps beside `key`, in the same slot: `key`
/// then `suffix` when `key` has a hash tag (the tag stays the first one),
/// else `{key}` then `suffix` (the whole key becomes the tag). A key with a
/// `}` and no tag has no such name in a cluster: the caller checks the slot
/// where it matters (`key_slot` of both), since any name serves outside one.
pub fn derived_key(key: &[u8], suffix: &[u8]) -> Vec<u8> {
    let mut name = Vec::with_capacity(key.len() + suffix.len() + 2);
    if has_tag(key) {
        name.extend_from_slice(key);
    } else {
        name.push(b'{');
        name.extend_from_slice(key);
        name.push(b'}');
    }
    name.extend_from_slice(suffix);
    name
}

pub fn has_tag(key: &[u8]) -> bool {
    key.iter().position(|&b| b == b'{').is_some_and(|open| {
        key[open + 1..]
            .iter()
            .position(|&b| b == b'}')
            .is_some_and(|len| len > 0)
    })
}

/// CRC16/XMODEM (polynomial 0x1021, initial 0), as the cluster uses.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A set of slots.
#[derive(Clone, PartialEq, Eq)]
pub struct Slots([u64; SLOTS / 64]);

impl Slots {
    pub const fn empty() -> Slots {
        Slots([0; SLOTS / 64])
    }

    pub fn contains(&self, slot: u16) -> bool {
        let slot = usize::from(slot);
        slot < SLOTS && self.0[slot / 64] & (1 << (slot % 64)) != 0
    }

    pub fn set(&mut self, slot: usize, on: bool) {
        if slot < SLOTS {
            if on {
                self.0[slot / 64] |= 1 << (slot % 64);
            } else {
                self.0[slot / 64] &= !(1 << (slot % 64));
            }
        }
    }
}

/// The slots the `myself` line of a `CLUSTER NODES` text serves and that
/// are neither migrating (`[slot->-id]`) nor importing (`[slot-<-id]`).
/// A replica's line lists no slots, so a replica gets none.
pub fn stable_own_slots(cluster_nodes: &str) -> Slots {
    let mut slots = Slots::empty();
    let Some(fields) = cluster_nodes
        .lines()
        .map(|line| line.split_ascii_whitespace().collect::<Vec<_>>())
        .find(|fields| {
            fields
                .get(2)
                .is_some_and(|f| f.split(',').any(|f| f == "myself"))
        })
    else {
        return slots;
    };
    let mut moving = Vec::new();
    for range in fields.iter().skip(8) {
        if let Some(inner) = range.strip_prefix('[') {
            // "[slot->-id" or "[slot-<-id]": the slot is the leading number.
            let digits: String = inner.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(slot) = digits.parse::<usize>() {
                moving.push(slot);
            }
            continue;
        }
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        if let (Ok(first), Ok(last)) = (first.parse::<usize>(), last.parse::<usize>()) {
            for slot in first..=last.min(SLOTS - 1) {
                slots.set(slot, true);
            }
        }
    }
    for slot in moving {
        slots.set(slot, false);
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_the_cluster_spec() {
        // Values from CLUSTER KEYSLOT on Valkey 8.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{orders}:schedule"), key_slot(b"orders"));
        assert_eq!(
            key_slot(b"{orders}:pending"),
            key_slot(b"{orders}:schedule")
        );
        // An empty tag hashes the whole key; only the first tag counts.
        assert_eq!(key_slot(b"{}x"), crc16(b"{}x") & 16383);
        assert_eq!(key_slot(b"a{b}{c}"), key_slot(b"b"));
        assert_eq!(key_slot(b"a{bc"), crc16(b"a{bc") & 16383);
    }

    #[test]
    fn a_derived_key_shares_the_slot_of_its_key() {
        assert_eq!(
            derived_key(b"{q}:schedule", b":echomq-hold"),
            b"{q}:schedule:echomq-hold"
        );
        assert_eq!(derived_key(b"retries", b":h"), b"{retries}:h");
        for key in [&b"{q}:schedule"[..], b"retries", b"a{b}{c}", b"a{bc", b"{"] {
            let derived = derived_key(key, b":echomq-hold");
            assert_eq!(key_slot(&derived), key_slot(key), "{key:?}");
        }
        // A `}` without a tag: outside the cluster's rules, the caller checks.
        for key in [&b"{}x"[..], b"a}b", b"}{", b"", b"x{}y{z}"] {
            let derived = derived_key(key, b":h");
            assert_ne!(key_slot(&derived), key_slot(key), "{key:?}");
        }
    }

    #[test]
    fn own_slots_leave_out_migrating_and_importing() {
        let text = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5 9 [3->-b2] [7-<-c3]
b2 127.0.0.1:7001@17001 master - 0 0 2 connected 10-20
c3 127.0.0.1:7002@17002 slave a1 0 0 1 connected
";
        let slots = stable_own_slots(text);
        let served: Vec<u16> = (0..30).filter(|&s| slots.contains(s)).collect();
        assert_eq!(served, vec![0, 1, 2, 4, 5, 9]);
        let replica = "c3 127.0.0.1:7002@17002 myself,slave a1 0 0 1 connected\n";
        assert!(stable_own_slots(replica) == Slots::empty());
        assert!(stable_own_slots("") == Slots::empty());
    }
}
