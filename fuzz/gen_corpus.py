#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets: realistic watch bodies and list responses.

Run from anywhere: python3 fuzz/gen_corpus.py. The files are committed; rerun after editing.
Watch seeds start with the two header bytes `watch_stream` reads (chunking seed, largest chunk).
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def pod(name, rv, ns="default", phase="Running"):
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": "0b1c6c1e-7f0e-4c1e-9a3e-%012d" % int(rv),
            "resourceVersion": rv,
            "creationTimestamp": "2024-05-01T10:00:00Z",
            "labels": {"app": "web", "tier": "frontend"},
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2024-05-01T09:59:00Z"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4b",
                 "uid": "5f1d", "controller": True, "blockOwnerDeletion": True}
            ],
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                 "time": "2024-05-01T10:00:00Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}
            ],
        },
        "spec": {
            "containers": [
                {"name": "web", "image": "nginx:1.27",
                 "ports": [{"containerPort": 80, "protocol": "TCP"}],
                 "resources": {"limits": {"cpu": "500m", "memory": "128Mi"},
                               "requests": {"cpu": "100m", "memory": "64Mi"}},
                 "livenessProbe": {"httpGet": {"path": "/", "port": "http"}, "periodSeconds": 10},
                 "env": [{"name": "MODE", "value": "prod"}]}
            ],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "nodeName": "node-1",
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
        },
        "status": {
            "phase": phase,
            "podIP": "10.0.0.7",
            "conditions": [{"type": "Ready", "status": "True",
                            "lastTransitionTime": "2024-05-01T10:00:05Z"}],
            "containerStatuses": [
                {"name": "web", "ready": True, "restartCount": 0, "image": "nginx:1.27",
                 "imageID": "docker.io/library/nginx@sha256:00", "started": True,
                 "state": {"running": {"startedAt": "2024-05-01T10:00:04Z"}}}
            ],
        },
    }


def event(ty, obj):
    return json.dumps({"type": ty, "object": obj}, separators=(",", ":"))


def meta_only(o):
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
            "metadata": o["metadata"]}


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def watch(name, header, lines, tail=""):
    write("watch_stream", name, header + ("\n".join(lines) + "\n" + tail).encode())


bookmark_end = {"kind": "Pod", "apiVersion": "v1", "metadata": {
    "resourceVersion": "120", "annotations": {"k8s.io/initial-events-end": "true"}}}
gone = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "too old resource version: 5 (100)", "reason": "Expired", "code": 410}

watch("added_modified_deleted.txt", b"\x07\x00", [
    event("ADDED", pod("web-1", "101")),
    event("MODIFIED", pod("web-1", "102", phase="Succeeded")),
    event("DELETED", pod("web-1", "103")),
])
watch("small_chunks.txt", b"\x2a\x05", [
    event("ADDED", pod("a", "11", ns="kube-system")),
    event("BOOKMARK", {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "12"}}),
])
watch("streaming_list_end.txt", b"\x03\x40", [
    event("ADDED", pod("web-2", "118")),
    event("BOOKMARK", bookmark_end),
])
watch("error_gone.txt", b"\x00\x00", [event("ERROR", gone)])
# The object before the type: decoded through one buffered copy.
watch("object_first.txt", b"\x11\x13", [
    json.dumps({"object": pod("web-3", "130"), "type": "ADDED"}, separators=(",", ":")),
])
# CRLF line ends and blank lines, then an event cut off by a dropped connection.
write("watch_stream", "crlf_blank_truncated.txt", b"\x05\x09" + (
    event("ADDED", pod("b", "7")) + "\r\n\r\n\n" + event("MODIFIED", pod("b", "8")) + "\r\n"
    + event("DELETED", pod("b", "9"))[:60]).encode())
# The read error after the body (header bit 7).
watch("read_error.txt", b"\x09\x88", [event("ADDED", pod("c", "3"))])
watch("metadata_only.txt", b"\x02\x20", [
    event("ADDED", meta_only(pod("m", "55"))),
    event("DELETED", meta_only(pod("m", "56"))),
])
watch("malformed_then_valid.txt", b"\x04\x00", [
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":",
    "not json",
    event("ADDED", {"metadata": {"name": 5}}),
    event("NOPE", {}),
    event("ADDED", pod("d", "4")),
])


def lst(items, rv, cont=None, remaining=None, kind="PodList", api="v1"):
    meta = {"resourceVersion": rv}
    if cont is not None:
        meta["continue"] = cont
    if remaining is not None:
        meta["remainingItemCount"] = remaining
    return json.dumps({"kind": kind, "apiVersion": api, "metadata": meta, "items": items},
                      separators=(",", ":")).encode()


write("list_decode", "pods.json", lst([pod("web-1", "101"), pod("web-2", "102")], "140"))
write("list_decode", "page_with_continue.json",
      lst([pod("p", "9")], "150", cont="eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTUwfQ", remaining=3))
write("list_decode", "empty_null_items.json", b'{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":null}')
write("list_decode", "no_items_extra_fields.json", b'{"metadata":{},"extra":[1,{"a":null}],"kind":"PodList"}')
write("list_decode", "metadata_list.json",
      lst([meta_only(pod("m", "55"))], "160", kind="PartialObjectMetadataList", api="meta.k8s.io/v1"))
write("list_decode", "items_first.json", json.dumps(
    {"items": [pod("x", "1")], "metadata": {"resourceVersion": "2"}}).encode())
