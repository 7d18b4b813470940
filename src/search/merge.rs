//! The merge: the search's sequential part, on the calling thread. It takes the chunks'
//! outputs in chunk order and replays what a FIFO search decides: each source's property
//! bits, each successor's node (the first candidate of a new fingerprint gets the next node
//! number and joins the next level), the graph's edges, the bounds. It reads the outputs'
//! fingerprints and successor lists, never a state's bytes: a piece of encoded candidates
//! joins the next level as the expanding thread cut it, its repeats marked dropped
//! ([`Level::push_piece`]).

use super::bfs::{ChunkOut, DUP, NEW};
use super::frontier::Level;
use super::liveness::Graph;
use super::visited::{NodeId, Nodes, Table, MAX_NODES};
use super::{End, Stop};
use stateright::{Expectation, Model, Property};
use std::sync::RwLock;

/// The search's sequential state: the visited set, the graph, the counts, the decisions.
pub(super) struct Run<'a, M: Model> {
    pub props: &'a [Property<M>],
    /// The visited set: the table (shared with the expanding threads) and the nodes.
    pub table: &'a RwLock<Table>,
    pub nodes: Nodes,
    pub graph: Option<Graph>,
    pub found: Vec<Option<NodeId>>,
    pub generated: usize,
    pub max_depth: usize,
    pub stopped: Option<Stop>,
    pub end: Option<End>,
    pub max_states: Option<usize>,
    /// The next source's node index.
    pub src: NodeId,
    /// `all_found()`, updated at each discovery.
    pub decided: bool,
    /// Candidates a thread took for new that the merge found visited (a look-up that ran
    /// before the merge inserted the state; `KVMC_SEARCH_STATS`).
    pub repeats: usize,
    /// Per candidate of the output being merged: its node (reused from one output to the next).
    pub ids: Vec<NodeId>,
}

impl<M: Model> Run<'_, M> {
    /// Every property is decided: it has its discovery, or a property of the same name has
    /// (properties sharing a name are one property, e.g. a deadlock check and a cycle check).
    fn all_found(&self) -> bool {
        !self.props.is_empty()
            && self
                .props
                .iter()
                .all(|p| self.props.iter().zip(&self.found).any(|(q, f)| q.name == p.name && f.is_some()))
    }

    /// Merge one chunk's output; `left` counts this level's sources not yet merged. Returns
    /// false when the run ends here.
    pub fn merge(
        &mut self,
        out: ChunkOut<M::State>,
        len: usize,
        depth: usize,
        expand: bool,
        left: &mut usize,
        next: &mut Level<M::State>,
    ) -> bool {
        let words = self.props.len().div_ceil(64);
        let lock = self.table;
        let mut table = lock.read().unwrap();
        let ChunkOut { done, hits, ends, succs, states, mut pieces, fps, dups } = out;
        let mut succs = succs.into_iter();
        let mut whole = states.into_iter();
        let mut dups = dups.into_iter();
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        // The next candidate's piece and entry (encoded states).
        let (mut piece, mut entry) = (0, 0);
        let mut start = 0u32;
        for j in 0..done {
            let src = self.src;
            self.src += 1;
            *left -= 1;
            self.max_depth = depth;
            let hits = &hits[j * words..(j + 1) * words];
            for (k, p) in self.props.iter().enumerate() {
                let bit = hits[k / 64] >> (k % 64) & 1 == 1;
                if bit && p.expectation != Expectation::Eventually && self.found[k].is_none() {
                    self.found[k] = Some(src);
                    self.decided = self.all_found();
                }
            }
            if let Some(g) = &mut self.graph {
                g.push_bits(hits);
            }
            if self.decided {
                self.end = Some(End::AllDiscovered);
                return false;
            }
            let (end, generated) = ends[j];
            if !expand {
                self.stopped.get_or_insert(Stop::MaxDepth);
                if let Some(g) = &mut self.graph {
                    g.close_node();
                }
                continue;
            }
            self.generated += generated as usize;
            for s in succs.by_ref().take((end - start) as usize) {
                let target = match s.known {
                    NEW => {
                        let fp = fps[ids.len()];
                        if self.nodes.len() >= MAX_NODES {
                            self.end = Some(End::Stopped(Stop::Capacity));
                            return false;
                        }
                        // The state bound: never more than `max_states` visited states; a new
                        // one past it stops the run (it may be a repeat within this batch:
                        // conservative, the run is cut all the same).
                        if self.max_states.is_some_and(|n| self.nodes.len() >= n) && table.get(fp).is_none() {
                            self.end = Some(End::Stopped(Stop::MaxStates));
                            return false;
                        }
                        let state = whole.next();
                        if table.needs_room(1) {
                            // Growing moves every slot: wait for the readers' chunks.
                            drop(table);
                            lock.write().unwrap().grow(1);
                            table = lock.read().unwrap();
                        }
                        let encoded = state.is_none();
                        let id = match table.insert(fp, self.nodes.next_id()) {
                            Ok(()) => {
                                if let Some(state) = state {
                                    next.push_state(state);
                                }
                                self.nodes.push(src, s.action)
                            }
                            Err(id) => {
                                self.repeats += 1;
                                if encoded {
                                    pieces[piece].drop_entry(entry);
                                }
                                id
                            }
                        };
                        if encoded {
                            entry += 1;
                            if entry == pieces[piece].ends.len() {
                                (piece, entry) = (piece + 1, 0);
                            }
                        }
                        ids.push(id);
                        id
                    }
                    DUP => ids[dups.next().expect("a repeated candidate") as usize],
                    id => id,
                };
                if let Some(g) = &mut self.graph {
                    g.push_edge(target, s.class);
                }
            }
            start = end;
            if let Some(g) = &mut self.graph {
                g.close_node();
            }
        }
        for p in pieces {
            next.push_piece(p);
        }
        self.ids = ids;
        done == len
    }
}
