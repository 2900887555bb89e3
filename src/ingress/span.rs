//! A JSON-pointer → YAML-position index, built by walking the parser's events once.
//!
//! JSON Schema errors and semantic checks speak JSON pointers (`/slices/0/sparsity/1`); users
//! read `file:line:col`. This index bridges the two. Values that reach a pointer through an
//! alias or a merge key (`<<: *anchor`) are indexed at their *definition* (where the text to
//! fix actually is); anything not indexed falls back to its nearest indexed ancestor.

use super::diagnostic::{Location, PackDiagnostic};
use serde_saphyr::granit_parser::{Event, Marker, Parser, Span};
use std::collections::{BTreeMap, HashMap};

/// A resolved source position: 1-based line and column (in characters) plus a byte range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Pos {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub col: u32,
    /// Byte offset of the start.
    pub offset: usize,
    /// Length in bytes (at least 1 where the source has text there).
    pub len: usize,
}

/// Where one node sits: its key (for mapping values) and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The key's position, when the node is a mapping value.
    pub key: Option<Pos>,
    /// The value's position.
    pub value: Pos,
}

/// JSON pointer (escaped as in RFC 6901) → source positions.
#[derive(Debug, Default)]
pub(crate) struct SpanIndex {
    entries: BTreeMap<String, Entry>,
    /// Second and later `<<` keys of one mapping, at the key. The deserializer applies
    /// both silently (issue 23), so ingress refuses them from here.
    repeated_merges: Vec<(String, Pos)>,
}

/// Maps parser markers to byte offsets, for sources where the parser reports only characters.
struct Offsets<'a> {
    text: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> Offsets<'a> {
    fn new(text: &'a str) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self { text, line_starts }
    }

    /// Byte offset of a 1-based line and 0-based character column, clamped to the text.
    fn byte_at(&self, line: usize, col: usize) -> usize {
        let Some(&start) = self.line_starts.get(line.saturating_sub(1)) else {
            return self.text.len();
        };
        let rest = &self.text[start..];
        let within = rest.char_indices().nth(col).map_or(rest.len(), |(i, _)| i);
        start + within
    }

    fn pos(&self, span: &Span) -> Pos {
        let start = marker_offset(self, &span.start);
        let end = marker_offset(self, &span.end).max(start);
        let len = if end > start {
            end - start
        } else {
            // Zero-width events (an empty scalar): cover one character when there is one.
            self.text[start..].chars().next().map_or(0, char::len_utf8)
        };
        Pos {
            line: u32::try_from(span.start.line()).unwrap_or(u32::MAX).max(1),
            col: u32::try_from(span.start.col() + 1).unwrap_or(u32::MAX),
            offset: start,
            len,
        }
    }
}

fn marker_offset(offsets: &Offsets<'_>, m: &Marker) -> usize {
    m.byte_offset()
        .filter(|&b| b <= offsets.text.len() && offsets.text.is_char_boundary(b))
        .unwrap_or_else(|| offsets.byte_at(m.line(), m.col()))
}

