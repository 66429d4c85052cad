//! The protobuf wire format: a bounds-checked reader of varints, tags and length-delimited
//! values that never reads past its input nor allocates from a length it reads.

use super::error::{Error, ErrorKind};

/// How a field's value is encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WireType {
    /// 0: a varint.
    Varint,
    /// 1: eight little-endian bytes.
    Fixed64,
    /// 2: a varint length, then that many bytes.
    Len,
    /// 5: four little-endian bytes.
    Fixed32,
}

/// A field's value as read from the wire, before the schema interprets it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Raw<'de> {
    /// A varint's value.
    Varint(u64),
    /// A fixed64's bits.
    Fixed64(u64),
    /// A fixed32's bits.
    Fixed32(u32),
    /// A length-delimited value's bytes.
    Len(&'de [u8]),
}

impl Raw<'_> {
    pub(crate) fn wire_type(&self) -> WireType {
        match self {
            Raw::Varint(_) => WireType::Varint,
            Raw::Fixed64(_) => WireType::Fixed64,
            Raw::Fixed32(_) => WireType::Fixed32,
            Raw::Len(_) => WireType::Len,
        }
    }
}

/// The most bytes a varint takes (64 bits, 7 per byte).
pub(crate) const MAX_VARINT_LEN: usize = 10;

/// Reads the varint at the start of `data`: its value and length, or `None` when `data` ends
/// before it does (and it could still be valid).
///
/// # Errors
///
/// [`ErrorKind::BadVarint`] when it runs past ten bytes or past 64 bits.
#[inline]
pub(crate) fn peek_varint(data: &[u8]) -> Result<Option<(u64, usize)>, Error> {
    // Most varints (tags, lengths, small numbers) are one byte.
    if let Some(&b) = data.first()
        && b < 0x80
    {
        return Ok(Some((u64::from(b), 1)));
    }
    peek_long_varint(data)
}

fn peek_long_varint(data: &[u8]) -> Result<Option<(u64, usize)>, Error> {
    let mut value: u64 = 0;
    for (i, &b) in data.iter().enumerate().take(MAX_VARINT_LEN) {
        let bits = u64::from(b & 0x7f);
        if i == MAX_VARINT_LEN - 1 && b > 1 {
            // The tenth byte holds bit 63 only.
            return Err(Error::new(ErrorKind::BadVarint));
        }
        value |= bits << (7 * i);
        if b < 0x80 {
            return Ok(Some((value, i + 1)));
        }
    }
    if data.len() >= MAX_VARINT_LEN {
        Err(Error::new(ErrorKind::BadVarint))
    } else {
        Ok(None)
    }
}

/// Splits a tag into its field number and wire type.
///
/// # Errors
///
/// [`ErrorKind::BadTag`] for field number 0, one past `u32`, or a wire type that is not 0, 1, 2
/// or 5 (groups, 3 and 4, are not used by Kubernetes).
#[inline]
pub(crate) fn split_tag(tag: u64) -> Result<(u32, WireType), Error> {
    let number = u32::try_from(tag >> 3)
        .ok()
        .filter(|n| (1..1 << 29).contains(n))
        .ok_or_else(|| Error::new(ErrorKind::BadTag))?;
    let wire = match tag & 7 {
        0 => WireType::Varint,
        1 => WireType::Fixed64,
        2 => WireType::Len,
        5 => WireType::Fixed32,
        _ => return Err(Error::new(ErrorKind::BadTag)),
    };
    Ok((number, wire))
}

/// A cursor over a message's bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader<'de> {
    data: &'de [u8],
}

impl<'de> Reader<'de> {
    #[inline]
    pub(crate) fn new(data: &'de [u8]) -> Self {
        Self { data }
    }

    /// The bytes not read yet.
    #[inline]
    pub(crate) fn rest(&self) -> &'de [u8] {
        self.data
    }

    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Reads a varint.
    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64, Error> {
        match peek_varint(self.data)? {
            Some((v, n)) => {
                self.data = self.data.get(n..).unwrap_or_default();
                Ok(v)
            }
            None => Err(Error::new(ErrorKind::Truncated)),
        }
    }

    /// Reads `n` bytes.
    #[inline]
    fn take(&mut self, n: usize) -> Result<&'de [u8], Error> {
        if n > self.data.len() {
            return Err(Error::new(ErrorKind::Truncated));
        }
        let (head, tail) = self.data.split_at(n);
        self.data = tail;
        Ok(head)
    }

    /// Reads a varint length and the bytes it counts.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LengthPastInput`] when the length claims more than what is left.
    #[inline]
    pub(crate) fn len_delimited(&mut self) -> Result<&'de [u8], Error> {
        let len = self.varint()?;
        match usize::try_from(len) {
            Ok(n) if n <= self.data.len() => self.take(n),
            _ => Err(Error::new(ErrorKind::LengthPastInput)),
        }
    }

    /// Reads a tag: the field number and wire type.
    #[inline]
    pub(crate) fn tag(&mut self) -> Result<(u32, WireType), Error> {
        split_tag(self.varint()?)
    }

    /// Reads a value of wire type `wire`.
    #[inline]
    pub(crate) fn value(&mut self, wire: WireType) -> Result<Raw<'de>, Error> {
        Ok(match wire {
            WireType::Varint => Raw::Varint(self.varint()?),
            WireType::Fixed64 => Raw::Fixed64(u64::from_le_bytes(fixed(self.take(8)?))),
            WireType::Fixed32 => Raw::Fixed32(u32::from_le_bytes(fixed(self.take(4)?))),
            WireType::Len => Raw::Len(self.len_delimited()?),
        })
    }

    /// Reads the next field: its number and value; `None` at the end of the message.
    #[inline]
    pub(crate) fn field(&mut self) -> Result<Option<(u32, Raw<'de>)>, Error> {
        if self.data.is_empty() {
            return Ok(None);
        }
        let (number, wire) = self.tag()?;
        Ok(Some((number, self.value(wire)?)))
    }

    /// The number of the next field, without reading it; `None` at the end or on a bad tag
    /// (which reading it reports).
    #[inline]
    pub(crate) fn peek_number(&self) -> Option<u32> {
        match self.data.first() {
            None => None,
            Some(&b) if b < 0x80 => Some(u32::from(b >> 3)),
            Some(_) => {
                let mut copy = *self;
                copy.tag().ok().map(|(n, _)| n)
            }
        }
    }
}

