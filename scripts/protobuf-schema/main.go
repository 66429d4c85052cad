// Command protobuf-schema writes src/protobuf/schema/generated.rs: the protobuf schema of every
// built-in Kubernetes kind k8s-openapi has, read with reflection from the Go types' struct tags
// (`protobuf:"..."`, `protobuf_key`, `protobuf_val`, `json:"..."`).
//
//	go run .                  # the Rust tables, on stdout
//	go run . fixtures <dir>   # golden protobuf/JSON fixtures (fixtures.go)
//
// It fails, naming the Go field, on anything the Rust schema types cannot express, rather than
// writing something wrong.
package main

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// kubernetesVersion is the release of the Go modules in go.mod.
const kubernetesVersion = "1.37.2"

// groupVersions are the group versions k8s-openapi 0.29 has for v1_37, which are those
// kube-apiserver 1.37 serves. client-go's scheme also registers long-removed versions
// (extensions/v1beta1, apps/v1beta2, ...) that no k8s-openapi type names; they are left out.
// "v1" is the core group, which also holds the unversioned kinds (Status, APIGroup, ...).
var groupVersions = []string{
	"v1",
	"admissionregistration.k8s.io/v1",
	"admissionregistration.k8s.io/v1alpha1",
	"admissionregistration.k8s.io/v1beta1",
	"apiextensions.k8s.io/v1",
	"apiregistration.k8s.io/v1",
	"apps/v1",
	"authentication.k8s.io/v1",
	"authorization.k8s.io/v1",
	"autoscaling/v1",
	"autoscaling/v2",
	"batch/v1",
	"certificates.k8s.io/v1",
	"certificates.k8s.io/v1beta1",
	"coordination.k8s.io/v1",
	"coordination.k8s.io/v1alpha2",
	"coordination.k8s.io/v1beta1",
	"discovery.k8s.io/v1",
	"events.k8s.io/v1",
	"flowcontrol.apiserver.k8s.io/v1",
	"internal.apiserver.k8s.io/v1alpha1",
	"lifecycle.k8s.io/v1alpha1",
	"meta.k8s.io/v1",
	"networking.k8s.io/v1",
	"node.k8s.io/v1",
	"policy/v1",
	"rbac.authorization.k8s.io/v1",
	"resource.k8s.io/v1",
	"resource.k8s.io/v1alpha3",
	"resource.k8s.io/v1beta1",
	"resource.k8s.io/v1beta2",
	"scheduling.k8s.io/v1",
	"scheduling.k8s.io/v1alpha3",
	"scheduling.k8s.io/v1beta1",
	"storage.k8s.io/v1",
	"storagemigration.k8s.io/v1",
	"storagemigration.k8s.io/v1beta1",
}

// newScheme registers every built-in kind: client-go's scheme (every k8s.io/api group and the
// unversioned meta kinds under "v1"), apiextensions v1, apiregistration v1, and meta.k8s.io/v1
// (PartialObjectMetadata and its list, Table, the options kinds, WatchEvent).
func newScheme() *runtime.Scheme {
	s := runtime.NewScheme()
	must(clientgoscheme.AddToScheme(s))
	metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
	must(apiextensionsv1.AddToScheme(s))
	must(apiregistrationv1.AddToScheme(s))
	metav1.AddToGroupVersion(s, metav1.SchemeGroupVersion)
	must(metav1.AddMetaToScheme(s))
	return s
}

func must(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "protobuf-schema: "+format+"\n", args...)
	os.Exit(1)
}

func main() {
	switch {
	case len(os.Args) == 1:
		os.Stdout.WriteString(generate(newScheme()))
		// Expected (go-to-protobuf itself goes by the Go types); list them with -v.
		fmt.Fprintf(os.Stderr, "protobuf-schema: %d tags whose wire type or label is not their Go type's\n", len(tagMismatches))
	case len(os.Args) == 2 && os.Args[1] == "-v":
		os.Stdout.WriteString(generate(newScheme()))
		for _, m := range tagMismatches {
			fmt.Fprintln(os.Stderr, "protobuf-schema: the Go type wins over the tag:", m)
		}
	case len(os.Args) == 3 && os.Args[1] == "fixtures":
		writeFixtures(newScheme(), os.Args[2])
	default:
		fail("usage: protobuf-schema [-v | fixtures <dir>]")
	}
}

