//! Rendering for people: states as tables, actions by name, steps as one-line stories.

use super::connector::Phase;
use super::input::{Input, System};
use crate::system::types::{BlockHash, ContentTag, Status};
use crate::system::{Direction, Engine, Event};
use std::fmt::Write;

pub fn action_label(sys: &System, a: &Input) -> String {
    let name = |r: &u16| sys.workload.requests[*r as usize].name.clone();
    match a {
        Input::Arrive(r) => format!("arrive {}", name(r)),
        Input::Step => "step".to_string(),
        Input::StepDrain => "step (copies finish within it)".to_string(),
        Input::StepStoresDrain => "step (stores finish within it)".to_string(),
        Input::StepSyncLoadFails(k) => format!("step (sync load fails from block {k})"),
        Input::TransferDone(Direction::Store) => "store copy done".to_string(),
        Input::TransferDone(Direction::Load) => "load copy done".to_string(),
        Input::LoadFails(k) => format!("load fails from block {k}"),
        Input::Abort(r) => format!("abort {}", name(r)),
        Input::Error(r) => format!("error {}", name(r)),
        Input::StreamInput(r) => format!("next input for {}", name(r)),
        Input::ConsumerRead(r) => format!("consumer reads {}", name(r)),
        Input::Decode(x) => match x {
            crate::system::pd::PdInput::Send(r) => format!("router sends {} to D", name(r)),
            crate::system::pd::PdInput::Step => "D: step".to_string(),
            crate::system::pd::PdInput::ReadDone => "D: NIXL read done".to_string(),
            crate::system::pd::PdInput::ReadFails(k) => format!("D: NIXL read fails from block {k}"),
        },
    }
}

fn label(sys: &System, h: BlockHash) -> String {
    sys.workload.label(h)
}

/// A content tag in workload terms: "A.1" for a full block, "A.1[:1]" for a partial one.
pub fn content(sys: &System, t: ContentTag) -> String {
    sys.workload.describe(t)
}

fn names(sys: &System, v: &[u16]) -> String {
    v.iter().map(|r| sys.workload.requests[*r as usize].name.as_str()).collect::<Vec<_>>().join(" ")
}

