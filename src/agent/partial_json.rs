//! An incremental extractor of one top-level string field (`"text"`) from a
//! JSON object that arrives in arbitrary pieces: the `partial_json` of a
//! tool call's `input_json_delta` events.
//!
//! [`StringField::push`] takes the next piece and returns the part of the
//! field's value decoded since the last call, so the pieces' outputs
//! concatenate to the whole value. It handles every JSON escape split at any
//! byte, surrogate pairs split across pieces (the character is emitted once
//! both halves arrived; a lone or broken surrogate becomes U+FFFD), UTF-8
//! characters split across byte pieces, whitespace between tokens, and the
//! key after other keys whose nested values may hold a `"text"` key of
//! their own (ignored: only the top-level field counts, the first time).
//! Malformed input never panics; it just yields what it can. The state is a
//! few bytes plus the field's name: memory does not grow with the input.

/// The replacement for a broken escape or a lone surrogate.
const REPLACEMENT: char = '\u{FFFD}';

/// Extracts the value of one top-level string field, piece by piece.
#[derive(Debug, Clone)]
pub struct StringField {
    /// The field's name.
    name: String,
    /// Where the scanner is.
    state: Scan,
    /// Nesting: 0 before the top-level object, 1 inside it.
    depth: usize,
    /// At depth 1: what comes next.
    expect: Expect,
    /// The string being read, when inside one.
    string: Option<Text>,
    /// The current key at depth 1 (at most `name.len() + 1` bytes).
    key: Vec<u8>,
    /// The current key is the field's name.
    key_matches: bool,
    /// The field's value was read to its end (later duplicates are ignored).
    done: bool,
    /// Decoded bytes not yet returned (an incomplete UTF-8 character).
    out: Vec<u8>,
}

/// The scanner's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    /// Outside any string.
    Between,
    /// Inside a string.
    InString,
    /// After the top-level object closed: everything else is ignored.
    Finished,
}

/// What the top-level object expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// A key (after `{` or `,`).
    Key,
    /// A value (after `:`).
    Value,
    /// `,` or `}` (after a value).
    Next,
}

/// What a string being read is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A key of the top-level object.
    Key,
    /// The field's value: decoded and returned.
    Target,
    /// Anything else: skipped.
    Skip,
}

/// A string being decoded.
#[derive(Debug, Clone, Copy)]
struct Text {
    /// What it is for.
    role: Role,
    /// Where in an escape it is.
    escape: Escape,
    /// A high surrogate waiting for its low half.
    high: Option<u16>,
}

/// Where in an escape sequence a string is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    /// Plain characters.
    None,
    /// After a backslash.
    Started,
    /// After `\u` and this many hex digits making `value`.
    Unicode {
        /// Digits read so far (0 to 3).
        digits: u8,
        /// Their value.
        value: u16,
    },
}

