//! The HTTP side of the fake API server: routing, list and watch handlers, the watch stream.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::faults::Verb;
use super::fields;
use super::patch::{self, PatchType};
use super::query::{
    ApiError, ContinueAt, Filter, QueryParams, decode_continue, encode_continue, flag, reason_for,
    url_decode,
};
use super::store::{
    DeleteOptions, EventKind, Part, ResourceInfo, StoredEvent, WatchMsg, WatchStart, WriteMode,
};
use super::wire::{self, Wire};
use super::{RecordedRequest, Shared};

type Body = BoxBody<Bytes, std::io::Error>;

/// The largest request body accepted; larger ones are refused rather than buffered.
const MAX_BODY: usize = 16 << 20;

pub(crate) async fn accept_loop(listener: tokio::net::TcpListener, shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        let stream = tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                // Transient accept errors (e.g. too many open files) must not end the server.
                Err(_) => continue,
            },
        };
        // As Go's net package (so kube-apiserver) does by default: without it Nagle's algorithm
        // holds a small watch event back until the client's delayed ACK (~40 ms on Linux).
        let _ = stream.set_nodelay(true);
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut shutdown = shared.shutdown.subscribe();
            let mut restart = shared.conn_abort.subscribe();
            let svc_shared = shared.clone();
            let svc = hyper::service::service_fn(move |req| handle(svc_shared.clone(), req));
            let conn = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), svc);
            // Dropping the connection future closes the socket without a goodbye, which is
            // what a crashed or restarted API server looks like to clients.
            tokio::select! {
                _ = conn => {}
                _ = shutdown.wait_for(|s| *s) => {}
                _ = restart.changed() => {}
            }
        });
    }
}

/// Where a request path points.
struct Route {
    res: usize,
    namespace: Option<String>,
    name: Option<String>,
    /// `Status` for `.../{name}/status`.
    part: Part,
}

fn full(status: u16, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    bytes_response(status, Bytes::from(bytes), wire::JSON)
}

fn bytes_response(status: u16, bytes: Bytes, content_type: &'static str) -> Response<Body> {
    let mut resp = Response::new(Full::new(bytes).map_err(|e| match e {}).boxed());
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(content_type),
    );
    resp
}

/// An object response in the negotiated encoding (metadata only if asked for).
fn object_response(
    wire: Wire,
    info: &ResourceInfo,
    status: u16,
    v: &Value,
) -> Result<Response<Body>, ApiError> {
    let encoded = if wire.metadata_only {
        wire::object_body(wire, "meta.k8s.io/v1", "PartialObjectMetadata", &partial(v))
    } else {
        wire::object_body(wire, &info.api_version(), &info.kind, v)
    };
    let (bytes, content_type) = encoded.map_err(encode_failed)?;
    Ok(bytes_response(status, bytes, content_type))
}

/// A stored object the protobuf encoder refuses (a value of the wrong JSON type for its
/// field) is a server error, as kube-apiserver could not have stored it.
fn encode_failed(e: crate::protobuf::encode::EncodeError) -> ApiError {
    ApiError::new(
        500,
        "InternalError",
        format!("encoding the response as protobuf failed: {e}"),
    )
}

/// How a write answers a body that does not decode into its Go type.
#[derive(Debug, Clone, Copy)]
enum Decode<'a> {
    /// `POST` / `PUT`: the request body is decoded first; `transformDecodeError` makes a
    /// failure `400 BadRequest` ("ConfigMap in version "v1" cannot be handled as a ConfigMap:
    /// ..."), and nothing is stored.
    Body,
    /// A JSON or JSON merge patch: `jsonPatcher` decodes the patched JSON into the type, a
    /// failure is `422 Invalid` on `patch` whose value is the patched object.
    PatchedJson,
    /// A strategic merge patch: `smpPatcher` converts the patched map, a failure is `422
    /// Invalid` on `patch` whose value is the patch.
    Strategic(&'a [u8]),
    /// Server-side apply: the field manager's `failed to create typed patch object` is a plain
    /// error, so `500` with the reason left empty.
    Apply {
        namespace: Option<&'a str>,
        name: &'a str,
    },
}

