//! `kvmc explore MODEL`: stateright's Explorer on loopback, states rendered as tables.
//!
//! stateright's Explorer serves every request on one thread and rebuilds a state path from its
//! action indices for each one, a whole path per action of the last state, with no bound: one
//! request for a 300,000-step path held it for seconds and grew it by a gigabyte. kvmc puts a
//! small proxy in front of it: the Explorer listens on a private loopback port, and the proxy,
//! on the address the user gave, refuses a request head over [`MAX_HEAD_BYTES`] and a state
//! path over [`MAX_PATH_STEPS`] steps before the Explorer sees them, so the work and memory of
//! one request stay bounded (about `MAX_PATH_STEPS` x (actions + 2) steps of the model).

use crate::error::{KvmcError, Result};
use crate::model::KvModel;
use crate::props::{self, Kind};
use crate::scope::scenario::scenario_actions;
use crate::scope::Scope;
use clap::Args;
use stateright::Model;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest state path (steps after the initial state) the explorer opens or serves.
pub const MAX_PATH_STEPS: usize = 4096;
/// The largest request head (request line and headers) the explorer reads.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// The largest request body it forwards (the Explorer's own requests have none).
const MAX_BODY_BYTES: usize = 64 * 1024;
/// Connections handled at once; more are answered 503 at once.
const MAX_CONNECTIONS: usize = 32;
/// A client that sends nothing for this long is dropped.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// What a refused client may still send (read and dropped) before its connection closes.
const DRAIN_BYTES: u64 = 8 << 20;

#[derive(Args, Debug)]
pub struct ExploreArgs {
    /// The model file to explore.
    pub model: PathBuf,
    /// Apply a bug variant on top of the profile (see `kvmc list`).
    #[arg(long)]
    pub variant: Option<String>,
    /// Use this profile instead of the model's own.
    #[arg(long)]
    pub profile: Option<String>,
    /// Address to serve on (loopback by default).
    #[arg(long, default_value = "127.0.0.1:3000")]
    pub addr: String,
    /// Open at a path: stateright's index path ("0/1/0/2": the initial state's index, then one
    /// action index per step; at most 4096 steps) or a scenario file.
    #[arg(long)]
    pub path: Option<String>,
    /// Print the URL and check the path (every index names an action of the state it is taken
    /// in) without serving.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(a: ExploreArgs) -> Result<i32> {
    let scope = Arc::new(Scope::load(&a.model)?);
    if let Some(v) = a.variant.as_deref() {
        // As for `check`: a variant that changes nothing this model reads is refused.
        crate::system::rules::resolve(a.profile.as_deref().unwrap_or(&scope.profile), Some(v))
            .map_err(KvmcError::Usage)?;
        crate::check::gate::variant_applies(&scope, a.profile.as_deref().unwrap_or(&scope.profile), v)
            .map_err(|why| KvmcError::Usage(format!("--variant {v}: {why}")))?;
    }
    let defs: Vec<_> =
        props::REGISTRY.iter().filter(|p| props::applies(p, &scope.cfg) && p.kind == Kind::Always).collect();
    let model = KvModel::new(scope, a.profile.as_deref(), a.variant.as_deref(), defs).map_err(KvmcError::Usage)?;
    let mut fragment = String::new();
    if let Some(p) = &a.path {
        let idx = if std::path::Path::new(p).is_file() {
            let acts = scenario_actions(&model.sys, std::path::Path::new(p))?;
            if acts.contains(&crate::model::Action::StepStoresDrain) {
                return Err(KvmcError::input(
                    std::path::Path::new(p),
                    1,
                    "the scenario has steps in which stores finish within the step (kvmc replay with \
                     store_steps = 0), which the explorer does not offer; run it with `kvmc replay SCENARIO`, \
                     or replay the trace with store_steps = 1 to get a scenario the explorer opens"
                        .to_string(),
                ));
            }
            if acts.len() > MAX_PATH_STEPS {
                return Err(KvmcError::input(
                    std::path::Path::new(p),
                    1,
                    format!(
                        "the scenario has {} steps; the explorer opens paths of at most {MAX_PATH_STEPS} steps \
                         (run it with `kvmc replay SCENARIO`)",
                        acts.len()
                    ),
                ));
            }
            let mut s = model.init();
            let mut idx = vec!["0".to_string()];
            for x in acts {
                let mut acts = Vec::new();
                model.actions(&s, &mut acts);
                idx.push(acts.iter().position(|y| *y == x).expect("resolved").to_string());
                s = model.next_state(&s, x).expect("resolved");
            }
            idx.join("/")
        } else {
            check_index_path(&model, p).map_err(|why| {
                let shown: String = p.chars().take(48).collect();
                let more = if shown.len() < p.len() { "..." } else { "" };
                KvmcError::Usage(format!("--path {shown}{more}: {why}"))
            })?;
            p.clone()
        };
        fragment = format!("#/steps/{idx}");
    }
    let addr: std::net::SocketAddr =
        a.addr.parse().map_err(|_| KvmcError::Usage(format!("--addr {}: expected IP:PORT", a.addr)))?;
    if !addr.ip().is_loopback() {
        eprintln!("warning: serving on {addr}, which is not a loopback address");
    }
    if a.dry_run {
        println!("Explorer: http://{}/{fragment}", a.addr);
        return Ok(0);
    }
    let listener = TcpListener::bind(addr).map_err(|e| KvmcError::Usage(format!("cannot listen on {addr}: {e}")))?;
    // The bound address (port 0 picks a free one).
    println!("Explorer: http://{}/{fragment}", listener.local_addr().unwrap_or(addr));
    serve(model, listener)
}

