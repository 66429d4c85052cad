//! Request parsing: query parameters, field selectors, continue tokens, and `Status` errors.

use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::selector::LabelRequirements;

/// The list/watch query parameters of one request, as the fake server understood them.
///
/// Absent parameters are `None`; values are kept as sent (after URL decoding) so tests can
/// assert exactly what a client asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryParams {
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch` (`Exact` or `NotOlderThan`).
    pub resource_version_match: Option<String>,
    /// `limit`, as sent.
    pub limit: Option<String>,
    /// `continue`.
    pub continue_token: Option<String>,
    /// `watch` (`true` or `1` start a watch).
    pub watch: Option<String>,
    /// `timeoutSeconds`.
    pub timeout_seconds: Option<String>,
    /// `allowWatchBookmarks`.
    pub allow_watch_bookmarks: Option<String>,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<String>,
    /// `labelSelector`.
    pub label_selector: Option<String>,
    /// `fieldSelector`.
    pub field_selector: Option<String>,
    /// `shardSelector` (KEP-5866).
    pub shard_selector: Option<String>,
}

impl QueryParams {
    /// Parses a raw query string (`a=b&c=d`), URL-decoding keys and values. Of a repeated
    /// parameter the first value counts, as apimachinery's `Convert_Slice_string_To_*` take
    /// `values[0]`.
    pub(crate) fn parse(query: Option<&str>) -> Self {
        let mut q = QueryParams::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let (k, v) = (url_decode(k), url_decode(v));
            let slot = match k.as_str() {
                "resourceVersion" => &mut q.resource_version,
                "resourceVersionMatch" => &mut q.resource_version_match,
                "limit" => &mut q.limit,
                "continue" => &mut q.continue_token,
                "watch" => &mut q.watch,
                "timeoutSeconds" => &mut q.timeout_seconds,
                "allowWatchBookmarks" => &mut q.allow_watch_bookmarks,
                "sendInitialEvents" => &mut q.send_initial_events,
                "labelSelector" => &mut q.label_selector,
                "fieldSelector" => &mut q.field_selector,
                "shardSelector" => &mut q.shard_selector,
                _ => continue,
            };
            if slot.is_none() {
                *slot = Some(v);
            }
        }
        q
    }

    /// Whether this request asks for a watch (`watch` present and not `0` or `false`).
    pub fn is_watch(&self) -> bool {
        flag(self.watch.as_deref())
    }

    pub(crate) fn bookmarks(&self) -> bool {
        flag(self.allow_watch_bookmarks.as_deref())
    }
}

/// A boolean query parameter as apimachinery's `Convert_Slice_string_To_bool` reads it: absent
/// is false, and so are `0` and `false` in any case; anything else (`""`, `yes`, `1`) is true.
pub(crate) fn flag(v: Option<&str>) -> bool {
    v.is_some_and(|s| s != "0" && !s.eq_ignore_ascii_case("false"))
}

/// Decodes `application/x-www-form-urlencoded` text; malformed escapes are kept verbatim rather
/// than rejected, since the server must never fail on odd input.
pub(crate) fn url_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An API error, rendered as a `meta/v1 Status` object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details.causes`.
    pub causes: Vec<Cause>,
    /// `metadata.continue`: the token an expired continue's `410` offers for an inconsistent
    /// rest of the list (apiserver etcd3 store, `handleCompactedErrorForPaging`).
    pub continue_token: Option<String>,
}

/// One `details.causes` entry of a `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    /// `reason`, e.g. `FieldValueInvalid` (Go's `CauseType`).
    pub reason: &'static str,
    pub message: String,
    /// `field`, e.g. `metadata.finalizers`.
    pub field: Option<String>,
}

/// One field error of an `Invalid` response, as apimachinery's `field.Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub field: &'static str,
    pub kind: FieldErrorKind,
}

