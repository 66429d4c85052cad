//! Sharded list and watch (KEP-5866, kube-apiserver's alpha `ShardedListAndWatch` gate): each
//! replica of a controller lists and watches only the objects whose hashed `metadata.uid` (or
//! `metadata.namespace`) falls in its ranges, so n replicas split one collection between them.
//!
//! The wire format is the apiserver's `shardSelector` parameter, a CEL expression of
//! `shardRange(object.metadata.uid, '0x…', '0x…')` calls joined by `||`, each an inclusive start
//! and exclusive end over the 64-bit FNV-1a hash of the field's value (full range
//! `[0x0000000000000000, 0x10000000000000000)`). The rules follow k8s.io/apiserver
//! `pkg/sharding/parser.go` and k8s.io/apimachinery `pkg/sharding`: hex bounds are lowercase,
//! 16 digits (or exactly `0x10000000000000000` for 2^64), start below end, one field for all
//! ranges.
//!
//! A server without the gate ignores the parameter and answers with the whole collection; its
//! list responses then lack `metadata.shardInfo`. The reflector checks each object it receives
//! against the shard as well, as client-go's `NewShardedListWatch` does, so such a server costs
//! each replica the whole collection's transfer and decode but never caches or hands its
//! handlers more than its shard (the reflector logs each such list at info level). The
//! server's sharding is what saves the transfer; client-side, the shard holds either way.
//!
//! ```
//! use kube_informer::sharding::{ShardKey, ShardSelector};
//!
//! let shard = ShardSelector::of(1, 2).unwrap();
//! assert_eq!(
//!     shard.to_string(),
//!     "shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')"
//! );
//! let parsed: ShardSelector = shard.to_string().parse().unwrap();
//! assert_eq!(parsed, shard);
//! assert_eq!(parsed.key(), ShardKey::Uid);
//! // Every uid is in exactly one of the n shards.
//! let uid = "6e1d2a8c-51c4-4b8f-9d0e-3f7a2b1c9d10";
//! let owners = (0..3).filter(|&i| ShardSelector::of(i, 3).unwrap().matches_value(uid));
//! assert_eq!(owners.count(), 1);
//! ```

use std::{fmt, str::FromStr};

use kube::Resource;

/// The field whose hash places an object in a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ShardKey {
    /// `object.metadata.uid`: spreads objects evenly; the usual choice.
    Uid,
    /// `object.metadata.namespace`: keeps each namespace on one replica (cluster-scoped objects
    /// all hash the empty namespace).
    Namespace,
}

impl ShardKey {
    /// The CEL field path the apiserver expects.
    pub fn path(self) -> &'static str {
        match self {
            ShardKey::Uid => "object.metadata.uid",
            ShardKey::Namespace => "object.metadata.namespace",
        }
    }

    fn from_path(path: &str) -> Option<Self> {
        match path {
            "object.metadata.uid" => Some(ShardKey::Uid),
            "object.metadata.namespace" => Some(ShardKey::Namespace),
            _ => None,
        }
    }

    /// This key's value in `obj`'s metadata (empty when unset, as the apiserver reads it).
    pub fn value_of<K: Resource>(self, obj: &K) -> &str {
        let meta = obj.meta();
        match self {
            ShardKey::Uid => meta.uid.as_deref(),
            ShardKey::Namespace => meta.namespace.as_deref(),
        }
        .unwrap_or("")
    }
}

/// The end of the hash space, 2^64, as an exclusive bound.
pub const HASH_SPACE_END: u128 = 1 << 64;

/// One hash range: `start` inclusive, `end` exclusive, `start < end <= 2^64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShardRange {
    start: u64,
    end: u128,
}

impl ShardRange {
    /// The range `[start, end)`.
    ///
    /// # Errors
    ///
    /// [`ShardError::Invalid`] unless `start < end <= 2^64`.
    pub fn new(start: u64, end: u128) -> Result<Self, ShardError> {
        if u128::from(start) >= end || end > HASH_SPACE_END {
            return Err(ShardError::Invalid(format!(
                "shard range [{start:#x}, {end:#x}) is empty or beyond 2^64"
            )));
        }
        Ok(Self { start, end })
    }

    /// The inclusive start.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The exclusive end (at most 2^64).
    pub fn end(&self) -> u128 {
        self.end
    }

    /// Whether `hash` is in the range.
    pub fn contains(&self, hash: u64) -> bool {
        hash >= self.start && u128::from(hash) < self.end
    }
}

