//! What the generated decoders call: one function per kind of value, each reading one
//! occurrence of a field (its tag already read) and checking its wire type as the serde path
//! does.

use std::{any::Any, collections::BTreeMap};

use k8s_openapi::{
    ByteString,
    apimachinery::pkg::{
        api::resource::Quantity,
        apis::meta::v1::{MicroTime, Time},
        util::intstr::IntOrString,
    },
    jiff,
};
use serde::de::{DeserializeOwned, Error as _};

use crate::{
    protobuf::{
        de::{self, MAX_DEPTH},
        error::{Error, ErrorKind},
        format,
        schema::{BUILTIN, MessageId, Type},
        wire::{Raw, Reader, WireType},
    },
    reflector::decode::{Child, Node},
};

/// The projection at the value being decoded: `None` when nothing below it is dropped.
pub(super) type P<'a> = Option<&'a Node>;

/// What a generated decoder returns.
pub(super) type Res = Result<(), Error>;

/// What the projection does with one field.
pub(super) enum Look<'a> {
    /// Decode it, with this projection below it.
    Keep(P<'a>),
    /// Skip it.
    Drop,
}

pub(super) use Look::Keep;

/// What the projection `p` of an object does at its field `json`.
#[inline]
pub(super) fn look<'a>(p: P<'a>, json: &str) -> Look<'a> {
    match p {
        None => Keep(None),
        Some(node) => match node.child(json) {
            None => Keep(None),
            Some(Child::Drop | Child::Check) => Look::Drop,
            Some(Child::Descend(below)) => Keep(Some(below)),
        },
    }
}

/// The projection of each element of an array whose projection is `q`.
#[inline]
pub(super) fn elements(q: P<'_>) -> P<'_> {
    q.and_then(Node::elements)
}

/// Decodes a kind's message into `slot` when it is an `Option<R>`.
pub(super) fn root<R: k8s_openapi::Resource + Default + 'static>(
    slot: &mut dyn Any,
    b: &[u8],
    type_meta: Option<(&str, &str)>,
    p: P<'_>,
    f: fn(&[u8], &mut R, P<'_>, u32) -> Res,
) -> Result<bool, Error> {
    let Some(slot) = slot.downcast_mut::<Option<R>>() else {
        return Ok(false);
    };
    // Another kind in the envelope: the serde path reports it as k8s-openapi does.
    if type_meta.is_some_and(|(api_version, kind)| api_version != R::API_VERSION || kind != R::KIND)
    {
        return Ok(false);
    }
    let mut out = R::default();
    f(b, &mut out, p, 0)?;
    *slot = Some(out);
    Ok(true)
}

/// What a test does with each kind decoded directly.
#[cfg(test)]
pub(super) trait Roots {
    fn root<R>(&mut self, id: u16)
    where
        R: k8s_openapi::Resource
            + DeserializeOwned
            + Default
            + PartialEq
            + std::fmt::Debug
            + 'static;
}

#[cold]
fn wrong(id: u16, n: u32) -> Error {
    Error::at_field(
        ErrorKind::WrongWireType,
        BUILTIN.message(MessageId(id)).name,
        n,
    )
}

fn utf8(b: &[u8]) -> Result<&str, Error> {
    std::str::from_utf8(b).map_err(|_| Error::new(ErrorKind::InvalidUtf8))
}

/// One level deeper than `d`.
#[inline]
pub(super) fn deeper(d: u32) -> Result<u32, Error> {
    if d >= MAX_DEPTH {
        return Err(Error::new(ErrorKind::TooDeep));
    }
    Ok(d + 1)
}

/// Skips a value of wire type `w`.
#[inline]
pub(super) fn skip(r: &mut Reader<'_>, w: WireType) -> Res {
    r.value(w).map(drop)
}

/// A length-delimited value: a nested message's bytes.
#[inline]
pub(super) fn len<'de>(
    r: &mut Reader<'de>,
    w: WireType,
    id: u16,
    n: u32,
) -> Result<&'de [u8], Error> {
    if w != WireType::Len {
        return Err(wrong(id, n));
    }
    r.len_delimited()
}

#[inline]
fn varint(r: &mut Reader<'_>, w: WireType, id: u16, n: u32) -> Result<u64, Error> {
    if w != WireType::Varint {
        return Err(wrong(id, n));
    }
    r.varint()
}

#[inline]
pub(super) fn string(r: &mut Reader<'_>, w: WireType, id: u16, n: u32) -> Result<String, Error> {
    Ok(utf8(len(r, w, id, n)?)?.to_owned())
}

/// `None` for the zero value, which JSON leaves out of an `omitempty` field.
#[inline]
pub(super) fn nz<T: Default + PartialEq>(v: T) -> Option<T> {
    (v != T::default()).then_some(v)
}

