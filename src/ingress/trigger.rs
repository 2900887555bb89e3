//! The machine-checkable rollback trigger (issue 24): `rollback.when`, a boolean expression
//! over the pack's guardrail ids, parsed here once so a typo is refused at validate and the
//! release stage only evaluates it.
//!
//! Grammar (keywords are lowercase; ids are guardrail ids):
//! `expr := and ("or" and)*`, `and := unary ("and" unary)*`,
//! `unary := "not" unary | "(" expr ")" | ID`.

use serde::{Deserialize, Serialize};

/// A parsed `rollback.when`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "op", content = "of", rename_all = "snake_case")]
pub enum TriggerExpr {
    /// True when the guardrail with this id failed.
    Failed(String),
    /// Negation.
    Not(Box<TriggerExpr>),
    /// All of them.
    All(Vec<TriggerExpr>),
    /// Any of them.
    Any(Vec<TriggerExpr>),
}

/// Why a `when` expression does not parse: what was expected at which character.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TriggerSyntaxError {
    /// 1-based character position in the expression.
    pub at: usize,
    /// What went wrong, e.g. "expected a guardrail id, found `)`".
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Id(String),
    And,
    Or,
    Not,
    Open,
    Close,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Id(id) => format!("`{id}`"),
            Token::And => "`and`".into(),
            Token::Or => "`or`".into(),
            Token::Not => "`not`".into(),
            Token::Open => "`(`".into(),
            Token::Close => "`)`".into(),
        }
    }
}

/// Longest expression accepted, in tokens: a trigger is a sentence, not a program.
const MAX_TOKENS: usize = 256;

fn tokens(text: &str) -> Result<Vec<(usize, Token)>, TriggerSyntaxError> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let at = i + 1;
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let token = match c {
            '(' => {
                i += 1;
                Token::Open
            }
            ')' => {
                i += 1;
                Token::Close
            }
            c if c.is_ascii_lowercase() || c.is_ascii_digit() => {
                let start = i;
                while i < chars.len()
                    && (chars[i].is_ascii_lowercase() || chars[i].is_ascii_digit() || "_-".contains(chars[i]))
                {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                match word.as_str() {
                    "and" => Token::And,
                    "or" => Token::Or,
                    "not" => Token::Not,
                    _ => Token::Id(word),
                }
            }
            other => {
                return Err(TriggerSyntaxError {
                    at,
                    message: format!(
                        "unexpected character `{}`; guardrail ids are lowercase letters, digits, `-` and `_`",
                        other.escape_default()
                    ),
                });
            }
        };
        out.push((at, token));
        if out.len() > MAX_TOKENS {
            return Err(TriggerSyntaxError {
                at,
                message: format!("the expression is longer than {MAX_TOKENS} words"),
            });
        }
    }
    Ok(out)
}

struct Parser {
    tokens: Vec<(usize, Token)>,
    next: usize,
    end: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.next).map(|(_, t)| t)
    }

    fn error(&self, expected: &str) -> TriggerSyntaxError {
        match self.tokens.get(self.next) {
            Some((at, t)) => TriggerSyntaxError {
                at: *at,
                message: format!("expected {expected}, found {}", t.describe()),
            },
            None => TriggerSyntaxError {
                at: self.end,
                message: format!("expected {expected}, found the end of the expression"),
            },
        }
    }

    fn list(
        &mut self,
        separator: Token,
        item: fn(&mut Parser, usize) -> Result<TriggerExpr, TriggerSyntaxError>,
        depth: usize,
        make: fn(Vec<TriggerExpr>) -> TriggerExpr,
    ) -> Result<TriggerExpr, TriggerSyntaxError> {
        let mut items = vec![item(self, depth)?];
        while self.peek() == Some(&separator) {
            self.next += 1;
            items.push(item(self, depth)?);
        }
        Ok(if items.len() == 1 {
            items.remove(0)
        } else {
            make(items)
        })
    }

    fn or(&mut self, depth: usize) -> Result<TriggerExpr, TriggerSyntaxError> {
        self.list(Token::Or, Parser::and, depth, TriggerExpr::Any)
    }

    fn and(&mut self, depth: usize) -> Result<TriggerExpr, TriggerSyntaxError> {
        self.list(Token::And, Parser::unary, depth, TriggerExpr::All)
    }

    fn unary(&mut self, depth: usize) -> Result<TriggerExpr, TriggerSyntaxError> {
        if depth > 32 {
            return Err(self.error("at most 32 nested `not` or parentheses"));
        }
        match self.peek().cloned() {
            Some(Token::Not) => {
                self.next += 1;
                Ok(TriggerExpr::Not(Box::new(self.unary(depth + 1)?)))
            }
            Some(Token::Open) => {
                self.next += 1;
                let inner = self.or(depth + 1)?;
                if self.peek() != Some(&Token::Close) {
                    return Err(self.error("`)`"));
                }
                self.next += 1;
                Ok(inner)
            }
            Some(Token::Id(id)) => {
                self.next += 1;
                Ok(TriggerExpr::Failed(id))
            }
            _ => Err(self.error("a guardrail id, `not` or `(`")),
        }
    }
}

