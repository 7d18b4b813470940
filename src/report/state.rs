//! One engine state as structured values, for the explorer's page (src/explorer) and the ITF
//! export: G1 as blocks (reference count, hash, content, free-queue position), the requests
//! with their block tables and cursors, the host tier (entries, pins, write-pending, eviction
//! order; SimpleCPU's CPU pool; the Mooncake pool; NIXL's host buffer), the connector's
//! per-request mirror and its jobs in flight, and router replay's row store and emitted rows.
//!
//! Every element that breaks a state predicate is marked `bad` with the reason (a G1 block
//! cached under a hash whose KV it does not hold, a host entry whose KV is not its key's, KV
//! computed from wrong KV), so that a page shows the values that break the property. Values
//! are plain JSON: numbers, strings, booleans, lists and objects, no nulls.

use crate::props::{g1 as g1_props, host as host_props};
use crate::system::display::{content, live_phase};
use crate::system::types::{BlockHash, ContentTag, FinishReason, Status};
use crate::system::{Engine, System};
use serde_json::{json, Value};

fn label(sys: &System, h: BlockHash) -> String {
    sys.workload.label(h)
}

fn name(sys: &System, r: u16) -> String {
    sys.workload.req_name(r).to_string()
}

fn labels(sys: &System, ks: &[BlockHash]) -> Vec<String> {
    ks.iter().map(|k| label(sys, *k)).collect()
}

/// Why a block's content is wrong under `hash` (None: it is right, or not claimed).
fn wrong_content(sys: &System, hash: Option<BlockHash>, c: ContentTag) -> Option<String> {
    if let ContentTag::Bad(k) = c {
        return Some(format!("holds {k:?} KV"));
    }
    let h = hash?;
    (c != ContentTag::full(h, sys.cfg.block_size))
        .then(|| format!("keyed {} but holds {}", label(sys, h), content(sys, c)))
}

/// A pool of blocks (G1, or SimpleCPU's CPU pool) as a list of blocks.
fn pool_blocks(sys: &System, p: &crate::system::gpu_pool::GpuPool, unsound: &dyn Fn(u32) -> bool) -> Value {
    let queue = p.free_queue();
    let blocks: Vec<Value> = (1..p.num_blocks())
        .map(|b| {
            let h = p.block_hash(b);
            let c = p.content(b);
            let mut v = json!({
                "id": b,
                "ref": p.ref_cnt(b),
                "hash": h.map_or("-".to_string(), |h| label(sys, h)),
                "content": content(sys, c),
                "free_pos": queue.iter().position(|&x| x == b).map_or(-1, |i| i as i64),
                "bad": false,
            });
            let why = if unsound(b) {
                Some(format!(
                    "cached under {} but holds {}",
                    h.map_or("-".to_string(), |h| label(sys, h)),
                    content(sys, c)
                ))
            } else if let ContentTag::Bad(k) = c {
                Some(format!("holds {k:?} KV"))
            } else {
                None
            };
            if let Some(w) = why {
                v["bad"] = json!(true);
                v["why"] = json!(w);
            }
            v
        })
        .collect();
    json!({"blocks": blocks, "free_queue": queue, "num_free": p.num_free()})
}

/// The state as values (see the module doc).
pub fn state_json(sys: &System, e: &Engine) -> Value {
    let b = sys.cfg.block_size;
    // G1 blocks listed in the cached map under a hash whose KV they do not hold.
    let mut unsound_g1 = vec![false; e.pool.num_blocks() as usize];
    for (h, blocks) in e.pool.cached() {
        for &blk in blocks.iter() {
            if !g1_props::cached_block_sound(e, b, h, blk) {
                unsound_g1[blk as usize] = true;
            }
        }
    }
    let mut v = json!({
        "g1": pool_blocks(sys, &e.pool, &|blk| unsound_g1[blk as usize]),
        "queues": {
            "running": e.running.iter().map(|r| name(sys, *r)).collect::<Vec<_>>(),
            "waiting": e.waiting.iter().map(|r| name(sys, *r)).collect::<Vec<_>>(),
            "kv_holding": e.kv_holding.iter().map(|r| name(sys, *r)).collect::<Vec<_>>(),
        },
        "requests": requests(sys, e),
        "flags": flags(e.ghost.violations),
    });
    if let Some(h) = host(sys, e) {
        v["host"] = h;
    }
    if let Some(c) = connector(sys, e) {
        v["connector"] = c;
    }
    if let Some(r) = rows(sys, e) {
        v["rows"] = r;
    }
    if let Some(pd) = pd(sys, e) {
        v["pd"] = pd;
    }
    v
}

