//! The one bounded line reader every agent pipe is read with (stdout and
//! stderr, whatever the protocol), with one policy for a line too long to
//! hold: it is never buffered whole. Its first bytes and its length come
//! out as [`Frame::Oversized`]; the reader goes on at the next line. A last
//! line without a newline is a line as any other.

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The longest line of an agent's stdout held whole; a longer one is
/// [`Frame::Oversized`].
pub const MAX_LINE_BYTES: usize = 8 << 20;

/// Bytes kept of a line too long to hold, for the log.
pub const KEPT_BYTES: usize = 200;

/// One line as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A whole line, without its newline.
    Line(Vec<u8>),
    /// A line longer than the bound: its length and its first bytes.
    Oversized {
        /// Its length in bytes (without the newline).
        bytes: usize,
        /// Its first bytes (at most the reader's `kept`).
        start: Vec<u8>,
    },
}

impl Frame {
    /// The line as text (lossy), or the start of an oversized one.
    pub fn lossy(&self) -> String {
        match self {
            Self::Line(line) => String::from_utf8_lossy(line).into_owned(),
            Self::Oversized { start, .. } => String::from_utf8_lossy(start).into_owned(),
        }
    }

    /// Whether the line holds nothing but whitespace (an oversized one
    /// never counts as blank).
    pub fn is_blank(&self) -> bool {
        matches!(self, Self::Line(line) if line.iter().all(u8::is_ascii_whitespace))
    }
}

/// Reads lines of at most `max` bytes from a buffered reader.
#[derive(Debug)]
pub struct LineReader<R> {
    /// The pipe, buffered.
    reader: R,
    /// The longest line held whole.
    max: usize,
    /// Bytes kept of a longer one.
    kept: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// A reader holding at most `max` bytes of a line, keeping the first
    /// `kept` (at most `max`) of a longer one.
    pub fn new(reader: R, max: usize, kept: usize) -> Self {
        Self {
            reader,
            max,
            kept: kept.min(max),
        }
    }

    /// The next line; `None` at the end of the pipe.
    ///
    /// # Errors
    ///
    /// The pipe broke.
    pub async fn next(&mut self) -> std::io::Result<Option<Frame>> {
        let mut line = Vec::new();
        let mut bytes = 0usize;
        let mut any = false;
        loop {
            let buf = self.reader.fill_buf().await?;
            if buf.is_empty() {
                return Ok(any.then(|| self.frame(line, bytes)));
            }
            any = true;
            let (chunk, used, ended) = match buf.iter().position(|b| *b == b'\n') {
                Some(at) => (&buf[..at], at + 1, true),
                None => (buf, buf.len(), false),
            };
            bytes += chunk.len();
            let room = if bytes > self.max {
                self.kept.saturating_sub(line.len())
            } else {
                chunk.len()
            };
            line.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if bytes > self.max {
                line.truncate(self.kept);
            }
            self.reader.consume(used);
            if ended {
                return Ok(Some(self.frame(line, bytes)));
            }
        }
    }

    /// What was read of a line of `bytes` bytes.
    fn frame(&self, line: Vec<u8>, bytes: usize) -> Frame {
        if bytes > self.max {
            Frame::Oversized { bytes, start: line }
        } else {
            Frame::Line(line)
        }
    }
}

#[cfg(test)]
mod tests;