/// Escape one JSON-pointer segment (RFC 6901).
pub(crate) fn escape_segment(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// The parent of a pointer (`/a/b` → `/a`, `/a` → ``); `None` for the root.
pub(crate) fn parent_pointer(pointer: &str) -> Option<&str> {
    pointer.rfind('/').map(|i| &pointer[..i])
}

enum Frame {
    Map {
        pointer: String,
        /// The current key and its position, once read; `None` while a key is expected.
        key: Option<(String, Pos)>,
        /// Merge sources (anchored pointers) to apply when the mapping ends.
        merges: Vec<String>,
        /// Whether a `<<` key was read already.
        merged: bool,
    },
    Seq {
        pointer: String,
        next: usize,
    },
    /// A complex (non-scalar) key or an inline merge mapping: not indexed.
    Skip,
}

/// Where the next node goes.
enum Slot {
    Root,
    Value { pointer: String, key: Option<Pos> },
    Key,
    Merge,
    Skip,
}

impl SpanIndex {
    /// Index `text`. Parse errors end the walk quietly: the loader reports them from the
    /// deserializer, and whatever was indexed before them stays usable.
    pub(crate) fn build(text: &str) -> SpanIndex {
        let offsets = Offsets::new(text);
        let mut index = SpanIndex::default();
        let mut stack: Vec<Frame> = Vec::new();
        // Anchor id → pointer of the anchored node.
        let mut anchors: HashMap<usize, String> = HashMap::new();
        let mut in_document = false;

        for item in Parser::new_from_str(text) {
            let Ok((event, span)) = item else { break };
            match event {
                Event::DocumentStart(..) => {
                    if in_document {
                        break; // only the first document matters (more are refused)
                    }
                    in_document = true;
                }
                Event::Scalar(value, _, anchor, _) => {
                    let pos = offsets.pos(&span);
                    match next_slot(&mut stack) {
                        Slot::Key => {
                            if let Some(Frame::Map {
                                key, merged, pointer, ..
                            }) = stack.last_mut()
                            {
                                if value == "<<" {
                                    if *merged {
                                        index.repeated_merges.push((pointer.clone(), pos));
                                    }
                                    *merged = true;
                                }
                                *key = Some((value.into_owned(), pos));
                            }
                        }
                        Slot::Value { pointer, key } => {
                            index.insert(&pointer, key, pos);
                            if anchor != 0 {
                                anchors.insert(anchor, pointer);
                            }
                        }
                        Slot::Root => index.insert("", None, pos),
                        Slot::Merge | Slot::Skip => {}
                    }
                }
                Event::Alias(id) => {
                    let pos = offsets.pos(&span);
                    match next_slot(&mut stack) {
                        Slot::Value { pointer, key } => {
                            index.insert(&pointer, key, pos);
                            if let Some(source) = anchors.get(&id).cloned() {
                                index.copy_children(&source, &pointer, false);
                            }
                        }
                        Slot::Merge => {
                            // The mapping merged into: the top frame, or the one under a
                            // `<<: [*a, *b]` list.
                            let target = stack
                                .iter_mut()
                                .rev()
                                .find(|f| !matches!(f, Frame::Seq { pointer, .. } if pointer == MERGE_LIST));
                            if let (Some(source), Some(Frame::Map { merges, .. })) =
                                (anchors.get(&id).cloned(), target)
                            {
                                merges.push(source);
                            }
                        }
                        Slot::Key => {
                            if let Some(Frame::Map { key, .. }) = stack.last_mut() {
                                *key = Some(("*".into(), pos));
                            }
                        }
                        Slot::Root | Slot::Skip => {}
                    }
                }
                Event::SequenceStart(_, anchor, _) | Event::MappingStart(_, anchor, _) => {
                    let is_map = matches!(event, Event::MappingStart(..));
                    let pos = offsets.pos(&span);
                    let frame = match next_slot(&mut stack) {
                        Slot::Root => {
                            index.insert("", None, pos);
                            Some(String::new())
                        }
                        Slot::Value { pointer, key } => {
                            index.insert(&pointer, key, pos);
                            Some(pointer)
                        }
                        Slot::Merge if !is_map => {
                            // `<<: [*a, *b]`: the aliases inside are merge sources.
                            stack.push(Frame::Seq {
                                pointer: MERGE_LIST.into(),
                                next: 0,
                            });
                            None
                        }
                        Slot::Key | Slot::Merge | Slot::Skip => {
                            stack.push(Frame::Skip);
                            None
                        }
                    };
                    if let Some(pointer) = frame {
                        if anchor != 0 {
                            anchors.insert(anchor, pointer.clone());
                        }
                        stack.push(if is_map {
                            Frame::Map {
                                pointer,
                                key: None,
                                merges: Vec::new(),
                                merged: false,
                            }
                        } else {
                            Frame::Seq { pointer, next: 0 }
                        });
                    }
                }
                Event::SequenceEnd | Event::MappingEnd => {
                    if let Some(Frame::Map { pointer, merges, .. }) = stack.pop() {
                        for source in merges {
                            index.copy_children(&source, &pointer, true);
                        }
                    }
                }
                _ => {}
            }
        }
        index
    }

    /// The mappings that hold more than one `<<` key: each later key's pointer and position.
    pub(crate) fn repeated_merges(&self) -> &[(String, Pos)] {
        &self.repeated_merges
    }

    fn insert(&mut self, pointer: &str, key: Option<Pos>, value: Pos) {
        self.entries.insert(pointer.to_owned(), Entry { key, value });
    }

    /// Re-root every entry under `source` at `target`. With `only_children`, the source node
    /// itself is not copied (a merge adds keys, not a node), and keys already present win.
    fn copy_children(&mut self, source: &str, target: &str, only_children: bool) {
        let prefix = format!("{source}/");
        let copies: Vec<(String, Entry)> = self
            .entries
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .map(|(p, e)| (format!("{target}/{}", &p[prefix.len()..]), *e))
            .collect();
        for (pointer, entry) in copies {
            if only_children {
                self.entries.entry(pointer).or_insert(entry);
            } else {
                self.entries.insert(pointer, entry);
            }
        }
    }

    /// The entry at `pointer`, or at its nearest indexed ancestor (then `exact` is false).
    pub(crate) fn lookup(&self, pointer: &str) -> Option<(Entry, bool)> {
        let mut p = pointer;
        let mut exact = true;
        loop {
            if let Some(e) = self.entries.get(p) {
                return Some((*e, exact));
            }
            exact = false;
            p = parent_pointer(p)?;
        }
    }

    /// Position of the value at `pointer` (or the nearest ancestor's).
    pub(crate) fn value_pos(&self, pointer: &str) -> Option<Pos> {
        self.lookup(pointer).map(|(e, _)| e.value)
    }

    /// Position of the key naming `pointer` when it has one, else of its value.
    pub(crate) fn key_pos(&self, pointer: &str) -> Option<Pos> {
        self.lookup(pointer)
            .map(|(e, exact)| if exact { e.key.unwrap_or(e.value) } else { e.value })
    }
}

/// Builds located diagnostics for one pack file.
pub(crate) struct Locator {
    /// The file name as the user gave it.
    pub file: String,
    /// The pointer index of its text.
    pub index: SpanIndex,
}

impl Locator {
    fn make(&self, pointer: &str, pos: Option<Pos>, message: String, hint: Option<String>) -> PackDiagnostic {
        let pos = pos.unwrap_or(Pos {
            line: 1,
            col: 1,
            offset: 0,
            len: 0,
        });
        PackDiagnostic {
            location: self.location(pos),
            pointer: pointer.to_owned(),
            message,
            hint,
            span: (pos.offset, pos.len),
        }
    }

    /// The `Location` of a position in this file.
    pub(crate) fn location(&self, pos: Pos) -> Location {
        Location {
            file: self.file.clone(),
            line: pos.line,
            col: pos.col,
        }
    }

    /// A diagnostic at the value `pointer` names.
    pub(crate) fn at_value(
        &self,
        pointer: &str,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> PackDiagnostic {
        self.make(pointer, self.index.value_pos(pointer), message.into(), hint)
    }

    /// A diagnostic at the key naming `pointer` (its value when it has no key).
    pub(crate) fn at_key(
        &self,
        pointer: &str,
        message: impl Into<String>,
        hint: Option<String>,
    ) -> PackDiagnostic {
        self.make(pointer, self.index.key_pos(pointer), message.into(), hint)
    }
}

const MERGE_LIST: &str = "\u{0}merge";

/// Decide where the next node goes, advancing sequence counters and consuming mapping keys.
fn next_slot(stack: &mut [Frame]) -> Slot {
    match stack.last_mut() {
        None => Slot::Root,
        Some(Frame::Skip) => Slot::Skip,
        Some(Frame::Seq { pointer, next }) => {
            let i = *next;
            *next += 1;
            if pointer == MERGE_LIST {
                Slot::Merge
            } else {
                Slot::Value {
                    pointer: format!("{pointer}/{i}"),
                    key: None,
                }
            }
        }
        Some(Frame::Map { pointer, key, .. }) => match key.take() {
            None => Slot::Key,
            Some((k, _)) if k == "<<" => Slot::Merge,
            Some((k, pos)) => Slot::Value {
                pointer: format!("{pointer}/{}", escape_segment(&k)),
                key: Some(pos),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(index: &SpanIndex, pointer: &str) -> (u32, u32) {
        let p = index.value_pos(pointer).expect("indexed");
        (p.line, p.col)
    }

    #[test]
    fn block_and_flow_positions() {
        let text = "a: 1\nb:\n  - x\n  - {c: 2, d: [3, 4]}\n";
        let idx = SpanIndex::build(text);
        assert_eq!(at(&idx, "/a"), (1, 4));
        assert_eq!(at(&idx, "/b/0"), (3, 5));
        assert_eq!(at(&idx, "/b/1/c"), (4, 9));
        assert_eq!(at(&idx, "/b/1/d/1"), (4, 19));
        let k = idx.key_pos("/b/1/d").unwrap();
        assert_eq!((k.line, k.col), (4, 12));
        assert_eq!(&text[k.offset..k.offset + k.len], "d");
        // Unknown pointers fall back to the nearest ancestor.
        assert_eq!(at(&idx, "/b/1/zzz"), (4, 5));
    }

    #[test]
    fn aliases_and_merges_point_at_the_definition() {
        let text = "x-shape: &s {m: 1, k: 2}\nops:\n  - {<<: *s, n: 3}\n  - *s\n";
        let idx = SpanIndex::build(text);
        assert_eq!(at(&idx, "/ops/0/m"), (1, 17));
        assert_eq!(at(&idx, "/ops/0/n"), (3, 17));
        assert_eq!(at(&idx, "/ops/1"), (4, 5));
        assert_eq!(at(&idx, "/ops/1/k"), (1, 23));
    }

    #[test]
    fn a_second_merge_key_in_one_mapping_is_recorded_at_its_key() {
        let text = "a: &a {m: 1}\nb: &b {n: 2}\nc:\n  <<: *a\n  <<: *b\nd: {<<: [*a, *b]}\n";
        let idx = SpanIndex::build(text);
        let repeated: Vec<(&str, u32, u32)> = idx
            .repeated_merges()
            .iter()
            .map(|(p, pos)| (p.as_str(), pos.line, pos.col))
            .collect();
        assert_eq!(repeated, [("/c", 5, 3)]);
        // A merge list locates what each of its anchors brings (it fell back to `/d`).
        assert_eq!(at(&idx, "/d/n"), (2, 11));
    }

    #[test]
    fn survives_garbage() {
        let idx = SpanIndex::build("a: [1, 2\nb: {");
        assert!(idx.value_pos("/a").is_some() || idx.value_pos("").is_none());
        let _ = SpanIndex::build("");
        let _ = SpanIndex::build("? [a, b]\n: c\n");
    }
}
