//! A partial log whose recorder stopped because the implementation raised: does the model die
//! there too? From every model state consistent with the last recorded step, the model is run
//! into its next engine step under every input the scope allows before it (copies finishing,
//! a session's next input, ...; not more than [`MAX_INPUTS`] before the step), and the first
//! path (breadth first, in the inputs' fixed order) on which the engine dies names the
//! property that says so (queue-sound, connector-assert, rows-present, tokens-positive). The log does not hold
//! the inputs of the step that raised (an abort, a session's end), so "does not die" is no
//! verdict: the model may need an input only the implementation's client sent.

use crate::system::display::action_label;
use crate::system::{Engine, Event, Events, Input, System};

/// Inputs (other than the engine step) tried before the step that raised.
pub const MAX_INPUTS: usize = 3;
/// The properties whose violation kills the engine.
pub const KILLS: [&str; 4] = ["queue-sound", "connector-assert", "rows-present", "tokens-positive"];
/// Model states tried at most.
pub const MAX_STATES: usize = 20_000;

/// The model's death after the last recorded step, or how far the search for one went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeathCheck {
    /// The property that kills the engine, what the model says, and the inputs that got there
    /// (labels, the engine step last).
    pub found: Option<(String, String, Vec<String>)>,
    /// Model states tried.
    pub states: usize,
    /// The search stopped at [`MAX_STATES`] before it had tried every path: no death found is
    /// then not even the search's answer.
    pub bounded: bool,
}

/// Search from `starts` (the replay's final model states) for an engine that dies in its next
/// step.
pub fn after(sys: &System, starts: &[&Engine]) -> DeathCheck {
    after_within(sys, starts, MAX_STATES)
}

/// [`after`] trying at most `max_states` model states.
pub fn after_within(sys: &System, starts: &[&Engine], max_states: usize) -> DeathCheck {
    let mut level: Vec<(Engine, Vec<Input>)> = starts.iter().map(|e| ((*e).clone(), Vec::new())).collect();
    let mut states = 0;
    let mut inputs = Vec::new();
    for depth in 0..=MAX_INPUTS {
        let mut next = Vec::new();
        for (e, path) in &level {
            inputs.clear();
            sys.inputs(e, &mut inputs);
            for &a in &inputs {
                // The last input is the engine step itself.
                if !a.is_step() && depth == MAX_INPUTS {
                    continue;
                }
                if states == max_states {
                    return DeathCheck { found: None, states, bounded: true };
                }
                states += 1;
                let mut ev = Events::on();
                let Some(s) = sys.apply(e, a, &mut ev, false) else { continue };
                let mut p = path.clone();
                p.push(a);
                if s.is_dead() {
                    let (property, detail) = ev
                        .list
                        .iter()
                        .rev()
                        .find_map(|x| match x {
                            Event::Violation { property, detail } if KILLS.contains(property) => {
                                Some((property.to_string(), detail.clone()))
                            }
                            _ => None,
                        })
                        .unwrap_or_else(|| ("(engine gone)".into(), String::new()));
                    let labels = p.iter().map(|a| action_label(sys, a)).collect();
                    return DeathCheck { found: Some((property, detail, labels)), states, bounded: false };
                }
                if !a.is_step() && next.iter().all(|(x, _): &(Engine, Vec<Input>)| *x != s) {
                    next.push((s, p));
                }
            }
        }
        level = next;
    }
    DeathCheck { found: None, states, bounded: false }
}