impl TriggerExpr {
    /// Parse a `when` expression.
    pub fn parse(text: &str) -> Result<TriggerExpr, TriggerSyntaxError> {
        let mut p = Parser {
            tokens: tokens(text)?,
            next: 0,
            end: text.chars().count() + 1,
        };
        let expr = p.or(0)?;
        if p.next < p.tokens.len() {
            return Err(p.error("`and`, `or` or the end of the expression"));
        }
        Ok(expr)
    }

    /// Every guardrail id the expression names, in order of appearance.
    pub fn ids(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.visit(&mut |id| out.push(id));
        out
    }

    fn visit<'a>(&'a self, f: &mut impl FnMut(&'a str)) {
        match self {
            TriggerExpr::Failed(id) => f(id),
            TriggerExpr::Not(e) => e.visit(f),
            TriggerExpr::All(es) | TriggerExpr::Any(es) => es.iter().for_each(|e| e.visit(f)),
        }
    }

    /// Kleene three-valued evaluation: `failed(id)` gives `Some(true)` (failed),
    /// `Some(false)` (held) or `None` (undecided); `None` propagates only where it could
    /// change the answer (`x or true` is true whatever `x` is).
    pub fn eval(&self, failed: &impl Fn(&str) -> Option<bool>) -> Option<bool> {
        match self {
            TriggerExpr::Failed(id) => failed(id),
            TriggerExpr::Not(e) => e.eval(failed).map(|v| !v),
            TriggerExpr::All(es) => {
                let vs: Vec<Option<bool>> = es.iter().map(|e| e.eval(failed)).collect();
                if vs.contains(&Some(false)) {
                    Some(false)
                } else if vs.contains(&None) {
                    None
                } else {
                    Some(true)
                }
            }
            TriggerExpr::Any(es) => {
                let vs: Vec<Option<bool>> = es.iter().map(|e| e.eval(failed)).collect();
                if vs.contains(&Some(true)) {
                    Some(true)
                } else if vs.contains(&None) {
                    None
                } else {
                    Some(false)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> TriggerExpr {
        TriggerExpr::Failed(s.into())
    }

    #[test]
    fn and_binds_tighter_than_or_and_parentheses_override() {
        assert_eq!(
            TriggerExpr::parse("a or b and not c").unwrap(),
            TriggerExpr::Any(vec![
                id("a"),
                TriggerExpr::All(vec![id("b"), TriggerExpr::Not(Box::new(id("c")))])
            ])
        );
        assert_eq!(
            TriggerExpr::parse("(a or b) and c").unwrap(),
            TriggerExpr::All(vec![TriggerExpr::Any(vec![id("a"), id("b")]), id("c")])
        );
        assert_eq!(
            TriggerExpr::parse(" block-speedup ").unwrap(),
            id("block-speedup")
        );
    }

    #[test]
    fn syntax_errors_say_what_was_expected_where() {
        let e = TriggerExpr::parse("a or").unwrap_err();
        assert_eq!(e.at, 5);
        assert!(e.message.contains("found the end"), "{}", e.message);
        let e = TriggerExpr::parse("a b").unwrap_err();
        assert_eq!(
            (e.at, e.message.as_str()),
            (3, "expected `and`, `or` or the end of the expression, found `b`")
        );
        let e = TriggerExpr::parse("(a or b").unwrap_err();
        assert!(e.message.starts_with("expected `)`"), "{}", e.message);
        let e = TriggerExpr::parse("speed < 1.5").unwrap_err();
        assert_eq!(e.at, 7);
        assert!(TriggerExpr::parse("").is_err());
        assert!(TriggerExpr::parse(&"not ".repeat(40)).is_err());
        assert!(TriggerExpr::parse(&vec!["a"; 300].join(" or ")).is_err());
    }

    #[test]
    fn evaluation_is_three_valued_and_unknown_only_where_it_matters() {
        let truth = |id: &str| match id {
            "failed" => Some(true),
            "held" => Some(false),
            _ => None,
        };
        let eval = |s: &str| TriggerExpr::parse(s).unwrap().eval(&truth);
        assert_eq!(eval("failed"), Some(true));
        assert_eq!(eval("held or open"), None);
        assert_eq!(eval("failed or open"), Some(true));
        assert_eq!(eval("held and open"), Some(false));
        assert_eq!(eval("failed and open"), None);
        assert_eq!(eval("not held"), Some(true));
        assert_eq!(eval("not open"), None);
        assert_eq!(
            TriggerExpr::parse("a or (b and not a)").unwrap().ids(),
            vec!["a", "b", "a"]
        );
    }
}