/// P/D (src/system/pd): the decode instance D as a state of its own (its G1, requests,
/// connector and row store) and the router's state per request: P's and D's answers, the
/// merge and what a colocated engine answers.
fn pd(sys: &System, e: &Engine) -> Option<Value> {
    use crate::system::pd::{colocated_start, response, router::merge, Route};
    let (st, pdsys) = (e.pd.as_deref()?, sys.pd.as_deref()?);
    let dsys = System { cfg: pdsys.cfg.clone(), workload: pdsys.wl.clone(), pd: None, ..sys.clone() };
    let router: Vec<Value> = st
        .route
        .iter()
        .enumerate()
        .map(|(i, route)| {
            let r = i as u16;
            let spec = pdsys.wl.spec(r, 0);
            let p_ok = matches!(e.reqs[i].status, Status::Finished(FinishReason::Stopped | FinishReason::LengthCapped));
            let d_ok =
                matches!(st.d.reqs[i].status, Status::Finished(FinishReason::Stopped | FinishReason::LengthCapped));
            let p = match route {
                Route::Prefilled(p) | Route::Decoding(p) => Some(*p),
                Route::Merged | Route::Http500 { .. } if p_ok => {
                    Some(response(e, &sys.rules, sys.workload.spec(r, 0), r))
                }
                _ => None,
            };
            let d = (d_ok && !matches!(route, Route::Prefill | Route::Prefilled(_)))
                .then(|| response(&st.d, &sys.rules, spec, r));
            let start = colocated_start(&sys.rules, spec);
            let t1 = (spec.prompt_len + spec.max_tokens - 1).min(st.d.reqs[i].num_tokens(spec).saturating_sub(1));
            let (state, bad) = match route {
                Route::Prefill => ("P prefilling".to_string(), false),
                Route::Prefilled(_) => ("P answered; to send to D".to_string(), false),
                Route::Decoding(_) => ("D decoding".to_string(), false),
                Route::Merged => ("merged".to_string(), false),
                Route::Http500 { stage: true } => ("HTTP 500 (a stage failed)".to_string(), false),
                Route::Http500 { stage: false } => ("HTTP 500 (the merge refused)".to_string(), true),
            };
            let mut v = json!({"name": spec.name, "state": state, "bad": bad,
                "p": p.map_or("-".to_string(), |x| x.describe()),
                "d": d.map_or("-".to_string(), |x| x.describe()),
                "colocated": format!("start {start}, {} rows at [{start},{t1})", t1.saturating_sub(start))});
            if let (Some(p), Some(d)) = (p, d) {
                match merge(sys.rules.pd_router_merge, &p, &d) {
                    Ok(m) => {
                        v["merged"] = json!(m.describe());
                        if !m.equals_colocated(start, t1) {
                            v["bad"] = json!(true);
                            v["why"] =
                                json!(format!("the merged rows ({}) are not the colocated answer", m.describe()));
                        }
                    }
                    Err(why) => {
                        v["merged"] = json!(format!("HTTP 500 \"Request processing failed: {why}\""));
                        v["why"] = json!(why);
                    }
                }
            }
            v
        })
        .collect();
    let mut d = state_json(&dsys, &st.d);
    d["title"] = json!("D (decode instance)");
    Some(json!({"d": d, "router": router, "merge_rule": format!("{:?}", sys.rules.pd_router_merge)}))
}