/// Check an index path against the model: the first index names an initial state, each later
/// one an action of the state reached so far (as stateright's Explorer reads it), and there
/// are at most [`MAX_PATH_STEPS`] steps. The error names the first bad segment (1-based).
pub fn check_index_path(model: &KvModel, p: &str) -> std::result::Result<(), String> {
    let segs: Vec<&str> = p.strip_suffix('/').unwrap_or(p).split('/').collect();
    if segs.len() > MAX_PATH_STEPS + 1 {
        return Err(format!("{} steps; the explorer opens paths of at most {MAX_PATH_STEPS} steps", segs.len() - 1));
    }
    let mut idx = Vec::with_capacity(segs.len());
    for (i, s) in segs.iter().enumerate() {
        match s.parse::<usize>() {
            Ok(n) => idx.push(n),
            Err(_) => {
                return Err(format!(
                    "segment {} ({s:?}) is not an index: neither a file nor an index path like 0/1/2",
                    i + 1
                ))
            }
        }
    }
    let inits = model.init_states();
    let mut state = inits.get(idx[0]).cloned().ok_or_else(|| {
        format!(
            "segment 1 ({}) names no initial state: the model has {} (index 0 to {})",
            idx[0],
            inits.len(),
            inits.len() - 1
        )
    })?;
    let mut actions = Vec::new();
    for (i, &n) in idx.iter().enumerate().skip(1) {
        actions.clear();
        model.actions(&state, &mut actions);
        let Some(a) = actions.get(n).cloned() else {
            let at = if i == 1 { "the initial state".to_string() } else { format!("the state after step {}", i - 1) };
            return Err(match actions.len() {
                0 => format!("segment {} ({n}): {at} has no action", i + 1),
                k => format!("segment {} ({n}) names no action of {at}: it has {k} (index 0 to {})", i + 1, k - 1),
            });
        };
        // As the Explorer does: an action without a next state leaves the state as it is.
        if let Some(next) = model.next_state(&state, a) {
            state = next;
        }
    }
    Ok(())
}

