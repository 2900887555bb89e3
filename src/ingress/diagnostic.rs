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
        if self.source_text.is_empty() {
            None
        } else {
            Some(self)
        }
    }

    fn labels(&self) -> Option<Box<dyn Iterator<Item = LabeledSpan> + '_>> {
        if self.source_text.is_empty() {
            return None;
        }
        Some(Box::new(self.diagnostics.iter().map(|d| {
            LabeledSpan::new_with_span(Some(d.message.clone()), SourceSpan::from(d.span))
        })))
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