fn event_text(sys: &System, e: &Event) -> Option<String> {
    let n = |r: &u16| sys.workload.req_name(*r).to_string();
    let keys = |ks: &[BlockHash]| ks.iter().map(|k| label(sys, *k)).collect::<Vec<_>>().join(",");
    Some(match e {
        Event::Arrived { .. } => return None,
        Event::Lookup { req, local, external, load_async } => match external {
            None => format!("{} lookup: G1 hit {local}, host busy (retry)", n(req)),
            // NIXL's producer requests load nothing from the connector.
            Some(_) if sys.cfg.connector_kind() == crate::system::config::ConnectorKind::Nixl => {
                format!("{} lookup: G1 hit {local}", n(req))
            }
            Some(x) => format!(
                "{} lookup: G1 hit {local}, {} hit {x}{}",
                n(req),
                if sys.cfg.mooncake().is_some() { "pool" } else { "host" },
                if *load_async {
                    " (async)"
                } else if *x > 0 {
                    " (sync)"
                } else {
                    ""
                }
            ),
        },
        Event::Admitted { req, resumed, table, num_computed } => {
            format!(
                "admit {}{} table {table:?} computed {num_computed}",
                n(req),
                if *resumed { " (resumed)" } else { "" }
            )
        }
        Event::AsyncLoadWait { req, table, .. } => {
            format!("{} waits for its load into {table:?}", n(req))
        }
        Event::Scheduled { req, start, tokens, .. } => format!("{} computes [{start},{})", n(req), start + tokens),
        Event::Preempted { req } => format!("preempt {}", n(req)),
        Event::StepScheduled { .. } | Event::JobsToFlush { .. } | Event::HostStored { .. } => return None,
        Event::Promoted { req, num_computed, failed } => {
            format!(
                "{}'s load {}: promoted with {num_computed} computed",
                n(req),
                if *failed { "failed" } else { "landed" }
            )
        }
        Event::NoRoom { req, free } => format!("{} does not fit ({free} free blocks)", n(req)),
        Event::G1Evicted { block, hash } => {
            format!("G1 block {block} loses {}", label(sys, *hash))
        }
        Event::G1Cached { .. } => return None,
        Event::HostEvicted { key } => format!("host evicts {}", label(sys, *key)),
        Event::StoreRefused { req, keys: k } => {
            format!("{} store of [{}] refused: host full", n(req), keys(k))
        }
        Event::StoreJob { job, req, keys: k, blocks, .. } => {
            format!("store job {job}: {} [{}] from blocks {blocks:?}", n(req), keys(k))
        }
        Event::LoadJob { job, req, keys: k, blocks, sync, .. } => {
            format!(
                "{} load job {job}: {} [{}] into blocks {blocks:?}",
                if *sync { "sync" } else { "async" },
                n(req),
                keys(k)
            )
        }
        Event::PdSaved { req, blocks, .. } => format!("{}'s blocks {blocks:?} copied to the host buffer", n(req)),
        Event::PdSent { .. } => return None,
        Event::PdRead { req, blocks, .. } => {
            format!("the consumer reads {}'s blocks {blocks:?} from the host buffer", n(req))
        }
        Event::Flush { job } => format!("flush job {job}"),
        Event::TransferDone { job } => format!("job {job} copied"),
        Event::TransferFailed { job, invalid } => {
            format!("job {job} failed: blocks {invalid:?} invalid")
        }
        Event::JobCompleted { job } => format!("job {job} completed"),
        Event::HostLoadDone { req, job } => format!("{}'s load event {job} landed (pins released)", n(req)),
        Event::Sampled { req, position } => format!("{} samples token {position}", n(req)),
        Event::TurnEnded { req, turn, reason } => {
            format!("{} ends input {} ({}), keeps its blocks", n(req), turn + 1, reason.as_str())
        }
        Event::StreamQueued { req } => format!("{}'s next input is queued", n(req)),
        Event::RowsCut { req, from, to } => {
            format!("{}'s hit limited from {from} to {to} tokens (its rows are not all here)", n(req))
        }
        Event::RowsEmitted { req, start, end, from_store } => format!(
            "{} emits rows [{start},{end}){}",
            n(req),
            if *from_store { " (read back from the row store)" } else { "" }
        ),
        Event::SessionResumed { req, turn, num_computed } => {
            format!("{} takes input {} (computed {num_computed} kept)", n(req), turn + 1)
        }
        Event::Finished { req, reason } => format!("{} finishes ({})", n(req), reason.as_str()),
        Event::Freed { req, blocks } => format!("{} frees {blocks:?}", n(req)),
        Event::Violation { property, detail } => format!("VIOLATION {property}: {detail}"),
        Event::Decode { ev } => format!("D: {}", event_text(sys, ev)?),
        Event::Router { text } => text.clone(),
        Event::WrongVictims { got, want, policy } => {
            let order = match policy {
                crate::system::rules::HostLru::ReleaseOrder => "0.24 release",
                crate::system::rules::HostLru::InsertRank => "0.32 insert-rank",
                crate::system::rules::HostLru::RequestRank => "0.33 request-rank",
            };
            // Where the two lists part first, so that a cut story still says it.
            let i = got.iter().zip(want).take_while(|(a, b)| a == b).count();
            let name = |ks: &[BlockHash]| ks.get(i).map_or("nothing".to_string(), |k| label(sys, *k));
            format!(
                "VIOLATION eviction-order: victim {} of {} is {} where the {order} order names {}; the host tier \
                 evicts [{}]; the order names [{}]",
                i + 1,
                got.len().max(want.len()),
                name(got),
                name(want),
                keys(got),
                keys(want)
            )
        }
    })
}