/// The field error types the fake server reports (`field.ErrorType`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FieldErrorKind {
    /// `field.Invalid`: the value (as JSON) and why.
    Invalid(Value, String),
    /// `field.Forbidden`: why.
    Forbidden(String),
    /// `field.Invalid` of a value that is not JSON, as Go prints it (`0x0` for a `uint64` 0),
    /// and why.
    InvalidGo(&'static str, String),
}

impl FieldError {
    /// `field.Error.ErrorBody`.
    fn body(&self) -> String {
        match &self.kind {
            FieldErrorKind::Invalid(v, detail) => format!("Invalid value: {v}: {detail}"),
            FieldErrorKind::InvalidGo(v, detail) => format!("Invalid value: {v}: {detail}"),
            FieldErrorKind::Forbidden(detail) => format!("Forbidden: {detail}"),
        }
    }

    fn cause_type(&self) -> &'static str {
        match self.kind {
            FieldErrorKind::Invalid(..) | FieldErrorKind::InvalidGo(..) => "FieldValueInvalid",
            FieldErrorKind::Forbidden(_) => "FieldValueForbidden",
        }
    }
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            causes: Vec::new(),
            continue_token: None,
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(what: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{what} \"{name}\" not found"))
    }

    /// apimachinery `errors.NewInvalid` for `ListOptions`, which the handlers return when
    /// `ValidateListOptions` fails (`apiserver/pkg/endpoints/handlers/get.go`).
    pub fn invalid_list_options(problems: &[String]) -> Self {
        Self::new(
            422,
            "Invalid",
            format!(
                "ListOptions.meta.k8s.io \"\" is invalid: {}",
                problems.join(", ")
            ),
        )
    }

    /// `errors.NewResourceExpired`: what the watch cache and etcd return for compacted RVs.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn too_old(rv: u64, oldest: u64) -> Self {
        Self::expired(format!("too old resource version: {rv} ({oldest})"))
    }

    /// apiserver `storage.NewTooLargeResourceVersionError`: a 504 `Timeout` whose cause type is
    /// `ResourceVersionTooLarge`; client-go's `IsTooLargeResourceVersionError` checks either.
    pub fn too_large(rv: u64, current: u64) -> Self {
        let mut e = Self::new(
            504,
            "Timeout",
            format!("Timeout: Too large resource version: {rv}, current: {current}"),
        );
        e.causes.push(Cause {
            reason: "ResourceVersionTooLarge",
            message: "Too large resource version".into(),
            field: None,
        });
        e
    }

    /// `errors.NewConflict`: `resource` is the qualified resource (`configmaps`,
    /// `deployments.apps`) or, for delete preconditions, the kind, as the apiserver words it.
    pub fn conflict(resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource} \"{name}\": {why}"),
        )
    }

    /// `errors.NewInvalid` for an object: `qualified_kind` is `ConfigMap` or `Deployment.apps`.
    pub fn invalid(qualified_kind: &str, name: &str, errors: &[FieldError]) -> Self {
        let listed: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.body()))
            .collect();
        // `utilerrors.Aggregate` prints one error bare and several as a bracketed list.
        let joined = match listed.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        let mut e = Self::new(
            422,
            "Invalid",
            format!("{qualified_kind} \"{name}\" is invalid: {joined}"),
        );
        e.causes = errors
            .iter()
            .map(|fe| Cause {
                reason: fe.cause_type(),
                message: fe.body(),
                field: Some(fe.field.to_string()),
            })
            .collect();
        e
    }

    /// What `errors.NewGenericServerResponse` makes of a 422 (a JSON patch that does not apply).
    pub fn unprocessable(server_message: impl Into<String>) -> Self {
        let mut e = Self::new(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        );
        e.causes.push(Cause {
            reason: "UnexpectedServerResponse",
            message: server_message.into(),
            field: None,
        });
        e
    }

    /// `negotiation.NewUnsupportedMediaTypeError`, with why the fake refuses, if it is a
    /// type the real server would take.
    pub fn unsupported_media_type(accepted: &[&str], why: Option<&str>) -> Self {
        let mut message = format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        );
        if let Some(why) = why {
            message.push_str(" (");
            message.push_str(why);
            message.push(')');
        }
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// `errors.NewInternalError`.
    pub fn internal(why: &str) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {why}"),
        )
    }

    pub fn status_json(&self) -> Value {
        let mut details = json!({});
        if !self.causes.is_empty() {
            details["causes"] = self
                .causes
                .iter()
                .map(|c| {
                    let mut cause = json!({"reason": c.reason, "message": c.message});
                    if let Some(f) = &c.field {
                        cause["field"] = json!(f);
                    }
                    cause
                })
                .collect();
        }
        if self.code == 504 || self.code == 429 {
            details["retryAfterSeconds"] = json!(1);
        }
        let metadata = match &self.continue_token {
            Some(token) => json!({ "continue": token }),
            None => json!({}),
        };
        json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": metadata,
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": details,
            "code": self.code,
        })
    }
}

