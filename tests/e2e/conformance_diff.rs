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
//!
//! The order across keys is checked apart ([`compare_order`], for the in-order FIFOs only, whose
//! order client-go defines), window by window: the test splits each trace where a step begins
//! (after the previous step's quiescent point) and says how that step's events arrive.
//!
//! - [`Delivery::Live`]: over a running watch, which carries events in the server's order. Each
//!   handler must get its calls in the same order across all keys on both sides, leaving out
//!   only what is not a watch event: no-op updates (resyncs; every watch event carries a new
//!   resourceVersion) and initial adds (the replay of the cache to a handler added
//!   mid-window, which client-go makes in its store's map order).
//! - [`Delivery::Relist`]: a list that replaces the cache (the initial list, or one after a
//!   410). client-go's watch-list gathers the objects in a temporary store and hands them on in
//!   its random order, so the order of the adds and updates across keys is not compared; only
//!   that every delete (a tombstone) comes before any add or update of the window, on each side
//!   alone: the order client-go's `RealFIFO.Replace` and `AtomicFIFO`'s `ReplacedAll` give, and
//!   kube-informer's README promises.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::ops::Range;

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

/// How the events of a window reach the informers, which says what order across keys is
/// defined there (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Every event comes over a running watch: each handler's calls across keys in server order.
    Live,
    /// A relist, possibly followed by live events none of which is a delete: every delete of
    /// the window before its first add or update, on each side.
    Relist,
}

/// One step of the test: which calls of each trace it holds, and how they were delivered.
#[derive(Debug, Clone)]
pub struct Window {
    pub step: String,
    pub delivery: Delivery,
    /// The step's calls in the reference trace (indices into its calls).
    pub reference: Range<usize>,
    /// The step's calls in the candidate trace.
    pub candidate: Range<usize>,
}

/// What an order comparison found.
#[derive(Debug, Default)]
pub struct OrderOutcome {
    /// Calls of the reference trace whose order across keys was compared (live windows).
    pub live: usize,
    /// Calls of both traces checked for deletes first (relist windows).
    pub relisted: usize,
    pub differences: Vec<String>,
}

/// Whether a call in a live window comes from a watch event: not a no-op update (a resync, or
/// a late relist's), not an initial add (a handler added mid-window is replayed the cache).
fn from_watch_event(call: &Call) -> bool {
    !(call.is_no_op_update() || (call.call == "add" && call.initial))
}

fn keyed(call: &Call) -> String {
    format!("{} {}", call.key, call.short())
}

/// Checks the order of the calls across keys, window by window (see the module docs): in live
/// windows each handler's calls must come in the same order in both traces; in relist windows
/// each trace must give every delete before any add or update (the resyncs of `resyncing`
/// handlers left out).
pub fn compare_order(
    reference: &[Call],
    candidate: &[Call],
    windows: &[Window],
    resyncing: &BTreeSet<&str>,
    names: (&str, &str),
) -> OrderOutcome {
    let mut outcome = OrderOutcome::default();
    for window in windows {
        let (Some(r), Some(c)) = (
            reference.get(window.reference.clone()),
            candidate.get(window.candidate.clone()),
        ) else {
            outcome.differences.push(format!(
                "step {}: window {:?} / {:?} out of the traces ({} / {} calls)",
                window.step,
                window.reference,
                window.candidate,
                reference.len(),
                candidate.len()
            ));
            continue;
        };
        match window.delivery {
            Delivery::Live => live_order(r, c, window, names, &mut outcome),
            Delivery::Relist => {
                for (calls, name) in [(r, names.0), (c, names.1)] {
                    deletes_first(calls, window, resyncing, name, &mut outcome);
                }
            }
        }
    }
    outcome
}

/// Groups the calls of one window per handler, keeping those `keep` accepts, in trace order.
fn per_handler(calls: &[Call], keep: impl Fn(&Call) -> bool) -> BTreeMap<&str, Vec<&Call>> {
    let mut grouped: BTreeMap<&str, Vec<&Call>> = BTreeMap::new();
    for call in calls.iter().filter(|c| keep(c)) {
        grouped.entry(call.handler.as_str()).or_default().push(call);
    }
    grouped
}

