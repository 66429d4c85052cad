//! `PATCH`: which patch types the fake API server takes, and applying them.
//!
//! JSON patch (RFC 6902) and JSON merge patch (RFC 7386) are applied with the `json-patch`
//! crate, as kube-apiserver applies them with `evanphx/json-patch` (`handlers/patch.go`).
//!
//! Strategic merge patch and server-side apply are served for bodies of maps and scalars only
//! (a Lease, a ConfigMap's `data`, labels and annotations): the merge of lists depends on
//! per-field rules (Go `patchStrategy` tags, OpenAPI `listType`) the fake server does not have,
//! so a body with a list, and a strategic `$`-directive, gets `415` saying so
//! ([`fields::check_supported`](super::fields::check_supported)) rather than a result the real
//! server would not give. Within that subset a strategic merge patch is exactly a JSON merge
//! patch (maps merged key by key, `null` deletes), and an apply is handled by
//! [`fields::apply`](super::fields::apply) with field ownership.

use serde_json::Value;

use super::query::ApiError;

/// The patch types kube-apiserver serves, as named by the request's `Content-Type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchType {
    /// `application/json-patch+json`.
    Json,
    /// `application/merge-patch+json`.
    Merge,
    /// `application/strategic-merge-patch+json`, of maps and scalars.
    Strategic,
    /// `application/apply-patch+yaml` (server-side apply; a JSON body is valid YAML), of maps
    /// and scalars.
    Apply,
}

const JSON_PATCH: &str = "application/json-patch+json";
const MERGE_PATCH: &str = "application/merge-patch+json";
const STRATEGIC_MERGE_PATCH: &str = "application/strategic-merge-patch+json";
const APPLY_PATCH_YAML: &str = "application/apply-patch+yaml";
const APPLY_PATCH_CBOR: &str = "application/apply-patch+cbor";

/// What the fake server accepts for built-in kinds, in the order the 415 message lists them
/// (the apiserver's `installer.go`).
const ACCEPTED: &[&str] = &[
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    APPLY_PATCH_YAML,
];

/// What it accepts for custom resources: no strategic merge patch, as apiextensions-apiserver's
/// `customresource_handler.go` serves them (CR types have no Go struct tags to merge by).
const ACCEPTED_CUSTOM: &[&str] = &[JSON_PATCH, MERGE_PATCH, APPLY_PATCH_YAML];

/// The maximum number of operations in one JSON patch (`maxJSONPatchOperations`).
const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

impl PatchType {
    /// The patch type of a `Content-Type` header (parameters such as `charset` ignored, as the
    /// apiserver does), or the `415` the request gets; `builtin` is false for a custom
    /// resource, which takes no strategic merge patch.
    pub fn from_content_type(content_type: Option<&str>, builtin: bool) -> Result<Self, ApiError> {
        let accepted = if builtin { ACCEPTED } else { ACCEPTED_CUSTOM };
        let media = content_type
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim();
        match media {
            JSON_PATCH => Ok(Self::Json),
            MERGE_PATCH => Ok(Self::Merge),
            STRATEGIC_MERGE_PATCH if builtin => Ok(Self::Strategic),
            APPLY_PATCH_YAML => Ok(Self::Apply),
            APPLY_PATCH_CBOR => Err(ApiError::unsupported_media_type(
                accepted,
                Some(
                    "the fake API server does not decode CBOR: send the apply configuration as JSON",
                ),
            )),
            _ => Err(ApiError::unsupported_media_type(accepted, None)),
        }
    }
}