/// kube-apiserver decodes every object it writes into its Go type, so a value of the wrong
/// JSON type (`{"data": {"k": 5}}` in a ConfigMap) is refused and never stored. For the kinds
/// the protobuf schema knows this is the encoder's check: what it cannot encode, Go could not
/// have decoded. Custom resources are not checked (apiextensions validates them against
/// their OpenAPI schema, which the fake server does not have).
fn check_types(info: &ResourceInfo, obj: &Value, how: Decode<'_>) -> Result<(), ApiError> {
    let encoder = crate::protobuf::encode::Encoder::default();
    let api_version = info.api_version();
    if !encoder.has_kind(&api_version, &info.kind) {
        return Ok(());
    }
    let Err(e) = encoder.object(&api_version, &info.kind, obj) else {
        return Ok(());
    };
    let detail = decode_error(&info.kind, &e);
    Err(match how {
        Decode::Body => ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {detail}",
            kind = info.kind,
            version = info.version,
        )),
        Decode::PatchedJson => patch_invalid(obj.to_string(), detail),
        Decode::Strategic(body) => patch_invalid(String::from_utf8_lossy(body).into(), detail),
        Decode::Apply { namespace, name } => {
            let group_version = if info.group.is_empty() {
                format!("/{}", info.version)
            } else {
                api_version.clone()
            };
            ApiError::new(
                500,
                "",
                format!(
                    "failed to create typed patch object ({}/{name}; {group_version}, Kind={}): {}",
                    namespace.unwrap_or(""),
                    info.kind,
                    e
                ),
            )
        }
    })
}

/// `errors.NewInvalid(schema.GroupKind{}, "", field.Invalid(field.NewPath("patch"), value,
/// detail))`.
fn patch_invalid(value: String, detail: String) -> ApiError {
    let body = format!("Invalid value: {}: {detail}", Value::String(value));
    let mut e = ApiError::new(422, "Invalid", format!(" \"\" is invalid: patch: {body}"));
    e.causes.push(super::query::Cause {
        reason: "FieldValueInvalid",
        message: body,
        field: Some("patch".into()),
    });
    e
}

/// An encoder error in the words of Go's `encoding/json` ("json: cannot unmarshal number into
/// Go struct field ConfigMap.data.k of type string"); never the value itself.
fn decode_error(kind: &str, e: &crate::protobuf::encode::EncodeError) -> String {
    use crate::protobuf::encode::EncodeError;
    let bare = |s: &str| {
        s.strip_prefix("an ")
            .or_else(|| s.strip_prefix("a "))
            .unwrap_or(s)
            .to_string()
    };
    match e {
        EncodeError::WrongType {
            path,
            expected,
            found,
        } => format!(
            "json: cannot unmarshal {} into Go struct field {kind}{path} of type {}",
            bare(found),
            bare(expected)
        ),
        other => format!("json: cannot unmarshal into Go struct field {kind}: {other}"),
    }
}

fn error_response(wire: Wire, e: &ApiError) -> Response<Body> {
    let (bytes, content_type) = wire::status_body(wire, &e.status_json());
    let mut resp = bytes_response(e.code, bytes, content_type);
    if e.code == 429 {
        resp.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    resp
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = QueryParams::parse(req.uri().query());
    let route = resolve(&shared, &path);
    let wire = negotiate(&shared, &req, &route);
    let verb = match (&method, &route) {
        (&Method::GET, Ok(Some(r))) if r.name.is_some() => Verb::Get,
        (&Method::GET, Ok(Some(_))) if query.is_watch() => Verb::Watch,
        (&Method::GET, Ok(Some(_))) => Verb::List,
        (&Method::POST, Ok(Some(_))) => Verb::Create,
        (&Method::PUT, Ok(Some(_))) => Verb::Update,
        (&Method::PATCH, Ok(Some(_))) => Verb::Patch,
        (&Method::DELETE, Ok(Some(_))) => Verb::Delete,
        _ => Verb::Other,
    };

    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let raw_query = req.uri().query().map(str::to_string);
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let resp = if let Some(code) = shared.faults.take_failure(verb) {
        error_response(
            wire,
            &ApiError::new(
                code,
                reason_for(code),
                format!("injected fault: status {code}"),
            ),
        )
    } else {
        let body = if matches!(
            verb,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete
        ) {
            match read_body(req).await {
                Ok(b) => b,
                Err(e) => {
                    return Ok(record(
                        &shared,
                        method,
                        path,
                        verb,
                        query,
                        error_response(wire, &e),
                    ));
                }
            }
        } else {
            Bytes::new()
        };
        let request = WriteRequest {
            body,
            content_type,
            user_agent,
            options: WriteParams::parse(raw_query.as_deref()),
        };
        match dispatch(&shared, &method, &path, route, &query, request, wire) {
            Ok(r) => r,
            Err(e) => error_response(wire, &e),
        }
    };
    Ok(record(&shared, method, path, verb, query, resp))
}

fn record(
    shared: &Shared,
    method: Method,
    path: String,
    verb: Verb,
    query: QueryParams,
    resp: Response<Body>,
) -> Response<Body> {
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    shared.requests.lock().push(RecordedRequest {
        method: method.to_string(),
        path,
        verb,
        query,
        status: resp.status().as_u16(),
        content_type,
    });
    resp
}

/// The response encoding of a request: protobuf only for a registered resource the server
/// serves it for (see [`wire::ProtobufSettings::allows`]).
fn negotiate(
    shared: &Shared,
    req: &Request<Incoming>,
    route: &Result<Option<Route>, ApiError>,
) -> Wire {
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let info = match route {
        Ok(Some(r)) => Some(shared.store.lock().info(r.res).clone()),
        _ => None,
    };
    let settings = shared.protobuf.lock();
    wire::negotiate(accept, |metadata_only| {
        info.as_ref()
            .is_some_and(|i| settings.allows(&i.api_version(), &i.kind, metadata_only))
    })
}

async fn read_body(req: Request<Incoming>) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(req.into_body(), MAX_BODY);
    Ok(limited
        .collect()
        .await
        .map_err(|e| ApiError::bad_request(format!("reading the request body failed: {e}")))?
        .to_bytes())
}

fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

/// The body and options of a write.
struct WriteRequest {
    body: Bytes,
    content_type: Option<String>,
    user_agent: Option<String>,
    options: WriteParams,
}

impl WriteRequest {
    /// The field manager of a non-apply write: `fieldManager`, else the User-Agent up to its
    /// first `/` (`fieldmanager.prefixFromUserAgent`).
    fn update_manager(&self) -> String {
        self.options.field_manager.clone().unwrap_or_else(|| {
            let ua = self.user_agent.as_deref().unwrap_or("");
            ua.split('/').next().unwrap_or("").to_string()
        })
    }
}

/// The query parameters of writes (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
#[derive(Debug, Default)]
struct WriteParams {
    dry_run: Vec<String>,
    force: Option<String>,
    field_manager: Option<String>,
}

impl WriteParams {
    fn parse(query: Option<&str>) -> Self {
        let mut p = Self::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match url_decode(k).as_str() {
                "dryRun" => p.dry_run.push(url_decode(v)),
                // The first value of a repeated parameter counts.
                "force" if p.force.is_none() => p.force = Some(url_decode(v)),
                "fieldManager" if p.field_manager.is_none() => {
                    p.field_manager = Some(url_decode(v));
                }
                _ => {}
            }
        }
        p
    }
}

/// apimachinery `ValidateDryRun`: only `All` is a dry-run value.
fn dry_run(values: &[String], options: &str) -> Result<bool, ApiError> {
    match values {
        [] => Ok(false),
        [all] if all == "All" => Ok(true),
        _ => Err(ApiError::new(
            422,
            "Invalid",
            format!(
                "{options}.meta.k8s.io \"\" is invalid: dryRun: Unsupported value: {values:?}: supported values: \"All\""
            ),
        )),
    }
}

/// The parts of a `DeleteOptions` body the fake server acts on (an empty body is none).
fn delete_options(body: &[u8]) -> Result<DeleteOptions, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(DeleteOptions::default());
    }
    let v = parse_json(body)?;
    let text = |v: &Value| v.as_str().map(str::to_string);
    let dry: Vec<String> = v["dryRun"]
        .as_array()
        .map(|a| a.iter().filter_map(text).collect())
        .unwrap_or_default();
    Ok(DeleteOptions {
        uid: text(&v["preconditions"]["uid"]),
        resource_version: text(&v["preconditions"]["resourceVersion"]),
        dry_run: dry_run(&dry, "DeleteOptions")?,
    })
}

/// Maps a path to a registered resource. `Ok(None)` is a non-resource path (`/version`).
fn resolve(shared: &Shared, path: &str) -> Result<Option<Route>, ApiError> {
    let not_found = || {
        ApiError::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    };
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segs.as_slice() {
        ["version"] => return Ok(None),
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Err(not_found()),
    };
    let (namespace, plural, name, sub) = match rest {
        // A Namespace's own subresources, before the namespaced reading would take
        // `/namespaces/{name}/status` for a resource `status` in that namespace.
        ["namespaces", name, sub @ ("status" | "finalize")] => {
            (None, "namespaces", Some(*name), Some(*sub))
        }
        ["namespaces", ns, plural] => (Some(*ns), *plural, None, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name), None),
        ["namespaces", ns, plural, name, sub] => (Some(*ns), *plural, Some(*name), Some(*sub)),
        [plural] => (None, *plural, None, None),
        [plural, name] => (None, *plural, Some(*name), None),
        [plural, name, sub] => (None, *plural, Some(*name), Some(*sub)),
        _ => return Err(not_found()),
    };
    let store = shared.store.lock();
    let res = store.lookup(group, version, plural).ok_or_else(not_found)?;
    if namespace.is_some() && !store.info(res).namespaced {
        return Err(not_found());
    }
    if namespace.is_none() && name.is_some() && store.info(res).namespaced {
        return Err(not_found());
    }
    if namespace.is_some_and(str::is_empty) || name.is_some_and(str::is_empty) {
        return Err(not_found());
    }
    let part = match sub {
        None => Part::Main,
        Some("status") if store.info(res).status_subresource => Part::Status,
        // Any other subresource (scale, log, ...), or status where it is not served.
        Some(_) => return Err(not_found()),
    };
    Ok(Some(Route {
        res,
        namespace: namespace.map(str::to_string),
        name: name.map(str::to_string),
        part,
    }))
}

