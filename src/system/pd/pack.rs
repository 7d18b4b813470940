//! P/D's packed form (`collections::pack`): the decode instance's engine as any engine packs,
//! then the router's state per request.

use super::router::Resp;
use super::{PdState, Route};
use crate::system::collections::pack::{pack_fields, put, Pack, Reader};
use crate::system::engine::Engine;

pack_fields!(Resp { start, rows, len, gap });
pack_fields!(PdState { d, route });

/// Packed: a tag, the variant's index, then its answer or flag.
impl Pack for Route {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        match self {
            Route::Prefill => put(out, [0]),
            Route::Prefilled(a) => {
                put(out, [1]);
                a.pack(out);
            }
            Route::Decoding(a) => {
                put(out, [2]);
                a.pack(out);
            }
            Route::Merged => put(out, [3]),
            Route::Http500 { stage } => {
                put(out, [4]);
                stage.pack(out);
            }
        }
    }
    #[inline]
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        *self = match r.tag()? {
            0 => Route::Prefill,
            t @ (1 | 2) => {
                let mut a = Resp::default();
                a.unpack(r)?;
                if t == 1 {
                    Route::Prefilled(a)
                } else {
                    Route::Decoding(a)
                }
            }
            3 => Route::Merged,
            4 => {
                let mut stage = false;
                stage.unpack(r)?;
                Route::Http500 { stage }
            }
            _ => return None,
        };
        Some(())
    }
}

/// Decoders' starting values (every field is then decoded).
impl Default for Resp {
    fn default() -> Self {
        Resp { start: 0, rows: None, len: 0, gap: false }
    }
}
impl Default for Route {
    fn default() -> Self {
        Route::Prefill
    }
}
impl Default for PdState {
    fn default() -> Self {
        PdState { d: Engine::default(), route: Vec::new() }
    }
}
