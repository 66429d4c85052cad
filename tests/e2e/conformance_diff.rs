//! The comparison of two conformance traces (client-go's and kube-informer's handler calls on
//! the same server events): per handler and per key, the sequences of calls must be equal after
//! normalizing only what is legitimately timing-dependent.
//!
//! - How calls for different keys interleave (batching across keys, listener goroutines): the
//!   calls are grouped per `(handler, key)`, in the order each trace printed them.
//! - How many resyncs fall in a window: on a handler with a resync period, an update whose old
//!   and new objects have the same resourceVersion and uid is a resync (or a relist's no-op
//!   update, which the resync-free handlers check exactly). Those are taken out of its
//!   sequences and only their presence is checked: both traces must have some.
//!
//! Anything else that differs is reported, with both sequences of every key that differs.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::Deserialize;

/// One handler call as both trace programs print it (one JSON line).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Call {
    pub handler: String,
    pub call: String,
    pub key: String,
    pub initial: bool,
    pub old_rv: String,
    pub old_uid: String,
    pub new_rv: String,
    pub new_uid: String,
    pub tombstone: bool,
}

impl Call {
    /// An update that changes nothing: a resync, or a relist's update of an unchanged object.
    pub fn is_no_op_update(&self) -> bool {
        self.call == "update" && self.old_rv == self.new_rv && self.old_uid == self.new_uid
    }

    /// Compact form for diffs: `add(initial) 123/ab12`, `update 123/ab12 -> 130/ab12`,
    /// `delete(tombstone) 130/ab12`.
    fn short(&self) -> String {
        let uid = |u: &str| u.chars().take(8).collect::<String>();
        match self.call.as_str() {
            "add" => format!(
                "add{} {}/{}",
                if self.initial { "(initial)" } else { "" },
                self.new_rv,
                uid(&self.new_uid)
            ),
            "update" => format!(
                "update {}/{} -> {}/{}",
                self.old_rv,
                uid(&self.old_uid),
                self.new_rv,
                uid(&self.new_uid)
            ),
            _ => format!(
                "{}{} {}/{}",
                self.call,
                if self.tombstone { "(tombstone)" } else { "" },
                self.old_rv,
                uid(&self.old_uid)
            ),
        }
    }
}

/// What a comparison found: how many calls were compared, and the differences (empty: equal).
#[derive(Debug, Default)]
pub struct Outcome {
    /// Calls compared exactly, per trace (the resyncs taken out are not counted).
    pub compared: usize,
    /// Resyncs taken out of each trace (reference, candidate).
    pub resyncs: (usize, usize),
    pub differences: Vec<String>,
}

/// Compares the `candidate` trace with the `reference` one. `resyncing` names the handlers with
/// a resync period, whose no-op updates are counted instead of compared.
pub fn compare(
    reference: &[Call],
    candidate: &[Call],
    resyncing: &BTreeSet<&str>,
    names: (&str, &str),
) -> Outcome {
    let mut outcome = Outcome::default();
    let (ref_calls, ref_resyncs) = per_key(reference, resyncing);
    let (cand_calls, cand_resyncs) = per_key(candidate, resyncing);
    outcome.resyncs = (ref_resyncs.values().sum(), cand_resyncs.values().sum());
    for handler in resyncing {
        let (r, c) = (
            ref_resyncs.get(*handler).copied().unwrap_or(0),
            cand_resyncs.get(*handler).copied().unwrap_or(0),
        );
        if (r == 0) != (c == 0) {
            outcome.differences.push(format!(
                "handler {handler}: {} made {r} resync calls, {} made {c}",
                names.0, names.1
            ));
        }
    }
    let keys: BTreeSet<&(String, String)> = ref_calls.keys().chain(cand_calls.keys()).collect();
    let empty = Vec::new();
    for hk in keys {
        let r = ref_calls.get(hk).unwrap_or(&empty);
        let c = cand_calls.get(hk).unwrap_or(&empty);
        outcome.compared += r.len();
        if r != c {
            let mut text = format!("handler {} key {}:\n", hk.0, hk.1);
            for i in 0..r.len().max(c.len()) {
                let show = |calls: &Vec<&Call>| calls.get(i).map_or("-".to_owned(), |c| c.short());
                let (a, b) = (show(r), show(c));
                let mark = if a == b { " " } else { "≠" };
                let _ = writeln!(text, "  {mark} {:<44} {b}", a);
            }
            outcome
                .differences
                .push(format!("{text}  (left: {}, right: {})", names.0, names.1));
        }
    }
    outcome
}

type PerKey<'a> = BTreeMap<(String, String), Vec<&'a Call>>;