fn dispatch(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    route: Result<Option<Route>, ApiError>,
    query: &QueryParams,
    request: WriteRequest,
    wire: Wire,
) -> Result<Response<Body>, ApiError> {
    let Some(route) = route? else {
        if method == Method::GET && path.trim_matches('/') == "version" {
            return Ok(full(
                200,
                &json!({
                    "major": "1", "minor": "37", "gitVersion": "v1.37.0-fake",
                    "gitCommit": "", "gitTreeState": "clean", "buildDate": "",
                    "goVersion": "", "compiler": "gc", "platform": "linux/amd64",
                }),
            ));
        }
        return Err(method_not_allowed());
    };
    let ns = route.namespace.as_deref();
    let info = shared.store.lock().info(route.res).clone();
    let part = route.part;
    match (method, route.name.as_deref()) {
        // GET of `/status` returns the whole object, as the apiserver's status REST does.
        (&Method::GET, Some(name)) => {
            let v = shared.store.lock().get(route.res, ns, name)?;
            object_response(wire, &info, 200, &v)
        }
        (&Method::GET, None) if query.is_watch() => {
            watch(shared, route.res, &info, route.namespace, query, wire)
        }
        (&Method::GET, None) => list(shared, route.res, &info, route.namespace, query, wire),
        (&Method::POST, None) => {
            let mode = WriteMode::api(Part::Main, write_dry_run(&request, "CreateOptions")?);
            let obj = parse_json(&request.body)?;
            check_types(&info, &obj, Decode::Body)?;
            let v = shared.store.lock().create(route.res, ns, obj, mode)?;
            object_response(wire, &info, 201, &v)
        }
        (&Method::PUT, Some(name)) => {
            let mode = WriteMode::api(part, write_dry_run(&request, "UpdateOptions")?);
            let obj = parse_json(&request.body)?;
            check_types(&info, &obj, Decode::Body)?;
            let mut store = shared.store.lock();
            // A tracked object's managed fields follow the update (`fields::record_update`).
            let obj = match store.get(route.res, ns, name) {
                Ok(old) => fields::record_update(
                    &old,
                    obj,
                    &request.update_manager(),
                    info.status_subresource && part == Part::Main,
                ),
                Err(_) => obj,
            };
            let v = store.update(route.res, ns, Some(name), obj, mode)?;
            object_response(wire, &info, 200, &v)
        }
        (&Method::PATCH, Some(name)) => {
            // As `PatchResource`: the content type first, then the options, then the body.
            let kind =
                PatchType::from_content_type(request.content_type.as_deref(), info.is_builtin())?;
            if request.options.force.is_some() && kind != PatchType::Apply {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch",
                ));
            }
            let mode = WriteMode::api(part, write_dry_run(&request, "PatchOptions")?);
            let ignore_status = info.status_subresource && part == Part::Main;
            if kind == PatchType::Apply {
                return server_side_apply(shared, &route, name, &request, mode, ignore_status)
                    .and_then(|(code, v)| object_response(wire, &info, code, &v));
            }
            let mut store = shared.store.lock();
            let current = store.get(route.res, ns, name)?;
            let patched = patch::apply(kind, &current, &request.body)?;
            let how = match kind {
                PatchType::Strategic => Decode::Strategic(&request.body),
                _ => Decode::PatchedJson,
            };
            check_types(&info, &patched, how)?;
            let patched =
                fields::record_update(&current, patched, &request.update_manager(), ignore_status);
            // The patched object is then an update: a resourceVersion the patch sets is a
            // precondition (409 if stale), and the status and finalizer rules apply.
            let v = store.update(route.res, ns, Some(name), patched, mode)?;
            object_response(wire, &info, 200, &v)
        }
        (&Method::DELETE, Some(name)) if part == Part::Main => {
            let opts = delete_options(&request.body)?;
            let v = shared.store.lock().delete(route.res, ns, name, &opts)?;
            object_response(wire, &info, 200, &v)
        }
        _ => Err(method_not_allowed()),
    }
}

