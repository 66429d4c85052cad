#!/usr/bin/env python3
"""Generates src/protobuf/direct/generated.rs: protobuf decoders that build k8s-openapi's
structs in place, field by field, without going through their serde visitors.

Inputs, both already in the build:
  - the protobuf schema, src/protobuf/schema/generated.rs (itself generated from Kubernetes'
    Go types by scripts/protobuf-schema);
  - k8s-openapi's sources for its newest Kubernetes version (found through `cargo metadata`):
    each struct's fields and Rust types, and from its `Deserialize` impl the JSON name of each.

Each schema field is matched to the Rust field of the same JSON name. Fields whose Rust type
is one the runtime (src/protobuf/direct/mod.rs) builds directly get a direct arm; any other
(raw JSON, durations, the JSONSchemaProps unions, a type that does not match) decodes that one
value through the serde `Deserializer` (src/protobuf/de.rs), which is the reference. Fields
k8s-openapi lacks are skipped, as its visitors ignore unknown keys.

Usage: scripts/protobuf-direct.py [--check]   (--check: fail if the committed file differs)
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCHEMA = os.path.join(ROOT, "src/protobuf/schema/generated.rs")
OUT = os.path.join(ROOT, "src/protobuf/direct/generated.rs")
K8S_VERSION_DIR = "v1_37"
K8S_MACRO = "k8s_if_1_37"


def k8s_openapi_dir():
    meta = json.loads(
        subprocess.check_output(
            ["cargo", "metadata", "--format-version", "1", "--locked"],
            cwd=ROOT,
            env={**os.environ, "K8S_OPENAPI_ENABLED_VERSION": "1.37"},
        )
    )
    for p in meta["packages"]:
        if p["name"] == "k8s-openapi":
            return p["version"], os.path.dirname(p["manifest_path"])
    sys.exit("k8s-openapi is not in cargo metadata")


# ---------------------------------------------------------------------------------------------
# The schema tables.

FIELD_RE = re.compile(
    r'^\s+(?:(f)\((\d+), "([^"]*)", (.+), ([SRM])\)|(z)\((\d+), "([^"]*)", (.+)\)|(i)\((\d+), m\((\d+)\)\)),$'
)


def parse_schema():
    text = open(SCHEMA).read()
    messages = {}
    cur = None
    for line in text.splitlines():
        m = re.match(r"^    // (\d+)$", line)
        if m:
            cur = int(m.group(1))
            messages[cur] = {"name": None, "fields": []}
            continue
        if cur is None:
            continue
        m = re.match(r'^        name: "([^"]+)",$', line)
        if m:
            messages[cur]["name"] = m.group(1)
            continue
        m = FIELD_RE.match(line)
        if m:
            if m.group(1):
                num, js, ty, card, oz, inline = int(m.group(2)), m.group(3), m.group(4), m.group(5), False, False
            elif m.group(6):
                num, js, ty, card, oz, inline = int(m.group(7)), m.group(8), m.group(9), "S", True, False
            else:
                num, js, ty, card, oz, inline = int(m.group(11)), "", "m(%s)" % m.group(12), "S", False, True
            messages[cur]["fields"].append(
                {"number": num, "json": js, "ty": ty, "card": card, "omit_zero": oz, "inline": inline}
            )
        if line.startswith("pub(super) static ROOTS"):
            break
    roots = re.findall(r'r\("([^"]*)", "([^"]*)", (\d+)\)', text.split("pub(super) static ROOTS", 1)[1])
    return messages, [(a, k, int(i)) for a, k, i in roots]


# ---------------------------------------------------------------------------------------------
# k8s-openapi's structs.


def parse_k8s(src):
    """definition name -> {path, fields: {json: (rust_name, rust_type)}, resource: bool}"""
    base = os.path.join(src, "src", K8S_VERSION_DIR)
    structs = {}
    for dirpath, _, files in os.walk(base):
        for fname in files:
            if not fname.endswith(".rs") or fname == "mod.rs":
                continue
            path = os.path.join(dirpath, fname)
            text = open(path).read()
            d = re.search(r"^// Generated from definition (\S+)$", text, re.M)
            if not d:
                continue
            s = re.search(r"^#\[derive\(([^)]*)\)\]\npub struct (\w+) \{\n(.*?)^\}", text, re.M | re.S)
            if not s:
                continue
            derives, name = s.group(1), s.group(2)
            body = "\n".join(l for l in s.group(3).splitlines() if not l.strip().startswith("///"))
            types = dict(re.findall(r"^\s*pub (\w+): (.+),$", body, re.M))
            jsons = re.findall(r'^\s*"([^"]+)" => Field::Key_(\w+),$', text, re.M)
            rel = os.path.relpath(dirpath, base).replace(os.sep, "::")
            fields = {}
            for js, rust in jsons:
                if rust in types:
                    fields[js] = (rust, types[rust])
            structs[d.group(1)] = {
                "path": "k8s_openapi::%s::%s" % (rel, name),
                "fields": fields,
                "default": "Default" in [d.strip() for d in derives.split(",")],
                "resource": re.search(r"^impl crate::Resource for %s \{" % name, text, re.M) is not None,
            }
    return structs


def definition_of(proto_name):
    assert proto_name.startswith("k8s.io.")
    return "io.k8s." + proto_name[len("k8s.io."):]


def norm_def(d):
    return d.replace("-", "_")


# ---------------------------------------------------------------------------------------------
# Matching fields to Rust types.

SIMPLE = {
    "std::string::String": "String",
    "bool": "Bool",
    "i32": "Int32",
    "i64": "Int64",
    "f64": "Double",
    "crate::ByteString": "Bytes",
    "crate::apimachinery::pkg::apis::meta::v1::Time": "Time",
    "crate::apimachinery::pkg::apis::meta::v1::MicroTime": "MicroTime",
    "crate::apimachinery::pkg::api::resource::Quantity": "Quantity",
    "crate::apimachinery::pkg::util::intstr::IntOrString": "IntOrString",
}


def unwrap(t, prefix):
    if t.startswith(prefix) and t.endswith(">"):
        return t[len(prefix):-1]
    return None


def shape(rust_type):
    """(optional, container, leaf) of a Rust field type; container is None, 'vec' or 'map'."""
    opt = False
    inner = unwrap(rust_type, "Option<")
    if inner is not None:
        opt, rust_type = True, inner
    v = unwrap(rust_type, "std::vec::Vec<")
    if v is not None:
        return opt, "vec", v
    m = unwrap(rust_type, "std::collections::BTreeMap<std::string::String, ")
    if m is not None:
        return opt, "map", m
    return opt, None, rust_type


class Gen:
    def __init__(self, messages, roots, structs):
        self.messages = messages
        self.roots = roots
        self.by_def = {norm_def(k): v for k, v in structs.items()}
        self.fns = {}  # (message id, parent struct def or None) -> fn name
        self.queue = []
        self.stats = {"direct": 0, "serde": 0, "absent": 0}
        self.absent = []

    def struct_of(self, mid):
        return self.by_def.get(norm_def(definition_of(self.messages[mid]["name"])))

    def fn_for(self, mid, parent_def=None):
        key = (mid, parent_def)
        if key not in self.fns:
            if parent_def is None:
                name = "m%d" % mid
            else:
                parent = next(i for i, m in self.messages.items() if self.struct_of(i) is not None and self.struct_of(i)["path"] == parent_def[0])
                name = "m%d_in_%d" % (mid, parent)
            self.fns[key] = name
            self.queue.append(key)
        return self.fns[key]

    def leaf_message(self, leaf, ty):
        """The fn that decodes message type `ty` into Rust type `leaf`, if it is that struct."""
        m = re.fullmatch(r"m\((\d+)\)", ty)
        if not m:
            return None
        mid = int(m.group(1))
        st = self.struct_of(mid)
        if st is None or not st["default"] or "crate::" + st["path"][len("k8s_openapi::"):] != leaf:
            return None
        return self.fn_for(mid)

    def arm(self, mid, idx, f, struct, out, inline=False):
        """The match arm of schema field `f` (index `idx` of message `mid`) writing into the
        struct `struct` through the expression `out`."""
        num = f["number"]
        if f["inline"]:
            inner = int(re.fullmatch(r"m\((\d+)\)", f["ty"]).group(1))
            fn = self.fn_for(inner, (struct["path"], mid))
            self.stats["direct"] += 1
            return "%d => %s(rt::len(r, w, %d, n)?, %s, p, d)?," % (num, fn, mid, out)
        got = struct["fields"].get(f["json"])
        if got is None:
            # k8s-openapi's visitors would ignore such a key, but it more likely means this
            # script misread k8s-openapi's source: a silent skip would drop data.
            self.stats["absent"] += 1
            self.absent.append("%s.%s" % (self.messages[mid]["name"], f["json"]))
            return None
        rust, rty = got
        opt, cont, leaf = shape(rty)
        place = "%s.%s" % (out, rust)
        ty, card = f["ty"], f["card"]
        simple = SIMPLE.get(leaf)
        body = None
        if card == "S" and cont is not None:
            body = "if let Some(v) = rt::value(r, w, %d, %d, q, d)? { %s = v; }" % (mid, idx, place)
        elif card == "S":
            if simple == ty and ty not in ("Time", "MicroTime") and not (f["omit_zero"] and ty == "Double"):
                fn = ty.lower()
                if f["omit_zero"] and ty in ("String", "Bool", "Int32", "Int64", "Bytes"):
                    val = "if let Some(v) = rt::nz(rt::%s(r, w, %d, n)?) { %s = %s; }" % (
                        fn, mid, place, "Some(v)" if opt else "v")
                else:
                    val = "%s = %s;" % (place, ("Some(rt::%s(r, w, %d, n)?)" if opt else "rt::%s(r, w, %d, n)?") % (fn, mid))
                body = val
            elif simple == ty and ty in ("Time", "MicroTime") and opt:
                body = "if let Some(v) = rt::%s(r, w, %d, n)? { %s = Some(v); }" % (
                    "time" if ty == "Time" else "micro_time", mid, place)
            else:
                fn = self.leaf_message(leaf, ty)
                if fn is not None:
                    target = "%s.insert(Default::default())" % place if opt else "{ %s = Default::default(); &mut %s }" % (place, place)
                    body = "%s(rt::len(r, w, %d, n)?, %s, q, rt::deeper(d)?)?;" % (fn, mid, target)
            if body is None:
                body = "if let Some(v) = rt::value(r, w, %d, %d, q, d)? { %s = v; }" % (mid, idx, place)
        elif card == "R" and cont == "vec":
            vec = "%s.get_or_insert_default()" % place if opt else "&mut %s" % place
            fn = self.leaf_message(leaf, ty)
            if fn is not None:
                body = "%s(rt::len(r, w, %d, n)?, rt::push(%s, r, n), elements(q), rt::deeper(d)?)?;" % (fn, mid, vec)
            elif simple == ty and ty in ("String", "Bool", "Int32", "Int64", "Quantity"):
                body = "rt::%ss(r, w, %d, n, %s)?;" % (ty.lower(), mid, vec)
            else:
                body = "rt::value_element(r, w, %d, %d, elements(q), d, %s)?;" % (mid, idx, vec)
        elif card == "M" and cont == "map":
            mp = "%s.get_or_insert_default()" % place if opt else "&mut %s" % place
            fn = self.leaf_message(leaf, ty)
            if fn is not None:
                # The map exists once its field occurs, even if the projection drops every entry.
                body = ("let m = %s; if let Some((k, v, q)) = rt::entry(r, w, %d, n, q)? { %s(v, rt::insert(m, k), q, rt::deeper(d)?)?; }"
                        % (mp, mid, fn))
            elif simple == ty and ty in ("String", "Quantity", "Bytes"):
                body = "rt::%s_map(r, w, %d, n, q, %s)?;" % (ty.lower(), mid, mp)
            else:
                body = "rt::value_entry(r, w, %d, %d, q, d, %s)?;" % (mid, idx, mp)
        if body is None:
            # The Rust type does not have the schema's shape: the serde path decides.
            self.stats["serde"] += 1
            return None, (mid, idx)
        if "rt::value" in body:
            self.stats["serde"] += 1
        else:
            self.stats["direct"] += 1
        if inline and card in ("R", "M"):
            # The serde path presents each occurrence of an inline message as keys of the parent
            # object, so a repeated or map field in a later occurrence replaces the earlier one.
            assert idx < 128
            body = "if rt::first(&mut seen, %d) { %s = Default::default(); } %s" % (idx, place, body)
        bind = "q" if re.search(r"\bq\b", body) else "_"
        look = 'let Keep(%s) = look(p, "%s") else { rt::skip(r, w)?; continue };' % (bind, f["json"])
        return "%d => { %s %s }" % (num, look, body)

    def message_fn(self, key):
        mid, parent = key
        msg = self.messages[mid]
        if parent is None:
            st = self.struct_of(mid)
            ty = st["path"]
        else:
            path = parent[0]
            st = next(v for v in self.by_def.values() if v["path"] == path)
            ty = path
        arms = []
        mismatched = []
        for idx, f in enumerate(msg["fields"]):
            a = self.arm(mid, idx, f, st, "o", inline=parent is not None)
            if a is None:
                continue
            if isinstance(a, tuple):
                mismatched.append(a[1])
                continue
            arms.append(a)
        name = self.fns[key]
        lines = ["/// `%s`%s." % (msg["name"], "" if parent is None else ", inline in `%s`" % ty.split("::")[-1])]
        lines.append("fn %s(b: &[u8], o: &mut %s, p: P<'_>, d: u32) -> Res {" % (name, ty))
        lines.append("    let r = &mut Reader::new(b);")
        if any("rt::first(&mut seen" in a for a in arms):
            lines.append("    let mut seen = [0u64; 2];")
        lines.append("    while !r.is_empty() {")
        lines.append("        let (n, w) = r.tag()?;")
        lines.append("        match n {")
        for a in arms:
            lines.append("            " + a)
        lines.append("            _ => rt::skip(r, w)?,")
        lines.append("        }")
        lines.append("    }")
        lines.append("    Ok(())")
        lines.append("}")
        return "\n".join(lines), mismatched

    def generate(self, k8s_version):
        dispatch = []
        for api_version, kind, mid in sorted(set(self.roots), key=lambda r: r[2]):
            st = self.struct_of(mid)
            if st is None or not st["resource"] or not st["default"]:
                continue
            if any(d[0] == mid for d in dispatch):
                continue
            dispatch.append((mid, st["path"], self.fn_for(mid)))
        bodies = []
        mismatched = []
        while self.queue:
            key = self.queue.pop(0)
            text, mm = self.message_fn(key)
            bodies.append((key, text))
            mismatched += mm
        if self.absent:
            sys.exit("schema fields without a k8s-openapi field (misparsed source?): %s" % ", ".join(self.absent))
        if mismatched:
            for mid, idx in mismatched:
                f = self.messages[mid]["fields"][idx]
                print("no decoder for %s.%s (%s %s)" % (self.messages[mid]["name"], f["json"], f["ty"], f["card"]),
                      file=sys.stderr)
            sys.exit("the schema and k8s-openapi's types do not match; teach the generator")
        bodies.sort(key=lambda kt: (kt[0][0], kt[0][1] is not None, kt[1]))
        out = []
        out.append("// @generated by scripts/protobuf-direct.py from the protobuf schema (src/protobuf/schema/")
        out.append("// generated.rs) and k8s-openapi %s's %s structs. Do not edit: CI regenerates this file" % (k8s_version, K8S_VERSION_DIR.replace("_", ".").replace("v", "")))
        out.append("// and fails on a diff.")
        out.append("//")
        out.append("// Direct arms: %d; values through the serde path: %d; schema fields k8s-openapi lacks: %d."
                   % (self.stats["direct"], self.stats["serde"], self.stats["absent"]))
        out.append("")
        out.append("#![allow(unused_variables, clippy::too_many_lines, clippy::needless_continue, clippy::match_same_arms)]")
        out.append("")
        out.append("use std::any::Any;")
        out.append("")
        out.append("use super::rt::{self, Keep, P, Res, elements, look};")
        out.append("use crate::protobuf::{error::Error, wire::Reader};")
        out.append("")
        out.append("/// Decodes message `id` into `slot` (an `Option<K>`) when `K` is the k8s-openapi type of a")
        out.append("/// kind whose message `id` is; `Ok(false)` when it is not (the caller goes through serde).")
        out.append("pub(super) fn root(")
        out.append("    id: u16,")
        out.append("    slot: &mut dyn Any,")
        out.append("    b: &[u8],")
        out.append("    type_meta: Option<(&str, &str)>,")
        out.append("    p: P<'_>,")
        out.append(") -> Result<bool, Error> {")
        out.append("    match id {")
        for mid, path, fn in dispatch:
            out.append("        %d => rt::root::<%s>(slot, b, type_meta, p, %s)," % (mid, path, fn))
        out.append("        _ => Ok(false),")
        out.append("    }")
        out.append("}")
        out.append("")
        out.append("/// Calls `v` with each kind [`root`] decodes directly, and its message.")
        out.append("#[cfg(test)]")
        out.append("pub(super) fn for_each_root(v: &mut impl rt::Roots) {")
        for mid, path, fn in dispatch:
            out.append("    v.root::<%s>(%d);" % (path, mid))
        out.append("}")
        for _, text in bodies:
            out.append("")
            out.append(text)
        return "\n".join(out) + "\n"


def check_coverage(messages, roots, structs):
    """Every kind k8s-openapi has (a struct implementing its `Resource`) is a root of the schema:
    the informer asks for protobuf by group version, so a kind missing from the schema's list of
    group versions (scripts/protobuf-schema/main.go) would fail at run time as `UnknownKind`."""
    rooted = {norm_def(definition_of(messages[mid]["name"])) for _, _, mid in roots}
    missing = sorted(d for d, st in structs.items() if st["resource"] and norm_def(d) not in rooted)
    if missing:
        sys.exit("k8s-openapi kinds the protobuf schema lacks (add their group version to "
                 "scripts/protobuf-schema/main.go): %s" % ", ".join(missing))


def main():
    check = "--check" in sys.argv[1:]
    version, src = k8s_openapi_dir()
    messages, roots = parse_schema()
    structs = parse_k8s(src)
    check_coverage(messages, roots, structs)
    text = Gen(messages, roots, structs).generate(version)
    text = subprocess.run(["rustfmt", "--edition", "2024"], input=text, capture_output=True, text=True, check=True).stdout
    if check:
        old = open(OUT).read() if os.path.exists(OUT) else ""
        if old != text:
            sys.exit("%s is stale: run scripts/protobuf-direct.py" % os.path.relpath(OUT, ROOT))
        return
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