/// A shard: one or more hash ranges over one [`ShardKey`]. Its `Display` is the canonical
/// `shardSelector` string, the same the apiserver echoes in `ListMeta.shardInfo.selector`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ShardSelector {
    key: ShardKey,
    ranges: Vec<ShardRange>,
}

impl ShardSelector {
    /// Shard `index` of `count` equal shards by uid: the hash space cut into `count` ranges
    /// (`[index × 2^64 / count, (index + 1) × 2^64 / count)`), so every object is in exactly
    /// one of the `count` shards.
    ///
    /// # Errors
    ///
    /// [`ShardError::Invalid`] when `count` is 0 or `index >= count`.
    pub fn of(index: u32, count: u32) -> Result<Self, ShardError> {
        Self::of_key(ShardKey::Uid, index, count)
    }

    /// As [`of`](Self::of), hashing `key`.
    ///
    /// # Errors
    ///
    /// [`ShardError::Invalid`] when `count` is 0 or `index >= count`.
    pub fn of_key(key: ShardKey, index: u32, count: u32) -> Result<Self, ShardError> {
        if index >= count {
            return Err(ShardError::Invalid(format!(
                "shard index {index} is not below the shard count {count}"
            )));
        }
        let bound = |i: u32| HASH_SPACE_END * u128::from(i) / u128::from(count);
        let start = u64::try_from(bound(index)).expect("below 2^64 since index < count");
        Ok(Self {
            key,
            ranges: vec![ShardRange::new(start, bound(index + 1))?],
        })
    }

    /// A shard of explicit ranges (joined by `||`).
    ///
    /// # Errors
    ///
    /// [`ShardError::Invalid`] when `ranges` is empty.
    pub fn ranges(key: ShardKey, ranges: Vec<ShardRange>) -> Result<Self, ShardError> {
        if ranges.is_empty() {
            return Err(ShardError::Invalid(
                "a shard selector needs at least one range".into(),
            ));
        }
        Ok(Self { key, ranges })
    }

    /// The hashed field.
    pub fn key(&self) -> ShardKey {
        self.key
    }

    /// The ranges, in the order given.
    pub fn shard_ranges(&self) -> &[ShardRange] {
        &self.ranges
    }

    /// Whether a field value (a uid or namespace) belongs to this shard.
    pub fn matches_value(&self, value: &str) -> bool {
        let hash = hash_field(value);
        self.ranges.iter().any(|r| r.contains(hash))
    }

    /// Whether `obj` belongs to this shard.
    pub fn matches<K: Resource>(&self, obj: &K) -> bool {
        self.matches_value(self.key.value_of(obj))
    }
}

/// The 64-bit FNV-1a hash of `value`'s bytes, the hash the apiserver shards by
/// (k8s.io/apimachinery `pkg/sharding/hash.go`).
pub fn hash_field(value: &str) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    value
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}

fn hex_bound(v: u128) -> String {
    if v == HASH_SPACE_END {
        "0x10000000000000000".to_string()
    } else {
        format!("{v:#018x}")
    }
}

impl fmt::Display for ShardSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(" || ")?;
            }
            write!(
                f,
                "shardRange({}, '{}', '{}')",
                self.key.path(),
                hex_bound(u128::from(r.start)),
                hex_bound(r.end)
            )?;
        }
        Ok(())
    }
}

/// What is wrong with a shard selector, or with a server's answer to one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The selector is malformed or empty.
    #[error("invalid shard selector: {0}")]
    Invalid(String),
    /// The server applied a different selector than the one asked for.
    #[error("the server applied the shard selector {applied:?}, not {asked:?}")]
    Mismatch {
        /// The selector asked for.
        asked: String,
        /// The selector `metadata.shardInfo` echoed.
        applied: String,
    },
    /// The server sent an object outside the shard; it is left out of the cache.
    #[error("the server sent {key}, which is outside the shard {selector:?}; it is not cached")]
    OutOfShard {
        /// The object's `namespace/name`.
        key: String,
        /// The selector asked for.
        selector: String,
    },
}

impl FromStr for ShardSelector {
    type Err = ShardError;

    /// Parses a `shardSelector` expression with the apiserver's rules.
    fn from_str(s: &str) -> Result<Self, ShardError> {
        let mut p = Parser {
            src: s,
            pos: 0,
            ranges: Vec::new(),
            key: None,
            depth: 0,
        };
        p.skip_ws();
        if p.at_end() {
            return Err(p.error("empty shard selector"));
        }
        p.disjunction()?;
        p.skip_ws();
        if !p.at_end() {
            return Err(p.error("unexpected text after the expression"));
        }
        let key = p.key.expect("a parsed expression has at least one range");
        Self::ranges(key, p.ranges)
    }
}

