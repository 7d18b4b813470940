//! The explorer's HTTP server: std only, one thread per connection (at most
//! [`MAX_CONNECTIONS`] at once), one GET per connection. It serves the embedded page
//! (`assets/`: HTML, JS, CSS; nothing is fetched from the network) and `/api/view?QUERY`, the
//! data of one target as JSON ([`super::view`]). Requests are bounded before any work: a head
//! over [`MAX_HEAD_BYTES`] is refused (414 or 431), a request with a body (411, 413), a method
//! other than GET or HEAD (405), a path of more than [`super::MAX_PATH_STEPS`] steps (414), a
//! client that sends nothing for [`CLIENT_TIMEOUT`] is dropped.

use super::conform::{conform_view, log_file, ConformTarget};
use super::{model_file, view, Target, MAX_PATH_STEPS};
use crate::model::KvModel;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The largest request head (request line and headers) the explorer reads.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Connections handled at once; more are answered 503 at once.
pub const MAX_CONNECTIONS: usize = 32;
/// A client that sends nothing for this long is dropped.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Models kept loaded (by file, profile, variant); the oldest goes first.
const MAX_MODELS: usize = 16;
/// What a refused client may still send (read and dropped) before its connection closes.
const DRAIN_BYTES: u64 = 1 << 20;

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

type Key = (PathBuf, Option<String>, Option<String>);

/// What the server holds: the directory it serves models from, the target `/` opens, and
/// the models loaded so far.
pub struct Explorer {
    pub root: PathBuf,
    pub default: Target,
    /// Where `/` leads instead of `default` (a conformance run: `/?conform=LOG...`).
    pub home: Option<String>,
    models: Mutex<Vec<(Key, Arc<KvModel>)>>,
}

/// A response: status, reason, content type, body.
pub struct Response {
    pub code: u16,
    pub reason: &'static str,
    pub ctype: &'static str,
    pub body: String,
    pub location: Option<String>,
}

fn resp(code: u16, reason: &'static str, ctype: &'static str, body: String) -> Response {
    Response { code, reason, ctype, body, location: None }
}

fn json_error(code: u16, reason: &'static str, msg: &str) -> Response {
    resp(code, reason, "application/json", serde_json::json!({ "error": msg }).to_string())
}

impl Explorer {
    pub fn new(root: PathBuf, default: Target) -> Self {
        Explorer { root, default, home: None, models: Mutex::new(Vec::new()) }
    }

    fn model(&self, t: &Target) -> Result<Arc<KvModel>, Response> {
        let file = model_file(&self.root, &t.model).map_err(|e| json_error(404, "Not Found", &e))?;
        let key = (file.clone(), t.profile.clone(), t.variant.clone());
        let mut models = self.models.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, m)) = models.iter().find(|(k, _)| *k == key) {
            return Ok(m.clone());
        }
        let m = Arc::new(
            super::load_model(&file, t.profile.as_deref(), t.variant.as_deref())
                .map_err(|e| json_error(400, "Bad Request", &e.to_string()))?,
        );
        if models.len() >= MAX_MODELS {
            models.remove(0);
        }
        models.push((key, m.clone()));
        Ok(m)
    }

    /// Answer one request target (path and query) of a GET.
    pub fn answer(&self, target: &str) -> Response {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        match path {
            "/" | "/index.html" => {
                if query.is_empty() {
                    let mut r = resp(302, "Found", "text/plain; charset=utf-8", String::new());
                    r.location = Some(self.home.clone().unwrap_or_else(|| self.default.url_path()));
                    return r;
                }
                resp(200, "OK", "text/html; charset=utf-8", INDEX_HTML.to_string())
            }
            "/app.js" => resp(200, "OK", "text/javascript; charset=utf-8", APP_JS.to_string()),
            "/app.css" => resp(200, "OK", "text/css; charset=utf-8", APP_CSS.to_string()),
            "/api/view" => self.api_view(query),
            _ => json_error(404, "Not Found", &format!("no such page: {path}")),
        }
    }

    fn api_view(&self, query: &str) -> Response {
        if query.split('&').any(|p| p.starts_with("conform=")) {
            return self.api_conform(query);
        }
        let t = match Target::from_query(query) {
            Ok(t) => t,
            Err(e) => return json_error(400, "Bad Request", &e),
        };
        let steps = t.path.split('/').filter(|s| !s.is_empty()).count().saturating_sub(1);
        if steps > MAX_PATH_STEPS {
            let msg =
                format!("a state path of {steps} steps; the explorer serves paths of at most {MAX_PATH_STEPS} steps");
            return json_error(414, "URI Too Long", &msg);
        }
        let at = query.split('&').find_map(|p| p.strip_prefix("at=")).map(|v| v.parse::<usize>());
        let at = match at {
            None => None,
            Some(Ok(n)) => Some(n),
            Some(Err(_)) => return json_error(400, "Bad Request", "at: not a step number"),
        };
        let m = match self.model(&t) {
            Ok(m) => m,
            Err(r) => return r,
        };
        if let Some(sc) = &t.scenario {
            let acts = model_file(&self.root, sc)
                .map_err(|e| e.replacen("model", "scenario", 1))
                .and_then(|f| crate::scope::scenario::scenario_actions(&m.sys, &f).map_err(|e| e.to_string()));
            return match acts.and_then(|acts| {
                if acts.len() > MAX_PATH_STEPS {
                    return Err(format!("{} steps; the explorer opens at most {MAX_PATH_STEPS}", acts.len()));
                }
                super::view_of(&m, &t, &acts, at)
            }) {
                Ok(v) => resp(200, "OK", "application/json", v.to_string()),
                Err(e) => json_error(404, "Not Found", &format!("scenario {}: {e}", short(sc))),
            };
        }
        match view(&m, &t, at) {
            Ok(v) => resp(200, "OK", "application/json", v.to_string()),
            Err(e) => json_error(404, "Not Found", &format!("path {}: {e}", short(&t.path))),
        }
    }
}