/// What the events of one step say about a violation of `property`, if they name it (a
/// transition that raised a ghost flag tells why in an event; state predicates have none).
pub fn violation_text(sys: &System, events: &[Event], property: &str) -> Option<String> {
    let prefix = format!("VIOLATION {property}: ");
    events.iter().filter_map(|e| event_text(sys, e)).find_map(|t| t.strip_prefix(&prefix).map(str::to_string))
}

/// One step as a story line: what happened, in order.
pub fn step_story(sys: &System, _before: &Engine, _after: &Engine, events: &[Event]) -> String {
    let parts: Vec<String> = events.iter().filter_map(|e| event_text(sys, e)).collect();
    if parts.is_empty() {
        "nothing observable".to_string()
    } else {
        parts.join("; ")
    }
}

/// The state as tables (G1, requests, host tier, jobs).
pub fn render(sys: &System, e: &Engine) -> String {
    let mut s = String::new();
    let wl = &sys.workload;
    let _ = writeln!(s, "G1  free queue (head first): {:?}", e.pool.free_queue());
    let _ = writeln!(s, "    block  ref  hash      content");
    for b in 1..e.pool.num_blocks() {
        let h = e.pool.block_hash(b).map_or("-".to_string(), |h| label(sys, h));
        let _ = writeln!(s, "    {:<6} {:<4} {:<9} {}", b, e.pool.ref_cnt(b), h, content(sys, e.pool.content(b)));
    }
    let _ = writeln!(
        s,
        "requests  running [{}]  waiting [{}]  kv-holding [{}]",
        names(sys, &e.running),
        names(sys, &e.waiting),
        names(sys, &e.kv_holding)
    );
    for (i, q) in e.reqs.iter().enumerate() {
        let spec = wl.spec(i as u16, q.turn);
        if q.status == Status::Pending {
            let _ = writeln!(s, "    {:<4} not arrived", spec.name);
            continue;
        }
        let _ = writeln!(
            s,
            "    {:<4} {:<22} computed {}/{}  out {}/{}  table {:?}{}",
            spec.name,
            q.status.short(),
            q.num_computed,
            q.num_tokens(spec),
            q.num_output,
            spec.max_tokens,
            q.table,
            match (q.preempted, wl.is_session(i as u16)) {
                (false, false) => String::new(),
                (true, false) => "  (preempted before)".to_string(),
                (p, true) => format!(
                    "  (session input {}/{}{})",
                    wl.input_no(i as u16, q.turn) + 1,
                    wl.num_turns(i as u16),
                    if p { ", preempted before" } else { "" }
                ),
            }
        );
    }
    if let Some(oc) = e.conn.offloading() {
        let _ = writeln!(
            s,
            "G2  {} chunks, {} free; eviction order {:?}",
            oc.host.capacity,
            oc.host.num_free_slots(),
            oc.host.eviction_order().iter().map(|k| label(sys, *k)).collect::<Vec<_>>()
        );
        if let Some(a) = oc.host.arc.as_deref() {
            let l = |v: &[crate::system::host_tier::Key]| v.iter().map(|k| label(sys, *k)).collect::<Vec<_>>();
            let _ = writeln!(
                s,
                "    ARC T1 {:?} T2 {:?} B1 {:?} B2 {:?} target {}",
                l(&a.t1),
                l(&a.t2),
                l(&a.b1),
                l(&a.b2),
                a.target.get()
            );
        }
        let _ = writeln!(s, "    key       slot ref  rank      content");
        for (k, en) in oc.host.entries() {
            let c: Vec<String> = en.content.iter().map(|t| content(sys, *t)).collect();
            let _ = writeln!(
                s,
                "    {:<9} {:<4} {:<4} {:<9} {}",
                label(sys, *k),
                en.slot,
                en.ref_cnt,
                format!("{:?}", en.rank),
                if c.is_empty() { "(writing)".into() } else { c.join(",") }
            );
        }
        for (i, st) in oc.reqs.iter().enumerate() {
            if let Some(st) = st {
                let _ = writeln!(
                    s,
                    "    conn {:<4} keys {} mirror {:?} cursor {} jobs {:?}",
                    wl.requests[i].name, st.num_keys, st.mirror, st.cursor, st.transfer_jobs
                );
            }
        }
        for j in &oc.jobs {
            let _ = writeln!(
                s,
                "    job {} {:?} {} [{}] blocks {:?} {}",
                j.id,
                j.kind,
                wl.requests[j.req as usize].name,
                j.keys.iter().map(|k| label(sys, *k)).collect::<Vec<_>>().join(","),
                j.blocks,
                live_phase(j.phase)
            );
        }
    }
    if let Some(sc) = e.conn.simple_cpu() {
        render_simple_cpu(&mut s, sys, sc);
    }
    if let Some(mc) = e.conn.mooncake() {
        render_mooncake(&mut s, sys, mc);
    }
    if let Some(nx) = e.conn.nixl() {
        let slots: Vec<String> = (1..nx.host.len())
            .filter(|&b| nx.host[b] != ContentTag::Empty)
            .map(|b| format!("{b}: {}", content(sys, nx.host[b])))
            .collect();
        let _ = writeln!(s, "NIXL host buffer {{{}}}", slots.join(", "));
        let names = |v: &[u16]| v.iter().map(|r| wl.requests[*r as usize].name.as_str()).collect::<Vec<_>>().join(" ");
        let _ = writeln!(s, "    need save: [{}]", names(&nx.need_save));
        for x in &nx.sending {
            let _ = writeln!(
                s,
                "    send {} blocks {:?} ({} tokens){}",
                wl.requests[x.req as usize].name,
                x.blocks,
                x.tokens,
                if x.read { " read by the consumer" } else { "" }
            );
        }
    }
    if e.ghost.violations != 0 {
        let _ = writeln!(s, "violations flagged: {:#x}", e.ghost.violations);
    }
    s
}

