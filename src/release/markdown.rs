//! Pack text in Markdown (issue 23: `memo.md` went unescaped into CI job summaries, so a
//! slice named `<img src=x onerror=…>` or a description with `](javascript:…)` rendered
//! as HTML or a link, and a `|` or a newline broke the validation table).
//!
//! Every value a Markdown template prints goes through [`escape_message`] (the
//! environment's formatter, [`markdown_formatter`]): nothing needs a filter, so no value
//! can be forgotten; only strings the code marks safe pass unchanged. Code spans in a
//! value (sparsegate's messages quote names and paths in backticks) are rebuilt with
//! [`code`], and templates put a value in a code span with `| code`, never with their own
//! backticks. Outside code spans the rule is:
//! - `<`, `>` become `&lt;`, `&gt;` (no raw HTML, no autolinks), and `&` before a letter,
//!   digit or `#` becomes `&amp;` (no entity smuggles a character in);
//! - `\`, `` ` ``, `*`, `[`, `]`, `|`, `~` get a backslash (no emphasis, code span, link,
//!   image, table cell or strike-through), and so does `_` at the edge of a word
//!   (`qa_lead` stays as written: an underscore inside a word is never emphasis);
//! - `#` at the start of a value gets a backslash (no heading where a value starts a line);
//! - `@` that would start a mention becomes `&#64;` (`owner@example.com` stays);
//! - newlines and other control characters become spaces (a value stays on its line).
//!
//! Ordinary names, paths, emails and numbers contain none of these, so they print exactly
//! as before (the memo snapshots did not change). Inside a template's code span an escape
//! shows literally (`` `a\|b` ``), which only hostile text contains; it stays inert.

use minijinja::{AutoEscape, Error, ErrorKind, Output, State, Value};

/// The auto-escape mode of Markdown templates (`*.md`).
pub const MARKDOWN: &str = "markdown";

/// Auto-escaping by template name: HTML as minijinja does it, Markdown for `*.md`.
pub fn auto_escape(name: &str) -> AutoEscape {
    let base = name.strip_suffix(".j2").unwrap_or(name);
    if base.ends_with(".md") {
        AutoEscape::Custom(MARKDOWN.into())
    } else {
        minijinja::default_auto_escape_callback(name)
    }
}

/// The formatter: Markdown templates print every value through [`escape_markdown`]; the
/// rest as minijinja's default does. Undefined values are errors (strict, as the
/// environment is configured: a custom formatter has to say so itself).
pub fn markdown_formatter(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    if value.is_undefined() && state.undefined_behavior() == minijinja::UndefinedBehavior::Strict {
        return Err(Error::new(ErrorKind::UndefinedError, "undefined value printed"));
    }
    match state.auto_escape() {
        AutoEscape::Custom(mode) if mode == MARKDOWN => {
            let text = if value.is_safe() {
                return out
                    .write_str(value.as_str().unwrap_or_default())
                    .map_err(Error::from);
            } else if value.is_none() || value.is_undefined() {
                String::new()
            } else {
                value.to_string()
            };
            out.write_str(&escape_message(&text)).map_err(Error::from)
        }
        _ => minijinja::escape_formatter(out, state, value),
    }
}

/// A value as Markdown: the code spans sparsegate's own messages use (`` `dur` ``, a
/// quoted path) stay code spans, rebuilt by [`code`]; everything between them is
/// [`escape_markdown`]ed. A value with an odd number of backticks has no spans to keep and
/// is escaped whole. Either way, no byte of the value is markup.
pub fn escape_message(text: &str) -> String {
    let parts: Vec<&str> = text.split('`').collect();
    if parts.len().is_multiple_of(2) {
        return escape_markdown(text);
    }
    parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            if i.is_multiple_of(2) {
                escape_markdown(part)
            } else {
                code_span(part).as_str().unwrap_or_default().to_owned()
            }
        })
        .collect()
}