#[inline]
fn fixed<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(bytes);
    out
}

/// A length-delimited field of a message whose bytes may not all have arrived: where its value
/// starts, how long it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) number: u32,
    pub(crate) wire: WireType,
    /// Bytes of the tag and (for [`WireType::Len`]) the length prefix.
    pub(crate) header_len: usize,
    /// Bytes of the value after the header (the length for `Len`, 8 or 4 for fixed, and for a
    /// varint its own length, counted in `header_len` as 0 here).
    pub(crate) value_len: u64,
}

/// Reads a field's header from the start of `data`, which may end anywhere: `None` when it has
/// not all arrived. For a varint field the value is in `value_len` bytes after the tag.
pub(crate) fn peek_header(data: &[u8]) -> Result<Option<Header>, Error> {
    let Some((tag, tag_len)) = peek_varint(data)? else {
        return Ok(None);
    };
    let (number, wire) = split_tag(tag)?;
    let rest = data.get(tag_len..).unwrap_or_default();
    let (header_len, value_len) = match wire {
        WireType::Varint => match peek_varint(rest)? {
            Some((_, n)) => (tag_len, n as u64),
            None => return Ok(None),
        },
        WireType::Fixed64 => (tag_len, 8),
        WireType::Fixed32 => (tag_len, 4),
        WireType::Len => match peek_varint(rest)? {
            Some((len, n)) => (tag_len + n, len),
            None => return Ok(None),
        },
    };
    Ok(Some(Header {
        number,
        wire,
        header_len,
        value_len,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints() {
        assert_eq!(peek_varint(&[0]).unwrap(), Some((0, 1)));
        assert_eq!(peek_varint(&[0x96, 0x01]).unwrap(), Some((150, 2)));
        assert_eq!(peek_varint(&[0x96]).unwrap(), None);
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(peek_varint(&max).unwrap(), Some((u64::MAX, 10)));
        let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert_eq!(peek_varint(&over).unwrap_err().kind(), ErrorKind::BadVarint);
        let long = [0x80; 11];
        assert_eq!(peek_varint(&long).unwrap_err().kind(), ErrorKind::BadVarint);
        assert_eq!(
            Reader::new(&[0x80]).varint().unwrap_err().kind(),
            ErrorKind::Truncated
        );
    }

    #[test]
    fn tags() {
        assert_eq!(split_tag(0x0a).unwrap(), (1, WireType::Len));
        assert_eq!(split_tag(0x08).unwrap(), (1, WireType::Varint));
        assert_eq!(split_tag(0x0d).unwrap(), (1, WireType::Fixed32));
        assert_eq!(split_tag(0x09).unwrap(), (1, WireType::Fixed64));
        for bad in [0x02, 0x0b, 0x0c, 0x0e, 0x0f, 1 << 40] {
            assert_eq!(
                split_tag(bad).unwrap_err().kind(),
                ErrorKind::BadTag,
                "{bad}"
            );
        }
    }

    #[test]
    fn lengths_must_fit() {
        // A length of 2^63: an error, never an allocation.
        let mut r = Reader::new(&[
            0x0a, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01,
        ]);
        assert_eq!(r.field().unwrap_err().kind(), ErrorKind::LengthPastInput);
        let mut r = Reader::new(&[0x0a, 0x03, b'a', b'b']);
        assert_eq!(r.field().unwrap_err().kind(), ErrorKind::LengthPastInput);
        let mut r = Reader::new(&[0x0a, 0x02, b'a', b'b', 0x10, 0x05, 0x1d, 1, 0, 0, 0]);
        assert_eq!(r.field().unwrap(), Some((1, Raw::Len(b"ab"))));
        assert_eq!(r.peek_number(), Some(2));
        assert_eq!(r.field().unwrap(), Some((2, Raw::Varint(5))));
        assert_eq!(r.field().unwrap(), Some((3, Raw::Fixed32(1))));
        assert_eq!(r.field().unwrap(), None);
        let mut r = Reader::new(&[0x19, 1, 0, 0]);
        assert_eq!(r.field().unwrap_err().kind(), ErrorKind::Truncated);
    }

    #[test]
    fn headers() {
        assert_eq!(peek_header(&[0x12]).unwrap(), None);
        assert_eq!(peek_header(&[0x12, 0x80]).unwrap(), None);
        let h = peek_header(&[0x12, 0x80, 0x01]).unwrap().unwrap();
        assert_eq!((h.number, h.header_len, h.value_len), (2, 3, 128));
        let h = peek_header(&[0x08, 0x96, 0x01]).unwrap().unwrap();
        assert_eq!((h.number, h.header_len, h.value_len), (1, 1, 2));
        assert_eq!(peek_header(&[0x08, 0x96]).unwrap(), None);
    }
}
