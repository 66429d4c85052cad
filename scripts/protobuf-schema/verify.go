package main

// verify checks the schema against what the Go types' own Marshal writes, since many tags lie
// (see scalar): it fills a value of every message with non-zero data, marshals it, and walks
// the bytes with the schema. Every field on the wire must be in the schema with a wire type its
// Rust Type accepts, and every schema field must turn up on the wire somewhere.

import (
	"encoding/binary"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

type checker struct {
	byKey map[string]*message // by "msg:" + Go type
	seen  map[*message]map[int]bool
	errs  []string
}

// specialValue is a non-zero value of each special type.
func specialValue(t reflect.Type) (reflect.Value, bool) {
	var v any
	switch t {
	case reflect.TypeFor[metav1.Time]():
		v = metav1.NewTime(time.Unix(1700000000, 0))
	case reflect.TypeFor[metav1.MicroTime]():
		v = metav1.NewMicroTime(time.Unix(1700000000, 123456000))
	case reflect.TypeFor[metav1.Duration]():
		v = metav1.Duration{Duration: time.Second}
	case reflect.TypeFor[resource.Quantity]():
		v = resource.MustParse("1")
	case reflect.TypeFor[intstr.IntOrString]():
		v = intstr.FromString("x")
	case reflect.TypeFor[metav1.FieldsV1]():
		v = metav1.FieldsV1{Raw: []byte(`{}`)}
	case reflect.TypeFor[runtime.RawExtension]():
		v = runtime.RawExtension{Raw: []byte(`{}`)}
	case reflect.TypeFor[apiextensionsv1.JSON]():
		v = apiextensionsv1.JSON{Raw: []byte(`1`)}
	case reflect.TypeFor[apiextensionsv1.JSONSchemaPropsOrArray]():
		v = apiextensionsv1.JSONSchemaPropsOrArray{Schema: &apiextensionsv1.JSONSchemaProps{Type: "string"}}
	case reflect.TypeFor[apiextensionsv1.JSONSchemaPropsOrBool]():
		v = apiextensionsv1.JSONSchemaPropsOrBool{Allows: true}
	case reflect.TypeFor[apiextensionsv1.JSONSchemaPropsOrStringArray]():
		v = apiextensionsv1.JSONSchemaPropsOrStringArray{Property: []string{"a"}}
	default:
		return reflect.Value{}, false
	}
	return reflect.ValueOf(v), true
}

// fill sets v (settable) to a non-zero value; recursive messages go two levels deep.
func fill(v reflect.Value, depth map[reflect.Type]int) {
	t := v.Type()
	if s, ok := specialValue(t); ok {
		v.Set(s)
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.Struct && depth[t.Elem()] >= 2 {
			return
		}
		p := reflect.New(t.Elem())
		fill(p.Elem(), depth)
		v.Set(p)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1.5)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Struct && depth[t.Elem()] >= 2 {
			return
		}
		s := reflect.MakeSlice(t, 1, 1)
		fill(s.Index(0), depth)
		v.Set(s)
	case reflect.Map:
		if t.Elem().Kind() == reflect.Struct && depth[t.Elem()] >= 2 {
			return
		}
		m := reflect.MakeMap(t)
		k := reflect.New(t.Key()).Elem()
		fill(k, depth)
		e := reflect.New(t.Elem()).Elem()
		fill(e, depth)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		depth[t]++
		for i := range t.NumField() {
			if _, ok := t.Field(i).Tag.Lookup("protobuf"); ok {
				fill(v.Field(i), depth)
			}
		}
		depth[t]--
	}
}

// wireOf is the wire type of a Rust Type's value (2 for everything length-delimited).
func wireOf(ty string) int {
	switch ty {
	case "Bool", "Int32", "Int64", "Uint32", "Uint64":
		return 0
	case "Double":
		return 1
	case "Float":
		return 5
	}
	return 2
}

type wireField struct {
	number, wire int
	payload      []byte // a length-delimited field's bytes
}