/// The `code` filter: `value` as one inline code span, whatever it holds. The fence is one
/// backtick longer than the longest run inside (padded with a space where the value starts
/// or ends with one), `|` is escaped (GFM splits table cells even inside code spans), and
/// newlines and control characters become spaces. Templates use it instead of writing
/// backticks around a value, which a value holding a backtick could close early.
pub fn code(value: &Value) -> Value {
    if value.is_none() || value.is_undefined() {
        return code_span("");
    }
    match value.as_str() {
        Some(text) => code_span(text),
        None => code_span(&value.to_string()),
    }
}

fn code_span(value: &str) -> Value {
    let content: String = value
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .replace('|', "\\|");
    let mut longest = 0;
    let mut run = 0;
    for c in content.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = if content.starts_with('`') || content.ends_with('`') {
        " "
    } else {
        ""
    };
    Value::from_safe_string(format!("{fence}{pad}{content}{pad}{fence}"))
}

/// The `holder` filter: a sign-off holder `Name <email>` with the name escaped and the
/// email kept as an autolink when it is a plain address (letters, digits, `.`, `_`, `%`,
/// `+`, `-`, one `@`); anything else escaped whole.
pub fn holder(value: &str) -> Value {
    let plain_email = |e: &str| {
        e.matches('@').count() == 1
            && !e.starts_with('@')
            && !e.ends_with('@')
            && e.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._%+-@".contains(c))
    };
    match value.strip_suffix('>').and_then(|v| v.rsplit_once(" <")) {
        Some((name, email)) if plain_email(email) => {
            Value::from_safe_string(format!("{} <{email}>", escape_markdown(name)))
        }
        _ => Value::from_safe_string(escape_markdown(value)),
    }
}

/// `text` as inert Markdown text (the rule is in the module documentation).
pub fn escape_markdown(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let word = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric());
    for (i, &c) in chars.iter().enumerate() {
        let prev = i.checked_sub(1).and_then(|j| chars.get(j));
        let next = chars.get(i + 1);
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' if next.is_some_and(|n| n.is_alphanumeric() || *n == '#') => out.push_str("&amp;"),
            '\\' | '`' | '*' | '[' | ']' | '|' | '~' => {
                out.push('\\');
                out.push(c);
            }
            '_' if !(word(prev) && word(next)) => out.push_str("\\_"),
            '#' if i == 0 => out.push_str("\\#"),
            '@' if !word(prev) && word(next) => out.push_str("&#64;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_text_is_unchanged() {
        for s in [
            "tiny",
            "qa_lead",
            "owner@example.com",
            "scenarios/examples/pack.yaml",
            "sha256:0123abcd",
            "Test Owner",
            "2:4",
            "0.0123",
            "p95 latency regressed by more than 5% (x1.07)",
        ] {
            assert_eq!(escape_markdown(s), s);
        }
    }

    #[test]
    fn markup_is_made_inert() {
        assert_eq!(
            escape_markdown("<script>alert(1)</script>"),
            "&lt;script&gt;alert(1)&lt;/script&gt;"
        );
        assert_eq!(
            escape_markdown("[click](javascript:alert(1))"),
            "\\[click\\](javascript:alert(1))"
        );
        assert_eq!(escape_markdown("a | b\nc"), "a \\| b c");
        assert_eq!(escape_markdown("`x` *y* _z_"), "\\`x\\` \\*y\\* \\_z\\_");
        assert_eq!(escape_markdown("# title"), "\\# title");
        assert_eq!(escape_markdown("hi @team"), "hi &#64;team");
        assert_eq!(escape_markdown("&lt;b&gt;"), "&amp;lt;b&amp;gt;");
        assert_eq!(
            holder("Ada <ada@example.com>").as_str(),
            Some("Ada <ada@example.com>")
        );
        assert_eq!(
            holder("<b>Eve</b> <x@y><script>").as_str(),
            Some("&lt;b&gt;Eve&lt;/b&gt; &lt;x@y&gt;&lt;script&gt;")
        );
    }
}
