//! Reflector errors, classified the way client-go's reflector decides what to do next.

use std::time::Duration;

use kube::core::Status;

use super::decode::{DecodeError, UndecodableObject};
use crate::fifo::FifoError;

/// An error from one list or watch call of a [`ListerWatcher`](super::ListerWatcher).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListWatchError {
    /// The server answered with a failure `Status` (HTTP status, or a watch `ERROR` event).
    #[error("API error {}: {} ({})", .0.code, .0.message, .0.reason)]
    Api(Box<Status>),
    /// The request could not be sent or its response not read (connection refused, reset, TLS…).
    #[error("request failed: {0}")]
    Request(#[source] kube::Error),
    /// A list body or watch line could not be decoded.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The server sent a well-formed event or list item whose object does not decode as the
    /// informer's type; the reflector skips it (see [`UndecodableObject`]).
    #[error(transparent)]
    Undecodable(Box<UndecodableObject>),
    /// The watch stream broke while being read.
    #[error("watch stream broke: {0}")]
    Stream(#[source] kube::Error),
    /// The server sent nothing (no response headers, no body bytes) for this long
    /// ([`ListOptions::idle_timeout`](super::ListOptions::idle_timeout)): a dead connection or
    /// server.
    #[error("nothing received for {0:?}: assuming a dead connection")]
    Idle(std::time::Duration),
    /// A list item or watch event grew past the configured maximum size before it ended
    /// ([`ReflectorConfig::max_object_bytes`](super::ReflectorConfig::max_object_bytes)); the
    /// request was abandoned rather than buffering without bound.
    #[error("a list item or watch event exceeds the maximum object size of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A sharded list the server did not shard as asked (see [`crate::sharding`]).
    #[error(transparent)]
    Shard(#[from] crate::sharding::ShardError),
}

impl ListWatchError {
    /// The HTTP status code the server gave, if it gave one.
    pub fn status_code(&self) -> Option<u16> {
        match self {
            Self::Api(s) if s.code != 0 => Some(s.code),
            Self::Request(kube::Error::Api(s)) if s.code != 0 => Some(s.code),
            _ => None,
        }
    }

    fn status(&self) -> Option<&Status> {
        match self {
            Self::Api(s) | Self::Request(kube::Error::Api(s)) => Some(s),
            _ => None,
        }
    }

    /// 410 Gone / reason `Expired` or `Gone`: the resourceVersion asked for has been compacted
    /// (client-go `isExpiredError`).
    pub fn is_expired(&self) -> bool {
        self.status()
            .is_some_and(|s| s.code == 410 || s.reason == "Expired" || s.reason == "Gone")
    }

    /// The resourceVersion asked for is newer than the server has (client-go
    /// `isTooLargeResourceVersionError`: cause `ResourceVersionTooLarge`, or a timeout whose
    /// message says "Too large resource version").
    pub fn is_too_large_resource_version(&self) -> bool {
        self.status().is_some_and(|s| {
            let cause = s.details.as_ref().is_some_and(|d| {
                d.causes
                    .iter()
                    .any(|c| c.reason == "ResourceVersionTooLarge")
            });
            cause
                || ((s.code == 504 || s.reason == "Timeout")
                    && s.message.contains("Too large resource version"))
        })
    }

    /// 429 Too Many Requests.
    pub fn is_too_many_requests(&self) -> bool {
        self.status()
            .is_some_and(|s| s.code == 429 || s.reason == "TooManyRequests")
    }

    /// The server rejected the request as invalid (400/422): for a streaming list, a sign that the
    /// server does not support it.
    pub fn is_bad_request(&self) -> bool {
        self.status().is_some_and(|s| {
            matches!(s.code, 400 | 422) || s.reason == "BadRequest" || s.reason == "Invalid"
        })
    }
}

/// An error the reflector reports to its watch-error handler. None is fatal: the reflector
/// recovers from each (relist, re-watch, back off) and keeps going until it is stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Listing failed.
    #[error("list failed: {0}")]
    List(#[source] ListWatchError),
    /// A watch could not be started.
    #[error("watch failed to start: {0}")]
    WatchStart(#[source] ListWatchError),
    /// A running watch failed (broken stream, undecodable line, `ERROR` event).
    #[error("watch failed: {0}")]
    Watch(#[source] ListWatchError),
    /// The watch closed within a second without delivering anything: treated as a failure so a
    /// server that closes every watch at once is not hammered (client-go "very short watch").
    #[error("very short watch: closed after {0:?} with no events")]
    VeryShortWatch(Duration),
    /// Nothing arrived on the watch for longer than the configured idle timeout.
    #[error("watch idle for {0:?}: assuming a dead connection")]
    IdleTimeout(Duration),
    /// The server did not answer a watch request (not even with its headers) within
    /// [`ReflectorConfig::watch_start_timeout`](super::ReflectorConfig::watch_start_timeout).
    #[error("no answer to the watch request within {0:?}: assuming a dead connection")]
    WatchStartTimeout(Duration),
    /// An object from the server could not be queued (for example it has no name).
    #[error("cannot queue object: {0}")]
    Store(#[source] FifoError),
    /// The server sent an object outside the reflector's shard
    /// ([`ShardError::OutOfShard`](crate::sharding::ShardError::OutOfShard)); it is not cached.
    #[error("{0}")]
    OutOfShard(#[source] crate::sharding::ShardError),
    /// A streaming initial list (watch-list) failed; the reflector falls back to list + watch.
    #[error("streaming list failed, falling back to list+watch: {0}")]
    WatchList(#[source] ListWatchError),
    /// An object the informer's compact cache holds did not decode when its handlers were to
    /// be told of it, so they were not (see [`StorageError`](crate::StorageError) for when
    /// this can happen). Reported once per stored version of the object, however many
    /// notifications (a relist's, each resync's, a late handler's replay) and handlers meet
    /// it, from the thread or task of the handler that read it first. An update whose old object does not decode is not reported:
    /// the handlers are told of the new one, as an add. The object stays cached, and
    /// [`Indexer::try_get_by_key`](crate::Indexer::try_get_by_key) returns the same error.
    #[error("cached object not handed to handlers: {0}")]
    Unreadable(#[source] crate::StorageError),
}

impl Error {
    /// The list/watch error underneath, when there is one.
    pub fn list_watch_error(&self) -> Option<&ListWatchError> {
        match self {
            Self::List(e) | Self::WatchStart(e) | Self::Watch(e) | Self::WatchList(e) => Some(e),
            _ => None,
        }
    }

    /// True when the error means "resourceVersion expired" (410).
    pub fn is_expired(&self) -> bool {
        self.list_watch_error()
            .is_some_and(ListWatchError::is_expired)
    }
}
