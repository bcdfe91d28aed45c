//! RESP2, as the data path reads it: one decoder for every reply.
//!
//! [`element`] decodes the element at a position of a buffer: its head (an integer, a status or
//! error line, a bulk string's bytes, an array's length) and where the next one starts, or
//! `None` when it has not all arrived yet. The rest only walks what it decodes:
//! - a `Framer` finds where the reply at the start of a growing buffer ends, resuming where it
//!   stopped, so a big reply arriving in many reads is walked once;
//! - a [`Reader`] reads replies in place, element by element (the data path's hottest reply, a
//!   transaction's members and rosters, goes straight into its events), or builds a [`Value`]
//!   of one (`value`), error replies included ([`ServerError`]).
//!
//! Hostile input is an error, never a panic, and a length from the wire never sizes anything
//! by itself: a bulk string is looked at only once all of it has arrived, an array reserves room
//! for at most as many elements as the bytes already there can hold, and the framer keeps one
//! count, not a stack. Memory thus follows the bytes received, not what a header announces
//! (`*2147483647`, a 1 GB bulk header). Only `-1` is null; another negative length is refused.

mod value;

#[cfg(test)]
pub mod tests;

use std::io;

pub use self::value::{ErrorLine, ServerError, Value};

/// Deepest nesting of arrays a [`Value`] is built from; ours are at most three levels (EXEC of
/// ZRANGEs). Bounds the recursion that builds one.
pub(super) const MAX_DEPTH: usize = 8;

pub(super) fn protocol(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("Redis protocol error: {what}"),
    )
}

/// One element of a reply, as [`element`] decodes it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Item<'a> {
    /// A status reply (`+OK`, `+QUEUED`), without its `+`.
    Status(&'a [u8]),
    /// An error reply, without its `-`.
    Error(ErrorLine<'a>),
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(&'a [u8]),
    /// A null bulk string or array.
    Nil,
    /// An array of this many elements, which follow.
    Array(usize),
}

/// The element starting at `at`, and where the next one starts; `None` if it has not all
/// arrived yet (a bulk string counts as arrived with its CRLF).
#[inline]
pub fn element(buf: &[u8], at: usize) -> io::Result<Option<(Item<'_>, usize)>> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    if matches!(kind, b'+' | b'-') {
        let Some((text, next)) = line(buf, at + 1)? else {
            return Ok(None);
        };
        let item = match kind {
            b'+' => Item::Status(text),
            _ => Item::Error(ErrorLine::new(text)),
        };
        return Ok(Some((item, next)));
    }
    let Some((n, next)) = header(buf, at + 1)? else {
        return Ok(None);
    };
    let item = match kind {
        b':' => Item::Int(n),
        b'$' | b'*' if n == -1 => Item::Nil,
        b'$' => {
            let len = length(n)?;
            // `next + len` cannot overflow: `len` is below 2^63 and `next` below a buffer's size.
            let end = next + len;
            let Some(tail) = buf.get(end..end + 2) else {
                return Ok(None);
            };
            if tail != b"\r\n" {
                return Err(protocol("a bulk string without its CRLF"));
            }
            return Ok(Some((Item::Bulk(&buf[next..end]), end + 2)));
        }
        b'*' => Item::Array(length(n)?),
        other => {
            return Err(protocol(&format!(
                "unexpected reply type byte {:?}",
                other as char
            )));
        }
    };
    Ok(Some((item, next)))
}

/// A bulk string's or an array's length; only `-1` (null) may be negative.
#[inline]
fn length(n: i64) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| protocol("a length out of range (only -1 may be negative)"))
}

/// The line starting at `at`, without its CRLF, and where the next element starts; `None` if
/// the line is not complete yet. Status and error lines may hold no CR.
fn line(buf: &[u8], at: usize) -> io::Result<Option<(&[u8], usize)>> {
    let rest = buf.get(at..).unwrap_or_default();
    let Some(end) = rest.iter().position(|&b| b == b'\r') else {
        return Ok(None);
    };
    match rest.get(end + 1) {
        None => Ok(None),
        Some(b'\n') => Ok(Some((&rest[..end], at + end + 2))),
        Some(_) => Err(protocol("a CR without its LF")),
    }
}

/// The integer on the header line that starts at `at` (just past its type byte), and where the
/// next element starts, in one pass over the line. `None` if the line has not all arrived.
#[inline]
fn header(buf: &[u8], at: usize) -> io::Result<Option<(i64, usize)>> {
    // Most headers of the data path are one digit (member lengths, counts, small arrays), and
    // a raw reply is walked twice (framing, then reading): take those in one inlined step.
    if let Some(&[d @ b'0'..=b'9', b'\r', b'\n']) = buf.get(at..at + 3) {
        return Ok(Some((i64::from(d - b'0'), at + 3)));
    }
    long_header(buf, at)
}

