//! Router replay's packed form (`collections::pack`): the scheduler side, the row store, the
//! worker's requests and the clients' records, field by field (the scheduler's and the
//! store's impls sit next to their private fields).

use super::{AuxSched, AuxState, RowStore, RowsOutput, RowsRecord, WorkerReq};
use crate::system::collections::pack::pack_fields;

pack_fields!(RowsRecord { first, end, gap, count });
pack_fields!(WorkerReq { keys, pending, capture_cursor, emit_cursor, tail, buffer_start });
pack_fields!(RowsOutput { req, start, end, from_store });
pack_fields!(AuxState { sched, row_store, workers, rows, dead });

/// Decoders' starting values (every field is then decoded).
impl Default for RowsOutput {
    fn default() -> Self {
        RowsOutput { req: 0, start: 0, end: 0, from_store: false }
    }
}
impl Default for AuxState {
    fn default() -> Self {
        AuxState {
            sched: AuxSched::default(),
            row_store: RowStore::default(),
            workers: Vec::new(),
            rows: Vec::new(),
            dead: false,
        }
    }
}