/// The conventional reason for a status code, used by injected faults.
pub(crate) fn reason_for(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

/// One `metadata.name` / `metadata.namespace` requirement of a field selector.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldRequirement {
    field: Field,
    value: String,
    equal: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Name,
    Namespace,
}

/// A parsed field selector; only the fields every resource supports are accepted, like the
/// generic registry's `DefaultClusterScopedAttr`/`DefaultNamespaceScopedAttr` (and, for a
/// cluster-scoped custom resource, `metadata.name` only, as apiextensions' `crConverter`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FieldSelector(Vec<FieldRequirement>);

impl FieldSelector {
    /// Parses as apimachinery's `fields.ParseSelector`: terms split on unescaped commas, each
    /// split at its leftmost operator (`!=`, `==`, `=`), nothing trimmed, values unescaped
    /// (`\,` `\=` `\\`); `namespace_field` says whether `metadata.namespace` is supported.
    pub fn parse(input: &str, namespace_field: bool) -> Result<Self, ApiError> {
        let mut reqs = Vec::new();
        for part in split_terms(input).into_iter().filter(|p| !p.is_empty()) {
            let Some((field, equal, value)) = split_term(part) else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{input}'; can't understand '{part}'"
                )));
            };
            let value = unescape_value(value).map_err(ApiError::bad_request)?;
            let field = match field {
                "metadata.name" => Field::Name,
                "metadata.namespace" if namespace_field => Field::Namespace,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "field label not supported: {other}"
                    )));
                }
            };
            reqs.push(FieldRequirement {
                field,
                value,
                equal,
            });
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let path = match r.field {
                Field::Name => "name",
                Field::Namespace => "namespace",
            };
            let actual = obj["metadata"][path].as_str().unwrap_or("");
            (actual == r.value) == r.equal
        })
    }
}

/// `fields.splitTerms`: the selector split on commas a backslash does not escape.
fn split_terms(input: &str) -> Vec<&str> {
    if input.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut in_slash = false;
    for (i, c) in input.char_indices() {
        match c {
            _ if in_slash => in_slash = false,
            '\\' => in_slash = true,
            ',' => {
                terms.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&input[start..]);
    terms
}

/// `fields.splitTerm`: the field, whether the operator is an equality, and the raw value, at
/// the leftmost operator (`!=` before `==` before `=` at each position).
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, equal) in [("!=", false), ("==", true), ("=", true)] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], equal, value));
            }
        }
    }
    None
}

/// `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes; an unescaped `,` or
/// `=`, or any other escape, is an error.
fn unescape_value(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                ));
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Go prints the rune with `%v`: its code point.
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    u32::from(c)
                ));
            }
            _ => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".into());
    }
    Ok(out)
}

/// Label and field selectors of a list or watch.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub labels: LabelRequirements,
    pub fields: FieldSelector,
    /// The namespace of the request path, if any.
    pub namespace: Option<String>,
    /// The shard selector, when the server shards and one was given.
    pub shard: Option<crate::sharding::ShardSelector>,
}

