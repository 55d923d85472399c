//! The slots an atomic slot migration is importing into this node.
//!
//! Valkey 9's atomic slot migration (`CLUSTER MIGRATESLOTS`) shows in neither
//! the module API nor `CLUSTER NODES`: the target loads the slot's keys
//! before it owns the slot. The server's atomic-slot-migration event tells
//! each step; `importing` keeps the slots an import has started and not yet
//! completed or aborted, and the timer never acts on them, whatever `CLUSTER
//! NODES` says. (The source needs no such set: it serves until ownership
//! moves, its writes travel with the migration, and during the final handoff
//! it pauses writes, which the timer already waits out.)

use std::sync::{Mutex, PoisonError};

use redis_module::Context;

use crate::rules::slots::Slots;
use crate::server::events::{OnSlotMigration, SlotMigration};

/// The slots of atomic imports in progress on this node.
static IMPORTING: Mutex<Slots> = Mutex::new(Slots::empty());

/// Forgets every import (at load: the statics can outlive an unload).
pub fn reset_importing() {
    *IMPORTING.lock().unwrap_or_else(PoisonError::into_inner) = Slots::empty();
}

/// Whether an atomic slot migration is importing `slot` into this node.
pub fn importing(slot: u16) -> bool {
    IMPORTING
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .contains(slot)
}

/// Follows the server's atomic slot migration event.
pub struct MigrationWatch;

impl OnSlotMigration for MigrationWatch {
    fn step(_ctx: &Context, step: SlotMigration, ranges: &[(u16, u16)]) {
        let on = match step {
            SlotMigration::ImportStarted => true,
            SlotMigration::ImportCompleted | SlotMigration::ImportAborted => false,
            // This node is the source: it serves until ownership moves.
            SlotMigration::ExportStarted
            | SlotMigration::ExportCompleted
            | SlotMigration::ExportAborted => return,
        };
        let mut importing = IMPORTING.lock().unwrap_or_else(PoisonError::into_inner);
        for &(first, last) in ranges {
            for slot in first..=last {
                importing.set(usize::from(slot), on);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_atomic_import_holds_its_slots_until_it_ends() {
        reset_importing();
        let ctx = Context::dummy();
        MigrationWatch::step(&ctx, SlotMigration::ImportStarted, &[(5, 7), (100, 100)]);
        assert!(importing(5) && importing(7) && importing(100));
        assert!(!importing(4) && !importing(8));
        // The source's steps change nothing here.
        MigrationWatch::step(&ctx, SlotMigration::ExportStarted, &[(8, 8)]);
        assert!(!importing(8));
        MigrationWatch::step(&ctx, SlotMigration::ImportCompleted, &[(5, 7)]);
        assert!(!importing(5) && !importing(7) && importing(100));
        MigrationWatch::step(&ctx, SlotMigration::ImportAborted, &[(100, 100)]);
        assert!(!importing(100));
        // The last slot's range does not wrap.
        MigrationWatch::step(&ctx, SlotMigration::ImportStarted, &[(16383, 16383)]);
        assert!(importing(16383));
        reset_importing();
        assert!(!importing(16383));
    }
}