/// SimpleCPU's CPU pool, per-request state and events.
fn render_simple_cpu(s: &mut String, sys: &System, sc: &crate::system::connector::SimpleCpuState) {
    let wl = &sys.workload;
    let _ = writeln!(
        s,
        "CPU {} blocks, {} free; free queue (head first): {:?}",
        sc.cpu.num_blocks() - 1,
        sc.cpu.num_free(),
        sc.cpu.free_queue()
    );
    let _ = writeln!(s, "    block  ref  hash      content");
    for b in 1..sc.cpu.num_blocks() {
        let h = sc.cpu.block_hash(b).map_or("-".to_string(), |h| label(sys, h));
        let _ = writeln!(s, "    {:<6} {:<4} {:<9} {}", b, sc.cpu.ref_cnt(b), h, content(sys, sc.cpu.content(b)));
    }
    for (i, q) in sc.reqs.iter().enumerate() {
        if q.store.is_none() && q.pending.is_none() && q.load.is_none() {
            continue;
        }
        let mut line = format!("    conn {:<4}", wl.requests[i].name);
        if let Some(st) = &q.store {
            line.push_str(&format!(
                " mirror {:?} cursor {} events {:?}{}",
                st.mirror,
                st.cursor,
                st.events,
                if st.finished { " (finished)" } else { "" }
            ));
        }
        if let Some(p) = &q.pending {
            line.push_str(&format!(" lookup pin {:?} (hit {})", p.blocks, p.hit));
        }
        if let Some(l) = &q.load {
            line.push_str(&format!(" load cpu {:?} -> gpu {:?} event {:?}", l.cpu, l.gpu, l.event));
        }
        let _ = writeln!(s, "{line}");
    }
    for ev in &sc.stores {
        let parts: Vec<String> =
            ev.parts.iter().map(|t| format!("{} gpu {:?} -> cpu {:?}", wl.req_name(t.req), t.gpu, t.cpu)).collect();
        let _ = writeln!(s, "    store event {} [{}] {}", ev.id, parts.join("; "), live_phase(ev.phase));
    }
    for ev in &sc.loads {
        let _ = writeln!(
            s,
            "    load event {} [{}] cpu {:?} -> gpu {:?} {}",
            ev.id,
            names(sys, &ev.reqs),
            ev.cpu,
            ev.gpu,
            live_phase(ev.phase)
        );
    }
    for t in &sc.pending_finished {
        let _ =
            writeln!(s, "    finish-time store {} gpu {:?} -> cpu {:?} (next event)", wl.req_name(t.req), t.gpu, t.cpu);
    }
}