/// Applies a patch body to the current object and returns the patched object, which the
/// caller then stores as an update (so the resourceVersion, status and finalizer rules of an
/// update apply to it).
///
/// # Errors
///
/// `400 BadRequest` for a body that is not a patch of its type, `413` for a JSON patch of more
/// than 10,000 operations, `422 Invalid` for a JSON patch that does not apply (a failed `test`,
/// a missing path), as `jsonPatcher.applyJSPatch` answers; `415` for a strategic merge patch
/// outside the supported subset. An apply is not a patch of this kind (the caller hands it to
/// `fields::apply`): `500` if one gets here.
pub(crate) fn apply(kind: PatchType, current: &Value, body: &[u8]) -> Result<Value, ApiError> {
    // `validateAndTranscodePatch`: a patch must be JSON whatever its type.
    let body: Value =
        serde_json::from_slice(body).map_err(|_| ApiError::bad_request("invalid JSON patch"))?;
    let patched = match kind {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            if ops.0.len() > MAX_JSON_PATCH_OPERATIONS {
                return Err(ApiError::new(
                    413,
                    "RequestEntityTooLarge",
                    format!(
                        "Request entity too large: The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
                        ops.0.len()
                    ),
                ));
            }
            let mut doc = current.clone();
            // `patch_unsafe` on a copy: a failed patch leaves the copy half-done, and the copy
            // is dropped; the undo of `patch` is not needed.
            json_patch::patch_unsafe(&mut doc, &ops)
                .map_err(|e| ApiError::unprocessable(e.to_string()))?;
            doc
        }
        PatchType::Apply => {
            return Err(ApiError::internal(
                "an apply configuration is not a patch to merge",
            ));
        }
        PatchType::Merge | PatchType::Strategic => {
            if kind == PatchType::Strategic {
                // `strategicpatch.StrategicMergeMapPatch` over a schema without list fields
                // or directives merges as RFC 7386 does.
                super::fields::check_supported(&body, "strategic merge patch", true)?;
            }
            if !body.is_object() {
                // evanphx `MergePatch` turns a non-object patch into the whole document, which
                // then fails to decode as the object; the apiserver answers 400 or 422. A
                // merge patch of a Kubernetes object is always an object.
                return Err(ApiError::bad_request(
                    "invalid JSON merge patch: the patch of an object must be a JSON object",
                ));
            }
            let mut doc = current.clone();
            json_patch::merge(&mut doc, &body);
            doc
        }
    };
    if !patched.is_object() {
        return Err(ApiError::new(
            422,
            "Invalid",
            "patch: Invalid value: the patched object is not a JSON object",
        ));
    }
    Ok(patched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm() -> Value {
        json!({"metadata": {"name": "a", "labels": {"x": "1"}}, "data": {"k": "v", "l": [1, 2]}})
    }

    #[test]
    fn content_types_map_to_patch_types_or_415() {
        assert_eq!(
            PatchType::from_content_type(Some("application/merge-patch+json; charset=utf-8"), true),
            Ok(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type(Some(JSON_PATCH), true),
            Ok(PatchType::Json)
        );
        assert_eq!(
            PatchType::from_content_type(Some(STRATEGIC_MERGE_PATCH), true),
            Ok(PatchType::Strategic)
        );
        assert_eq!(
            PatchType::from_content_type(Some(APPLY_PATCH_YAML), true),
            Ok(PatchType::Apply)
        );
        for refused in [Some(APPLY_PATCH_CBOR), Some("text/plain"), None] {
            let e = PatchType::from_content_type(refused, true).unwrap_err();
            assert_eq!(
                (e.code, e.reason),
                (415, "UnsupportedMediaType"),
                "{refused:?}"
            );
            assert!(e.message.contains(MERGE_PATCH), "{}", e.message);
        }
        let cbor = PatchType::from_content_type(Some(APPLY_PATCH_CBOR), true).unwrap_err();
        assert!(cbor.message.contains("CBOR"), "{}", cbor.message);
    }

    #[test]
    fn custom_resources_take_no_strategic_merge_patch() {
        let e = PatchType::from_content_type(Some(STRATEGIC_MERGE_PATCH), false).unwrap_err();
        assert_eq!((e.code, e.reason), (415, "UnsupportedMediaType"));
        assert_eq!(
            e.message,
            "the body of the request was in an unknown format - accepted media types include: \
             application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
        );
        for ok in [JSON_PATCH, MERGE_PATCH, APPLY_PATCH_YAML] {
            assert!(
                PatchType::from_content_type(Some(ok), false).is_ok(),
                "{ok}"
            );
        }
    }

    #[test]
    fn strategic_merge_patch_of_maps_and_scalars_merges_as_rfc_7386_and_refuses_lists() {
        let body = br#"{"metadata": {"labels": {"x": null, "y": "2"}}, "data": {"k": "w"}}"#;
        let out = apply(PatchType::Strategic, &cm(), body).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        assert_eq!(out["data"], json!({"k": "w", "l": [1, 2]}));
        for refused in [
            &br#"{"data": {"l": [3]}}"#[..],
            br#"{"metadata": {"$patch": "replace"}}"#,
            br#"{"$setElementOrder/data": {}}"#,
        ] {
            let e = apply(PatchType::Strategic, &cm(), refused).unwrap_err();
            assert_eq!(
                (e.code, e.reason),
                (415, "UnsupportedMediaType"),
                "{}",
                String::from_utf8_lossy(refused)
            );
        }
    }

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let body = br#"{"metadata": {"labels": {"x": null, "y": "2"}}, "data": {"l": [3]}}"#;
        let out = apply(PatchType::Merge, &cm(), body).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"y": "2"}));
        // Lists are replaced whole, maps merged key by key.
        assert_eq!(out["data"], json!({"k": "v", "l": [3]}));
        assert_eq!(
            apply(PatchType::Merge, &cm(), b"[1]").unwrap_err().code,
            400
        );
        assert_eq!(apply(PatchType::Merge, &cm(), b"{").unwrap_err().code, 400);
    }

    #[test]
    fn json_patch_does_every_operation() {
        let body = json!([
            {"op": "add", "path": "/data/n", "value": "new"},
            {"op": "remove", "path": "/data/k"},
            {"op": "replace", "path": "/metadata/labels/x", "value": "9"},
            {"op": "move", "from": "/data/n", "path": "/data/m"},
            {"op": "copy", "from": "/data/m", "path": "/data/c"},
            {"op": "add", "path": "/data/l/-", "value": 3},
            {"op": "test", "path": "/data/l", "value": [1, 2, 3]},
        ]);
        let out = apply(PatchType::Json, &cm(), body.to_string().as_bytes()).unwrap();
        assert_eq!(out["data"], json!({"m": "new", "c": "new", "l": [1, 2, 3]}));
        assert_eq!(out["metadata"]["labels"]["x"], "9");
    }

    #[test]
    fn json_patch_failures_are_422_and_bad_bodies_400() {
        let failed_test = json!([{"op": "test", "path": "/data/k", "value": "other"}]);
        let e = apply(PatchType::Json, &cm(), failed_test.to_string().as_bytes()).unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        let missing = json!([{"op": "replace", "path": "/spec/x", "value": 1}]);
        assert_eq!(
            apply(PatchType::Json, &cm(), missing.to_string().as_bytes())
                .unwrap_err()
                .code,
            422
        );
        let not_ops = json!({"op": "add"});
        assert_eq!(
            apply(PatchType::Json, &cm(), not_ops.to_string().as_bytes())
                .unwrap_err()
                .code,
            400
        );
        let unknown_op = json!([{"op": "frobnicate", "path": "/a"}]);
        assert_eq!(
            apply(PatchType::Json, &cm(), unknown_op.to_string().as_bytes())
                .unwrap_err()
                .code,
            400
        );
        let whole = json!([{"op": "replace", "path": "", "value": 1}]);
        assert_eq!(
            apply(PatchType::Json, &cm(), whole.to_string().as_bytes())
                .unwrap_err()
                .code,
            422
        );
    }
}
