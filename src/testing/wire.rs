//! Content negotiation and the two response encodings of the fake API server: JSON, and
//! kube-apiserver's protobuf (`application/vnd.kubernetes.protobuf`) for built-in kinds.

use std::collections::HashSet;

use bytes::Bytes;
use serde_json::{Value, json};

use crate::protobuf::encode::{self, EncodeError, Encoder};

/// The media type of JSON bodies and JSON watch streams.
pub(crate) const JSON: &str = "application/json";

/// What a request gets back, from its `Accept` header and what the resource can be served as.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Wire {
    /// Protobuf rather than JSON.
    pub protobuf: bool,
    /// `PartialObjectMetadata(List)` rather than the objects (`as=PartialObjectMetadata...`).
    pub metadata_only: bool,
}

/// The server's protobuf switches.
#[derive(Debug)]
pub(crate) struct ProtobufSettings {
    /// Protobuf is served at all (default on, as kube-apiserver serves it).
    pub enabled: bool,
    /// `(apiVersion, kind)` of built-in resources served only as JSON.
    pub disabled: HashSet<(String, String)>,
}

/// Set to `0` to start every fake server with protobuf off (JSON only), so a test suite
/// written against the default runs in the other encoding too (CI runs the reflector, informer
/// and chaos suites both ways).
pub const FAKE_PROTOBUF_ENV: &str = "KUBE_INFORMER_FAKE_PROTOBUF";

impl Default for ProtobufSettings {
    fn default() -> Self {
        Self {
            enabled: std::env::var_os(FAKE_PROTOBUF_ENV).is_none_or(|v| v != "0"),
            disabled: HashSet::new(),
        }
    }
}

impl ProtobufSettings {
    /// Whether a resource of `api_version` `kind` may be served in protobuf: with its own
    /// message (a built-in kind: custom resources are JSON only, as apiextensions-apiserver
    /// serves them), or as metadata only (which kube-apiserver serves in protobuf for custom
    /// resources too).
    pub(crate) fn allows(&self, api_version: &str, kind: &str, metadata_only: bool) -> bool {
        if !self.enabled {
            return false;
        }
        let enc = Encoder::default();
        if metadata_only {
            return enc.has_kind("meta.k8s.io/v1", "PartialObjectMetadataList");
        }
        enc.has_kind(api_version, kind)
            && !self
                .disabled
                .contains(&(api_version.to_string(), kind.to_string()))
    }
}

/// One media range of an `Accept` header.
struct Clause<'a> {
    media: &'a str,
    q: f32,
    as_kind: Option<&'a str>,
    group: Option<&'a str>,
    version: Option<&'a str>,
}

fn parse_clause(text: &str) -> Option<Clause<'_>> {
    let mut parts = text.split(';').map(str::trim);
    let media = parts.next().filter(|m| !m.is_empty())?;
    let mut c = Clause {
        media,
        q: 1.0,
        as_kind: None,
        group: None,
        version: None,
    };
    for param in parts {
        let (k, v) = param.split_once('=').unwrap_or((param, ""));
        let v = v.trim().trim_matches('"');
        match k.trim().to_ascii_lowercase().as_str() {
            "q" => c.q = v.parse().unwrap_or(0.0),
            "as" => c.as_kind = Some(v),
            "g" => c.group = Some(v),
            "v" => c.version = Some(v),
            _ => {}
        }
    }
    Some(c)
}

/// Picks the response encoding as kube-apiserver's `NegotiateOutputMediaType` does: the
/// media ranges in order of preference (`q`, then as listed), the first one the endpoint can
/// serve wins. `protobuf_ok(metadata_only)` says whether protobuf can be served. Ranges the
/// fake server does not serve (YAML, CBOR, `as=Table`) are passed over; with none left, or no
/// header, the answer is plain JSON.
pub(crate) fn negotiate(accept: Option<&str>, protobuf_ok: impl Fn(bool) -> bool) -> Wire {
    let mut clauses: Vec<Clause<'_>> = accept
        .unwrap_or("")
        .split(',')
        .filter_map(parse_clause)
        .filter(|c| c.q > 0.0)
        .collect();
    // Stable: equal preferences keep the header's order.
    clauses.sort_by(|a, b| b.q.total_cmp(&a.q));
    for c in clauses {
        let metadata_only = match c.as_kind {
            None => false,
            Some("PartialObjectMetadata" | "PartialObjectMetadataList")
                if c.group == Some("meta.k8s.io") && c.version == Some("v1") =>
            {
                true
            }
            Some(_) => continue,
        };
        let media = c.media.to_ascii_lowercase();
        match media.as_str() {
            "application/vnd.kubernetes.protobuf" if protobuf_ok(metadata_only) => {
                return Wire {
                    protobuf: true,
                    metadata_only,
                };
            }
            "application/json" | "application/*" | "*/*" => {
                return Wire {
                    protobuf: false,
                    metadata_only,
                };
            }
            _ => {}
        }
    }
    Wire::default()
}

/// The `apiVersion` and `kind` of a `Status`, as kube-apiserver encodes errors.
const STATUS: (&str, &str) = ("v1", "Status");

/// One object (or a `Status`) as a response body, and its content type.
pub(crate) fn object_body(
    wire: Wire,
    api_version: &str,
    kind: &str,
    v: &Value,
) -> Result<(Bytes, &'static str), EncodeError> {
    if wire.protobuf {
        Ok((
            encode::encode_object(api_version, kind, v)?.into(),
            encode::CONTENT_TYPE,
        ))
    } else {
        Ok((serde_json::to_vec(v).unwrap_or_default().into(), JSON))
    }
}