fn requests(sys: &System, e: &Engine) -> Vec<Value> {
    let wl = &sys.workload;
    e.reqs
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let spec = wl.spec(i as u16, q.turn);
            let mut v = json!({
                "name": spec.name,
                "status": q.status.short(),
                "computed": q.num_computed,
                "tokens": q.num_tokens(spec),
                "prompt": spec.prompt_len,
                "output": q.num_output,
                "max_tokens": spec.max_tokens,
                "table": q.table,
                "preempted": q.preempted,
            });
            if wl.is_session(i as u16) {
                v["input"] = json!(format!("{}/{}", wl.input_no(i as u16, q.turn) + 1, wl.num_turns(i as u16)));
            }
            if q.status == Status::Pending {
                v["table"] = json!([]);
            }
            v
        })
        .collect()
}

/// The ghost breaches raised so far, by name.
fn flags(bits: u32) -> Vec<String> {
    use crate::system::ghost::Breach as B;
    let all = [
        (B::BadRead, "BadRead"),
        (B::StaleSource, "StaleSource"),
        (B::UnsafeLoad, "UnsafeLoad"),
        (B::EvictedPinned, "EvictedPinned"),
        (B::BadCompletion, "BadCompletion"),
        (B::CoverageLoss, "CoverageLoss"),
        (B::HandedOutInUse, "HandedOutInUse"),
        (B::MirrorMismatch, "MirrorMismatch"),
        (B::EvictionOrder, "EvictionOrder"),
        (B::FinalStoreLost, "FinalStoreLost"),
        (B::RowsMissing, "RowsMissing"),
        (B::RowsInexact, "RowsInexact"),
        (B::StartNotAnchored, "StartNotAnchored"),
        (B::ConnectorAssert, "ConnectorAssert"),
        (B::PdStaleSend, "PdStaleSend"),
        (B::PdNotColocated, "PdNotColocated"),
        (B::QueueRaised, "QueueRaised"),
        (B::TokensNonPositive, "TokensNonPositive"),
        (B::SessionHistoryLost, "SessionHistoryLost"),
    ];
    all.iter().filter(|(f, _)| bits & (*f as u32) != 0).map(|(_, n)| n.to_string()).collect()
}

/// The host tier of whichever connector the model runs.
fn host(sys: &System, e: &Engine) -> Option<Value> {
    let b = sys.cfg.block_size;
    if let Some(oc) = e.conn.offloading() {
        let bpc = sys.cfg.offload().map_or(1, |o| o.blocks_per_chunk);
        let entries: Vec<Value> = oc
            .host
            .entries()
            .map(|(k, en)| {
                let c: Vec<String> = en.content.iter().map(|t| content(sys, *t)).collect();
                let state = match en.ref_cnt {
                    r if r < 0 => "writing".to_string(),
                    0 => "ready".to_string(),
                    r => format!("pinned x{r}"),
                };
                let mut v = json!({
                    "key": label(sys, *k),
                    "slot": en.slot,
                    "ref": en.ref_cnt,
                    "state": state,
                    "rank": format!("{:?}", en.rank),
                    "content": if c.is_empty() { vec!["(writing)".to_string()] } else { c },
                    "bad": false,
                });
                if !host_props::entry_intact(k, en, b, bpc, &sys.workload) {
                    v["bad"] = json!(true);
                    let held: Vec<String> = en.content.iter().map(|t| content(sys, *t)).collect();
                    v["why"] =
                        json!(format!("key {} names other KV than it holds ({})", label(sys, *k), held.join(",")));
                }
                v
            })
            .collect();
        let mut v = json!({
            "kind": "offloading",
            "title": "G2 host tier (OffloadingConnector)",
            "capacity": oc.host.capacity,
            "free": oc.host.num_free_slots(),
            "write_pending": oc.host.num_write_pending,
            "eviction_order": labels(sys, &oc.host.eviction_order()),
            "entries": entries,
        });
        if let Some(a) = oc.host.arc.as_deref() {
            v["arc"] = json!({
                "t1": labels(sys, &a.t1), "t2": labels(sys, &a.t2),
                "b1": labels(sys, &a.b1), "b2": labels(sys, &a.b2),
                "target": format!("{}", a.target.get()),
            });
        }
        return Some(v);
    }
    if let Some(sc) = e.conn.simple_cpu() {
        let unsound = |blk: u32| {
            sc.cpu
                .block_hash(blk)
                .is_some_and(|h| sc.cpu.cached_under(&h, blk) && sc.cpu.content(blk) != ContentTag::full(h, b))
        };
        let mut v = pool_blocks(sys, &sc.cpu, &unsound);
        v["kind"] = json!("simple_cpu");
        v["title"] = json!("CPU block pool (SimpleCPUOffloadConnector)");
        v["eviction_order"] = json!(sc.fifo);
        return Some(v);
    }
    if let Some(mc) = e.conn.mooncake() {
        let entries: Vec<Value> = mc
            .pool
            .iter()
            .map(|(k, c)| {
                let mut v =
                    json!({"key": label(sys, *k), "content": [content(sys, *c)], "state": "stored", "bad": false});
                if let Some(w) = wrong_content(sys, Some(*k), *c) {
                    v["bad"] = json!(true);
                    v["why"] = json!(w);
                }
                v
            })
            .collect();
        return Some(json!({"kind": "mooncake", "title": "Mooncake pool", "entries": entries}));
    }
    if let Some(nx) = e.conn.nixl() {
        let entries: Vec<Value> = (1..nx.host.len())
            .filter(|&blk| nx.host[blk] != ContentTag::Empty)
            .map(|blk| json!({"key": format!("slot {blk}"), "content": [content(sys, nx.host[blk])], "state": "copied", "bad": false}))
            .collect();
        return Some(json!({"kind": "nixl", "title": "NIXL host buffer (P/D producer)", "entries": entries}));
    }
    None
}

