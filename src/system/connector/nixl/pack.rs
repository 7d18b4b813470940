//! NixlConnector's packed form (`collections::pack`), producer and consumer side: their fields
//! in order.

use super::consumer::{NixlConsumer, Recv};
use super::{NixlState, Send};
use crate::system::collections::pack::pack_fields;

pack_fields!(Send { req, blocks, tokens, read });
pack_fields!(NixlState { host, need_save, sending });
pack_fields!(Recv { req, blocks, first, done });
pack_fields!(NixlConsumer { remote, recvs });

/// Decoders' starting values (every field is then decoded).
impl Default for Send {
    fn default() -> Self {
        Send { req: 0, blocks: Vec::new(), tokens: 0, read: false }
    }
}
impl Default for NixlState {
    fn default() -> Self {
        NixlState { host: Vec::new(), need_save: Vec::new(), sending: Vec::new() }
    }
}
impl Default for Recv {
    fn default() -> Self {
        Recv { req: 0, blocks: Vec::new(), first: 0, done: None }
    }
}
impl Default for NixlConsumer {
    fn default() -> Self {
        NixlConsumer { remote: Vec::new(), recvs: Vec::new() }
    }
}
