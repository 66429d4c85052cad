//! What the reflector does after a failure: a pure function of where it failed and how, so the
//! whole policy reads (and is tested) as one table (client-go `reflector.go`:
//! `ListAndWatchWithContext`, `watchWithResync`, `isWatchErrorRetriable`, and the backoff
//! manager around `ListAndWatch` in `Run`).

use super::{Error, ListWatchError};

/// Where the reflector was when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Listing (or streaming the initial list) and replacing the store.
    List,
    /// Starting a watch.
    WatchStart {
        /// The watch is a re-watch after a backoff step (see [`after`]).
        after_backoff: bool,
    },
    /// Reading a running watch; `delivered` is whether it had delivered any event.
    Watch {
        /// The watch had delivered at least one event (or bookmark).
        delivered: bool,
        /// The watch is a re-watch after a backoff step (see [`after`]).
        after_backoff: bool,
    },
}

/// What comes after a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Go on at once.
    Now(Then),
    /// Wait one backoff step first.
    AfterBackOff(Then),
}

/// The request that comes next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Then {
    /// List again and replace the store (a relist).
    List,
    /// Watch again from the last resourceVersion: the store is still right up to it.
    Watch,
}

/// The recovery policy.
///
/// - A list failure waits a backoff step and lists again (`wait.BackoffUntil` around
///   `ListAndWatch`). An expired list version is not a failure here: the list itself retries at
///   once with `resourceVersion=""`.
/// - The connection failed (refused, reset, TLS, a broken stream, a line that is not a watch
///   event) or the server asked to slow down (429): the store is still right up to the last
///   resourceVersion, so back off and watch again from it (`isWatchErrorRetriable`;
///   `handleWatch` ending on a broken stream). A watch silent past the idle timeout is restarted
///   at once instead (see the table).
/// - 410 Expired on a watch that had delivered nothing and was a re-watch after a backoff step
///   (the first answer after a cut): the version fell out of the server's window while the
///   reflector waited, which is no new failure of the server; relist at once, so that
///   recovering from a cut costs one backoff step (the one before the re-watch), not two.
///   client-go recovers within one step as well: its re-watch follows a cut at once and the
///   backoff comes before the relist. Any other watch (right after a list, after a watch that
///   ended or went idle) backs off before relisting, as client-go always does: a server whose
///   watches refuse every version its lists give (an HA control plane whose members' watch
///   caches disagree) would otherwise be relisted in a loop with no wait.
/// - 410 on a watch that had delivered events, any other error event, or a watch that closed
///   within a second with nothing (client-go "very short watch"): relist after a backoff step,
///   as client-go returns from `ListAndWatch` and its backoff manager waits once.
/// - A list or watch event larger than the configured maximum: relist after a backoff step
///   (the memory is bounded either way; the backoff keeps an object that stays too large from
///   turning into a busy loop).
pub(crate) fn after(step: Step, error: &Error) -> Next {
    match step {
        Step::List => Next::AfterBackOff(Then::List),
        // The server did not answer the watch request in time: a dead connection or server.
        Step::WatchStart { .. }
            if matches!(error, Error::IdleTimeout(_) | Error::WatchStartTimeout(_)) =>
        {
            Next::AfterBackOff(Then::Watch)
        }
        Step::WatchStart { after_backoff } => match error.list_watch_error() {
            Some(e) if e.is_expired() && after_backoff => Next::Now(Then::List),
            Some(ListWatchError::Request(_)) => Next::AfterBackOff(Then::Watch),
            Some(e) if e.is_too_many_requests() => Next::AfterBackOff(Then::Watch),
            _ => Next::AfterBackOff(Then::List),
        },
        Step::Watch {
            delivered,
            after_backoff,
        } => match error {
            // Nothing arrived for longer than the server's bookmark cadence: the connection is
            // taken for dead and the watch restarted at once, on a new connection. A live server
            // that merely had nothing to say (an idle resource's first bookmark can take two
            // minutes) costs one request that way, served from its watch cache; an unreachable
            // one fails that request and backs off then.
            Error::IdleTimeout(_) => Next::Now(Then::Watch),
            Error::Watch(e) => match e {
                ListWatchError::TooLarge { .. } => Next::AfterBackOff(Then::List),
                ListWatchError::Stream(_) | ListWatchError::Decode(_) => {
                    Next::AfterBackOff(Then::Watch)
                }
                e if e.is_too_many_requests() => Next::AfterBackOff(Then::Watch),
                e if e.is_expired() && !delivered && after_backoff => Next::Now(Then::List),
                _ => Next::AfterBackOff(Then::List),
            },
            _ => Next::AfterBackOff(Then::List),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{
        fifo::FifoError,
        testutil::{api_error, connection_refused},
    };

    fn gone() -> ListWatchError {
        api_error(410, "Expired", "too old resource version")
    }

    fn broken_stream() -> ListWatchError {
        ListWatchError::Stream(kube::Error::ReadEvents(std::io::Error::other("reset")))
    }

    #[test]
    fn recovery_table() {
        use Next::{AfterBackOff, Now};
        use Then::{List, Watch};
        // Watches started after a backoff step (re-watches after a failure).
        let start = Step::WatchStart {
            after_backoff: true,
        };
        let fresh = Step::Watch {
            delivered: false,
            after_backoff: true,
        };
        let running = Step::Watch {
            delivered: true,
            after_backoff: true,
        };
        // Watches started right after a list, or after a watch that ended or went idle.
        let start_at_once = Step::WatchStart {
            after_backoff: false,
        };
        let fresh_at_once = Step::Watch {
            delivered: false,
            after_backoff: false,
        };
        let table: Vec<(Step, Error, Next)> = vec![
            // Lists: every failure backs off (an expired version is retried inside the list).
            (
                Step::List,
                Error::List(connection_refused()),
                AfterBackOff(List),
            ),
            (
                Step::List,
                Error::List(api_error(500, "InternalError", "")),
                AfterBackOff(List),
            ),
            (Step::List, Error::List(gone()), AfterBackOff(List)),
            (
                Step::List,
                Error::Store(FifoError::Closed),
                AfterBackOff(List),
            ),
            (
                Step::List,
                Error::IdleTimeout(Duration::from_secs(1)),
                AfterBackOff(List),
            ),
            // Starting a watch.
            (
                start,
                Error::WatchStart(connection_refused()),
                AfterBackOff(Watch),
            ),
            (
                start,
                Error::WatchStart(api_error(429, "TooManyRequests", "")),
                AfterBackOff(Watch),
            ),
            (start, Error::WatchStart(gone()), Now(List)),
            // 410 from a watch that no backoff step preceded: the relist waits one.
            (start_at_once, Error::WatchStart(gone()), AfterBackOff(List)),
            (fresh_at_once, Error::Watch(gone()), AfterBackOff(List)),
            (
                start,
                Error::WatchStart(api_error(403, "Forbidden", "")),
                AfterBackOff(List),
            ),
            (
                start,
                Error::WatchStart(api_error(500, "InternalError", "")),
                AfterBackOff(List),
            ),
            // A running watch.
            (fresh, Error::Watch(gone()), Now(List)),
            (running, Error::Watch(gone()), AfterBackOff(List)),
            (running, Error::Watch(broken_stream()), AfterBackOff(Watch)),
            (fresh, Error::Watch(broken_stream()), AfterBackOff(Watch)),
            (
                running,
                Error::IdleTimeout(Duration::from_secs(75)),
                Now(Watch),
            ),
            (
                fresh,
                Error::IdleTimeout(Duration::from_secs(75)),
                Now(Watch),
            ),
            (
                start,
                Error::IdleTimeout(Duration::from_secs(75)),
                AfterBackOff(Watch),
            ),
            (
                start,
                Error::WatchStartTimeout(Duration::from_secs(30)),
                AfterBackOff(Watch),
            ),
            (
                running,
                Error::Watch(api_error(429, "TooManyRequests", "")),
                AfterBackOff(Watch),
            ),
            (
                running,
                Error::Watch(api_error(500, "InternalError", "")),
                AfterBackOff(List),
            ),
            (
                running,
                Error::Watch(ListWatchError::TooLarge { limit: 1 }),
                AfterBackOff(List),
            ),
            (
                fresh,
                Error::VeryShortWatch(Duration::from_millis(10)),
                AfterBackOff(List),
            ),
        ];
        for (step, error, want) in table {
            assert_eq!(after(step, &error), want, "{step:?} after {error}");
        }
    }
}
