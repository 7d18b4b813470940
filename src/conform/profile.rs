//! Which rule set a log is checked under: `--profile` when given, else the release the log's
//! header names (`"implementation": "vllm", "version": "0.24.0"` is profile `vllm-0.24`), else
//! [`DEFAULT_PROFILE`]. A log recorded from one release and checked under another's rules
//! diverges where the releases differ, which reads as a model defect; so the header decides
//! unless the user says otherwise, and a flag that disagrees with the header is noted.

use super::log::{Ev, Header};
use crate::system::rules;

/// The profile a log whose header names no release kvmc models is checked under.
pub const DEFAULT_PROFILE: &str = "vllm-0.33";

/// Where a log's profile came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileFrom {
    /// `--profile` (or the explorer's `profile=` query).
    Flag,
    /// The release the log's header names.
    Header,
    /// Neither: [`DEFAULT_PROFILE`].
    Default,
}

impl ProfileFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileFrom::Flag => "flag",
            ProfileFrom::Header => "header",
            ProfileFrom::Default => "default",
        }
    }
}

/// The profile one log is checked under, and a note for the user when the log's header and
/// that profile disagree (or the header names a release kvmc has no rule set for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileChoice {
    pub profile: String,
    pub from: ProfileFrom,
    pub note: Option<String>,
}

/// The kvmc profile of the release a header names: `vllm` `X.Y.Z` (any suffix: `0.34.0rc1`,
/// `0.33.1.dev3`) is `vllm-X.Y` when kvmc has that profile.
pub fn release_profile(h: &Header) -> Option<String> {
    if h.implementation != "vllm" {
        return None;
    }
    let mut parts = h.version.split('.');
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: String = parts.next()?.chars().take_while(char::is_ascii_digit).collect();
    let minor: u32 = minor.parse().ok()?;
    let name = format!("vllm-{major}.{minor}");
    rules::profile(&name).map(|_| name)
}

/// The header of a log's text, if its first non-empty line is one (a malformed log is refused
/// later, with its line, by the check itself).
pub fn peek_header(text: &str) -> Option<Header> {
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    match serde_json::from_str::<Ev>(line).ok()? {
        Ev::Header(h) => Some(h),
        _ => None,
    }
}

/// Choose the profile for a log whose text is `text`.
pub fn choose(text: &str, given: Option<&str>) -> ProfileChoice {
    let header = peek_header(text);
    let release = header.as_ref().and_then(release_profile);
    let names = header.as_ref().map(|h| format!("{} {}", h.implementation, h.version));
    match (given, release) {
        (Some(p), release) => {
            let note = match (&release, &names) {
                (Some(r), Some(n)) if r != p => {
                    Some(format!("recorded from {n} (profile {r}); checked under --profile {p} as asked"))
                }
                _ => None,
            };
            ProfileChoice { profile: p.to_string(), from: ProfileFrom::Flag, note }
        }
        (None, Some(r)) => ProfileChoice { profile: r, from: ProfileFrom::Header, note: None },
        (None, None) => {
            let note = header.as_ref().filter(|h| h.implementation == "vllm").map(|h| {
                format!(
                    "the log names vllm {}, for which kvmc has no profile; checked under {DEFAULT_PROFILE} (--profile picks another)",
                    h.version
                )
            });
            ProfileChoice { profile: DEFAULT_PROFILE.to_string(), from: ProfileFrom::Default, note }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log(implementation: &str, version: &str) -> String {
        format!(
            "{{\"ev\":\"header\",\"format\":1,\"implementation\":\"{implementation}\",\"version\":\"{version}\",\"connector\":\"none\",\"async_scheduling\":false,\"block_size\":2,\"num_gpu_blocks\":4,\"max_num_batched_tokens\":4,\"max_num_seqs\":2,\"max_model_len\":6,\"load_failure_policy\":\"fail\"}}\n"
        )
    }

    #[test]
    fn the_header_names_the_profile() {
        for (v, p) in [
            ("0.24.0", "vllm-0.24"),
            ("0.32.0", "vllm-0.32"),
            ("0.34.0rc1", "vllm-0.34"),
            ("0.33.1.dev3+g1", "vllm-0.33"),
        ] {
            let c = choose(&log("vllm", v), None);
            assert_eq!((c.profile.as_str(), c.from, c.note), (p, ProfileFrom::Header, None), "{v}");
        }
    }

    #[test]
    fn a_flag_wins_and_a_disagreeing_header_is_noted() {
        let c = choose(&log("vllm", "0.24.0"), Some("vllm-0.33"));
        assert_eq!((c.profile.as_str(), c.from), ("vllm-0.33", ProfileFrom::Flag));
        assert!(c.note.unwrap().contains("recorded from vllm 0.24.0 (profile vllm-0.24)"));
        assert_eq!(choose(&log("vllm", "0.24.0"), Some("vllm-0.24")).note, None);
        assert_eq!(choose(&log("myconn", "1.0"), Some("vllm-0.24")).note, None);
    }

    #[test]
    fn an_unknown_release_falls_back_with_a_note() {
        let c = choose(&log("vllm", "0.99.0"), None);
        assert_eq!((c.profile.as_str(), c.from), (DEFAULT_PROFILE, ProfileFrom::Default));
        assert!(c.note.unwrap().contains("vllm 0.99.0"));
        for text in [log("myconn", "1.0"), log("vllm", "x"), "not json".into(), String::new()] {
            let c = choose(&text, None);
            assert_eq!((c.profile.as_str(), c.from), (DEFAULT_PROFILE, ProfileFrom::Default));
            assert!(c.note.is_none() || text.contains("vllm"), "{text}");
        }
    }
}