// The Go types with a dedicated Rust `Type`, by identity.
var special = map[reflect.Type]string{
	reflect.TypeFor[metav1.Time]():                                  "Time",
	reflect.TypeFor[metav1.MicroTime]():                             "MicroTime",
	reflect.TypeFor[metav1.Duration]():                              "Duration",
	reflect.TypeFor[resource.Quantity]():                            "Quantity",
	reflect.TypeFor[intstr.IntOrString]():                           "IntOrString",
	reflect.TypeFor[metav1.FieldsV1]():                              "RawJson",
	reflect.TypeFor[runtime.RawExtension]():                         "RawJson",
	reflect.TypeFor[apiextensionsv1.JSON]():                         "RawJson",
	reflect.TypeFor[apiextensionsv1.JSONSchemaPropsOrArray]():       "SchemaPropsOrArray",
	reflect.TypeFor[apiextensionsv1.JSONSchemaPropsOrBool]():        "SchemaPropsOrBool",
	reflect.TypeFor[apiextensionsv1.JSONSchemaPropsOrStringArray](): "SchemaPropsOrStringArray",
}

// The message the SchemaProps* types hold.
var jsonSchemaProps = reflect.TypeFor[apiextensionsv1.JSONSchemaProps]()

// marshaler is what gogo-generated (and hand-written) protobuf types implement; a kind whose
// type does not (metav1.Table) has no protobuf form and is no root.
type marshaler interface{ Marshal() ([]byte, error) }

var marshalerType = reflect.TypeFor[marshaler]()

// field is one parsed message field.
type field struct {
	number  int
	json    string
	ty      string // a Rust Type expression, before message ids are known: "msg:<Go type>" for messages
	card    string // "S", "R" or "Map(<key type>)"
	omit    bool
	inline  bool
	goField string // for error messages
}

type message struct {
	name   string
	fields []field
}

type walker struct {
	messages map[reflect.Type]*message
	// messages whose fields are still to be read
	queue []reflect.Type
}

// protoName is the protobuf name of a Go struct type: its package path with `/` and `-` as `.`
// and `_` (go-to-protobuf's package names), then its name.
func protoName(t reflect.Type) string {
	pkg := strings.NewReplacer("/", ".", "-", "_").Replace(t.PkgPath())
	return pkg + "." + t.Name()
}

// message records the struct t as a message, to be walked.
func (w *walker) message(t reflect.Type) string {
	if t.Kind() != reflect.Struct || t.Name() == "" || t.PkgPath() == "" {
		fail("%v is not a named struct", t)
	}
	if _, ok := w.messages[t]; !ok {
		w.messages[t] = &message{name: protoName(t)}
		w.queue = append(w.queue, t)
	}
	return "msg:" + protoName(t)
}