/// The Mooncake pool, the connector's per-request state and its jobs.
fn render_mooncake(s: &mut String, sys: &System, mc: &crate::system::connector::MooncakeState) {
    let wl = &sys.workload;
    let pool: Vec<String> = mc
        .pool
        .iter()
        .map(|(k, c)| {
            let held = content(sys, *c);
            let name = label(sys, *k);
            if held == name {
                name
            } else {
                format!("{name} (holds {held})")
            }
        })
        .collect();
    let _ = writeln!(s, "pool [{}]", pool.join(", "));
    for (i, q) in mc.reqs.iter().enumerate() {
        if q.load_spec.is_none() && q.tracker.is_none() && q.ledger.is_none() {
            continue;
        }
        let mut line = format!("    conn {:<4}", wl.requests[i].name);
        if let Some(ls) = &q.load_spec {
            line.push_str(&format!(
                " load spec [{},{}){}{}",
                ls.vllm_cached,
                ls.kvpool_cached,
                if ls.can_load { " can load" } else { "" },
                if ls.tail_key.is_none() { " (no tail key)" } else { "" }
            ));
        }
        if let Some(t) = &q.tracker {
            line.push_str(&format!(" tracker {} saved {} prefill {}", t.token_len, t.num_saved, t.prefill_end));
        }
        if let Some(l) = &q.ledger {
            line.push_str(&format!(
                " ledger jobs {:?} offset {}{}",
                l.live,
                l.saved_offset,
                if q.closing { " (closing)" } else { "" }
            ));
        }
        let _ = writeln!(s, "{line}");
    }
    for j in &mc.saves {
        let _ = writeln!(
            s,
            "    save job {} {} up to {} from blocks {:?} pins {:?} {}",
            j.id,
            wl.requests[j.req as usize].name,
            j.token_len,
            j.blocks,
            j.pinned,
            live_phase(j.phase)
        );
    }
    for j in &mc.loads {
        let _ = writeln!(
            s,
            "    load job {} {} [{}] into {:?} {}",
            j.id,
            wl.requests[j.req as usize].name,
            j.keys.iter().map(|k| label(sys, *k)).collect::<Vec<_>>().join(","),
            j.blocks,
            live_phase(j.phase)
        );
    }
}

