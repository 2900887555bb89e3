//! Where a field of a JSON file sits, as `line:col`, for messages about a foreign
//! `config.json` (issue 21: "`num_hidden_layers` at config.json:3:24 is 1000000000").
//!
//! serde_json keeps no spans for values that parsed, so the file is walked once more, only
//! when a message needs a position: one forward pass over the bytes that allocates nothing
//! and skips every value off the path without recursing, so a deeply nested or large file
//! (up to the 16 MiB read limit) costs one linear scan and no memory.

/// 1-based line and column (in characters) of the value at `path` (object keys from the
/// root) in the JSON `text`; `None` when the path is not there or the text is not JSON
/// enough to follow. Keys are compared as written, so a key spelled with escapes is not
/// found (the caller then gives the file without a position).
pub(super) fn value_position(text: &str, path: &[&str]) -> Option<(usize, usize)> {
    let mut s = Scan {
        b: text.as_bytes(),
        i: 0,
    };
    for (level, key) in path.iter().enumerate() {
        s.ws();
        s.expect(b'{')?;
        loop {
            s.ws();
            if s.peek()? == b'}' {
                return None;
            }
            let (start, end) = s.string()?;
            s.ws();
            s.expect(b':')?;
            s.ws();
            if &text[start..end] == *key {
                if level + 1 == path.len() {
                    return Some(line_col(text, s.i));
                }
                break;
            }
            s.skip_value()?;
            s.ws();
            if s.peek()? == b',' {
                s.i += 1;
            } else {
                return None;
            }
        }
    }
    None
}

/// Line and column of byte `offset` (a character boundary: the scan stops only at ASCII).
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset];
    let line = before.bytes().filter(|&b| b == b'\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

struct Scan<'a> {
    b: &'a [u8],
    i: usize,
}

impl Scan<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while self
            .peek()
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// A string starting here: the byte range of its content (escapes left as written).
    fn string(&mut self) -> Option<(usize, usize)> {
        self.expect(b'"')?;
        let start = self.i;
        loop {
            match self.peek()? {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return Some((start, self.i - 1));
                }
                _ => self.i += 1,
            }
        }
    }

    /// Past the value starting here: a container by counting brackets outside strings, a
    /// scalar up to the next delimiter.
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(|_| ()),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                return Some(());
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while self
                    .peek()
                    .is_some_and(|c| !matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                {
                    self.i += 1;
                }
                Some(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::value_position;

    #[test]
    fn nested_fields_are_found_past_containers_strings_and_escapes() {
        let text = "{\n  \"a\": [1, {\"x\": \"}\"}],\n  \"s\": \"q\\\"}\",\n  \"c\": {\"d\": 2, \"e\": \"é\", \"f\": 7}\n}";
        assert_eq!(value_position(text, &["a"]), Some((2, 8)));
        assert_eq!(value_position(text, &["s"]), Some((3, 8)));
        assert_eq!(value_position(text, &["c", "d"]), Some((4, 14)));
        // Columns count characters, not bytes.
        assert_eq!(value_position(text, &["c", "f"]), Some((4, 32)));
        assert_eq!(value_position(text, &["c", "zz"]), None);
        assert_eq!(value_position(text, &["missing"]), None);
        assert_eq!(value_position("{\"a\": ", &["b"]), None);
        assert_eq!(value_position("[1]", &["a"]), None);
    }
}
