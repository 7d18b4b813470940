//! `kvmc explore`: the dry run checks the path it is given; every counterexample of the gate
//! opens, by the command and by the URL path the report prints, at a last state that violates
//! the same property (issue 24); the served explorer answers its page and JSON and refuses
//! malformed and oversized requests quickly.

use crate::common::*;
use kvmc::explorer::{self, Target};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
    assert!(stdout(&o).contains("&path=0/2/2/2"), "{}", stdout(&o));
    // Neither a model nor a scenario: a usage error.
    let o = kvmc(&["explore", "--dry-run"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("needs a MODEL file"), "{}", stderr(&o));
}

/// Split a printed command into its arguments (the report quotes nothing in the gate).
fn args_of(command: &str) -> Vec<String> {
    let words: Vec<String> = command.split_whitespace().map(str::to_string).collect();
    assert_eq!(words[0], "kvmc", "{command}");
    assert!(words.iter().all(|w| !w.contains('\'')), "unquoted: {command}");
    words[1..].to_vec()
}

/// Issue 24, "the deep link round trip": for every counterexample of the gate, the command the
/// JSON report prints opens a path whose last state violates the same property (checked by
/// `--dry-run`), and so does its URL path (checked through the explorer's own view, without a
/// browser); the text report prints the same command.
#[test]
fn every_gate_counterexample_opens_by_its_command_and_url() {
    let o = kvmc(&["check", "--format", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let text = stdout(&kvmc(&["check", "--verbose"]));
    let (mut n, mut pd_seen) = (0, 0);
    for r in v["results"].as_array().unwrap() {
        let Some(cx) = r["counterexample"].as_object() else { continue };
        let property = r["property"].as_str().unwrap();
        let steps = cx["steps"].as_array().unwrap().len();
        let command = cx["explore"]["command"].as_str().unwrap_or_else(|| panic!("no explore link: {r}"));
        let url = cx["explore"]["url"].as_str().unwrap();
        assert!(command.contains(&format!("--profile {}", r["profile"].as_str().unwrap())), "{command}");
        // The command: its dry run resolves the path and names what the last state violates.
        let mut args = args_of(command);
        args.push("--dry-run".into());
        let o = kvmc(&args.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(o.status.code(), Some(0), "{command}: {}", stderr(&o));
        let out = stdout(&o);
        assert!(out.contains(&format!("Explorer: http://127.0.0.1:3000{url}\n")), "{command}: {out}");
        let last = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("last state (step {steps}) violates: ")))
            .unwrap_or_else(|| panic!("{command}: {out}"));
        assert!(last.split(", ").any(|p| p == property), "{command}: the last state violates {last}, not {property}");
        // The URL path, through the explorer's view (what the page fetches).
        let t = Target::from_query(url.strip_prefix("/?").unwrap()).unwrap();
        assert_eq!(t.property.as_deref(), Some(property));
        let m = explorer::load_model(&root().join(&t.model), t.profile.as_deref(), t.variant.as_deref()).unwrap();
        let view = explorer::view(&m, &t, Some(usize::MAX)).unwrap();
        assert_eq!(view["at"].as_u64(), Some(steps as u64), "{url}");
        assert!(
            view["violations"].as_array().unwrap().iter().any(|x| x["property"] == property),
            "{url}: the last state does not violate {property}"
        );
        assert_eq!(view["header"]["profile"], r["profile"], "{url}");
        // P/D: both instances and the router's state (issue 24); a refused or wrong merge is
        // marked on the router's row.
        if m.sys.pd.is_some() {
            let pd = &view["state"]["pd"];
            assert!(!pd["d"]["g1"]["blocks"].as_array().unwrap().is_empty(), "{url}: D's G1");
            assert!(pd["d"]["requests"].as_array().is_some_and(|v| !v.is_empty()), "{url}: D's requests");
            assert!(pd["d"]["connector"].is_object(), "{url}: D's connector");
            assert!(!pd["router"].as_array().unwrap().is_empty(), "{url}: the router's state");
            if property == "pd-equals-colocated" {
                assert!(pd["router"].as_array().unwrap().iter().any(|x| x["bad"] == true), "{url}: the merge");
            }
            pd_seen += 1;
        } else {
            assert!(view["state"].get("pd").is_none(), "{url}");
        }
        assert!(text.contains(&format!("  explore: {command}\n")), "the text report prints {command}");
        n += 1;
    }
    assert!(n >= 100, "the gate has {n} counterexamples");
    assert!(pd_seen >= 3, "the gate has {pd_seen} P/D counterexamples");
}

/// `explore --path SCENARIO` uses the scenario's model, profile and variant: a #60810
/// counterexample under vllm-0.32 written by `check --out` opens under vllm-0.32 (where
/// vllm-0.33 violates nothing on the same path).
#[test]
fn a_scenario_opens_with_its_own_profile_and_variant() {
    let d = tempdir("explore-scen");
    let o = kvmc(&[
        "check",
        "models/stream-resume.toml",
        "--profile",
        "vllm-0.32",
        "--property",
        "host-integrity",
        "--out",
        d.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let scen = d.join("stream-resume__vllm-0.32__fixed__host-integrity.scenario.toml");
    let o = kvmc(&["explore", "--path", scen.to_str().unwrap(), "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("profile=vllm-0.32"), "{}", stdout(&o));
    assert!(stdout(&o).contains("violates: host-integrity"), "{}", stdout(&o));
    // The command line still overrides the scenario.
    let o = kvmc(&["explore", "--path", scen.to_str().unwrap(), "--profile", "vllm-0.33", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("violates: nothing"), "{}", stdout(&o));
}

/// Issue 24: a `kvmc conform` divergence opens in the explorer, the log beside the model: the
/// command and URL that text, JSON and JUnit print open it at the diverging step, with every
/// step before it listed and the differing log line marked; the server refuses logs outside
/// its directory.
#[test]
fn a_conform_divergence_opens_with_the_log_beside_the_model() {
    use kvmc::explorer::conform::{conform_view, ConformTarget};
    // A real vLLM 0.24 log checked under 0.32's preemption rule (it diverges at step 7).
    let log = "tests/conformance/fixtures/vllm-0.24/async-preempt-restart.jsonl";
    let pv = ["--profile", "vllm-0.24", "--variant", "preempt-checks-deferred-free"];
    let o = kvmc(&[&["conform", log, "--format", "json"][..], &pv[..]].concat());
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let d = &v["logs"][0]["divergence"];
    let (step, line) = (d["step"].as_u64().unwrap(), d["line"].as_u64().unwrap());
    let command = d["explore"]["command"].as_str().unwrap();
    let url = d["explore"]["url"].as_str().unwrap();
    assert_eq!(
        command,
        format!("kvmc explore --conform {log} --profile vllm-0.24 --variant preempt-checks-deferred-free")
    );
    let text = stdout(&kvmc(&[&["conform", log][..], &pv[..]].concat()));
    assert!(text.contains(&format!("  explore: {command}\n")), "{text}");
    assert!(text.contains(&format!("  open:    http://127.0.0.1:3000{url}\n")), "{text}");
    let junit = stdout(&kvmc(&[&["conform", log, "--format", "junit"][..], &pv[..]].concat()));
    assert!(junit.contains(&format!("<property name=\"explore_command\" value=\"{command}\"/>")), "{junit}");
    assert!(junit.contains(&format!("<property name=\"explore_url\" value=\"{}\"/>", url.replace('&', "&amp;"))));
    // The command: its dry run names the same divergence.
    let mut args = args_of(command);
    args.push("--dry-run".into());
    let o = kvmc(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains(&format!("Explorer: http://127.0.0.1:3000{url}\n")), "{}", stdout(&o));
    assert!(stdout(&o).contains(&format!("diverges at step {step} (line {line}: ")), "{}", stdout(&o));
    // The URL, through the explorer's view (what the page fetches).
    let t = ConformTarget::from_query(url.strip_prefix("/?").unwrap()).unwrap();
    let view = conform_view(&root().join(&t.log), &t, None).unwrap();
    assert_eq!(view["at"].as_u64(), Some(step), "opens at the diverging step");
    let steps = view["steps"].as_array().unwrap();
    assert_eq!(steps.len() as u64, step + 1, "the initial state and every step up to the divergence");
    for (i, s) in steps.iter().enumerate().skip(1) {
        assert_eq!(s["action"], format!("step {i}"));
        assert!(!s["story"].as_str().unwrap().is_empty(), "step {i}: the model's side");
        assert_eq!(s["violated"].as_array().unwrap().is_empty(), i as u64 != step, "step {i}");
        assert!(!s["log"].as_array().unwrap().is_empty(), "step {i}: the log's side");
    }
    let differs: Vec<_> =
        steps.iter().flat_map(|s| s["log"].as_array().unwrap()).filter(|l| l["differs"] == true).collect();
    assert_eq!(differs.len(), 1, "one differing line");
    assert_eq!(differs[0]["line"].as_u64(), Some(line));
    assert_eq!(view["divergence"]["model"], d["model"]);
    assert_eq!(view["divergence"]["implementation"], d["implementation"]);
    assert!(!view["state"]["g1"]["blocks"].as_array().unwrap().is_empty() && view["state"]["requests"].is_array());
    assert!(view["prev_state"].is_object());
    // A log that conforms: no link, and the explorer says it conforms.
    let ok = "tests/conformance/fixtures/main.jsonl";
    let o = kvmc(&["conform", ok, "--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["logs"][0]["divergence"].is_null());
    let o = kvmc(&["explore", "--conform", ok, "--dry-run"]);
    assert!(stdout(&o).contains("\nconforms ("), "{}", stdout(&o));
    // Served: the page and its data; logs outside the directory or not .jsonl are refused.
    let srv = serve(&[&["--conform", log][..], &pv[..]].concat());
    assert!(srv.2.ends_with(url), "{} {url}", srv.2);
    let r = get(srv.1, &format!("/api/view?{}", url.strip_prefix("/?").unwrap()));
    assert!(r.starts_with("HTTP/1.1 200 ") && r.contains("\"mode\":\"conform\""), "{}", head(&r));
    assert!(get(srv.1, "/").contains("Location: /?conform="), "/ opens the log");
    assert!(get(srv.1, "/api/view?conform=/etc/passwd.jsonl").starts_with("HTTP/1.1 404 "));
    assert!(get(srv.1, "/api/view?conform=Cargo.toml").starts_with("HTTP/1.1 404 "));
}

#[test]
fn binding_another_address_than_loopback_warns() {
    let o = kvmc(&["explore", "models/error-mid-prefill.toml", "--bind", "0.0.0.0:0", "--dry-run"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stderr(&o).contains("warning: --bind 0.0.0.0:0 is not a loopback address"), "{}", stderr(&o));
    let o = kvmc(&["explore", "models/error-mid-prefill.toml", "--dry-run"]);
    assert!(stderr(&o).is_empty(), "loopback by default: {}", stderr(&o));
    assert!(stdout(&o).starts_with("Explorer: http://127.0.0.1:3000/?"), "{}", stdout(&o));
    let o = kvmc(&["explore", "models/error-mid-prefill.toml", "--bind", "nowhere", "--dry-run"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--bind nowhere: expected IP:PORT"), "{}", stderr(&o));
}

/// The explorer on a free loopback port; killed when dropped.
pub struct Server(Child, pub u16, pub String);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `kvmc explore ARGS --bind 127.0.0.1:PORT`; the URL it printed is `.2`.
pub fn serve(args: &[&str]) -> Server {
    // A port that was free a moment ago.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kvmc"))
        .arg("explore")
        .args(args)
        .args(["--bind", &addr])
        .current_dir(root())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kvmc explore starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let url = line.trim().strip_prefix("Explorer: ").unwrap_or_else(|| panic!("{line}")).to_string();
    assert!(
        url.starts_with(&format!("http://{addr}/?model=")) || url.starts_with(&format!("http://{addr}/?conform=")),
        "{url}"
    );
    let start = Instant::now();
    while TcpStream::connect(&addr).is_err() {
        assert!(start.elapsed() < Duration::from_secs(30), "the explorer listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
    Server(child, port, url)
}

/// Send raw bytes and return the response; the server closes after it.
fn raw(port: u16, req: &[u8]) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let _ = s.write_all(req);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(port: u16, target: &str) -> String {
    raw(port, format!("GET {target} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
}

fn head(r: &str) -> &str {
    &r[..r.len().min(300)]
}

#[test]
fn the_explorer_serves_its_page_and_refuses_bad_requests_quickly() {
    let srv = serve(&["models/error-mid-prefill.toml", "--property", "host-integrity", "--path", "0/0/0/2/0/1"]);
    let q = srv.2[srv.2.find("/?").unwrap()..].to_string();
    // The page, its script and style, all from the binary.
    let r = get(srv.1, &q);
    assert!(r.starts_with("HTTP/1.1 200 ") && r.contains("<script src=\"/app.js\">"), "{}", head(&r));
    assert!(get(srv.1, "/app.js").starts_with("HTTP/1.1 200 "));
    assert!(get(srv.1, "/app.css").starts_with("HTTP/1.1 200 "));
    // "/" sends the browser to the target the command line named.
    let r = get(srv.1, "/");
    assert!(r.starts_with("HTTP/1.1 302 ") && r.contains(&format!("Location: {q}\r\n")), "{}", head(&r));
    // The data: the violating state (step 5) and its explanation.
    let api = q.replacen("/?", "/api/view?", 1);
    let r = get(srv.1, &api);
    assert!(r.starts_with("HTTP/1.1 200 "), "{}", head(&r));
    let body: serde_json::Value = serde_json::from_str(r.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["at"], 5);
    assert_eq!(body["violations"][0]["property"], "host-integrity");
    assert!(body["state"]["host"]["entries"].as_array().unwrap().iter().any(|e| e["bad"] == true), "{body}");
    let path = |steps: usize| std::iter::once("0").chain(std::iter::repeat_n("2", steps)).collect::<Vec<_>>().join("/");
    // A 300,000-step path (a 600 KB request line): refused before any work.
    let r = get(srv.1, &format!("/api/view?model=models/error-mid-prefill.toml&path={}", path(300_000)));
    assert!(r.starts_with("HTTP/1.1 414 "), "{}", head(&r));
    // Past the step bound, with a head small enough to read.
    let r = get(srv.1, &format!("/api/view?model=models/error-mid-prefill.toml&path={}", path(4097)));
    assert!(r.starts_with("HTTP/1.1 414 ") && r.contains("at most 4096 steps"), "{}", head(&r));
    // Headers past the head limit.
    let r = raw(srv.1, format!("GET / HTTP/1.1\r\nX-Pad: {}\r\n\r\n", "a".repeat(100_000)).as_bytes());
    assert!(r.starts_with("HTTP/1.1 431 "), "{}", head(&r));
    for (req, code) in [
        (&b"NONSENSE\r\n\r\n"[..], "400"),
        (b"GET / HTTP/1.1 extra\r\n\r\n", "400"),
        (b"GET \xff\xfe HTTP/1.1\r\n\r\n", "400"),
        (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", "400"),
        (b"POST /api/view HTTP/1.1\r\n\r\n", "405"),
        (b"GET / HTTP/1.1\r\nContent-Length: 999999999\r\n\r\n", "413"),
        (b"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "411"),
    ] {
        let r = raw(srv.1, req);
        assert!(r.starts_with(&format!("HTTP/1.1 {code} ")), "{:?}: {}", String::from_utf8_lossy(req), head(&r));
    }
    // A model file outside the directory the explorer serves.
    let outside = std::env::temp_dir().join(format!("kvmc-explore-outside-{}.toml", std::process::id()));
    std::fs::copy(root().join("models/error-mid-prefill.toml"), &outside).unwrap();
    let outside_q = format!("/api/view?model={}", outside.display());
    let r = get(srv.1, &outside_q);
    let _ = std::fs::remove_file(&outside);
    assert!(r.starts_with("HTTP/1.1 404 ") && r.contains("outside the directory"), "{}", head(&r));
    for (target, code, says) in [
        ("/api/view?model=../Cargo.lock", "404", "not a .toml"),
        ("/api/view?model=/etc/passwd.toml", "404", "model"),
        ("/api/view?model=Cargo.toml", "400", ""),
        ("/api/view?path=0", "400", "names no model"),
        ("/api/view?model=models/error-mid-prefill.toml&bogus=1", "400", "unknown query parameter"),
        ("/api/view?model=models/error-mid-prefill.toml&path=0/99999", "404", "names no action"),
        ("/api/view?model=models/error-mid-prefill.toml&at=x", "400", "at"),
        ("/api/view?model=%zz", "400", "percent-encoded"),
        ("/api/view?model=models/error-mid-prefill.toml&variant=no-such", "400", "no-such"),
        ("/nowhere", "404", "no such page"),
    ] {
        let r = get(srv.1, target);
        assert!(r.starts_with(&format!("HTTP/1.1 {code} ")) && r.contains(says), "{target}: {}", head(&r));
    }
    // A client that connects and sends nothing does not hold the others up.
    let _idle = TcpStream::connect(("127.0.0.1", srv.1)).unwrap();
    assert!(get(srv.1, "/app.css").starts_with("HTTP/1.1 200 "));
    // Still serving.
    let r = get(srv.1, &format!("/api/view?model=models/error-mid-prefill.toml&path={}", path(40)));
    assert!(r.starts_with("HTTP/1.1 200 "), "{}", head(&r));
}

/// Walk a DOT file as a small parser would: statements `ID [attrs];` and `ID -> ID [attrs];`
/// with double-quoted strings (backslash escapes); returns (nodes with their attributes,
/// edges). Panics naming the line on anything else.
/// (id, attributes) of each node; (from, to) of each edge.
type Pairs = Vec<(String, String)>;

fn parse_dot(text: &str) -> (Pairs, Pairs) {
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("digraph counterexample {"));
    let (mut nodes, mut edges) = (Vec::new(), Vec::new());
    let mut closed = false;
    for (i, l) in lines.enumerate() {
        assert!(!closed, "line {}: after the closing brace: {l}", i + 2);
        let l = l.trim();
        if l == "}" {
            closed = true;
            continue;
        }
        let body = l.strip_suffix(';').unwrap_or_else(|| panic!("line {}: no ';': {l}", i + 2));
        let (head, attrs) = body.split_once(" [").unwrap_or_else(|| panic!("line {}: no attributes: {l}", i + 2));
        let attrs = attrs.strip_suffix(']').unwrap_or_else(|| panic!("line {}: unclosed [: {l}", i + 2));
        // Strings close: every unescaped quote pairs up.
        let mut quotes = 0;
        let mut esc = false;
        for c in attrs.chars() {
            match (esc, c) {
                (true, _) => esc = false,
                (false, '\\') => esc = true,
                (false, '"') => quotes += 1,
                _ => {}
            }
        }
        assert!(quotes % 2 == 0 && !esc, "line {}: unbalanced quotes: {l}", i + 2);
        match head.split_once(" -> ") {
            Some((a, b)) => edges.push((a.to_string(), b.to_string())),
            None if head == "node" => {}
            None => {
                assert!(head.chars().all(|c| c.is_ascii_alphanumeric()), "line {}: node id {head}", i + 2);
                nodes.push((head.to_string(), attrs.to_string()))
            }
        }
    }
    assert!(closed, "no closing brace");
    (nodes, edges)
}

/// Issue 24, exports: the ITF trace holds the full state as ITF values (integers as #bigint)
/// and marks the violating state; the DOT graph parses, has clean labels and the violating
/// state drawn red.
#[test]
fn itf_and_dot_exports_parse_back_with_the_state_and_the_violation() {
    let d = tempdir("explore-exports");
    let o =
        kvmc(&["check", "models/error-mid-prefill.toml", "--property", "host-integrity", "--out", d.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(10), "{}", stderr(&o));
    let file = |ext: &str| d.join(format!("error-mid-prefill__vllm-0.33__fixed__host-integrity.{ext}"));
    let itf: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(file("itf.json")).unwrap()).unwrap();
    assert_eq!(itf["#meta"]["format"], "ITF");
    let vars: Vec<&str> = itf["vars"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    let states = itf["states"].as_array().unwrap();
    assert_eq!(states.len(), 6, "the initial state and 5 steps");
    fn no_plain_numbers(v: &serde_json::Value, at: &str) {
        match v {
            serde_json::Value::Number(n) => panic!("{at}: a plain number {n} (ITF writes #bigint)"),
            serde_json::Value::Null => panic!("{at}: null"),
            serde_json::Value::Array(a) => a.iter().for_each(|x| no_plain_numbers(x, at)),
            serde_json::Value::Object(o) => {
                o.iter().filter(|(k, _)| *k != "#meta").for_each(|(k, x)| no_plain_numbers(x, &format!("{at}.{k}")))
            }
            _ => {}
        }
    }
    for (i, s) in states.iter().enumerate() {
        assert_eq!(s["#meta"]["index"], i);
        for v in &vars {
            assert!(s.get(*v).is_some(), "state {i} lacks {v}");
        }
        no_plain_numbers(s, &format!("state {i}"));
        let blocks = s["g1"]["blocks"].as_array().unwrap();
        assert_eq!(blocks.len(), 4, "G1's 4 blocks");
        assert_eq!(blocks[0]["id"], serde_json::json!({"#bigint": "1"}));
    }
    assert_eq!(states[1]["mbt::actionTaken"], "arrive A");
    assert_eq!(states[5]["violated"], serde_json::json!(["host-integrity"]));
    assert_eq!(states[4]["violated"], serde_json::json!([]));
    let bad: Vec<&serde_json::Value> =
        states[5]["host"]["entries"].as_array().unwrap().iter().filter(|e| e["bad"] == true).collect();
    assert_eq!(bad.len(), 1, "{}", states[5]["host"]);
    assert_eq!(bad[0]["key"], "A.1");
    assert_eq!(states[5]["requests"][0]["status"], "FINISHED_ERROR");
    // DOT.
    let dot = std::fs::read_to_string(file("dot")).unwrap();
    let (nodes, edges) = parse_dot(&dot);
    assert_eq!(nodes.len(), 6, "{dot}");
    assert_eq!(edges.len(), 5, "{dot}");
    for (a, b) in &edges {
        assert!(nodes.iter().any(|(n, _)| n == a) && nodes.iter().any(|(n, _)| n == b), "edge {a} -> {b}");
    }
    let red: Vec<&(String, String)> = nodes.iter().filter(|(_, a)| a.contains("color=red")).collect();
    assert_eq!(red.len(), 1, "{dot}");
    assert_eq!(red[0].0, "s5");
    assert!(red[0].1.contains("VIOLATES host-integrity"), "{dot}");
    assert!(!dot.contains("\\\"\\\""), "no doubled quotes: {dot}");
}