/// Groups calls per `(handler, key)` in trace order, taking out (and counting per handler) the
/// no-op updates of resyncing handlers.
fn per_key<'a>(
    calls: &'a [Call],
    resyncing: &BTreeSet<&str>,
) -> (PerKey<'a>, BTreeMap<String, usize>) {
    let mut grouped: PerKey<'a> = BTreeMap::new();
    let mut resyncs = BTreeMap::new();
    for call in calls {
        if resyncing.contains(call.handler.as_str()) && call.is_no_op_update() {
            *resyncs.entry(call.handler.clone()).or_insert(0) += 1;
            continue;
        }
        grouped
            .entry((call.handler.clone(), call.key.clone()))
            .or_default()
            .push(call);
    }
    (grouped, resyncs)
}

/// The `key → resourceVersion` map a handler's calls lead to when applied in order: what its
/// controller would believe the world is. At a quiescent point it must equal the server's.
pub fn replay(calls: &[Call], handler: &str) -> BTreeMap<String, String> {
    let mut state = BTreeMap::new();
    for call in calls.iter().filter(|c| c.handler == handler) {
        match call.call.as_str() {
            "delete" => {
                state.remove(&call.key);
            }
            _ => {
                state.insert(call.key.clone(), call.new_rv.clone());
            }
        }
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add(h: &str, key: &str, rv: &str, initial: bool) -> Call {
        Call {
            handler: h.into(),
            call: "add".into(),
            key: key.into(),
            initial,
            old_rv: String::new(),
            old_uid: String::new(),
            new_rv: rv.into(),
            new_uid: format!("uid-{key}"),
            tombstone: false,
        }
    }

    fn update(h: &str, key: &str, old: &str, new: &str) -> Call {
        Call {
            call: "update".into(),
            old_rv: old.into(),
            old_uid: format!("uid-{key}"),
            initial: false,
            ..add(h, key, new, false)
        }
    }

    fn delete(h: &str, key: &str, rv: &str, tombstone: bool) -> Call {
        Call {
            call: "delete".into(),
            old_rv: rv.into(),
            old_uid: format!("uid-{key}"),
            new_rv: String::new(),
            new_uid: String::new(),
            tombstone,
            ..add(h, key, "", false)
        }
    }

    fn resyncing() -> BTreeSet<&'static str> {
        BTreeSet::from(["h1"])
    }

    #[test]
    fn interleaving_across_keys_and_resync_counts_are_not_differences() {
        let reference = vec![
            add("h0", "a", "1", true),
            add("h0", "b", "2", true),
            add("h1", "a", "1", true),
            update("h1", "a", "1", "1"),
            update("h0", "a", "1", "3"),
            delete("h0", "b", "2", false),
        ];
        let candidate = vec![
            add("h0", "b", "2", true),
            add("h1", "a", "1", true),
            update("h1", "a", "1", "1"),
            update("h1", "a", "1", "1"),
            update("h1", "a", "1", "1"),
            add("h0", "a", "1", true),
            delete("h0", "b", "2", false),
            update("h0", "a", "1", "3"),
        ];
        let outcome = compare(&reference, &candidate, &resyncing(), ("go", "rust"));
        assert!(outcome.differences.is_empty(), "{:#?}", outcome.differences);
        assert_eq!(outcome.compared, 5);
        assert_eq!(outcome.resyncs, (1, 3));
        assert_eq!(
            replay(&candidate, "h0"),
            BTreeMap::from([("a".into(), "3".into())])
        );
    }

    #[test]
    fn a_tombstone_flag_an_order_or_a_missing_resync_is_a_difference() {
        let reference = vec![
            add("h0", "a", "1", false),
            delete("h0", "a", "1", true),
            add("h0", "b", "2", false),
            update("h0", "b", "2", "4"),
            update("h0", "b", "4", "5"),
            update("h1", "c", "7", "7"),
        ];
        let candidate = vec![
            add("h0", "a", "1", false),
            delete("h0", "a", "1", false),
            add("h0", "b", "2", false),
            update("h0", "b", "2", "5"),
        ];
        let outcome = compare(&reference, &candidate, &resyncing(), ("go", "rust"));
        assert_eq!(outcome.differences.len(), 3, "{:#?}", outcome.differences);
        assert!(outcome.differences[0].contains("made 1 resync calls"));
        assert!(outcome.differences[1].contains("delete(tombstone) 1/uid-a"));
        assert!(outcome.differences[2].contains("update 2/uid-b -> 4/uid-b"));
        assert!(outcome.differences[2].contains("≠ update 4/uid-b -> 5/uid-b"));
    }
}