#[inline]
pub(super) fn bool(r: &mut Reader<'_>, w: WireType, id: u16, n: u32) -> Result<bool, Error> {
    Ok(varint(r, w, id, n)? != 0)
}

// Go truncates a varint to its field's width.
#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
#[inline]
pub(super) fn int32(r: &mut Reader<'_>, w: WireType, id: u16, n: u32) -> Result<i32, Error> {
    Ok(varint(r, w, id, n)? as i32)
}

#[allow(clippy::cast_possible_wrap)]
#[inline]
pub(super) fn int64(r: &mut Reader<'_>, w: WireType, id: u16, n: u32) -> Result<i64, Error> {
    Ok(varint(r, w, id, n)? as i64)
}

#[inline]
pub(super) fn double(r: &mut Reader<'_>, w: WireType, id: u16, n: u32) -> Result<f64, Error> {
    if w != WireType::Fixed64 {
        return Err(wrong(id, n));
    }
    match r.value(w)? {
        Raw::Fixed64(bits) => Ok(f64::from_bits(bits)),
        _ => Err(wrong(id, n)),
    }
}

#[inline]
pub(super) fn bytes(r: &mut Reader<'_>, w: WireType, id: u16, n: u32) -> Result<ByteString, Error> {
    Ok(ByteString(len(r, w, id, n)?.to_vec()))
}

/// A `Timestamp {seconds = 1, nanos = 2}` as the instant its RFC 3339 form names; `None` for
/// the zero time (an empty message), which JSON writes as `null`.
fn timestamp(b: &[u8], micro: bool) -> Result<Option<jiff::Timestamp>, Error> {
    if b.is_empty() {
        return Ok(None);
    }
    let (mut seconds, mut nanos) = (0i64, 0i64);
    let mut r = Reader::new(b);
    while let Some((number, raw)) = r.field()? {
        #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
        match (number, raw) {
            (1, Raw::Varint(v)) => seconds = v as i64,
            (2, Raw::Varint(v)) => nanos = i64::from(v as i32),
            (1 | 2, _) => {
                return Err(Error::at_field(
                    ErrorKind::WrongWireType,
                    "Timestamp",
                    number,
                ));
            }
            _ => {}
        }
    }
    let out_of_range = || Error::custom("invalid value: a time out of range");
    // A `Time` is whole seconds: its nanoseconds do not even carry.
    let nanos = if micro { nanos } else { 0 };
    let (seconds, nanos) = format::instant(seconds, nanos, micro).ok_or_else(out_of_range)?;
    jiff::Timestamp::new(seconds, nanos)
        .map(Some)
        .map_err(|_| out_of_range())
}

#[inline]
pub(super) fn time(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
) -> Result<Option<Time>, Error> {
    Ok(timestamp(len(r, w, id, n)?, false)?.map(Time))
}

#[inline]
pub(super) fn micro_time(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
) -> Result<Option<MicroTime>, Error> {
    Ok(timestamp(len(r, w, id, n)?, true)?.map(MicroTime))
}

/// A `Quantity {string = 1}`; the zero `Quantity` is `"0"`, as JSON writes it.
fn quantity_of(b: &[u8]) -> Result<Quantity, Error> {
    let mut s: Option<&str> = None;
    let mut r = Reader::new(b);
    while let Some((number, raw)) = r.field()? {
        if number == 1 {
            let Raw::Len(b) = raw else {
                return Err(Error::at_field(ErrorKind::WrongWireType, "Quantity", 1));
            };
            s = Some(utf8(b)?);
        }
    }
    Ok(Quantity(s.unwrap_or("0").to_owned()))
}

#[inline]
pub(super) fn quantity(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
) -> Result<Quantity, Error> {
    quantity_of(len(r, w, id, n)?)
}

/// An `IntOrString {type = 1, intVal = 2, strVal = 3}`.
pub(super) fn intorstring(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
) -> Result<IntOrString, Error> {
    let (mut is_string, mut int, mut string) = (false, 0i32, "");
    let mut r = Reader::new(len(r, w, id, n)?);
    let wrong = |n| Error::at_field(ErrorKind::WrongWireType, "IntOrString", n);
    while let Some((number, raw)) = r.field()? {
        #[allow(clippy::cast_possible_truncation)]
        match (number, raw) {
            (1, Raw::Varint(v)) => is_string = v == 1,
            (2, Raw::Varint(v)) => int = v as i32,
            (3, Raw::Len(b)) => string = utf8(b)?,
            (1..=3, _) => return Err(wrong(number)),
            _ => {}
        }
    }
    Ok(if is_string {
        IntOrString::String(string.to_owned())
    } else {
        IntOrString::Int(int)
    })
}