// parseTag splits a `protobuf:"bytes,1,opt,name=x,casttype=y"` tag into wire type, number and
// label.
func parseTag(where, tag string) (wire string, number int, label string) {
	parts := strings.Split(tag, ",")
	if len(parts) < 2 {
		fail("%s: protobuf tag %q has no wire type and number", where, tag)
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n <= 0 || n >= 1<<29 {
		fail("%s: protobuf tag %q has no valid field number", where, tag)
	}
	// A few tags have no label (metav1.CreateOptions.FieldManager: "bytes,3,name=fieldManager"):
	// go-to-protobuf reads them as optional.
	label = "opt"
	if len(parts) > 2 && !strings.Contains(parts[2], "=") {
		label = parts[2]
	}
	return parts[0], n, label
}

// scalar maps a Go scalar kind and its tag's wire type to a Rust Type, or "" if t is no scalar.
func scalar(where string, t reflect.Type, wire string) string {
	want, ty := "varint", ""
	switch t.Kind() {
	case reflect.String:
		want, ty = "bytes", "String"
	case reflect.Bool:
		ty = "Bool"
	case reflect.Int32:
		ty = "Int32"
	case reflect.Int64:
		ty = "Int64"
	case reflect.Uint32:
		ty = "Uint32"
	case reflect.Uint64:
		ty = "Uint64"
	case reflect.Float64:
		want, ty = "fixed64", "Double"
	case reflect.Float32:
		want, ty = "fixed32", "Float"
	case reflect.Slice:
		if t.Elem().Kind() != reflect.Uint8 {
			return ""
		}
		want, ty = "bytes", "Bytes"
	case reflect.Int, reflect.Uint, reflect.Int8, reflect.Int16, reflect.Uint8, reflect.Uint16:
		fail("%s: Go %v has no protobuf scalar", where, t)
	default:
		return ""
	}
	// The Go kind decides the encoding: go-to-protobuf writes the .proto (and Marshal) from
	// it, and a few tags disagree (apiextensions JSONSchemaProps.maximum, a *float64 tagged
	// `bytes` that goes out as fixed64; metav1.DeleteOptions.propagationPolicy, a *string
	// tagged `varint`). verify() checks the result against what Marshal writes.
	checkWire(where, t, wire, want)
	return ty
}

var knownWire = map[string]bool{"varint": true, "bytes": true, "fixed64": true, "fixed32": true}

// tagMismatches are the protobuf tags whose wire type is not their Go kind's.
var tagMismatches []string

// checkWire notes a tag whose wire type is not the one of its Go type.
func checkWire(where string, t reflect.Type, wire, want string) {
	if wire != want && wire != "" {
		if !knownWire[wire] {
			fail("%s: unknown protobuf wire type %q", where, wire)
		}
		tagMismatches = append(tagMismatches, fmt.Sprintf("%s: tag says %s, Go %v is %s", where, wire, t, want))
	}
}

// valueType is the Rust Type of one value of Go type t (an element, a map value or a single
// field), tagged with wire type `wire`.
func (w *walker) valueType(where string, t reflect.Type, wire string) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s, ok := special[t]; ok {
		checkWire(where, t, wire, "bytes")
		if strings.HasPrefix(s, "SchemaProps") {
			w.message(jsonSchemaProps)
			return s + "(msg:" + protoName(jsonSchemaProps) + ")"
		}
		return s
	}
	if ty := scalar(where, t, wire); ty != "" {
		return ty
	}
	switch t.Kind() {
	case reflect.Struct:
		checkWire(where, t, wire, "bytes")
		if !reflect.PointerTo(t).Implements(marshalerType) {
			fail("%s: %v has no protobuf Marshal", where, t)
		}
		return w.message(t)
	case reflect.Slice:
		// A named []string that protobuf wraps in `message X { repeated string items = 1; }`
		// (metav1.Verbs, authentication ExtraValue) while JSON writes a plain array.
		if isStrings(t) {
			checkWire(where, t, wire, "bytes")
			return "Strings"
		}
	}
	fail("%s: Go %v (wire type %q) has no Rust schema type", where, t, wire)
	return ""
}

// isStrings is whether t is a named []string with its own protobuf Marshal, which protobuf
// wraps in `message X { repeated string items = 1; }` while JSON writes a plain array
// (metav1.Verbs, authentication ExtraValue).
func isStrings(t reflect.Type) bool {
	return t.Kind() == reflect.Slice && t.Name() != "" && t.Elem().Kind() == reflect.String &&
		reflect.PointerTo(t).Implements(marshalerType)
}

