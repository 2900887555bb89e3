//! A count of the graph's repeated fields straight from the protobuf wire format, before
//! anything is decoded: a file of 2 MB can claim a million empty nodes, and decoding them
//! would allocate hundreds of megabytes before a cap could say no. The scan walks field
//! keys and lengths only (no allocation) and also finds a truncated message, with the byte
//! where it stops.

/// How many of each repeated field the graph holds (summed over every `graph` field of the
/// model, since protobuf merges repeated occurrences, and over every subgraph an attribute
/// holds: an `If`'s branches, a `Loop`'s body).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// `GraphProto.node`.
    pub nodes: u64,
    /// `GraphProto.initializer`.
    pub initializers: u64,
    /// `GraphProto.input`, `output` and `value_info`.
    pub value_infos: u64,
}

/// Deepest nesting of subgraphs read (a Loop in an If in a Loop is 3; exporters write 1 or
/// 2, and each level costs prost three of its 100 levels of recursion).
pub const MAX_SUBGRAPH_DEPTH: usize = 8;

/// Where and why the wire format is broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError {
    /// Byte offset in the file.
    pub at: usize,
    /// What is wrong, in words.
    pub problem: &'static str,
}

/// Count the graph's fields in the serialized `ModelProto` `bytes`.
pub fn count(bytes: &[u8]) -> Result<Counts, WireError> {
    let mut counts = Counts::default();
    walk(bytes, 0, &mut |tag, start, body| {
        if tag == 7 {
            let Some((s, b)) = body else {
                return Err(WireError {
                    at: start,
                    problem: "the graph field is not a length-delimited message",
                });
            };
            count_graph(b, s, 0, &mut counts)?;
        }
        Ok(())
    })?;
    Ok(counts)
}

/// Add the fields of the `GraphProto` `bytes` (at file offset `base`, `depth` subgraphs
/// down) and of every subgraph its nodes' attributes hold.
fn count_graph(bytes: &[u8], base: usize, depth: usize, counts: &mut Counts) -> Result<(), WireError> {
    if depth > MAX_SUBGRAPH_DEPTH {
        return Err(WireError {
            at: base,
            problem: "subgraphs are nested more than 8 deep",
        });
    }
    walk(bytes, base, &mut |tag, _, body| {
        match tag {
            1 => {
                counts.nodes += 1;
                // NodeProto.attribute (5) → AttributeProto.g (6) or .graphs (11).
                if let Some((s, node)) = body {
                    walk(node, s, &mut |tag, _, body| {
                        if let (5, Some((s, attr))) = (tag, body) {
                            walk(attr, s, &mut |tag, _, body| {
                                if let (6 | 11, Some((s, sub))) = (tag, body) {
                                    count_graph(sub, s, depth + 1, counts)?;
                                }
                                Ok(())
                            })?;
                        }
                        Ok(())
                    })?;
                }
            }
            5 => counts.initializers += 1,
            11..=13 => counts.value_infos += 1,
            _ => {}
        }
        Ok(())
    })
}

/// Call `visit(tag, key_offset, body)` for each field of the message `bytes` (which starts
/// at file offset `base`); `body` is the payload of a length-delimited field.
fn walk<'a, F>(bytes: &'a [u8], base: usize, visit: &mut F) -> Result<(), WireError>
where
    F: FnMut(u32, usize, Option<(usize, &'a [u8])>) -> Result<(), WireError>,
{
    let mut i = 0;
    while i < bytes.len() {
        let at = base + i;
        let key = varint(bytes, &mut i).ok_or(WireError {
            at,
            problem: "a field key runs past the end of the message (truncated)",
        })?;
        let tag = u32::try_from(key >> 3).unwrap_or(0);
        if tag == 0 {
            return Err(WireError {
                at,
                problem: "field number 0 is not valid protobuf",
            });
        }
        let truncated = WireError {
            at,
            problem: "a field's value runs past the end of the message (truncated)",
        };
        match key & 7 {
            0 => {
                varint(bytes, &mut i).ok_or(truncated)?;
                visit(tag, at, None)?;
            }
            1 | 5 => {
                let width = if key & 7 == 1 { 8 } else { 4 };
                if bytes.len() - i < width {
                    return Err(truncated);
                }
                i += width;
                visit(tag, at, None)?;
            }
            2 => {
                let len = varint(bytes, &mut i).ok_or(truncated.clone())?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= bytes.len() - i)
                    .ok_or(truncated)?;
                visit(tag, at, Some((base + i, &bytes[i..i + len])))?;
                i += len;
            }
            _ => {
                return Err(WireError {
                    at,
                    problem: "a field uses a wire type ONNX never writes (groups or an invalid type)",
                });
            }
        }
    }
    Ok(())
}

/// A base-128 varint at `bytes[*i..]`, advancing `i`; `None` when truncated or over 10 bytes.
fn varint(bytes: &[u8], i: &mut usize) -> Option<u64> {
    let mut value = 0u64;
    for shift in 0..10 {
        let b = *bytes.get(*i)?;
        *i += 1;
        value |= u64::from(b & 0x7f) << (7 * shift);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}