/// A recursive-descent parser of the subset of CEL the apiserver accepts: `shardRange(path,
/// 'hex', 'hex')` calls, `||` and parentheses.
struct Parser<'a> {
    src: &'a str,
    pos: usize,
    ranges: Vec<ShardRange>,
    key: Option<ShardKey>,
    /// Parentheses open around the term being parsed (see [`MAX_NESTING`]).
    depth: usize,
}

/// Parentheses a selector may nest. The parser recurses once per level, so unbounded nesting
/// (a selector from a user, or echoed by the server) would overflow the stack and abort.
const MAX_NESTING: usize = 32;

impl Parser<'_> {
    fn error(&self, what: &str) -> ShardError {
        ShardError::Invalid(format!("{what} at offset {} of {:?}", self.pos, self.src))
    }

    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn at_end(&self) -> bool {
        self.pos >= self.src.len()
    }

    fn skip_ws(&mut self) {
        let trimmed = self.rest().trim_start();
        self.pos = self.src.len() - trimmed.len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), ShardError> {
        if self.eat(token) {
            Ok(())
        } else {
            Err(self.error(&format!("expected `{token}`")))
        }
    }

    fn disjunction(&mut self) -> Result<(), ShardError> {
        self.term()?;
        while self.eat("||") {
            self.term()?;
        }
        Ok(())
    }

    fn term(&mut self) -> Result<(), ShardError> {
        if self.eat("(") {
            if self.depth == MAX_NESTING {
                return Err(self.error(&format!("parentheses nested more than {MAX_NESTING} deep")));
            }
            self.depth += 1;
            self.disjunction()?;
            self.depth -= 1;
            return self.expect(")");
        }
        let name = self.ident()?;
        if name != "shardRange" {
            return Err(self.error(&format!(
                "unsupported function {name:?}; only shardRange() and || are allowed"
            )));
        }
        self.expect("(")?;
        let mut path = self.ident()?;
        while self.eat(".") {
            path.push('.');
            path.push_str(&self.ident()?);
        }
        let key = ShardKey::from_path(&path).ok_or_else(|| {
            self.error(&format!(
                "unsupported field path {path:?}; supported: object.metadata.uid, \
                 object.metadata.namespace"
            ))
        })?;
        if self.key.is_some_and(|k| k != key) {
            return Err(self.error("all shard ranges must use the same field"));
        }
        self.key = Some(key);
        self.expect(",")?;
        let start = self.hex("hexStart")?;
        self.expect(",")?;
        let end = self.hex("hexEnd")?;
        self.expect(")")?;
        let start = u64::try_from(start)
            .map_err(|_| self.error("the range start must be below 0x10000000000000000"))?;
        let range = ShardRange::new(start, end)
            .map_err(|_| self.error("shard range start must be less than end"))?;
        self.ranges.push(range);
        Ok(())
    }

    fn ident(&mut self) -> Result<String, ShardError> {
        self.skip_ws();
        let len = self
            .rest()
            .char_indices()
            .find(|&(i, c)| !(c == '_' || c.is_ascii_alphabetic() || (i > 0 && c.is_ascii_digit())))
            .map_or(self.rest().len(), |(i, _)| i);
        if len == 0 {
            return Err(self.error("expected an identifier"));
        }
        let id = self.rest()[..len].to_string();
        self.pos += len;
        Ok(id)
    }

    /// A quoted `0x`-prefixed hex literal: 16 lowercase digits, or `0x10000000000000000`.
    fn hex(&mut self, name: &str) -> Result<u128, ShardError> {
        self.skip_ws();
        let quote = match self.rest().chars().next() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(self.error(&format!("{name} must be a string literal"))),
        };
        let body = &self.rest()[1..];
        let close = body
            .find(quote)
            .ok_or_else(|| self.error("unterminated string literal"))?;
        let literal = &body[..close];
        let digits = literal
            .strip_prefix("0x")
            .ok_or_else(|| self.error(&format!("{name} must have a '0x' prefix")))?;
        let valid = match digits.len() {
            16 => digits
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            17 => digits == "10000000000000000",
            _ => false,
        };
        if !valid {
            return Err(self.error(&format!(
                "{name} must be a 0x-prefixed 16-digit lowercase hex value (or \
                 0x10000000000000000), got {literal:?}"
            )));
        }
        let value = u128::from_str_radix(digits, 16).expect("validated hex digits");
        self.pos += close + 2;
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_the_reference_values() {
        // Published FNV-1a 64-bit test vectors.
        assert_eq!(hash_field(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash_field("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash_field("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn n_equal_shards_partition_the_hash_space() {
        for count in [1u32, 2, 3, 7, 16] {
            let shards: Vec<_> = (0..count)
                .map(|i| ShardSelector::of(i, count).unwrap())
                .collect();
            assert_eq!(shards[0].ranges[0].start, 0);
            assert_eq!(shards[count as usize - 1].ranges[0].end, HASH_SPACE_END);
            for w in shards.windows(2) {
                assert_eq!(u128::from(w[1].ranges[0].start), w[0].ranges[0].end);
            }
            for i in 0..200 {
                let uid = format!("uid-{i}-{count}");
                let owners = shards.iter().filter(|s| s.matches_value(&uid)).count();
                assert_eq!(owners, 1, "{uid} in {owners} of {count} shards");
            }
        }
        assert!(ShardSelector::of(3, 3).is_err());
        assert!(ShardSelector::of(0, 0).is_err());
    }

    #[test]
    fn display_and_parse_round_trip_in_the_apiserver_format() {
        let two = ShardSelector::ranges(
            ShardKey::Namespace,
            vec![
                ShardRange::new(0, 0x4000_0000_0000_0000).unwrap(),
                ShardRange::new(0xc000_0000_0000_0000, HASH_SPACE_END).unwrap(),
            ],
        )
        .unwrap();
        let s = two.to_string();
        assert_eq!(
            s,
            "shardRange(object.metadata.namespace, '0x0000000000000000', '0x4000000000000000') \
             || shardRange(object.metadata.namespace, '0xc000000000000000', '0x10000000000000000')"
        );
        assert_eq!(s.parse::<ShardSelector>().unwrap(), two);
        // Whitespace, double quotes and parentheses are CEL too.
        let loose = " ( shardRange( object . metadata . uid ,\"0x0000000000000000\", \
                     '0x8000000000000000' ) ) ";
        assert_eq!(
            loose.parse::<ShardSelector>().unwrap(),
            ShardSelector::of(0, 2).unwrap()
        );
    }

    #[test]
    fn parse_refuses_what_the_apiserver_refuses() {
        for bad in [
            "",
            "   ",
            "shardRange(object.metadata.uid, '0x0', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x000000000000000A', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0000000000000000', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x8000000000000000', '0x0000000000000000')",
            "shardRange(object.metadata.uid, '0x10000000000000000', '0x10000000000000000')",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x20000000000000000')",
            "shardRange(object.metadata.name, '0x0000000000000000', '0x8000000000000000')",
            "shardRange(metadata.uid, '0x0000000000000000', '0x8000000000000000')",
            "hashRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x0000000000000000')",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') && \
             shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000') || \
             shardRange(object.metadata.namespace, '0x8000000000000000', '0x10000000000000000')",
            "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000",
        ] {
            assert!(
                matches!(bad.parse::<ShardSelector>(), Err(ShardError::Invalid(_))),
                "{bad:?} parsed"
            );
        }
    }

    /// Deep nesting is an error, not a stack overflow (which aborts the process): parsed on a
    /// thread with a 1 MiB stack (half a default thread's), which a million levels would
    /// overflow many times over.
    #[test]
    fn deeply_nested_parentheses_are_refused() {
        let range = "shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')";
        let nested = move |n: usize| format!("{}{range}{}", "(".repeat(n), ")".repeat(n));
        assert!(nested(MAX_NESTING).parse::<ShardSelector>().is_ok());
        let refused = std::thread::Builder::new()
            .stack_size(1024 * 1024)
            .spawn(move || {
                [nested(MAX_NESTING + 1), "(".repeat(1_000_000)]
                    .iter()
                    .map(|s| match s.parse::<ShardSelector>() {
                        Err(ShardError::Invalid(e)) => e.contains("nested more than"),
                        _ => false,
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap()
            .join()
            .unwrap();
        assert_eq!(refused, [true, true]);
    }

    #[test]
    fn objects_are_placed_by_the_hash_of_their_key() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let mut cm = ConfigMap::default();
        cm.metadata.uid = Some("foobar".into());
        cm.metadata.namespace = Some("a".into());
        // hash("foobar") = 0x85944171f73967e8 is in the upper half; hash("a") too.
        assert!(ShardSelector::of(1, 2).unwrap().matches(&cm));
        assert!(!ShardSelector::of(0, 2).unwrap().matches(&cm));
        let by_ns = ShardSelector::of_key(ShardKey::Namespace, 1, 2).unwrap();
        assert!(by_ns.matches(&cm));
        cm.metadata.namespace = Some("foobar".into());
        assert!(by_ns.matches(&cm));
    }
}
