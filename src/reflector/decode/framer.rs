//! Splitting a watch body into lines as its chunks arrive.

/// Splits a watch response body into lines as chunks arrive.
///
/// Chunk boundaries are arbitrary (an event may span many chunks, a chunk may hold many events);
/// the framer keeps the unfinished tail and hands out each complete line once. Empty lines are
/// skipped.
#[derive(Debug, Default)]
pub struct LineFramer {
    buf: Vec<u8>,
    /// How far `buf` has already been searched for a newline, so a large event arriving in many
    /// small chunks is scanned once, not once per chunk.
    scanned: usize,
}

impl LineFramer {
    /// A framer with nothing buffered.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes and returns every line they complete.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        let mut rest = chunk;
        // Fast path: nothing buffered, split the chunk in place.
        if self.buf.is_empty() {
            while let Some(pos) = memchr(b'\n', rest) {
                let line = trim_cr(&rest[..pos]);
                if !line.is_empty() {
                    lines.push(line.to_vec());
                }
                rest = &rest[pos + 1..];
            }
            self.buf.extend_from_slice(rest);
            self.scanned = self.buf.len();
            return lines;
        }
        self.buf.extend_from_slice(rest);
        let mut start = 0;
        let mut search_from = self.scanned;
        while let Some(pos) = memchr(b'\n', &self.buf[search_from..]) {
            let end = search_from + pos;
            let line = trim_cr(&self.buf[start..end]);
            if !line.is_empty() {
                lines.push(line.to_vec());
            }
            start = end + 1;
            search_from = start;
        }
        self.buf.drain(..start);
        self.scanned = self.buf.len();
        lines
    }

    /// Bytes received after the last newline (an event cut off by a dropped connection).
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }
}

fn trim_cr(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\r").unwrap_or(line)
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    // SIMD search: every watch byte is scanned for the newline, so a byte-at-a-time loop cost
    // about 3% of the CPU per event in the watch benchmark (S2, BENCHMARKS.md).
    memchr::memchr(needle, haystack)
}