/// Whether field `idx` (below 128) is met for the first time in this occurrence of an inline
/// message, by the bits of `seen`.
#[inline]
pub(super) fn first(seen: &mut [u64; 2], idx: usize) -> bool {
    let (word, bit) = (idx / 64, 1u64 << (idx % 64));
    let Some(w) = seen.get_mut(word) else {
        return false;
    };
    let first = *w & bit == 0;
    *w |= bit;
    first
}

/// Makes room in an empty `v` for this occurrence (just read) and the rest of its run, up to
/// 1 MiB of elements.
fn reserve<T>(v: &mut Vec<T>, r: &Reader<'_>, n: u32) {
    if !v.is_empty() {
        return;
    }
    let mut ahead = *r;
    let mut count = 1usize;
    while ahead.peek_number() == Some(n) {
        match ahead.tag().and_then(|(_, w)| ahead.value(w)) {
            Ok(_) => count += 1,
            Err(_) => break,
        }
    }
    // Counted before any element is checked: capped as serde caps a size hint, so a body of
    // empty occurrences cannot ask for gigabytes of large structs up front.
    v.reserve_exact(count.min((1 << 20) / size_of::<T>().max(1)));
}

/// A new element at the end of `v`, for the occurrence of field `n` just read: an empty `v`
/// is sized for the whole run of occurrences first, so its elements are never moved.
#[inline]
pub(super) fn push<'v, T: Default>(v: &'v mut Vec<T>, r: &Reader<'_>, n: u32) -> &'v mut T {
    reserve(v, r, n);
    v.push(T::default());
    let last = v.len() - 1;
    &mut v[last]
}

/// Elements of a scalar repeated field, one occurrence or a packed run of them.
fn scalars<T>(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
    v: &mut Vec<T>,
    f: impl Fn(u64) -> T,
) -> Res {
    match w {
        WireType::Varint => {
            v.push(f(r.varint()?));
            Ok(())
        }
        WireType::Len => {
            let mut packed = Reader::new(r.len_delimited()?);
            while !packed.is_empty() {
                v.push(f(packed.varint()?));
            }
            Ok(())
        }
        _ => Err(wrong(id, n)),
    }
}

#[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
pub(super) fn int32s(r: &mut Reader<'_>, w: WireType, id: u16, n: u32, v: &mut Vec<i32>) -> Res {
    scalars(r, w, id, n, v, |x| x as i32)
}

#[allow(clippy::cast_possible_wrap)]
pub(super) fn int64s(r: &mut Reader<'_>, w: WireType, id: u16, n: u32, v: &mut Vec<i64>) -> Res {
    scalars(r, w, id, n, v, |x| x as i64)
}

pub(super) fn bools(r: &mut Reader<'_>, w: WireType, id: u16, n: u32, v: &mut Vec<bool>) -> Res {
    scalars(r, w, id, n, v, |x| x != 0)
}

pub(super) fn strings(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
    v: &mut Vec<String>,
) -> Res {
    let s = string(r, w, id, n)?;
    reserve(v, r, n);
    v.push(s);
    Ok(())
}

pub(super) fn quantitys(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
    v: &mut Vec<Quantity>,
) -> Res {
    let q = quantity(r, w, id, n)?;
    reserve(v, r, n);
    v.push(q);
    Ok(())
}

/// One entry of a map field: a message of `key = 1` and `value = 2`, each absent as its zero.
fn entry_raw<'de>(
    r: &mut Reader<'de>,
    w: WireType,
    id: u16,
    n: u32,
    value: WireType,
) -> Result<(&'de [u8], Raw<'de>), Error> {
    let mut entry = Reader::new(len(r, w, id, n)?);
    let mut key: &[u8] = &[];
    let mut val = match value {
        WireType::Varint => Raw::Varint(0),
        WireType::Fixed64 => Raw::Fixed64(0),
        WireType::Fixed32 => Raw::Fixed32(0),
        WireType::Len => Raw::Len(&[]),
    };
    while let Some((number, raw)) = entry.field()? {
        match (number, raw) {
            (1, Raw::Len(b)) => key = b,
            (2, raw) if raw.wire_type() == value => val = raw,
            (1 | 2, _) => return Err(wrong(id, n)),
            _ => {}
        }
    }
    Ok((key, val))
}

/// A map entry's key, and the projection of its value; `None` when the projection drops it.
fn key<'q>(k: &[u8], q: P<'q>) -> Result<Option<(String, P<'q>)>, Error> {
    let k = utf8(k)?;
    let below = match q.and_then(|q| q.child(k)) {
        None => None,
        Some(Child::Drop | Child::Check) => return Ok(None),
        Some(Child::Descend(below)) => Some(below),
    };
    Ok(Some((k.to_owned(), below)))
}