/// The connector's per-request state (mirror tables, cursors) and its jobs in flight.
fn connector(sys: &System, e: &Engine) -> Option<Value> {
    let (reqs, jobs): (Vec<Value>, Vec<Value>) = if let Some(oc) = e.conn.offloading() {
        let reqs = oc
            .reqs
            .iter()
            .enumerate()
            .filter_map(|(i, st)| {
                let st = st.as_ref()?;
                Some(json!({"name": name(sys, i as u16), "mirror": st.mirror, "cursor": st.cursor,
                    "detail": format!("keys {} jobs {:?}", st.num_keys, st.transfer_jobs)}))
            })
            .collect();
        let jobs = oc
            .jobs
            .iter()
            .map(|j| {
                json!({"id": j.id, "kind": format!("{:?}", j.kind), "req": name(sys, j.req),
                    "keys": labels(sys, &j.keys), "blocks": j.blocks, "phase": live_phase(j.phase)})
            })
            .collect();
        (reqs, jobs)
    } else if let Some(sc) = e.conn.simple_cpu() {
        let reqs = sc
            .reqs
            .iter()
            .enumerate()
            .filter_map(|(i, q)| {
                let st = q.store.as_ref();
                if st.is_none() && q.pending.is_none() && q.load.is_none() {
                    return None;
                }
                let mut detail = Vec::new();
                if let Some(st) = st {
                    detail.push(format!("events {:?}{}", st.events, if st.finished { " (finished)" } else { "" }));
                }
                if let Some(p) = &q.pending {
                    detail.push(format!("lookup pin {:?} (hit {})", p.blocks, p.hit));
                }
                if let Some(l) = &q.load {
                    detail.push(format!("load cpu {:?} -> gpu {:?} event {:?}", l.cpu, l.gpu, l.event));
                }
                Some(json!({"name": name(sys, i as u16),
                    "mirror": st.map_or(Vec::new(), |s| s.mirror.to_vec()),
                    "cursor": st.map_or(0, |s| s.cursor), "detail": detail.join("; ")}))
            })
            .collect();
        let mut jobs: Vec<Value> = sc
            .stores
            .iter()
            .map(|ev| {
                let parts: Vec<String> = ev
                    .parts
                    .iter()
                    .map(|t| format!("{} gpu {:?} -> cpu {:?}", name(sys, t.req), t.gpu, t.cpu))
                    .collect();
                json!({"id": ev.id, "kind": "Store", "req": parts.join("; "), "keys": [], "blocks": [], "phase": live_phase(ev.phase)})
            })
            .collect();
        jobs.extend(sc.loads.iter().map(|ev| {
            let who: Vec<String> = ev.reqs.iter().map(|r| name(sys, *r)).collect();
            json!({"id": ev.id, "kind": "Load", "req": who.join(" "), "keys": [],
                "blocks": ev.gpu, "phase": format!("cpu {:?} -> gpu {:?} {}", ev.cpu, ev.gpu, live_phase(ev.phase))})
        }));
        (reqs, jobs)
    } else if let Some(mc) = e.conn.mooncake() {
        let mut jobs: Vec<Value> = mc
            .saves
            .iter()
            .map(|j| {
                json!({"id": j.id, "kind": "Save", "req": name(sys, j.req), "keys": [format!("up to token {}", j.token_len)],
                    "blocks": j.blocks, "phase": live_phase(j.phase)})
            })
            .collect();
        jobs.extend(mc.loads.iter().map(|j| {
            json!({"id": j.id, "kind": "Load", "req": name(sys, j.req), "keys": labels(sys, &j.keys),
                "blocks": j.blocks, "phase": live_phase(j.phase)})
        }));
        (Vec::new(), jobs)
    } else if let Some(nx) = e.conn.nixl() {
        let jobs = nx
            .sending
            .iter()
            .map(|x| {
                json!({"id": x.req, "kind": "Send", "req": name(sys, x.req), "keys": [format!("{} tokens", x.tokens)],
                    "blocks": x.blocks, "phase": if x.read { "read by the consumer" } else { "waiting for the consumer" }})
            })
            .collect();
        (Vec::new(), jobs)
    } else if let Some(nc) = e.conn.nixl_decode() {
        let reqs = (0..nc.remote.len())
            .filter(|&i| nc.remote[i])
            .map(|i| json!({"name": name(sys, i as u16), "mirror": [], "cursor": 0, "detail": "do_remote_prefill (P's KV to read)"}))
            .collect();
        let jobs = nc
            .recvs
            .iter()
            .map(|x| {
                let phase = match x.done {
                    None => "reading from P's host buffer".to_string(),
                    Some(None) => "landed".to_string(),
                    Some(Some(k)) => format!("failed from block {k}"),
                };
                json!({"id": x.req, "kind": "NIXL read", "req": name(sys, x.req), "keys": [format!("block indices from {}", x.first)],
                    "blocks": x.blocks, "phase": phase})
            })
            .collect();
        (reqs, jobs)
    } else {
        return None;
    };
    Some(json!({"requests": reqs, "jobs": jobs}))
}

/// Router replay: the row store, what each worker holds, and the rows each client received.
fn rows(sys: &System, e: &Engine) -> Option<Value> {
    let aux = e.aux.as_deref()?;
    let store = &aux.row_store;
    let objects: Vec<Value> =
        store.objects().iter().map(|k| json!({"key": label(sys, *k), "refs": store.references(k)})).collect();
    let emitted: Vec<Value> = aux
        .rows
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({"name": name(sys, i as u16), "first": r.first.map_or(-1, i64::from), "end": r.end,
                "count": r.count, "gap": r.gap})
        })
        .collect();
    let workers: Vec<Value> = aux
        .workers
        .iter()
        .enumerate()
        .filter_map(|(i, w)| {
            let w = w.as_ref()?;
            Some(json!({"name": name(sys, i as u16), "keys": labels(sys, &w.keys), "emit_cursor": w.emit_cursor,
                "capture_cursor": w.capture_cursor.map_or(-1, i64::from)}))
        })
        .collect();
    Some(json!({
        "store_capacity": store.capacity,
        "store": objects,
        "lru": labels(sys, store.lru_order()),
        "retained": labels(sys, &aux.sched.kv_cached),
        "workers": workers,
        "emitted": emitted,
        "dead": aux.dead,
    }))
}