/// Server-side apply (`PATCH` with `application/apply-patch+yaml`): `fieldManager` is required,
/// `force` is a boolean parameter (see `flag`); an apply to a missing object creates it (201), as the
/// apiserver's patcher does. The configuration is JSON (which is YAML); within the supported
/// subset (maps and scalars, see `fields`) ownership and conflicts follow the apiserver.
fn server_side_apply(
    shared: &Arc<Shared>,
    route: &Route,
    name: &str,
    request: &WriteRequest,
    mode: WriteMode,
    ignore_status: bool,
) -> Result<(u16, Value), ApiError> {
    let Some(manager) = request
        .options
        .field_manager
        .as_deref()
        .filter(|m| !m.is_empty())
    else {
        return Err(ApiError::new(
            422,
            "Invalid",
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
        ));
    };
    // `Convert_Slice_string_To_Pointer_bool`: anything but `0` / `false` is true.
    let force = flag(request.options.force.as_deref());
    let config: Value = serde_json::from_slice(&request.body).map_err(|e| {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            format!("the fake API server reads apply configurations written as JSON only: {e}"),
        )
    })?;
    let ns = route.namespace.as_deref();
    let mut store = shared.store.lock();
    let live = match store.get(route.res, ns, name) {
        Ok(v) => Some(v),
        Err(e) if e.code == 404 => None,
        Err(e) => return Err(e),
    };
    if let Some(body_name) = config["metadata"]["name"].as_str()
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let mut applied = fields::apply(live.as_ref(), &config, manager, force, ignore_status)?;
    applied["metadata"]["name"] = json!(name);
    let info = store.info(route.res).clone();
    check_types(
        &info,
        &applied,
        Decode::Apply {
            namespace: ns,
            name,
        },
    )?;
    match live {
        Some(_) => Ok((200, store.update(route.res, ns, Some(name), applied, mode)?)),
        None => Ok((201, store.create(route.res, ns, applied, mode)?)),
    }
}

fn method_not_allowed() -> ApiError {
    ApiError::new(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
    )
}

fn write_dry_run(request: &WriteRequest, options: &str) -> Result<bool, ApiError> {
    dry_run(&request.options.dry_run, options)
}

/// The metadata-only form the apiserver returns for `as=PartialObjectMetadata`.
fn partial(obj: &Value) -> Value {
    json!({
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": obj["metadata"].clone(),
    })
}

fn parse_rv(rv: &str) -> Result<u64, ApiError> {
    rv.parse()
        .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))
}

/// apimachinery `ValidateListOptions` for lists (`internalversion/validation`).
fn validate_list(q: &QueryParams) -> Result<(), ApiError> {
    let mut problems = Vec::new();
    if let Some(m) = q
        .resource_version_match
        .as_deref()
        .filter(|m| !m.is_empty())
    {
        let rv = q.resource_version.as_deref().unwrap_or("");
        if rv.is_empty() {
            problems.push("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided".to_string());
        }
        if q.continue_token.as_deref().is_some_and(|c| !c.is_empty()) {
            problems.push("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided".to_string());
        }
        if m != "Exact" && m != "NotOlderThan" {
            problems.push(format!("resourceVersionMatch: Unsupported value: {m:?}"));
        }
        if m == "Exact" && rv == "0" {
            problems.push("resourceVersionMatch: Forbidden: resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"".to_string());
        }
    }
    if q.send_initial_events.is_some() {
        problems.push(
            "sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list".to_string(),
        );
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_list_options(&problems))
    }
}

/// Whether `metadata.namespace` is a field selector label: for every built-in kind
/// (`DefaultMetaV1FieldSelectorConversion`), for custom resources only when namespaced
/// (apiextensions' `crConverter.ConvertFieldLabel`).
fn namespace_field(info: &ResourceInfo) -> bool {
    info.namespaced || info.is_builtin()
}