impl Filter {
    /// The request's filter; `sharding` says whether the server honours `shardSelector`,
    /// `namespace_field` whether `metadata.namespace` may be selected on.
    pub fn from_query(
        q: &QueryParams,
        namespace: Option<String>,
        sharding: bool,
        namespace_field: bool,
    ) -> Result<Self, ApiError> {
        let shard = match q.shard_selector.as_deref() {
            Some(s) if sharding => Some(
                s.parse::<crate::sharding::ShardSelector>()
                    .map_err(|e| ApiError::bad_request(e.to_string()))?,
            ),
            _ => None,
        };
        let labels = match q.label_selector.as_deref() {
            Some(s) => LabelRequirements::parse(s)
                .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?,
            None => LabelRequirements::default(),
        };
        let fields = match q.field_selector.as_deref() {
            Some(s) => FieldSelector::parse(s, namespace_field)?,
            None => FieldSelector::default(),
        };
        Ok(Self {
            labels,
            fields,
            namespace,
            shard,
        })
    }

    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj["metadata"]["namespace"].as_str() != Some(ns.as_str())
        {
            return false;
        }
        if !self.fields.matches(obj) {
            return false;
        }
        if let Some(shard) = &self.shard {
            let field = match shard.key() {
                crate::sharding::ShardKey::Uid => "uid",
                crate::sharding::ShardKey::Namespace => "namespace",
            };
            if !shard.matches_value(obj["metadata"][field].as_str().unwrap_or("")) {
                return false;
            }
        }
        if self.labels.selects_all() {
            return true;
        }
        let labels = obj["metadata"]["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        self.labels.matches(&labels)
    }
}

/// Where a continue token reads: the snapshot of its first page, or (a token from an expired
/// continue's `410`) the latest state, an inconsistent rest of the list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContinueAt {
    Snapshot(u64),
    Latest,
}

