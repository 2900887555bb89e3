//! Located pack errors: every problem points at `file:line:col` with a hint.

use miette::{Diagnostic, LabeledSpan, SourceSpan};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// A position in a pack file (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Location {
    /// The file, as the user named it.
    pub file: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column.
    pub col: u32,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.col)
    }
}

/// One problem in a pack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackDiagnostic {
    /// Where it is.
    pub location: Location,
    /// JSON pointer to the offending value (`/slices/0/sparsity/1`), empty for the root.
    pub pointer: String,
    /// What is wrong, as a sentence fragment.
    pub message: String,
    /// What would fix it.
    pub hint: Option<String>,
    /// Byte offset and length in the source, for the rendered snippet.
    pub span: (usize, usize),
}

impl fmt::Display for PackDiagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)?;
        if !self.pointer.is_empty() {
            write!(f, " (at {})", self.pointer)?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// A pack that could not be loaded: all of its problems at once.
#[derive(Debug, Clone, thiserror::Error)]
pub struct PackError {
    /// The pack file.
    pub path: PathBuf,
    /// Its text (empty when it could not be read).
    pub source_text: String,
    /// Every problem found, in source order.
    pub diagnostics: Vec<PackDiagnostic>,
}

impl fmt::Display for PackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.diagnostics.len();
        write!(
            f,
            "invalid scenario pack {} ({n} problem{})",
            self.path.display(),
            if n == 1 { "" } else { "s" }
        )?;
        for d in &self.diagnostics {
            write!(f, "\n{d}")?;
        }
        Ok(())
    }
}

impl Diagnostic for PackError {
    fn code<'a>(&'a self) -> Option<Box<dyn fmt::Display + 'a>> {
        Some(Box::new("sparsegate::pack"))
    }

    fn source_code(&self) -> Option<&dyn miette::SourceCode> {
        self.snippets_fit().then_some(self as &dyn miette::SourceCode)
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if !self.snippets_fit() {
            return None;
        }
        Some(Box::new(self.diagnostics.iter().map(|d| {
            LabeledSpan::new_with_span(Some(d.message.clone()), SourceSpan::from(d.span))
        })))
    }
}

/// Longest source line shown in a rendered snippet. miette pads the underline to the
/// column with a format width, and Rust refuses a width over `u16::MAX` with a panic: a
/// 2 MB pack holding a million-entry flow list on one line crashed `validate` (exit 101)
/// instead of refusing it. Past this length the problem prints as `file:line:col` text only.
pub const MAX_SNIPPET_LINE: usize = 4096;

impl PackError {
    /// Whether every problem's line is short enough to show as a snippet.
    fn snippets_fit(&self) -> bool {
        let text = self.source_text.as_bytes();
        !text.is_empty()
            && self.diagnostics.iter().all(|d| {
                let at = d.span.0.min(text.len());
                let end = (at + d.span.1).min(text.len());
                let start = text[..at].iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                let stop = text[end..]
                    .iter()
                    .position(|&b| b == b'\n')
                    .map_or(text.len(), |i| end + i);
                text[start..stop]
                    .split(|&b| b == b'\n')
                    .all(|line| line.len() <= MAX_SNIPPET_LINE)
            })
    }
}

/// The pack text, named after its file so rendered snippets say which file they show.
impl miette::SourceCode for PackError {
    fn read_span<'a>(
        &'a self,
        span: &SourceSpan,
        context_lines_before: usize,
        context_lines_after: usize,
    ) -> Result<Box<dyn miette::SpanContents<'a> + 'a>, miette::MietteError> {
        let inner = self
            .source_text
            .read_span(span, context_lines_before, context_lines_after)?;
        Ok(Box::new(miette::MietteSpanContents::new_named(
            self.path.display().to_string(),
            inner.data(),
            *inner.span(),
            inner.line(),
            inner.column(),
            inner.line_count(),
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error_at_end_of(line: String) -> PackError {
        let col = line.len() - 1;
        PackError {
            path: "pack.yaml".into(),
            diagnostics: vec![PackDiagnostic {
                location: Location {
                    file: "pack.yaml".into(),
                    line: 2,
                    col: u32::try_from(col + 1).unwrap(),
                },
                pointer: "/slices/0/workload/checkpoint/tokens".into(),
                message: "too many token counts".into(),
                hint: Some("list at most 16".into()),
                span: ("name: x\n".len() + col, 1),
            }],
            source_text: format!("name: x\n{line}\n"),
        }
    }

    fn rendered(err: &PackError) -> String {
        let mut out = String::new();
        miette::GraphicalReportHandler::new()
            .render_report(&mut out, err)
            .unwrap();
        out
    }

    #[test]
    fn a_problem_past_column_65535_renders_as_text_without_a_snippet() {
        // A million-entry token list fits the 4 MiB pack limit on one line; miette's
        // underline at column 200 000 was a format-width panic.
        let err = error_at_end_of(format!("tokens: [{}1]", "1,".repeat(100_000)));
        let out = rendered(&err);
        assert!(out.contains("pack.yaml:2:200011: too many token counts"), "{out}");
        assert!(!out.contains("1,1,1,1"), "no snippet of the long line: {out}");
    }

    #[test]
    fn a_problem_on_a_short_line_keeps_its_snippet() {
        let out = rendered(&error_at_end_of("tokens: [1, 2]".into()));
        assert!(out.contains("tokens: [1, 2]"), "{out}");
    }
}