/// Serve stateright's Explorer behind the proxy: the Explorer on a private loopback port, the
/// proxy on `listener`. Runs until the process ends.
fn serve(model: KvModel, listener: TcpListener) -> Result<i32> {
    let backend = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| KvmcError::Usage(format!("cannot find a free loopback port for the explorer: {e}")))?;
    std::thread::spawn(move || {
        model.checker().serve(backend);
    });
    let start = Instant::now();
    while TcpStream::connect(backend).is_err() {
        if start.elapsed() > Duration::from_secs(10) {
            return Err(KvmcError::Usage(format!("the explorer did not start on {backend}")));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let busy = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(mut client) = conn else { continue };
        if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            busy.fetch_sub(1, Ordering::SeqCst);
            let _ = respond(&mut client, 503, "Service Unavailable", "too many connections");
            continue;
        }
        let busy = busy.clone();
        std::thread::spawn(move || {
            let _ = proxy(client, backend);
            busy.fetch_sub(1, Ordering::SeqCst);
        });
    }
    Ok(0)
}

/// A plain-text response that closes the connection. What the client still sends is read
/// and dropped (up to a bound) so that closing does not reset the connection before the
/// client has read the answer.
fn respond(client: &mut TcpStream, code: u16, reason: &str, body: &str) -> std::io::Result<()> {
    let body = format!("{body}\n");
    write!(
        client,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    client.flush()?;
    client.shutdown(std::net::Shutdown::Write)?;
    client.set_read_timeout(Some(Duration::from_secs(1)))?;
    let _ = std::io::copy(&mut (&*client).take(DRAIN_BYTES), &mut std::io::sink());
    Ok(())
}

/// Why a request is refused before the Explorer sees it: (status, reason, message).
pub fn refuse(target: &str) -> Option<(u16, &'static str, String)> {
    let path = target.strip_prefix("/.states")?;
    let steps = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).count().saturating_sub(1);
    (steps > MAX_PATH_STEPS).then(|| {
        (
            414,
            "URI Too Long",
            format!("a state path of {steps} steps; the explorer serves paths of at most {MAX_PATH_STEPS} steps"),
        )
    })
}

/// One connection: read one request (bounded), refuse it or forward it to the Explorer with
/// `Connection: close`, copy the answer back, close.
fn proxy(mut client: TcpStream, backend: SocketAddr) -> std::io::Result<()> {
    client.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    client.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD_BYTES {
            let (code, reason) =
                if buf.contains(&b'\n') { (431, "Request Header Fields Too Large") } else { (414, "URI Too Long") };
            let msg = format!(
                "request head over {MAX_HEAD_BYTES} bytes; the explorer serves paths of at most {MAX_PATH_STEPS} steps"
            );
            return respond(&mut client, code, reason, &msg);
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default();
    let mut parts = request_line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(_)) = (method, target, version) else {
        return respond(&mut client, 400, "Bad Request", "not an HTTP request");
    };
    if let Some((code, reason, msg)) = refuse(target) {
        return respond(&mut client, code, reason, &msg);
    }
    let mut headers = String::new();
    let mut body_len = 0usize;
    for h in lines.filter(|l| !l.is_empty()) {
        let name = h.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
        match name.as_str() {
            "content-length" => {
                body_len = h[h.find(':').map_or(h.len(), |i| i + 1)..].trim().parse().unwrap_or(usize::MAX)
            }
            "transfer-encoding" => return respond(&mut client, 411, "Length Required", "chunked bodies are not read"),
            "connection" | "keep-alive" | "proxy-connection" => continue,
            _ => {}
        }
        headers.push_str(h);
        headers.push_str("\r\n");
    }
    if body_len > MAX_BODY_BYTES {
        return respond(&mut client, 413, "Payload Too Large", "request body too large");
    }
    let mut body = buf[head_end..].to_vec();
    while body.len() < body_len {
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        body.extend_from_slice(&chunk[..n]);
    }
    body.truncate(body_len);
    let mut up = TcpStream::connect(backend)?;
    write!(up, "{method} {target} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n")?;
    up.write_all(&body)?;
    up.flush()?;
    std::io::copy(&mut up, &mut client)?;
    client.flush()
}