/// The state a continue token carries: where it reads and the last key served. Like the
/// apiserver's (`storage/continue.go`, whose version is `-1` for "latest"), it is opaque to
/// clients; here it is hex-encoded `rv/key`.
pub(crate) fn encode_continue(at: ContinueAt, last_key: &str) -> String {
    let raw = match at {
        ContinueAt::Snapshot(rv) => format!("{rv}/{last_key}"),
        ContinueAt::Latest => format!("-1/{last_key}"),
    };
    let mut out = String::with_capacity(raw.len() * 2);
    for b in raw.bytes() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

pub(crate) fn decode_continue(token: &str) -> Result<(ContinueAt, String), ApiError> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token:?}"));
    if !token.len().is_multiple_of(2) || !token.is_ascii() {
        return Err(bad());
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16).ok())
        .collect();
    let raw = String::from_utf8(bytes.ok_or_else(bad)?).map_err(|_| bad())?;
    let (rv, key) = raw.split_once('/').ok_or_else(bad)?;
    // As the apiserver: a positive version is a snapshot, a negative one the latest state, and
    // 0 is invalid.
    let at = match rv.parse::<i64>().map_err(|_| bad())? {
        n if n < 0 => ContinueAt::Latest,
        0 => return Err(bad()),
        n => ContinueAt::Snapshot(n.unsigned_abs()),
    };
    Ok((at, key.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_decode_handles_escapes_plus_and_garbage() {
        assert_eq!(url_decode("a%3Db+c"), "a=b c");
        assert_eq!(url_decode("%"), "%");
        assert_eq!(url_decode("%z1"), "%z1");
        assert_eq!(url_decode("100%"), "100%");
        assert_eq!(url_decode("%4"), "%4");
    }

    #[test]
    fn query_params_are_parsed_and_decoded() {
        let q = QueryParams::parse(Some(
            "watch=1&labelSelector=app%3Dweb&resourceVersion=5&unknown=x&limit",
        ));
        assert!(q.is_watch());
        assert_eq!(q.label_selector.as_deref(), Some("app=web"));
        assert_eq!(q.resource_version.as_deref(), Some("5"));
        assert_eq!(q.limit.as_deref(), Some(""));
    }

    #[test]
    fn boolean_parameters_are_true_unless_0_or_false_and_the_first_value_wins() {
        for t in ["true", "1", "", "yes", "True", "on"] {
            assert!(flag(Some(t)), "{t:?}");
        }
        for f in ["0", "false", "FALSE", "False"] {
            assert!(!flag(Some(f)), "{f:?}");
        }
        assert!(!flag(None));
        let q = QueryParams::parse(Some(
            "watch=false&watch=true&resourceVersion=1&resourceVersion=2",
        ));
        assert!(!q.is_watch());
        assert_eq!(q.resource_version.as_deref(), Some("1"));
        assert!(QueryParams::parse(Some("watch")).is_watch());
        assert!(QueryParams::parse(Some("allowWatchBookmarks=yes")).bookmarks());
    }

    #[test]
    fn continue_token_round_trips_and_rejects_garbage() {
        let t = encode_continue(ContinueAt::Snapshot(42), "ns/name");
        assert_eq!(
            decode_continue(&t).unwrap(),
            (ContinueAt::Snapshot(42), "ns/name".to_string())
        );
        let t = encode_continue(ContinueAt::Latest, "ns/name");
        assert_eq!(
            decode_continue(&t).unwrap(),
            (ContinueAt::Latest, "ns/name".to_string())
        );
        // "0/a": the apiserver refuses a token at version 0.
        for bad in ["", "zz", "abc", "é", "6161", "302f61"] {
            assert_eq!(decode_continue(bad).unwrap_err().code, 400, "{bad:?}");
        }
    }

    #[test]
    fn field_selector_supports_name_and_namespace_only() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}});
        assert!(
            FieldSelector::parse("metadata.name=a", true)
                .unwrap()
                .matches(&obj)
        );
        assert!(
            FieldSelector::parse("metadata.name==a,metadata.namespace=ns", true)
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.namespace!=ns", true)
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(
            FieldSelector::parse("spec.x=1", true).unwrap_err().code,
            400
        );
        assert_eq!(
            FieldSelector::parse("metadata.name", true)
                .unwrap_err()
                .code,
            400
        );
    }

    #[test]
    fn field_selectors_parse_as_apimachinery() {
        let parse = |s: &str| FieldSelector::parse(s, true);
        let obj = |name: &str| json!({"metadata": {"name": name, "namespace": "ns"}});
        // Escaped commas and equals signs are part of the value.
        let sel = parse(r"metadata.name=a\,b\=c\\d").unwrap();
        assert!(sel.matches(&obj(r"a,b=c\d")));
        // The leftmost operator: `!=` at the first position it can start.
        let sel = parse("metadata.name!=x").unwrap();
        assert!(!sel.matches(&obj("x")) && sel.matches(&obj("y")));
        // No trimming: a space is part of the field (unsupported) or the value.
        assert_eq!(
            parse("metadata.name = a").unwrap_err().message,
            "field label not supported: metadata.name "
        );
        assert!(parse("metadata.name= a").unwrap().matches(&obj(" a")));
        assert!(!parse("metadata.name= a").unwrap().matches(&obj("a")));
        // Empty terms are skipped.
        assert!(parse(",metadata.name=a,").unwrap().matches(&obj("a")));
        for (bad, why) in [
            (
                "metadata.name=a=b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "metadata.name==a=b",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                r"metadata.name=a\x",
                r"invalid field selector: invalid escape sequence: \x",
            ),
            (
                r"metadata.name=a\",
                r"invalid field selector: invalid escape sequence: \",
            ),
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (400, why), "{bad}");
        }
        // Cluster-scoped custom resources have no `metadata.namespace` field.
        let e = FieldSelector::parse("metadata.namespace=ns", false).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (400, "field label not supported: metadata.namespace")
        );
        assert!(FieldSelector::parse("metadata.name=a", false).is_ok());
    }
}