fn list(
    shared: &Shared,
    res: usize,
    info: &ResourceInfo,
    namespace: Option<String>,
    q: &QueryParams,
    wire: Wire,
) -> Result<Response<Body>, ApiError> {
    validate_list(q)?;
    let sharding = shared.settings.lock().sharding;
    let filter = Filter::from_query(q, namespace, sharding, namespace_field(info))?;
    let limit = match q.limit.as_deref().filter(|l| !l.is_empty()) {
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit: {l:?}")))?,
        None => 0,
    };
    let rv = q.resource_version.as_deref().unwrap_or("");
    let rv_match = q.resource_version_match.as_deref().unwrap_or("");
    let store = shared.store.lock();
    let continue_token = q.continue_token.as_deref().filter(|c| !c.is_empty());
    let (at, start_after) = if let Some(token) = continue_token {
        // apiserver etcd3 store `GetList`: a continue token carries its own RV.
        if !rv.is_empty() && rv != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            ));
        }
        match decode_continue(token)? {
            (ContinueAt::Snapshot(at), key) if at < store.oldest_rv() => {
                let mut e = ApiError::expired(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                );
                // The rest of the list from the latest state, for a client that accepts an
                // inconsistent list (`storage.EncodeContinue(key, prefix, -1)`).
                e.continue_token = Some(encode_continue(ContinueAt::Latest, &key));
                return Err(e);
            }
            (ContinueAt::Snapshot(at), key) => (Some(at), Some(key)),
            (ContinueAt::Latest, key) => (None, Some(key)),
        }
    } else if rv.is_empty() || rv == "0" {
        (None, None)
    } else {
        let n = parse_rv(rv)?;
        // Exact match, or the legacy paged read at an RV, reads that exact snapshot; any other
        // RV means "not older than", served from the current state (k8s API concepts,
        // "Semantics for get and list").
        if rv_match == "Exact" || (rv_match.is_empty() && limit > 0) {
            (Some(n), None)
        } else if n > store.current_rv() {
            return Err(ApiError::too_large(n, store.current_rv()));
        } else {
            (None, None)
        }
    };
    let (snapshot_rv, items) = store.snapshot(res, at)?;
    drop(store);
    let mut matching: Vec<(String, Arc<Value>)> = items
        .into_iter()
        .filter(|(k, _)| start_after.as_ref().is_none_or(|s| k.as_str() > s.as_str()))
        .filter(|(_, v)| filter.matches(v))
        .collect();
    let rest = match usize::try_from(limit) {
        Ok(l) if l > 0 && matching.len() > l => matching.split_off(l),
        _ => Vec::new(),
    };
    let mut meta = json!({ "resourceVersion": snapshot_rv.to_string() });
    if let Some((last, _)) = matching.last().filter(|_| !rest.is_empty()) {
        meta["continue"] = json!(encode_continue(ContinueAt::Snapshot(snapshot_rv), last));
        // Like the apiserver, the count is only known without selectors.
        if q.label_selector.as_deref().unwrap_or("").is_empty()
            && q.field_selector.as_deref().unwrap_or("").is_empty()
            && filter.shard.is_none()
        {
            meta["remainingItemCount"] = json!(rest.len());
        }
    }
    if let Some(shard) = &filter.shard {
        meta["shardInfo"] = json!({ "selector": shard.to_string() });
    }
    let items: Vec<Value> = matching
        .into_iter()
        .map(|(_, v)| {
            if wire.metadata_only {
                partial(&v)
            } else {
                (*v).clone()
            }
        })
        .collect();
    let (api_version, kind) = if wire.metadata_only {
        (
            "meta.k8s.io/v1".to_string(),
            "PartialObjectMetadataList".to_string(),
        )
    } else {
        (info.api_version(), format!("{}List", info.kind))
    };
    let (mut bytes, content_type) =
        wire::list_body(wire, &api_version, &kind, &meta, &items).map_err(encode_failed)?;
    if wire.protobuf {
        bytes = shared.faults.garble_protobuf(bytes);
    }
    Ok(bytes_response(200, bytes, content_type))
}

/// apimachinery `validateWatchOptions`, plus the `WatchList` feature switch.
fn validate_watch(q: &QueryParams, watch_list: bool) -> Result<(), ApiError> {
    let mut problems = Vec::new();
    let m = q.resource_version_match.as_deref().unwrap_or("");
    if q.send_initial_events.is_some() {
        if m != "NotOlderThan" {
            problems.push("resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan".to_string());
        }
        if !watch_list {
            problems.push("sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled".to_string());
        }
    }
    if !m.is_empty() {
        if q.send_initial_events.is_none() {
            problems.push("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".to_string());
        }
        if m != "NotOlderThan" {
            problems.push(format!("resourceVersionMatch: Unsupported value: {m:?}"));
        }
        if q.continue_token.as_deref().is_some_and(|c| !c.is_empty()) {
            problems.push("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided".to_string());
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid_list_options(&problems))
    }
}

/// Everything a watch stream needs besides its channel.
struct WatchCtx {
    info: ResourceInfo,
    filter: Filter,
    wire: Wire,
    bookmarks: bool,
    timeout: Option<Duration>,
    interval: Option<Duration>,
}

impl WatchCtx {
    fn line(&self, kind: &str, obj: &Value) -> Value {
        let obj = if self.wire.metadata_only {
            partial(obj)
        } else {
            obj.clone()
        };
        json!({ "type": kind, "object": obj })
    }