fn live_order(
    r: &[Call],
    c: &[Call],
    window: &Window,
    names: (&str, &str),
    outcome: &mut OrderOutcome,
) {
    let (ref_calls, cand_calls) = (
        per_handler(r, from_watch_event),
        per_handler(c, from_watch_event),
    );
    let handlers: BTreeSet<&str> = ref_calls.keys().chain(cand_calls.keys()).copied().collect();
    let empty = Vec::new();
    for handler in handlers {
        let a = ref_calls.get(handler).unwrap_or(&empty);
        let b = cand_calls.get(handler).unwrap_or(&empty);
        outcome.live += a.len();
        let Some(at) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) else {
            continue;
        };
        let same_calls = {
            let sorted = |calls: &Vec<&Call>| {
                let mut v: Vec<String> = calls.iter().map(|c| keyed(c)).collect();
                v.sort();
                v
            };
            sorted(a) == sorted(b)
        };
        let mut text = format!(
            "step {} (live watch), handler {handler}: the calls across keys differ from call {at} \
             on{}:\n",
            window.step,
            if same_calls {
                " (the same calls, in another order)"
            } else {
                " (not the same calls: see the per-key differences)"
            }
        );
        for i in at.saturating_sub(2)..(at + 4).min(a.len().max(b.len())) {
            let show = |calls: &Vec<&Call>| calls.get(i).map_or("-".to_owned(), |c| keyed(c));
            let (x, y) = (show(a), show(b));
            let mark = if x == y { " " } else { "≠" };
            let _ = writeln!(text, "  {mark} {i:>4} {x:<60} {y}");
        }
        outcome
            .differences
            .push(format!("{text}  (left: {}, right: {})", names.0, names.1));
    }
}

fn deletes_first(
    calls: &[Call],
    window: &Window,
    resyncing: &BTreeSet<&str>,
    name: &str,
    outcome: &mut OrderOutcome,
) {
    let grouped = per_handler(calls, |c| {
        !(resyncing.contains(c.handler.as_str()) && c.is_no_op_update())
    });
    for (handler, calls) in grouped {
        outcome.relisted += calls.len();
        let Some(first) = calls.iter().position(|c| c.call != "delete") else {
            continue;
        };
        if let Some(late) = calls[first..].iter().find(|c| c.call == "delete") {
            outcome.differences.push(format!(
                "step {} (relist), {name}, handler {handler}: {} comes after {}: a relist must \
                 deliver every delete before its adds and updates",
                window.step,
                keyed(late),
                keyed(calls[first])
            ));
        }
    }
}

/// `calls` with two calls of one handler for different keys swapped, the first such pair that
/// [`compare_order`] compares in `range` (a live window): per key nothing changes, across keys
/// the order does. For the test to show that the order check sees what the per-key one cannot.
pub fn swap_across_keys(calls: &[Call], range: Range<usize>) -> Option<Vec<Call>> {
    let mut last: BTreeMap<&str, usize> = BTreeMap::new();
    for i in range {
        let call = &calls[i];
        if !from_watch_event(call) {
            continue;
        }
        if let Some(&j) = last.get(call.handler.as_str())
            && calls[j].key != call.key
        {
            let mut doctored = calls.to_vec();
            doctored.swap(i, j);
            return Some(doctored);
        }
        last.insert(call.handler.as_str(), i);
    }
    None
}

