//! The OffloadingConnector's packed form (`collections::pack`): its part of the engine's (the
//! search frontier's format), decoded in place into the box the search's engine reuses. The
//! per-request record and the job list their fields beside their definitions
//! (`pack_fields!(clone_bitwise ..)`: one list for their `Clone` and `Pack`).

use super::{Held, Job, JobKind, OffloadingState, Phase};
use crate::system::collections::pack::{pack_fields, pack_unit_enum, put, Pack, Reader};

pack_fields!(Held { req, waiting });
pack_fields!(OffloadingState { reqs, jobs, next_job, fences, host, held });
pack_unit_enum!(Phase { Built, Queued, Submitted, Done, Failed, Reported });

impl Pack for JobKind {
    #[inline]
    fn pack(&self, out: &mut Vec<u8>) {
        put(
            out,
            [match self {
                JobKind::Store => 0,
                JobKind::Load { sync: false } => 1,
                JobKind::Load { sync: true } => 2,
            }],
        );
    }
    #[inline]
    fn unpack(&mut self, r: &mut Reader<'_>) -> Option<()> {
        *self = match r.tag()? {
            0 => JobKind::Store,
            1 => JobKind::Load { sync: false },
            2 => JobKind::Load { sync: true },
            _ => return None,
        };
        Some(())
    }
}

/// Decoders' starting values (every field is then decoded).
impl Default for Job {
    fn default() -> Self {
        Job {
            id: 0,
            req: 0,
            kind: JobKind::Store,
            keys: Default::default(),
            blocks: Default::default(),
            slots: Default::default(),
            phase: Phase::Built,
            snapshot: Default::default(),
            torn: false,
            invalid_from: None,
            block_offset: 0,
        }
    }
}
impl Default for Held {
    fn default() -> Self {
        Held { req: 0, waiting: false }
    }
}
impl Default for OffloadingState {
    fn default() -> Self {
        OffloadingState {
            reqs: Default::default(),
            jobs: Vec::new(),
            next_job: 0,
            fences: Default::default(),
            host: Default::default(),
            held: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::types::BlockHash;

    /// The packed form round-trips, afresh and in place over another state; one byte less is
    /// refused, not a panic.
    #[test]
    fn packed_round_trip() {
        let mut s =
            OffloadingState { reqs: crate::system::collections::opt_vec::OptVec(vec![None; 3]), ..Default::default() };
        s.on_new_request(1);
        s.reqs[1].as_mut().unwrap().num_keys = 2;
        s.jobs.push(Job {
            keys: [BlockHash(7)].into_iter().collect(),
            blocks: [3].into_iter().collect(),
            kind: JobKind::Load { sync: true },
            ..Default::default()
        });
        s.held.push(Held { req: 2, waiting: true });
        s.host.use_arc(true, false);
        let mut bytes = Vec::new();
        s.pack(&mut bytes);
        let mut fresh = OffloadingState::default();
        crate::system::collections::pack::unpack_all(&mut fresh, &bytes).unwrap();
        assert_eq!(fresh, s);
        let mut place = OffloadingState::default();
        place.reqs.0 = vec![None, None, None, None];
        place.on_new_request(0);
        crate::system::collections::pack::unpack_all(&mut place, &bytes).unwrap();
        assert_eq!(place, s);
        let mut again = OffloadingState::default();
        assert!(crate::system::collections::pack::unpack_all(&mut again, &bytes[..bytes.len() - 1]).is_none());
        // JSON is the derive's form.
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains("\"jobs\""));
        assert_eq!(serde_json::from_str::<OffloadingState>(&json).unwrap(), s);
    }
}