    /// The `apiVersion` and `kind` of the objects on this stream.
    fn kind(&self) -> (String, String) {
        if self.wire.metadata_only {
            (
                "meta.k8s.io/v1".to_string(),
                "PartialObjectMetadata".to_string(),
            )
        } else {
            (self.info.api_version(), self.info.kind.clone())
        }
    }

    /// An event as written on the stream (a JSON line or a protobuf frame); one the encoder
    /// refuses becomes an `ERROR` event with a 500 `Status`, as the apiserver reports an
    /// object it cannot encode.
    fn frame(&self, line: &Value) -> Bytes {
        let (api_version, kind) = self.kind();
        wire::watch_frame(self.wire, line, &api_version, &kind).unwrap_or_else(|e| {
            let error = json!({ "type": "ERROR", "object": encode_failed(e).status_json() });
            wire::watch_frame(self.wire, &error, &api_version, &kind).unwrap_or_default()
        })
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Value {
        let (api_version, kind) = self.kind();
        let mut meta = json!({ "resourceVersion": rv.to_string() });
        if initial_end {
            meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        json!({ "type": "BOOKMARK", "object": { "apiVersion": api_version, "kind": kind, "metadata": meta } })
    }

    /// What this watcher sees of a stored event, given its selectors: the apiserver's
    /// `cacheWatcher.convertToWatchEvent` turns a change across the selector boundary into
    /// ADDED or DELETED.
    fn translate(&self, ev: &StoredEvent) -> Option<Value> {
        match ev.kind {
            EventKind::Added => self
                .filter
                .matches(&ev.object)
                .then(|| self.line("ADDED", &ev.object)),
            EventKind::Deleted => self
                .filter
                .matches(&ev.object)
                .then(|| self.line("DELETED", &ev.object)),
            EventKind::Modified => {
                let now = self.filter.matches(&ev.object);
                let before = ev.prev.as_deref().is_some_and(|p| self.filter.matches(p));
                match (before, now) {
                    (true, true) => Some(self.line("MODIFIED", &ev.object)),
                    (false, true) => Some(self.line("ADDED", &ev.object)),
                    (true, false) => {
                        let mut gone = ev.prev.as_deref().cloned().unwrap_or(Value::Null);
                        gone["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                        Some(self.line("DELETED", &gone))
                    }
                    (false, false) => None,
                }
            }
        }
    }
}

type Chunk = Result<Frame<Bytes>, std::io::Error>;

fn stream_response(rx: mpsc::Receiver<Chunk>, wire: Wire) -> Response<Body> {
    let stream =
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) });
    let mut resp = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static(wire::watch_content_type(wire)),
    );
    resp
}

fn watch(
    shared: &Arc<Shared>,
    res: usize,
    info: &ResourceInfo,
    namespace: Option<String>,
    q: &QueryParams,
    wire: Wire,
) -> Result<Response<Body>, ApiError> {
    let settings = *shared.settings.lock();
    validate_watch(q, settings.watch_list)?;
    let filter = Filter::from_query(q, namespace, settings.sharding, namespace_field(info))?;
    // 0 is unset, as kube-apiserver's `GetTimeoutForWatch` reads it (its default then applies;
    // here, no timeout). Capped, so that the deadline cannot overflow an `Instant`.
    let timeout = match q.timeout_seconds.as_deref().filter(|t| !t.is_empty()) {
        Some(t) => Some(
            t.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t:?}")))?,
        )
        .filter(|&s| s > 0)
        .map(|s| Duration::from_secs(s).min(crate::FAR_FUTURE)),
        None => None,
    };
    let rv = q.resource_version.as_deref().unwrap_or("");
    let initial_events = q.send_initial_events.as_deref();
    let send_initial = flag(initial_events);
    let start = if send_initial {
        if !rv.is_empty() && rv != "0" {
            let n = parse_rv(rv)?;
            let current = shared.store.lock().current_rv();
            if n > current {
                return Err(ApiError::too_large(n, current));
            }
        }
        WatchStart::CurrentState
    } else if rv.is_empty() || rv == "0" {
        // sendInitialEvents=false asks for no synthetic events at all.
        if initial_events.is_some() {
            WatchStart::Now
        } else {
            WatchStart::CurrentState
        }
    } else {
        WatchStart::After(parse_rv(rv)?)
    };
    let ctx = WatchCtx {
        info: info.clone(),
        filter,
        wire,
        bookmarks: q.bookmarks(),
        timeout,
        interval: settings.bookmark_interval,
    };
    let reg = match shared.store.lock().watch(res, start) {
        Ok(reg) => reg,
        Err(e) if e.code == 410 => {
            // The watch cache reports a compacted RV as an ERROR event on an open stream.
            let line = json!({ "type": "ERROR", "object": e.status_json() });
            return Ok(bytes_response(
                200,
                ctx.frame(&line),
                wire::watch_content_type(wire),
            ));
        }
        Err(e) => return Err(e),
    };
    let mut pending: VecDeque<Value> = reg
        .initial
        .iter()
        .filter(|o| ctx.filter.matches(o))
        .map(|o| ctx.line("ADDED", o))
        .collect();
    if send_initial && ctx.bookmarks {
        // KEP-3157: the end of the initial state is a bookmark at the RV it was taken at, sent
        // only where bookmarks are allowed (the cacher's `isListWatchRequest`; validation does
        // not require `allowWatchBookmarks`, a client without it just never sees the end).
        pending.push_back(ctx.bookmark(reg.rv, true));
    }
    pending.extend(reg.replay.iter().filter_map(|e| ctx.translate(e)));
    let (tx, rx) = mpsc::channel(16);
    tokio::spawn(run_watch(shared.clone(), ctx, pending, reg, tx));
    Ok(stream_response(rx, wire))
}