// parse splits a message's bytes into fields.
func parse(b []byte) ([]wireField, error) {
	var out []wireField
	for len(b) > 0 {
		key, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("bad key")
		}
		b = b[n:]
		f := wireField{number: int(key >> 3), wire: int(key & 7)}
		switch f.wire {
		case 0:
			_, n = binary.Uvarint(b)
			if n <= 0 {
				return nil, fmt.Errorf("bad varint")
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return nil, fmt.Errorf("short fixed64")
			}
			b = b[8:]
		case 5:
			if len(b) < 4 {
				return nil, fmt.Errorf("short fixed32")
			}
			b = b[4:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || uint64(len(b)-n) < l {
				return nil, fmt.Errorf("bad length")
			}
			f.payload = b[n : n+int(l)]
			b = b[n+int(l):]
		default:
			return nil, fmt.Errorf("wire type %d", f.wire)
		}
		out = append(out, f)
	}
	return out, nil
}

func (c *checker) errorf(format string, args ...any) {
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

// value checks one value of Rust Type ty (unresolved: "msg:..." for messages).
func (c *checker) value(where, ty string, f wireField) {
	want := wireOf(ty)
	if f.wire != want {
		c.errorf("%s: wire type %d on the wire, schema %s wants %d", where, f.wire, ty, want)
		return
	}
	switch {
	case strings.HasPrefix(ty, "msg:"):
		c.message(where, c.byKey[ty], f.payload)
	case ty == "Strings":
		fields, err := parse(f.payload)
		if err != nil {
			c.errorf("%s: %v", where, err)
		}
		for _, g := range fields {
			if g.number != 1 || g.wire != 2 {
				c.errorf("%s: Strings item field %d wire %d", where, g.number, g.wire)
			}
		}
	}
}

func (c *checker) message(where string, m *message, b []byte) {
	fields, err := parse(b)
	if err != nil {
		c.errorf("%s: %v", where, err)
		return
	}
	if c.seen[m] == nil {
		c.seen[m] = map[int]bool{}
	}
	for _, wf := range fields {
		i := sort.Search(len(m.fields), func(i int) bool { return m.fields[i].number >= wf.number })
		if i == len(m.fields) || m.fields[i].number != wf.number {
			c.errorf("%s: Marshal writes field %d, which the schema lacks", m.name, wf.number)
			continue
		}
		f := m.fields[i]
		c.seen[m][f.number] = true
		at := m.name + "." + f.json
		switch {
		case strings.HasPrefix(f.card, "Map("):
			if wf.wire != 2 {
				c.errorf("%s: map entry with wire type %d", at, wf.wire)
				continue
			}
			entry, err := parse(wf.payload)
			if err != nil {
				c.errorf("%s: %v", at, err)
				continue
			}
			key := strings.TrimSuffix(strings.TrimPrefix(f.card, "Map("), ")")
			for _, e := range entry {
				switch e.number {
				case 1:
					c.value(at+" key", key, e)
				case 2:
					c.value(at+" value", f.ty, e)
				default:
					c.errorf("%s: map entry field %d", at, e.number)
				}
			}
		case f.card == "R" && wf.wire == 2 && wireOf(f.ty) != 2:
			// A packed run of scalars.
		default:
			c.value(at, f.ty, wf)
		}
	}
}

// verify checks every message of w; the messages' fields must be read already.
func verify(w *walker) {
	c := &checker{byKey: map[string]*message{}, seen: map[*message]map[int]bool{}}
	types := make([]reflect.Type, 0, len(w.messages))
	for t, m := range w.messages {
		c.byKey["msg:"+protoName(t)] = m
		types = append(types, t)
	}
	sort.Slice(types, func(i, j int) bool { return w.messages[types[i]].name < w.messages[types[j]].name })
	for _, t := range types {
		v := reflect.New(t)
		fill(v.Elem(), map[reflect.Type]int{})
		b, err := v.Interface().(marshaler).Marshal()
		if err != nil {
			c.errorf("%v: Marshal: %v", t, err)
			continue
		}
		c.message(w.messages[t].name, w.messages[t], b)
	}
	for _, t := range types {
		m := w.messages[t]
		for _, f := range m.fields {
			if !c.seen[m][f.number] {
				c.errorf("%s: field %d (%s) never seen on the wire", m.name, f.number, f.json)
			}
		}
	}
	if len(c.errs) > 0 {
		sort.Strings(c.errs)
		fail("the schema disagrees with Marshal:\n  %s", strings.Join(c.errs, "\n  "))
	}
}