#[inline(never)]
fn long_header(buf: &[u8], at: usize) -> io::Result<Option<(i64, usize)>> {
    let bad = || protocol("a length or integer that is not a number");
    let negative = buf.get(at) == Some(&b'-');
    let start = at + usize::from(negative);
    // Up to 19 digits fit a u64 whatever they are; the range is checked once at the end.
    let digits = buf.get(start..).unwrap_or_default();
    let digits = &digits[..digits
        .iter()
        .take(19)
        .take_while(|d| d.is_ascii_digit())
        .count()];
    let n = digits
        .iter()
        .fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    let i = start + digits.len();
    match (buf.get(i), buf.get(i + 1)) {
        (None, _) | (Some(b'\r'), None) => return Ok(None),
        (Some(b'\r'), Some(b'\n')) if i > start => {}
        _ => return Err(bad()),
    }
    let n = if negative {
        0i64.checked_sub_unsigned(n).ok_or_else(bad)?
    } else {
        i64::try_from(n).map_err(|_| bad())?
    };
    Ok(Some((n, i + 2)))
}

/// Where the reply starting at `at` ends, if all of it has arrived: one [`Framer`] walk.
pub(super) fn reply_len(buf: &[u8], at: usize) -> io::Result<Option<usize>> {
    Framer { at, left: 0 }.reply_end(buf)
}

/// Finds where the reply at the start of a buffer ends as the buffer grows, resuming where the
/// last look stopped: a big reply arriving in many reads is walked once, not once per read.
#[derive(Debug, Default)]
pub(super) struct Framer {
    /// Where the next element starts: everything before it has been walked.
    at: usize,
    /// Elements still to come before the reply ends, once its first was walked. One count
    /// serves every level of nesting: an array's elements simply add to it.
    left: usize,
}

impl Framer {
    /// Whether the reply at the start of the buffer has been partly walked.
    pub(super) fn walking(&self) -> bool {
        self.at > 0
    }

    /// Where the reply that starts at `buf[0]` (or where [`reply_len`] set it going) ends, once
    /// all of it is in `buf`; the framer then starts over at `buf[0]` for the next reply. Between
    /// calls `buf` may only grow at its end.
    pub(super) fn reply_end(&mut self, buf: &[u8]) -> io::Result<Option<usize>> {
        if self.left == 0 {
            self.left = 1;
        }
        loop {
            let Some((item, next)) = element(buf, self.at)? else {
                return Ok(None);
            };
            self.at = next;
            self.left -= 1;
            if let Item::Array(n) = item {
                // Saturating: a count this high never completes, and the bytes run out first.
                self.left = self.left.saturating_add(n);
            }
            if self.left == 0 {
                self.at = 0;
                return Ok(Some(next));
            }
        }
    }
}

/// Reads replies in place, one element at a time.
pub struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }

    /// How many bytes have been read.
    pub fn position(&self) -> usize {
        self.at
    }

    /// The next element, or `None` (the position unchanged) if the bytes end before it does.
    #[inline]
    pub fn decode(&mut self) -> io::Result<Option<Item<'a>>> {
        Ok(element(self.buf, self.at)?.map(|(item, next)| {
            self.at = next;
            item
        }))
    }

    /// The next element of replies known to be whole; `Err` if the bytes end or are not RESP2.
    #[inline]
    pub fn item(&mut self) -> redis::RedisResult<Item<'a>> {
        Ok(self.decode()?.ok_or_else(ended)?)
    }

    /// Skips the rest of an element whose head was `item` (the elements of an array).
    pub fn skip_rest(&mut self, item: &Item<'_>) -> redis::RedisResult<()> {
        let Item::Array(mut left) = *item else {
            return Ok(());
        };
        while left > 0 {
            left -= 1;
            if let Item::Array(n) = self.item()? {
                left = left.saturating_add(n);
            }
        }
        Ok(())
    }

    /// Skips one whole reply.
    pub fn skip(&mut self) -> redis::RedisResult<()> {
        let item = self.item()?;
        self.skip_rest(&item)
    }

    /// The next reply as a [`Value`]; `None` if the bytes end before it does (the position is
    /// then unspecified: start again from where it was).
    pub fn value(&mut self) -> io::Result<Option<Value>> {
        self.value_at(0)
    }

    fn value_at(&mut self, depth: usize) -> io::Result<Option<Value>> {
        let Some(item) = self.decode()? else {
            return Ok(None);
        };
        Ok(Some(match item {
            Item::Int(n) => Value::Int(n),
            Item::Bulk(bytes) => Value::BulkString(bytes.to_vec()),
            Item::Nil => Value::Nil,
            Item::Status(b"OK") => Value::Okay,
            Item::Status(text) => Value::SimpleString(String::from_utf8_lossy(text).into_owned()),
            Item::Error(e) => Value::ServerError(e.owned()),
            Item::Array(n) => {
                if depth == MAX_DEPTH {
                    return Err(protocol("replies nested too deep"));
                }
                // Every element takes at least 3 bytes: a length from the wire cannot make us
                // reserve more than what has arrived.
                let room = (self.buf.len() - self.at) / 3;
                let mut items = Vec::with_capacity(n.min(room));
                for _ in 0..n {
                    let Some(item) = self.value_at(depth + 1)? else {
                        return Ok(None);
                    };
                    items.push(item);
                }
                Value::Array(items)
            }
        }))
    }
}

fn ended() -> io::Error {
    protocol("the replies ended early")
}