/// What changed between two states, per component: "G1 ...; G2 ...; A ...".
pub fn diff(sys: &System, a: &Engine, b: &Engine) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut g1 = Vec::new();
    for blk in 1..a.pool.num_blocks() as usize {
        let (ra, rb) = (a.pool.ref_cnt(blk as u32), b.pool.ref_cnt(blk as u32));
        let (ha, hb) = (a.pool.block_hash(blk as u32), b.pool.block_hash(blk as u32));
        let (ca, cb) = (a.pool.content(blk as u32), b.pool.content(blk as u32));
        let mut d = Vec::new();
        if ra != rb {
            d.push(format!("ref {ra}->{rb}"));
        }
        if ha != hb {
            let l = |h: Option<BlockHash>| h.map_or("none".to_string(), |h| label(sys, h));
            d.push(format!("hash {}->{}", l(ha), l(hb)));
        }
        if ca != cb {
            d.push(format!("kv {}->{}", content(sys, ca), content(sys, cb)));
        }
        if !d.is_empty() {
            g1.push(format!("blk{blk} {}", d.join(" ")));
        }
    }
    if !g1.is_empty() {
        parts.push(format!("G1 {}", g1.join(", ")));
    }
    if let (Some(ha), Some(hb)) = (a.conn.offloading(), b.conn.offloading()) {
        let mut g2 = Vec::new();
        for (k, eb) in hb.host.entries() {
            let state = |r: i32| {
                if r < 0 {
                    "writing".to_string()
                } else if r == 0 {
                    "ready".to_string()
                } else {
                    format!("pinned x{r}")
                }
            };
            match ha.host.get(k) {
                None => g2.push(format!("+{} ({})", label(sys, *k), state(eb.ref_cnt))),
                Some(ea) if ea.ref_cnt != eb.ref_cnt || ea.content != eb.content => {
                    let c: Vec<String> = eb.content.iter().map(|t| content(sys, *t)).collect();
                    g2.push(format!(
                        "{} {} holds {}",
                        label(sys, *k),
                        state(eb.ref_cnt),
                        if c.is_empty() { "-".into() } else { c.join(",") }
                    ))
                }
                _ => {}
            }
        }
        for (k, _) in ha.host.entries() {
            if hb.host.get(k).is_none() {
                g2.push(format!("-{}", label(sys, *k)));
            }
        }
        if !g2.is_empty() {
            parts.push(format!("G2 {}", g2.join(", ")));
        }
    }
    if let (Some(ca), Some(cb)) = (a.conn.simple_cpu(), b.conn.simple_cpu()) {
        let mut d = Vec::new();
        for blk in 1..ca.cpu.num_blocks() as usize {
            let mut x = Vec::new();
            if ca.cpu.ref_cnt(blk as u32) != cb.cpu.ref_cnt(blk as u32) {
                x.push(format!("ref {}->{}", ca.cpu.ref_cnt(blk as u32), cb.cpu.ref_cnt(blk as u32)));
            }
            if ca.cpu.block_hash(blk as u32) != cb.cpu.block_hash(blk as u32) {
                let l = |h: Option<BlockHash>| h.map_or("none".to_string(), |h| label(sys, h));
                x.push(format!("hash {}->{}", l(ca.cpu.block_hash(blk as u32)), l(cb.cpu.block_hash(blk as u32))));
            }
            if ca.cpu.content(blk as u32) != cb.cpu.content(blk as u32) {
                x.push(format!(
                    "kv {}->{}",
                    content(sys, ca.cpu.content(blk as u32)),
                    content(sys, cb.cpu.content(blk as u32))
                ));
            }
            if !x.is_empty() {
                d.push(format!("cpu{blk} {}", x.join(" ")));
            }
        }
        if !d.is_empty() {
            parts.push(format!("CPU {}", d.join(", ")));
        }
    }
    if let (Some(ma), Some(mb)) = (a.conn.mooncake(), b.conn.mooncake()) {
        let added: Vec<String> = mb
            .pool
            .iter()
            .filter(|(k, _)| !ma.pool.contains_key(*k))
            .map(|(k, c)| format!("+{} ({})", label(sys, *k), content(sys, *c)))
            .collect();
        if !added.is_empty() {
            parts.push(format!("pool {}", added.join(", ")));
        }
    }
    for (i, (qa, qb)) in a.reqs.iter().zip(&b.reqs).enumerate() {
        let spec = &sys.workload.requests[i];
        let mut d = Vec::new();
        if qa.status != qb.status {
            d.push(format!("{}->{}", qa.status.short(), qb.status.short()));
        }
        if qa.num_computed != qb.num_computed {
            d.push(format!("computed {}->{}", qa.num_computed, qb.num_computed));
        }
        if qa.table != qb.table {
            d.push(format!("table {:?}", qb.table));
        }
        if qa.turn != qb.turn {
            d.push(format!("input {}", sys.workload.input_no(i as u16, qb.turn) + 1));
        }
        if !d.is_empty() {
            parts.push(format!("{} {}", spec.name, d.join(" ")));
        }
    }
    parts.join("; ")
}

/// Jobs still moving through the worker (for display).
pub fn live_phase(p: Phase) -> &'static str {
    match p {
        Phase::Built => "built",
        Phase::Queued => "queued",
        Phase::Submitted => "copying",
        Phase::Done => "done",
        Phase::Failed => "failed",
        Phase::Reported => "reported",
    }
}