/// A map entry to decode: its key, its value's bytes and the value's projection.
pub(super) type Entry<'de, 'q> = (String, &'de [u8], P<'q>);

/// One entry of a map of messages; `None` when the projection drops it.
pub(super) fn entry<'de, 'q>(
    r: &mut Reader<'de>,
    w: WireType,
    id: u16,
    n: u32,
    q: P<'q>,
) -> Result<Option<Entry<'de, 'q>>, Error> {
    let (k, v) = entry_raw(r, w, id, n, WireType::Len)?;
    let Raw::Len(v) = v else {
        return Err(wrong(id, n));
    };
    Ok(key(k, q)?.map(|(k, q)| (k, v, q)))
}

/// A fresh value at `k`, replacing any there (a later entry of a key wins, as in JSON).
#[inline]
pub(super) fn insert<T: Default>(m: &mut BTreeMap<String, T>, k: String) -> &mut T {
    match m.entry(k) {
        std::collections::btree_map::Entry::Vacant(v) => v.insert(T::default()),
        std::collections::btree_map::Entry::Occupied(o) => {
            let slot = o.into_mut();
            *slot = T::default();
            slot
        }
    }
}

fn map_of<T>(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
    q: P<'_>,
    m: &mut BTreeMap<String, T>,
    f: impl FnOnce(&[u8]) -> Result<T, Error>,
) -> Res {
    let (k, v) = entry_raw(r, w, id, n, WireType::Len)?;
    let Raw::Len(v) = v else {
        return Err(wrong(id, n));
    };
    if let Some((k, _)) = key(k, q)? {
        m.insert(k, f(v)?);
    }
    Ok(())
}

pub(super) fn string_map(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
    q: P<'_>,
    m: &mut BTreeMap<String, String>,
) -> Res {
    map_of(r, w, id, n, q, m, |v| Ok(utf8(v)?.to_owned()))
}

pub(super) fn quantity_map(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
    q: P<'_>,
    m: &mut BTreeMap<String, Quantity>,
) -> Res {
    map_of(r, w, id, n, q, m, quantity_of)
}

pub(super) fn bytes_map(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    n: u32,
    q: P<'_>,
    m: &mut BTreeMap<String, ByteString>,
) -> Res {
    map_of(r, w, id, n, q, m, |v| Ok(ByteString(v.to_vec())))
}

/// The field at `idx` of message `id`, and the wire type of its values.
fn field(id: u16, idx: usize) -> (Type, WireType, &'static crate::protobuf::schema::Field) {
    let f = &BUILTIN.message(MessageId(id)).fields[idx];
    (f.ty, de::wire_of(f.ty), f)
}

/// A single field through the serde path; `None` when JSON leaves it out.
pub(super) fn value<T: DeserializeOwned>(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    idx: usize,
    q: P<'_>,
    d: u32,
) -> Result<Option<T>, Error> {
    let (ty, wire, f) = field(id, idx);
    if w != wire {
        return Err(wrong(id, f.number));
    }
    let raw = r.value(w)?;
    if de::skipped(f, raw) {
        return Ok(None);
    }
    de::value(&BUILTIN, d, ty, raw, q).map(Some)
}

/// One occurrence of a repeated field through the serde path.
pub(super) fn value_element<T: DeserializeOwned>(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    idx: usize,
    q: P<'_>,
    d: u32,
    v: &mut Vec<T>,
) -> Res {
    let (ty, wire, f) = field(id, idx);
    if w == WireType::Len && wire != WireType::Len {
        let mut packed = Reader::new(r.len_delimited()?);
        while !packed.is_empty() {
            v.push(de::value(&BUILTIN, d, ty, packed.value(wire)?, q)?);
        }
        return Ok(());
    }
    if w != wire {
        return Err(wrong(id, f.number));
    }
    let raw = r.value(w)?;
    reserve(v, r, f.number);
    v.push(de::value(&BUILTIN, d, ty, raw, q)?);
    Ok(())
}

/// One entry of a map field through the serde path.
pub(super) fn value_entry<T: DeserializeOwned>(
    r: &mut Reader<'_>,
    w: WireType,
    id: u16,
    idx: usize,
    q: P<'_>,
    d: u32,
    m: &mut BTreeMap<String, T>,
) -> Res {
    let (ty, wire, f) = field(id, idx);
    let (k, v) = entry_raw(r, w, id, f.number, wire)?;
    if let Some((k, q)) = key(k, q)? {
        m.insert(k, de::value(&BUILTIN, d, ty, v, q)?);
    }
    Ok(())
}