/// Why a watch stream stopped writing.
enum End {
    /// Clean end (timeout, client gone): the stream just finishes.
    Clean,
    /// Abrupt: the connection is cut mid-stream.
    Abort,
}

async fn run_watch(
    shared: Arc<Shared>,
    ctx: WatchCtx,
    mut pending: VecDeque<Value>,
    reg: super::store::WatchRegistration,
    out: mpsc::Sender<Chunk>,
) {
    let end = watch_loop(&shared, &ctx, &mut pending, reg, &out).await;
    if let End::Abort = end {
        // Let hyper write out the lines already handed over before the error cuts the
        // connection, so the client sees exactly the lines before the fault.
        for _ in 0..100 {
            if out.capacity() == out.max_capacity() {
                break;
            }
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
        let _ = out
            .send(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "fake API server dropped the watch",
            )))
            .await;
    }
}

async fn watch_loop(
    shared: &Shared,
    ctx: &WatchCtx,
    pending: &mut VecDeque<Value>,
    reg: super::store::WatchRegistration,
    out: &mpsc::Sender<Chunk>,
) -> End {
    let super::store::WatchRegistration {
        mut rx, kicked, rv, ..
    } = reg;
    let mut last_rv = rv;
    let mut abort = shared.watch_abort.subscribe();
    let mut stalled = shared.faults.stalled.subscribe();
    let deadline = ctx.timeout.map(|t| tokio::time::Instant::now() + t);
    let mut ticker = ctx.interval.map(|d| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + d, d);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut written = 0usize;
    loop {
        if shared.faults.drop_after().is_some_and(|n| written >= n) {
            return End::Abort;
        }
        if *stalled.borrow_and_update() {
            tokio::select! {
                _ = stalled.changed() => continue,
                _ = abort.changed() => return End::Abort,
                _ = out.closed() => return End::Clean,
            }
        }
        if let Some(line) = pending.pop_front() {
            if shared.faults.take_malformed()
                && out
                    .send(Ok(Frame::data(wire::garbage_frame(ctx.wire))))
                    .await
                    .is_err()
            {
                return End::Clean;
            }
            let mut bytes = ctx.frame(&line);
            if ctx.wire.protobuf {
                bytes = shared.faults.garble_protobuf(bytes);
            }
            let truncate = shared.faults.take_truncated();
            if truncate {
                // Half the event, then the connection is cut (below).
                bytes.truncate(bytes.len() / 2);
            }
            tokio::select! {
                sent = out.send(Ok(Frame::data(bytes))) => {
                    if sent.is_err() {
                        return End::Clean;
                    }
                }
                _ = abort.changed() => return End::Abort,
            }
            if truncate {
                return End::Abort;
            }
            written += 1;
            continue;
        }
        let sleep = async {
            match deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        let tick = async {
            match ticker.as_mut() {
                Some(t) => {
                    t.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            _ = abort.changed() => return End::Abort,
            _ = out.closed() => return End::Clean,
            _ = stalled.changed() => {}
            _ = sleep => return End::Clean,
            () = tick => {
                if ctx.bookmarks {
                    pending.push_back(ctx.bookmark(last_rv, false));
                }
            }
            msg = rx.recv() => match msg {
                None if kicked.load(Ordering::SeqCst) => return End::Abort,
                None => return End::Clean,
                Some(WatchMsg::Event(ev)) => {
                    last_rv = ev.rv;
                    if let Some(line) = ctx.translate(&ev) {
                        pending.push_back(line);
                    }
                }
                Some(WatchMsg::Bookmark(rv)) => {
                    last_rv = last_rv.max(rv);
                    if ctx.bookmarks {
                        pending.push_back(ctx.bookmark(last_rv, false));
                    }
                }
            },
        }
    }
}