impl StringField {
    /// An extractor of the top-level field `name`.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            state: Scan::Between,
            depth: 0,
            expect: Expect::Key,
            string: None,
            key: Vec::new(),
            key_matches: false,
            done: false,
            out: Vec::new(),
        }
    }

    /// Feeds the next piece; returns the part of the field's value decoded
    /// from it (empty when there is none yet).
    pub fn push(&mut self, piece: &str) -> String {
        self.push_bytes(piece.as_bytes())
    }

    /// Feeds the next piece as bytes (a UTF-8 character may be split across
    /// pieces); returns the newly decoded part of the field's value.
    pub fn push_bytes(&mut self, piece: &[u8]) -> String {
        for &byte in piece {
            self.byte(byte);
        }
        self.take()
    }

    /// Whether the field's value was read to its closing quote.
    pub fn is_complete(&self) -> bool {
        self.done
    }

    fn byte(&mut self, byte: u8) {
        match self.state {
            Scan::Finished => {}
            Scan::InString => self.in_string(byte),
            Scan::Between => self.between(byte),
        }
    }

    /// A byte outside any string.
    fn between(&mut self, byte: u8) {
        match byte {
            b'"' => {
                let role = match (self.depth, self.expect) {
                    (1, Expect::Key) => {
                        self.key.clear();
                        Role::Key
                    }
                    (1, Expect::Value) if self.key_matches && !self.done => Role::Target,
                    _ => Role::Skip,
                };
                self.string = Some(Text {
                    role,
                    escape: Escape::None,
                    high: None,
                });
                self.state = Scan::InString;
            }
            b'{' | b'[' => {
                if self.depth == 0 && byte == b'[' {
                    // Not an object: nothing in it is a top-level field.
                    self.state = Scan::Finished;
                    return;
                }
                self.depth += 1;
                if self.depth == 1 {
                    self.expect = Expect::Key;
                }
            }
            b'}' | b']' => match self.depth {
                0 => {}
                1 => self.state = Scan::Finished,
                _ => {
                    self.depth -= 1;
                    if self.depth == 1 {
                        self.expect = Expect::Next;
                    }
                }
            },
            b':' if self.depth == 1 => self.expect = Expect::Value,
            b',' if self.depth == 1 => {
                self.expect = Expect::Key;
                self.key_matches = false;
            }
            // Whitespace, scalars (numbers, true, false, null), stray bytes.
            _ => {}
        }
    }

    /// A byte inside a string.
    fn in_string(&mut self, byte: u8) {
        let Some(mut text) = self.string else {
            self.state = Scan::Between;
            return;
        };
        match text.escape {
            Escape::None => {
                if byte != b'\\' && text.high.take().is_some() {
                    self.char_out(text.role, REPLACEMENT);
                }
                match byte {
                    b'"' => {
                        self.string = None;
                        self.state = Scan::Between;
                        return self.string_ended(text.role);
                    }
                    b'\\' => text.escape = Escape::Started,
                    _ => self.byte_out(text.role, byte),
                }
            }
            Escape::Started => {
                text.escape = Escape::None;
                if byte == b'u' {
                    text.escape = Escape::Unicode {
                        digits: 0,
                        value: 0,
                    };
                } else {
                    if text.high.take().is_some() {
                        self.char_out(text.role, REPLACEMENT);
                    }
                    let decoded = match byte {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'b' => 0x08,
                        b'f' => 0x0c,
                        // `\"`, `\\`, `\/`, and (leniently) any other byte.
                        other => other,
                    };
                    self.byte_out(text.role, decoded);
                }
            }
            Escape::Unicode { digits, value } => {
                let Some(digit) = (byte as char).to_digit(16) else {
                    // A broken `\u`: replace it and read the byte as plain.
                    text.escape = Escape::None;
                    text.high = None;
                    self.char_out(text.role, REPLACEMENT);
                    self.string = Some(text);
                    return self.in_string(byte);
                };
                // At most four digits of at most 15 each fit a u16.
                let value = (value << 4) | digit as u16;
                if digits < 3 {
                    text.escape = Escape::Unicode {
                        digits: digits + 1,
                        value,
                    };
                } else {
                    text.escape = Escape::None;
                    self.unit(&mut text, value);
                }
            }
        }
        self.string = Some(text);
    }

    /// One `\uXXXX` code unit.
    fn unit(&mut self, text: &mut Text, unit: u16) {
        match unit {
            0xD800..=0xDBFF => {
                if text.high.replace(unit).is_some() {
                    self.char_out(text.role, REPLACEMENT);
                }
            }
            0xDC00..=0xDFFF => match text.high.take() {
                Some(high) => {
                    let code =
                        0x10000 + ((u32::from(high) - 0xD800) << 10) + (u32::from(unit) - 0xDC00);
                    self.char_out(text.role, char::from_u32(code).unwrap_or(REPLACEMENT));
                }
                None => self.char_out(text.role, REPLACEMENT),
            },
            _ => {
                if text.high.take().is_some() {
                    self.char_out(text.role, REPLACEMENT);
                }
                self.char_out(
                    text.role,
                    char::from_u32(u32::from(unit)).unwrap_or(REPLACEMENT),
                );
            }
        }
    }

    fn string_ended(&mut self, role: Role) {
        match role {
            Role::Key => {
                self.key_matches = self.key == self.name.as_bytes();
                self.expect = Expect::Key;
            }
            Role::Target => {
                self.done = true;
                self.expect = Expect::Next;
            }
            Role::Skip => {
                if self.depth == 1 {
                    self.expect = Expect::Next;
                }
            }
        }
    }

    fn char_out(&mut self, role: Role, c: char) {
        let mut buf = [0u8; 4];
        for &byte in c.encode_utf8(&mut buf).as_bytes() {
            self.byte_out(role, byte);
        }
    }

    fn byte_out(&mut self, role: Role, byte: u8) {
        match role {
            Role::Target => self.out.push(byte),
            // One byte more than the name is enough to tell it differs.
            Role::Key if self.key.len() <= self.name.len() => self.key.push(byte),
            Role::Key | Role::Skip => {}
        }
    }

    /// The decoded bytes as text, keeping an incomplete UTF-8 character for
    /// the next piece (unless the value has ended: then it is replaced).
    fn take(&mut self) -> String {
        let bytes = std::mem::take(&mut self.out);
        let mut text = String::with_capacity(bytes.len());
        let mut rest = bytes.as_slice();
        loop {
            match std::str::from_utf8(rest) {
                Ok(valid) => {
                    text.push_str(valid);
                    break;
                }
                Err(err) => {
                    let (valid, after) = rest.split_at(err.valid_up_to());
                    text.push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match err.error_len() {
                        Some(bad) => {
                            text.push(REPLACEMENT);
                            rest = after.get(bad..).unwrap_or_default();
                        }
                        None if self.done || self.state == Scan::Finished => {
                            text.push(REPLACEMENT);
                            break;
                        }
                        None => {
                            self.out = after.to_vec();
                            break;
                        }
                    }
                }
            }
        }
        text
    }
}

#[cfg(test)]
mod tests;
