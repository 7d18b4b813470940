//! Deep links into the explorer: for each counterexample, the command that serves it
//! (`kvmc explore MODEL --profile P [--variant V] --property X --path P`) and the URL path
//! (`/?model=...&profile=...&path=...`) that opens it on a running `kvmc explore` started in
//! the same directory. Text, JSON and JUnit reports print both; src/explorer reads them.

/// What the explorer opens: a model file under a rule set, a path through it, and the
/// property the path is about (if any).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    pub model: String,
    pub profile: Option<String>,
    pub variant: Option<String>,
    pub property: Option<String>,
    /// The index path ("0/2/1"); empty: the initial state.
    pub path: String,
    /// A scenario file (relative to the explorer's directory) whose actions are the path,
    /// for a scenario that has no index path (a replay's steps in which stores finish).
    pub scenario: Option<String>,
}

/// Percent-encode a query value (RFC 3986 unreserved characters and '/' stay).
pub fn encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Decode a percent-encoded query value ('+' is a space); None if it is not valid UTF-8 or
/// an escape is malformed.
pub fn decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Quote a shell word when it needs it.
fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._/=:+,".contains(&b)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

impl Target {
    /// The URL path (and query) that opens this target on a running `kvmc explore`.
    pub fn url_path(&self) -> String {
        let mut q = vec![format!("model={}", encode(&self.model))];
        if let Some(p) = &self.profile {
            q.push(format!("profile={}", encode(p)));
        }
        if let Some(v) = &self.variant {
            q.push(format!("variant={}", encode(v)));
        }
        if let Some(p) = &self.property {
            q.push(format!("property={}", encode(p)));
        }
        match &self.scenario {
            Some(sc) => q.push(format!("scenario={}", encode(sc))),
            None => q.push(format!("path={}", encode(if self.path.is_empty() { "0" } else { &self.path }))),
        }
        format!("/?{}", q.join("&"))
    }

    /// The command that serves this target and prints its URL.
    pub fn command(&self) -> String {
        let mut c = format!("kvmc explore {}", shell_word(&self.model));
        if let Some(p) = &self.profile {
            c.push_str(&format!(" --profile {}", shell_word(p)));
        }
        if let Some(v) = &self.variant {
            c.push_str(&format!(" --variant {}", shell_word(v)));
        }
        if let Some(p) = &self.property {
            c.push_str(&format!(" --property {}", shell_word(p)));
        }
        let path = self.scenario.as_deref().unwrap_or(if self.path.is_empty() { "0" } else { &self.path });
        c.push_str(&format!(" --path {}", shell_word(path)));
        c
    }

    /// Read a URL query ("model=...&path=..."); unknown keys are refused.
    pub fn from_query(q: &str) -> Result<Target, String> {
        let mut t = Target::default();
        let mut model = None;
        for pair in q.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode(v).ok_or_else(|| format!("query parameter {k}: not valid percent-encoded UTF-8"))?;
            let v = Some(v).filter(|v| !v.is_empty());
            match k {
                "model" => model = v,
                "profile" => t.profile = v,
                "variant" => t.variant = v,
                "property" => t.property = v,
                "path" => t.path = v.unwrap_or_default(),
                "scenario" => t.scenario = v,
                "at" => {}
                _ => {
                    return Err(format!(
                        "unknown query parameter {k:?} (model, profile, variant, property, path, scenario, at)"
                    ))
                }
            }
        }
        t.model = model.ok_or("the query names no model (model=models/NAME.toml)")?;
        Ok(t)
    }
}
