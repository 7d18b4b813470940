//! `kvmc explore`: the dry run checks the path it is given, and the served Explorer refuses
//! state paths and request heads past its bounds (issue 19, items 15 and 16).

use crate::common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[test]
fn dry_run_checks_every_segment_of_an_index_path() {
    let m = "models/error-mid-prefill.toml";
    for (path, want) in [
        ("0/99999/0", "segment 2 (99999) names no action of the initial state: it has 3"),
        ("1", "segment 1 (1) names no initial state: the model has 1"),
        ("0/2/2/7", "segment 4 (7) names no action of the state after step 2"),
        ("0/x", "segment 2 (\"x\") is not an index"),
    ] {
        let o = kvmc(&["explore", m, "--path", path, "--dry-run"]);
        assert_eq!(o.status.code(), Some(2), "{path}: {}", stdout(&o));
        assert!(stderr(&o).contains(&format!("--path {path}: {want}")), "{path}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "no URL for a bad path: {}", stdout(&o));
    }
    // A path longer than the explorer serves is refused too, without echoing all of it.
    let long = std::iter::once("0").chain(std::iter::repeat_n("2", 5000)).collect::<Vec<_>>().join("/");
    let o = kvmc(&["explore", m, "--path", &long, "--dry-run"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("5000 steps; the explorer opens paths of at most 4096 steps"), "{}", stderr(&o));
    assert!(stderr(&o).len() < 300, "{}", stderr(&o));
    // A path of actions that exist opens.
    let o = kvmc(&["explore", m, "--path", "0/2/2/2", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("#/steps/0/2/2/2"), "{}", stdout(&o));
}

/// The explorer on a free loopback port; killed when dropped.
struct Server(Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(model: &str) -> Server {
    // A port that was free a moment ago.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvmc"))
        .args(["explore", model, "--addr", &addr])
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kvmc explore starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), format!("Explorer: http://{addr}/"));
    // Serving once it accepts connections.
    let start = std::time::Instant::now();
    while TcpStream::connect(&addr).is_err() {
        assert!(start.elapsed() < Duration::from_secs(30), "the explorer listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Server(child, port)
}

/// Send one GET and return the response (status line first); the server closes after it.
fn get(port: u16, target: &str) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(format!("GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn the_explorer_refuses_oversized_state_paths_and_keeps_serving() {
    let srv = serve("models/error-mid-prefill.toml");
    let path = |steps: usize| std::iter::once("0").chain(std::iter::repeat_n("2", steps)).collect::<Vec<_>>().join("/");
    // The request of the issue: 300,000 steps (a 600 KB request line).
    let r = get(srv.1, &format!("/.states/{}", path(300_000)));
    assert!(r.starts_with("HTTP/1.1 414 "), "{}", &r[..r.len().min(200)]);
    assert!(r.contains("at most 4096 steps"), "{r}");
    // Past the bound, with a head that is small enough to read.
    let r = get(srv.1, &format!("/.states/{}", path(4097)));
    assert!(r.starts_with("HTTP/1.1 414 "), "{}", &r[..r.len().min(200)]);
    // Headers past the head limit.
    let mut s = TcpStream::connect(("127.0.0.1", srv.1)).unwrap();
    let big = format!("GET /.status HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(100_000));
    s.write_all(big.as_bytes()).unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.starts_with("HTTP/1.1 431 "), "{}", &r[..r.len().min(200)]);
    // Still serving: the Explorer's page and states come through the proxy.
    let r = get(srv.1, "/");
    assert!(r.starts_with("HTTP/1.1 200 "), "{}", &r[..r.len().min(200)]);
    let r = get(srv.1, "/.states/0");
    assert!(r.starts_with("HTTP/1.1 200 ") && r.contains("arrive A"), "{}", &r[..r.len().min(300)]);
    let r = get(srv.1, &format!("/.states/{}", path(40)));
    assert!(r.starts_with("HTTP/1.1 200 "), "{}", &r[..r.len().min(300)]);
    // stateright answers a path of unknown actions itself.
    let r = get(srv.1, "/.states/0/99999");
    assert!(r.starts_with("HTTP/1.1 404 "), "{}", &r[..r.len().min(300)]);
}