impl Explorer {
    /// A conformance run's view (src/explorer/conform.rs): the log must be a `.jsonl` file
    /// under the served directory.
    fn api_conform(&self, query: &str) -> Response {
        let t = match ConformTarget::from_query(query) {
            Ok(t) => t,
            Err(e) => return json_error(400, "Bad Request", &e),
        };
        let at = match query.split('&').find_map(|p| p.strip_prefix("at=")).map(|v| v.parse::<usize>()) {
            None => None,
            Some(Ok(n)) => Some(n),
            Some(Err(_)) => return json_error(400, "Bad Request", "at: not a step number"),
        };
        let file = match log_file(&self.root, &t.log) {
            Ok(f) => f,
            Err(e) => return json_error(404, "Not Found", &e),
        };
        match conform_view(&file, &t, at) {
            Ok(v) => resp(200, "OK", "application/json", v.to_string()),
            Err(e) => json_error(400, "Bad Request", &e.to_string()),
        }
    }
}

fn short(s: &str) -> String {
    let shown: String = s.chars().take(48).collect();
    if shown.len() < s.len() {
        format!("{shown}...")
    } else {
        shown
    }
}

/// Serve until the process ends.
pub fn serve(ex: Arc<Explorer>, listener: TcpListener) {
    let busy = Arc::new(AtomicUsize::new(0));
    for conn in listener.incoming() {
        let Ok(mut client) = conn else { continue };
        if busy.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            busy.fetch_sub(1, Ordering::SeqCst);
            let _ = write_response(&mut client, &json_error(503, "Service Unavailable", "too many connections"), true);
            continue;
        }
        let (busy, ex) = (busy.clone(), ex.clone());
        std::thread::spawn(move || {
            let _ = handle(&ex, client);
            busy.fetch_sub(1, Ordering::SeqCst);
        });
    }
}

fn write_response(client: &mut TcpStream, r: &Response, with_body: bool) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n\
         X-Content-Type-Options: nosniff\r\nConnection: close\r\n",
        r.code,
        r.reason,
        r.ctype,
        r.body.len()
    );
    if let Some(l) = &r.location {
        head.push_str(&format!("Location: {l}\r\n"));
    }
    head.push_str("\r\n");
    client.write_all(head.as_bytes())?;
    if with_body {
        client.write_all(r.body.as_bytes())?;
    }
    client.flush()
}

/// A refusal: answer, then read and drop what the client still sends (bounded), so that
/// closing does not reset the connection before the client has read the answer.
fn refuse(client: &mut TcpStream, r: Response) -> std::io::Result<()> {
    write_response(client, &r, true)?;
    client.shutdown(std::net::Shutdown::Write)?;
    client.set_read_timeout(Some(Duration::from_secs(1)))?;
    let _ = std::io::copy(&mut (&*client).take(DRAIN_BYTES), &mut std::io::sink());
    Ok(())
}

/// One connection: read one request head (bounded), answer it, close.
fn handle(ex: &Explorer, mut client: TcpStream) -> std::io::Result<()> {
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
            return refuse(&mut client, json_error(code, reason, &msg));
        }
        let n = client.read(&mut chunk)?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let Ok(head) = std::str::from_utf8(&buf[..head_end]) else {
        return refuse(&mut client, json_error(400, "Bad Request", "the request head is not UTF-8"));
    };
    let mut lines = head.split("\r\n");
    let mut parts = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return refuse(&mut client, json_error(400, "Bad Request", "not an HTTP request line"));
    };
    if !version.starts_with("HTTP/1.") || !target.starts_with('/') {
        return refuse(&mut client, json_error(400, "Bad Request", "not an HTTP/1.x request"));
    }
    for h in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = h.split_once(':') else {
            return refuse(&mut client, json_error(400, "Bad Request", "a header line without ':'"));
        };
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" if value.trim() != "0" => {
                return refuse(&mut client, json_error(413, "Payload Too Large", "the explorer reads no request body"))
            }
            "transfer-encoding" => {
                return refuse(&mut client, json_error(411, "Length Required", "chunked bodies are not read"))
            }
            _ => {}
        }
    }
    if method != "GET" && method != "HEAD" {
        return refuse(&mut client, json_error(405, "Method Not Allowed", "the explorer answers GET only"));
    }
    let r = ex.answer(target);
    write_response(&mut client, &r, method == "GET")
}