// walk reads the fields of struct t.
func (w *walker) walk(t reflect.Type) {
	msg := w.messages[t]
	seen := map[int]string{}
	for i := range t.NumField() {
		sf := t.Field(i)
		where := t.String() + "." + sf.Name
		tag, ok := sf.Tag.Lookup("protobuf")
		if !ok || tag == "-" {
			// TypeMeta and the like: JSON only.
			continue
		}
		if !sf.IsExported() {
			fail("%s: unexported field with a protobuf tag", where)
		}
		wire, number, label := parseTag(where, tag)
		if prev, dup := seen[number]; dup {
			fail("%s: field number %d also used by %s", where, number, prev)
		}
		seen[number] = sf.Name
		jsonTag := sf.Tag.Get("json")
		jsonName, opts, _ := strings.Cut(jsonTag, ",")
		if jsonName == "-" {
			fail("%s: protobuf field without JSON", where)
		}
		// encoding/json promotes the fields of an embedded struct without a JSON name
		// (`json:""` on core/v1 Volume.VolumeSource, `json:",inline"` elsewhere): inline.
		inline := sf.Anonymous && jsonName == ""
		if jsonName == "" && !inline {
			jsonName = sf.Name
		}
		f := field{number: number, json: jsonName, inline: inline, goField: where}
		ft := sf.Type
		// As with wire types, the Go type decides (discovery/v1 EndpointSlice.addressType is a
		// string tagged `rep`).
		isMap := ft.Kind() == reflect.Map
		isList := ft.Kind() == reflect.Slice && ft.Elem().Kind() != reflect.Uint8 && !isStrings(ft)
		if (label == "rep") != (isMap || isList) {
			tagMismatches = append(tagMismatches, fmt.Sprintf("%s: tag says %s, Go %v", where, label, ft))
		}
		switch {
		case isMap:
			// Some maps have no protobuf_key/protobuf_val tags (storage/v1
			// StorageClass.parameters): the entry is still key = 1, value = 2.
			kwire, knum, vwire, vnum := "", 1, "", 2
			if kt, ok := sf.Tag.Lookup("protobuf_key"); ok {
				kwire, knum, _ = parseTag(where+" key", kt)
			}
			if vt, ok := sf.Tag.Lookup("protobuf_val"); ok {
				vwire, vnum, _ = parseTag(where+" value", vt)
			}
			if knum != 1 || vnum != 2 {
				fail("%s: map entry numbers %d, %d", where, knum, vnum)
			}
			kt := scalar(where+" key", ft.Key(), kwire)
			if kt == "" || kt == "Bytes" || kt == "Double" || kt == "Float" {
				fail("%s: map key %v", where, ft.Key())
			}
			f.card = "Map(" + kt + ")"
			f.ty = w.valueType(where+" value", ft.Elem(), vwire)
		case isList:
			f.card = "R"
			f.ty = w.valueType(where, ft.Elem(), wire)
		default:
			f.card = "S"
			f.ty = w.valueType(where, ft, wire)
		}
		if inline && !strings.HasPrefix(f.ty, "msg:") {
			fail("%s: inline field of type %v is no message", where, ft)
		}
		if inline && f.card != "S" {
			fail("%s: repeated inline field", where)
		}
		k := ft.Kind()
		scalarKind := k == reflect.String || k == reflect.Bool || (k >= reflect.Int && k <= reflect.Float64) ||
			(k == reflect.Slice && ft.Elem().Kind() == reflect.Uint8)
		_, isSpecial := special[ft]
		f.omit = strings.Contains(","+opts+",", ",omitempty,") && scalarKind && !isSpecial && f.card == "S"
		msg.fields = append(msg.fields, f)
	}
	sort.Slice(msg.fields, func(i, j int) bool { return msg.fields[i].number < msg.fields[j].number })
}

type root struct {
	apiVersion, kind string
	ty               reflect.Type
}

// roots lists the kinds of groupVersions that have a protobuf form, sorted as Rust sorts
// `(&str, &str)`.
func roots(s *runtime.Scheme) []root {
	want := map[string]bool{}
	for _, gv := range groupVersions {
		want[gv] = false
	}
	var out []root
	for gvk, t := range s.AllKnownTypes() {
		if gvk.Version == runtime.APIVersionInternal {
			continue
		}
		gv := gvk.GroupVersion().String()
		if _, ok := want[gv]; !ok {
			continue
		}
		want[gv] = true
		if !reflect.PointerTo(t).Implements(marshalerType) {
			continue
		}
		out = append(out, root{gv, gvk.Kind, t})
	}
	for gv, found := range want {
		if !found {
			fail("no kinds of %s in the scheme", gv)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].apiVersion != out[j].apiVersion {
			return out[i].apiVersion < out[j].apiVersion
		}
		return out[i].kind < out[j].kind
	})
	return out
}