/// An error `Status` as a response body: protobuf if negotiated, and JSON should that fail.
pub(crate) fn status_body(wire: Wire, status: &Value) -> (Bytes, &'static str) {
    object_body(wire, STATUS.0, STATUS.1, status)
        .unwrap_or_else(|_| (serde_json::to_vec(status).unwrap_or_default().into(), JSON))
}

/// A list response body: JSON `{apiVersion, kind, metadata, items}`, or the protobuf list.
pub(crate) fn list_body(
    wire: Wire,
    api_version: &str,
    list_kind: &str,
    metadata: &Value,
    items: &[Value],
) -> Result<(Bytes, &'static str), EncodeError> {
    if wire.protobuf {
        let refs: Vec<&Value> = items.iter().collect();
        Ok((
            encode::encode_list(api_version, list_kind, metadata, &refs)?.into(),
            encode::CONTENT_TYPE,
        ))
    } else {
        let body = json!({
            "apiVersion": api_version, "kind": list_kind, "metadata": metadata, "items": items,
        });
        Ok((serde_json::to_vec(&body).unwrap_or_default().into(), JSON))
    }
}

/// The content type of a watch stream.
pub(crate) fn watch_content_type(wire: Wire) -> &'static str {
    if wire.protobuf {
        encode::WATCH_CONTENT_TYPE
    } else {
        JSON
    }
}

/// One watch event `{type, object}` as written on the stream: a JSON line, or a
/// length-prefixed protobuf frame whose object is of `api_version` `kind` (a `v1` `Status`
/// for `ERROR` events).
pub(crate) fn watch_frame(
    wire: Wire,
    line: &Value,
    api_version: &str,
    kind: &str,
) -> Result<Bytes, EncodeError> {
    if wire.protobuf {
        let event_type = line["type"].as_str().unwrap_or("");
        let (api_version, kind) = if event_type == "ERROR" {
            STATUS
        } else {
            (api_version, kind)
        };
        Ok(encode::encode_watch_event(event_type, api_version, kind, &line["object"])?.into())
    } else {
        let mut bytes = serde_json::to_vec(line).unwrap_or_default();
        bytes.push(b'\n');
        Ok(bytes.into())
    }
}

/// What the `malformed_line_next` fault writes before the real event: a JSON line that is
/// not JSON, or a well-framed protobuf frame whose body is not a `WatchEvent`.
pub(crate) fn garbage_frame(wire: Wire) -> Bytes {
    if wire.protobuf {
        Bytes::from_static(&[0, 0, 0, 4, 0xff, 0xff, 0xff, 0xff])
    } else {
        Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":{garbage\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pick(accept: &str, ok: bool) -> Wire {
        negotiate(Some(accept), |_| ok)
    }

    const PB: Wire = Wire {
        protobuf: true,
        metadata_only: false,
    };
    const PB_META: Wire = Wire {
        protobuf: true,
        metadata_only: true,
    };
    const JSON_META: Wire = Wire {
        protobuf: false,
        metadata_only: true,
    };

    #[test]
    fn negotiation() {
        assert_eq!(negotiate(None, |_| true), Wire::default());
        assert_eq!(pick("application/json", true), Wire::default());
        assert_eq!(
            pick(
                "application/vnd.kubernetes.protobuf, application/json",
                true
            ),
            PB
        );
        // Not servable in protobuf (a custom resource, or switched off): the next range.
        assert_eq!(
            pick(
                "application/vnd.kubernetes.protobuf, application/json",
                false
            ),
            Wire::default()
        );
        assert_eq!(
            pick(
                "application/json, application/vnd.kubernetes.protobuf",
                true
            ),
            Wire::default()
        );
        // Preference by q, then order.
        assert_eq!(
            pick(
                "application/json;q=0.5, application/vnd.kubernetes.protobuf",
                true
            ),
            PB
        );
        assert_eq!(
            pick(
                "application/vnd.kubernetes.protobuf;q=0, application/json",
                true
            ),
            Wire::default()
        );
        assert_eq!(pick("application/yaml, */*", true), Wire::default());
        assert_eq!(
            pick(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
                true
            ),
            PB_META
        );
        assert_eq!(
            pick(
                "application/vnd.kubernetes.protobuf;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json",
                false
            ),
            JSON_META
        );
        assert_eq!(
            pick(
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
                true
            ),
            JSON_META
        );
        // Tables are not served: the plain range after it.
        assert_eq!(
            pick(
                "application/json;as=Table;g=meta.k8s.io;v=v1,application/json",
                true
            ),
            Wire::default()
        );
        // `as=` of another group is not metadata-only.
        assert_eq!(
            pick(
                "application/json;as=PartialObjectMetadata;g=other;v=v1, application/vnd.kubernetes.protobuf",
                true
            ),
            PB
        );
        // The protobuf check is told whether the request is metadata-only.
        assert_eq!(
            negotiate(
                Some(
                    "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1, application/json"
                ),
                |meta| meta
            ),
            PB_META
        );
    }

    #[test]
    fn json_frames_are_lines() {
        let line = json!({"type": "ADDED", "object": {"a": 1}});
        let frame = watch_frame(Wire::default(), &line, "v1", "Pod");
        assert_eq!(
            frame.ok().as_deref(),
            Some(&b"{\"object\":{\"a\":1},\"type\":\"ADDED\"}\n"[..])
        );
        assert_eq!(watch_content_type(Wire::default()), "application/json");
        assert_eq!(
            watch_content_type(PB),
            "application/vnd.kubernetes.protobuf;stream=watch"
        );
    }
}