/// `calls` with the first delete of a relist window (`range`) moved after the next add or
/// update of the same handler for another key: per key nothing changes, across keys a
/// tombstone now follows an update.
pub fn delete_after_update(
    calls: &[Call],
    range: Range<usize>,
    resyncing: &BTreeSet<&str>,
) -> Option<Vec<Call>> {
    let counted = |c: &Call| !(resyncing.contains(c.handler.as_str()) && c.is_no_op_update());
    let d = range.clone().find(|&i| calls[i].call == "delete")?;
    let delete = &calls[d];
    // The next call of that handler that is not a delete, with no call for the same key
    // between: moving the delete after it changes nothing per key.
    let u = (d + 1..range.end).find(|&i| {
        let c = &calls[i];
        c.handler == delete.handler && counted(c) && (c.call != "delete" || c.key == delete.key)
    })?;
    if calls[u].key == delete.key {
        return None;
    }
    let mut doctored = calls.to_vec();
    let moved = doctored.remove(d);
    doctored.insert(u, moved);
    Some(doctored)
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

    fn window(step: &str, delivery: Delivery, r: Range<usize>, c: Range<usize>) -> Window {
        Window {
            step: step.into(),
            delivery,
            reference: r,
            candidate: c,
        }
    }

    #[test]
    fn cross_key_order_in_a_live_window_is_a_difference_the_per_key_view_misses() {
        let reference = vec![
            add("h0", "a", "1", true),
            add("h0", "b", "2", true),
            update("h0", "a", "1", "3"),
            update("h0", "b", "2", "4"),
            delete("h0", "a", "3", false),
        ];
        // The initial list in another order (a relist: not compared), and two live calls for
        // different keys swapped.
        let candidate = vec![
            add("h0", "b", "2", true),
            add("h0", "a", "1", true),
            update("h0", "b", "2", "4"),
            update("h0", "a", "1", "3"),
            delete("h0", "a", "3", false),
        ];
        let windows = [
            window("initial list", Delivery::Relist, 0..2, 0..2),
            window("bursts", Delivery::Live, 2..5, 2..5),
        ];
        let names = ("go", "rust");
        let per_key = compare(&reference, &candidate, &resyncing(), names);
        assert!(per_key.differences.is_empty(), "{:#?}", per_key.differences);
        let order = compare_order(&reference, &candidate, &windows, &resyncing(), names);
        assert_eq!(order.differences.len(), 1, "{:#?}", order.differences);
        let text = &order.differences[0];
        assert!(
            text.contains("step bursts (live watch), handler h0"),
            "{text}"
        );
        assert!(text.contains("from call 0"), "{text}");
        assert!(text.contains("the same calls, in another order"), "{text}");
        assert_eq!((order.live, order.relisted), (3, 4));

        // The same order in the live window: nothing to report.
        let mut same = candidate.clone();
        same.swap(2, 3);
        let order = compare_order(&reference, &same, &windows, &resyncing(), names);
        assert!(order.differences.is_empty(), "{:#?}", order.differences);
    }

    #[test]
    fn live_order_leaves_out_resyncs_a_late_replay_and_other_handlers_interleaving() {
        let reference = vec![
            add("late", "a", "1", true),
            add("late", "b", "2", true),
            update("h1", "a", "1", "1"),
            update("h0", "a", "1", "3"),
            update("h1", "a", "1", "3"),
            update("late", "a", "1", "3"),
            delete("h0", "b", "2", false),
            delete("h1", "b", "2", false),
            delete("late", "b", "2", false),
        ];
        let candidate = vec![
            add("late", "b", "2", true),
            update("h0", "a", "1", "3"),
            delete("h0", "b", "2", false),
            add("late", "a", "1", true),
            update("h1", "a", "1", "3"),
            update("late", "a", "1", "3"),
            update("h1", "b", "2", "2"),
            delete("h1", "b", "2", false),
            delete("late", "b", "2", false),
        ];
        let windows = [window("late handler", Delivery::Live, 0..9, 0..9)];
        let order = compare_order(
            &reference,
            &candidate,
            &windows,
            &resyncing(),
            ("go", "rust"),
        );
        assert!(order.differences.is_empty(), "{:#?}", order.differences);
        assert_eq!(order.live, 6);
    }

    #[test]
    fn a_delete_after_an_add_or_update_of_a_relist_is_a_difference_on_that_side_only() {
        // client-go: the tombstones first, then the list in any order.
        let reference = vec![
            delete("h0", "c", "5", true),
            delete("h0", "d", "6", true),
            update("h0", "b", "2", "7"),
            add("h0", "e", "8", false),
            delete("h1", "c", "5", true),
        ];
        let candidate = vec![
            delete("h0", "d", "6", true),
            add("h0", "e", "8", false),
            delete("h0", "c", "5", true),
            update("h0", "b", "2", "7"),
            delete("h1", "c", "5", true),
        ];
        let windows = [window("cut", Delivery::Relist, 0..5, 0..5)];
        let names = ("go", "rust");
        assert!(
            compare(&reference, &candidate, &resyncing(), names)
                .differences
                .is_empty()
        );
        let order = compare_order(&reference, &candidate, &windows, &resyncing(), names);
        assert_eq!(order.differences.len(), 1, "{:#?}", order.differences);
        let text = &order.differences[0];
        assert!(
            text.contains("step cut (relist), rust, handler h0"),
            "{text}"
        );
        assert!(
            text.contains("c delete(tombstone) 5/uid-c comes after e add 8/uid-e"),
            "{text}"
        );
        assert_eq!(order.relisted, 10);
    }

    #[test]
    fn the_doctored_traces_change_the_order_across_keys_only() {
        let trace = vec![
            delete("h0", "a", "1", true),
            update("h1", "b", "2", "2"),
            update("h0", "b", "2", "3"),
            add("h0", "c", "5", false),
            update("h0", "b", "3", "4"),
            add("h0", "d", "6", false),
            delete("h0", "c", "5", false),
        ];
        let windows = [
            window("relist", Delivery::Relist, 0..4, 0..4),
            window("live", Delivery::Live, 4..7, 4..7),
        ];
        let names = ("go", "doctored");
        assert!(
            compare_order(&trace, &trace, &windows, &resyncing(), names)
                .differences
                .is_empty()
        );
        let swapped = swap_across_keys(&trace, 4..7).expect("b and d are swappable");
        assert_eq!(swapped[4..6], [trace[5].clone(), trace[4].clone()]);
        let moved = delete_after_update(&trace, 0..4, &resyncing()).expect("a movable delete");
        assert_eq!(moved[1..3], [trace[2].clone(), trace[0].clone()]);
        for doctored in [swapped, moved] {
            let per_key = compare(&trace, &doctored, &resyncing(), names);
            assert!(per_key.differences.is_empty(), "{:#?}", per_key.differences);
            let order = compare_order(&trace, &doctored, &windows, &resyncing(), names);
            assert_eq!(order.differences.len(), 1, "{:#?}", order.differences);
        }
        assert!(swap_across_keys(&trace, 0..2).is_none());
        assert!(delete_after_update(&trace, 3..7, &resyncing()).is_none());
    }
}