func generate(s *runtime.Scheme) string {
	w := &walker{messages: map[reflect.Type]*message{}}
	rs := roots(s)
	for _, r := range rs {
		w.message(r.ty)
	}
	for len(w.queue) > 0 {
		t := w.queue[0]
		w.queue = w.queue[1:]
		w.walk(t)
	}
	verify(w)
	// Message ids: by protobuf name.
	types := make([]reflect.Type, 0, len(w.messages))
	for t := range w.messages {
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return w.messages[types[i]].name < w.messages[types[j]].name })
	ids := map[string]int{}
	for i, t := range types {
		if i > 0 && w.messages[types[i-1]].name == w.messages[t].name {
			fail("two Go types are protobuf message %s", w.messages[t].name)
		}
		ids["msg:"+protoName(t)] = i
	}
	if len(types) > 1<<16 {
		fail("%d messages do not fit MessageId(u16)", len(types))
	}
	resolve := func(ty string) string {
		open := strings.IndexByte(ty, '(')
		inner := ty
		if open >= 0 {
			inner = ty[open+1 : len(ty)-1]
		}
		if !strings.HasPrefix(inner, "msg:") {
			return ty
		}
		id, ok := ids[inner]
		if !ok {
			fail("internal: no id for %s", inner)
		}
		if open >= 0 {
			return ty[:open+1] + "MessageId(" + strconv.Itoa(id) + "))"
		}
		return "m(" + strconv.Itoa(id) + ")"
	}

	var b strings.Builder
	b.WriteString(`// @generated by scripts/protobuf-schema (scripts/protobuf-schema.sh) from the Go types of
// Kubernetes ` + kubernetesVersion + `. Do not edit: CI regenerates this file and fails on a diff.
//
// f: a field; z: a field whose JSON omits its zero value (omit_zero); i: an inline field.
// S, R, M: single, repeated, a map with string keys.

use super::Card::{self, Map, Repeated as R, Single as S};
use super::Type::{self, *};
use super::{Field, Message, MessageId, Root};

const M: Card = Map(String);

const fn m(id: u16) -> Type {
    Message(MessageId(id))
}

const fn f(number: u32, json: &'static str, ty: Type, card: Card) -> Field {
    Field { number, json, ty, card, omit_zero: false, inline: false }
}

const fn z(number: u32, json: &'static str, ty: Type) -> Field {
    Field { number, json, ty, card: S, omit_zero: true, inline: false }
}

const fn i(number: u32, ty: Type) -> Field {
    Field { number, json: "", ty, card: S, omit_zero: false, inline: true }
}

const fn r(api_version: &'static str, kind: &'static str, id: u16) -> Root {
    Root { api_version, kind, message: MessageId(id) }
}

pub(super) const KUBERNETES_VERSION: &str = "` + kubernetesVersion + `";

`)
	fmt.Fprintf(&b, "pub(super) static MESSAGES: [Message; %d] = [\n", len(types))
	for i, t := range types {
		msg := w.messages[t]
		fmt.Fprintf(&b, "    // %d\n    Message {\n        name: %q,\n        fields: &[", i, msg.name)
		if len(msg.fields) == 0 {
			b.WriteString("],\n    },\n")
			continue
		}
		b.WriteString("\n")
		for _, f := range msg.fields {
			ty := resolve(f.ty)
			card := f.card
			switch card {
			case "Map(String)":
				card = "M"
			case "S", "R":
			default:
				card = resolve(card)
			}
			switch {
			case f.inline:
				fmt.Fprintf(&b, "            i(%d, %s),\n", f.number, ty)
			case f.omit:
				fmt.Fprintf(&b, "            z(%d, %q, %s),\n", f.number, f.json, ty)
			default:
				fmt.Fprintf(&b, "            f(%d, %q, %s, %s),\n", f.number, f.json, ty, card)
			}
		}
		b.WriteString("        ],\n    },\n")
	}
	b.WriteString("];\n\n")
	fmt.Fprintf(&b, "pub(super) static ROOTS: [Root; %d] = [\n", len(rs))
	for _, r := range rs {
		fmt.Fprintf(&b, "    r(%q, %q, %d),\n", r.apiVersion, r.kind, ids["msg:"+protoName(r.ty)])
	}
	b.WriteString("];\n")
	return b.String()
}
