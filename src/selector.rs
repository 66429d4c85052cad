//! A parser for the Kubernetes label-selector string syntax into [`kube::core::Selector`].
//!
//! `kube-core` can build, print and evaluate selectors but cannot read the string form that
//! users type (`app=web,tier in (fe,be),!canary`). This module fills that gap, following the
//! grammar of apimachinery's `pkg/labels/selector.go` (`Parse`): comma-joined requirements, each
//! `key`, `!key`, `key=value`, `key==value`, `key!=value`, `key in (v1,v2)` or
//! `key notin (v1,v2)`. The numeric operators `gt`/`lt` (`key>1`) are rejected by
//! [`parse_label_selector`] because [`kube::core::Expression`] cannot represent them; the fake
//! API server, which must accept what kube-apiserver accepts, reads them with its own
//! matcher.

use std::collections::BTreeSet;

use kube::core::{Expression, Selector, SelectorExt};

/// Why a label-selector string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector {selector:?}: {reason}")]
pub struct SelectorParseError {
    /// The selector string as given.
    pub selector: String,
    /// What is wrong with it.
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Eq,
    DoubleEq,
    NotEq,
    Bang,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
}

/// Characters that end an identifier, as in apimachinery's lexer (`isSpecialSymbol`,
/// `isWhitespace`).
fn is_delimiter(c: char) -> bool {
    c.is_whitespace() || matches!(c, '=' | '!' | '(' | ')' | ',' | '>' | '<')
}

fn lex(input: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut chars = input.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        chars.next();
        let token = match c {
            '=' if chars.peek() == Some(&'=') => {
                chars.next();
                Token::DoubleEq
            }
            '=' => Token::Eq,
            '!' if chars.peek() == Some(&'=') => {
                chars.next();
                Token::NotEq
            }
            '!' => Token::Bang,
            '(' => Token::Open,
            ')' => Token::Close,
            ',' => Token::Comma,
            '>' => Token::Gt,
            '<' => Token::Lt,
            _ => {
                let mut word = String::from(c);
                while let Some(&n) = chars.peek() {
                    if is_delimiter(n) {
                        break;
                    }
                    word.push(n);
                    chars.next();
                }
                // `in` and `notin` are operators only where an operator is due: apimachinery
                // reads them as identifiers where a key or a value is (`in=notin` is valid).
                Token::Ident(word)
            }
        };
        tokens.push(token);
    }
    tokens
}

/// Label keys are an optional DNS-subdomain prefix and a `/`, then a name of at most 63
/// characters (apimachinery `validation.IsQualifiedName`).
fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        // A DNS-1123 subdomain: dot-separated labels of lowercase alphanumerics and `-`, each
        // starting and ending with an alphanumeric.
        let dns_label = |l: &str| {
            let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
            l.chars().all(|c| alnum(c) || c == '-')
                && l.chars().next().is_some_and(alnum)
                && l.chars().last().is_some_and(alnum)
        };
        let ok = !prefix.is_empty() && prefix.len() <= 253 && prefix.split('.').all(dns_label);
        if !ok {
            return Err(format!("invalid label key prefix {prefix:?}"));
        }
    }
    if name.is_empty() || name.len() > 63 || !is_label_chars(name) {
        return Err(format!("invalid label key {key:?}"));
    }
    Ok(())
}

/// Label values: empty, or at most 63 alphanumerics, `-`, `_`, `.`, starting and ending with an
/// alphanumeric (apimachinery `validation.IsValidLabelValue`).
fn validate_value(value: &str) -> Result<(), String> {
    if value.is_empty() || (value.len() <= 63 && is_label_chars(value)) {
        Ok(())
    } else {
        Err(format!("invalid label value {value:?}"))
    }
}

fn is_label_chars(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
        && s.chars().next().is_some_and(alnum)
        && s.chars().last().is_some_and(alnum)
}

struct Parser {
    tokens: Vec<Token>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Token> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let negated = if self.peek() == Some(&Token::Bang) {
            self.next();
            true
        } else {
            false
        };
        let key = match self.next() {
            Some(Token::Ident(k)) => k,
            other => return Err(format!("expected a label key, found {other:?}")),
        };
        validate_key(&key)?;
        if negated {
            return match self.peek() {
                None | Some(Token::Comma) => Ok(Expression::DoesNotExist(key).into()),
                Some(t) => Err(format!("unexpected {t:?} after !{key}")),
            };
        }
        let expression = match self.next() {
            None => Expression::Exists(key),
            Some(Token::Comma) => {
                // Put the comma back: the caller consumes separators.
                self.pos -= 1;
                Expression::Exists(key)
            }
            Some(Token::Eq | Token::DoubleEq) => Expression::Equal(key, self.value()?),
            Some(Token::NotEq) => Expression::NotEqual(key, self.value()?),
            Some(Token::Ident(op)) if op == "in" => Expression::In(key, self.set()?),
            Some(Token::Ident(op)) if op == "notin" => Expression::NotIn(key, self.set()?),
            Some(op @ (Token::Gt | Token::Lt)) => {
                // apimachinery `NewRequirement`: one value, a valid label value that parses as
                // an int64.
                let value = self.value()?;
                let n = value.parse::<i64>().map_err(|_| {
                    format!("for 'Gt', 'Lt' operators, the value must be an integer: {value:?}")
                })?;
                return Ok(Requirement::Numeric {
                    key,
                    greater: op == Token::Gt,
                    than: n,
                });
            }
            Some(t) => return Err(format!("unexpected {t:?} after key {key:?}")),
        };
        Ok(expression.into())
    }

    /// A single value; an empty value (`a=`) is allowed, as in apimachinery.
    fn value(&mut self) -> Result<String, String> {
        match self.peek() {
            Some(Token::Ident(_)) => match self.next() {
                Some(Token::Ident(v)) => {
                    validate_value(&v)?;
                    Ok(v)
                }
                _ => unreachable!("peeked an identifier"),
            },
            None | Some(Token::Comma) => Ok(String::new()),
            Some(t) => Err(format!("expected a value, found {t:?}")),
        }
    }

    /// A parenthesised set of values, read as apimachinery's `parseValues` and
    /// `parseIdentifiersList` read it: `()` is the set of the empty value, and so is a missing
    /// value next to a comma (`(,a)`, `(a,)`, `(a,,b)`), so a set is never empty.
    fn set(&mut self) -> Result<BTreeSet<String>, String> {
        if self.next() != Some(Token::Open) {
            return Err("expected '(' after set operator".into());
        }
        let mut values = BTreeSet::new();
        if self.peek() == Some(&Token::Close) {
            self.next();
            values.insert(String::new());
            return Ok(values);
        }
        // Whether a value (possibly the empty one) was read since the last comma.
        let mut have_value = false;
        loop {
            match self.next() {
                Some(Token::Ident(v)) if !have_value => {
                    validate_value(&v)?;
                    values.insert(v);
                    have_value = true;
                }
                Some(Token::Comma) => {
                    if !have_value {
                        values.insert(String::new());
                    }
                    have_value = false;
                }
                Some(Token::Close) => {
                    if !have_value {
                        values.insert(String::new());
                    }
                    return Ok(values);
                }
                t => return Err(format!("expected a value, ',' or ')' in set, found {t:?}")),
            }
        }
    }
}

/// Parses a label selector in the Kubernetes string syntax.
///
/// The empty (or all-whitespace) string selects everything.
///
/// ```
/// use kube::core::SelectorExt;
/// use std::collections::BTreeMap;
///
/// let sel = kube_informer::parse_label_selector("app=web, tier in (fe,be), !canary")?;
/// let labels = BTreeMap::from([
///     ("app".to_string(), "web".to_string()),
///     ("tier".to_string(), "fe".to_string()),
/// ]);
/// assert!(sel.matches(&labels));
/// assert!(kube_informer::parse_label_selector("a in (x").is_err());
/// # Ok::<(), kube_informer::selector::SelectorParseError>(())
/// ```
///
/// # Errors
///
/// [`SelectorParseError`] for a syntax error, an invalid key or value, or a numeric operator
/// (`>`/`<`), which [`Expression`] cannot represent. As in apimachinery, `()` is the set of the
/// empty value, not an empty set.
pub fn parse_label_selector(input: &str) -> Result<Selector, SelectorParseError> {
    let mut exprs = Vec::new();
    for requirement in parse_requirements(input)? {
        match requirement {
            Requirement::Expression(e) => exprs.push(e),
            Requirement::Numeric { key, .. } => {
                return Err(SelectorParseError {
                    selector: input.to_string(),
                    reason: format!(
                        "numeric comparison on {key:?} is not supported by kube::core::Expression"
                    ),
                });
            }
        }
    }
    Ok(exprs.into_iter().collect())
}

fn parse_requirements(input: &str) -> Result<Vec<Requirement>, SelectorParseError> {
    let fail = |reason: String| SelectorParseError {
        selector: input.to_string(),
        reason,
    };
    let tokens = lex(input);
    let mut parser = Parser { tokens, pos: 0 };
    let mut requirements = Vec::new();
    if parser.peek().is_none() {
        return Ok(requirements);
    }
    loop {
        requirements.push(parser.requirement().map_err(fail)?);
        match parser.next() {
            None => break,
            Some(Token::Comma) if parser.peek().is_some() => continue,
            Some(t) => return Err(fail(format!("unexpected {t:?} after requirement"))),
        }
    }
    Ok(requirements)
}

/// One requirement of a label selector.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Requirement {
    Expression(Expression),
    /// `key>than` (`greater`) or `key<than`.
    Numeric {
        key: String,
        greater: bool,
        than: i64,
    },
}

impl From<Expression> for Requirement {
    fn from(e: Expression) -> Self {
        Self::Expression(e)
    }
}

/// A label selector with every operator apimachinery's `labels.Parse` reads, the numeric `>`
/// and `<` included: what the fake API server filters by.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LabelRequirements(Vec<Requirement>);

#[cfg_attr(not(feature = "testing"), allow(dead_code))]
impl LabelRequirements {
    /// Parses a selector string as [`parse_label_selector`] does, and `key>n`, `key<n` too.
    pub(crate) fn parse(input: &str) -> Result<Self, SelectorParseError> {
        parse_requirements(input).map(Self)
    }

    pub(crate) fn selects_all(&self) -> bool {
        self.0.is_empty()
    }

    /// As apimachinery's `Requirement.Matches`: a numeric requirement needs the label, holding
    /// an integer, strictly above (or below) the bound.
    pub(crate) fn matches(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        self.0.iter().all(|r| match r {
            Requirement::Expression(e) => e.matches(labels),
            Requirement::Numeric { key, greater, than } => labels
                .get(key)
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| if *greater { v > *than } else { v < *than }),
        })
    }
}

/// A label or field selector as the API server reads it: a string in its syntax
/// (`"app=web,tier!=db"`), or kube's typed [`Selector`] or [`Expression`], printed in that syntax.
///
/// What [`FactoryConfig::labels`](crate::FactoryConfig::labels) and
/// [`ApiListerWatcher::labels`](crate::ApiListerWatcher::labels) (and their `fields`) take.
/// Field selectors support only `=`, `==` and `!=`: a typed selector with set operators is sent
/// as written and refused by the server.
///
/// ```
/// use kube::core::{Expression, Selector, SelectorExt};
/// use kube_informer::FactoryConfig;
///
/// let typed: Selector = Expression::Equal("app".into(), "web".into()).into();
/// let a = FactoryConfig::default().labels(typed);
/// let b = FactoryConfig::default().labels("app=web");
/// assert_eq!(a.label_selector, b.label_selector);
/// ```
pub trait SelectorArg {
    /// The selector in the API server's string syntax.
    fn into_selector_string(self) -> String;
}

impl SelectorArg for &str {
    fn into_selector_string(self) -> String {
        self.to_owned()
    }
}

impl SelectorArg for String {
    fn into_selector_string(self) -> String {
        self
    }
}

impl SelectorArg for &String {
    fn into_selector_string(self) -> String {
        self.clone()
    }
}

impl SelectorArg for Selector {
    fn into_selector_string(self) -> String {
        self.to_string()
    }
}

impl SelectorArg for &Selector {
    fn into_selector_string(self) -> String {
        self.to_string()
    }
}

impl SelectorArg for Expression {
    fn into_selector_string(self) -> String {
        self.to_string()
    }
}

impl SelectorArg for &Expression {
    fn into_selector_string(self) -> String {
        self.to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn typed_selectors_print_as_the_api_server_reads_them() {
        use super::SelectorArg;
        let sel: Selector = [
            Expression::Equal("app".into(), "web".into()),
            Expression::NotIn("tier".into(), ["db".to_owned()].into()),
        ]
        .into_iter()
        .collect();
        let s = (&sel).into_selector_string();
        assert_eq!(parse_label_selector(&s).unwrap(), sel);
        assert_eq!(
            Expression::Exists("canary".into()).into_selector_string(),
            "canary"
        );
        assert_eq!(Selector::default().into_selector_string(), "");
    }

    use super::*;
    use kube::core::SelectorExt;
    use std::collections::BTreeMap;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn set(v: &[&str]) -> BTreeSet<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn empty_selector_selects_everything() {
        assert!(parse_label_selector("").unwrap().selects_all());
        assert!(parse_label_selector("   ").unwrap().selects_all());
    }

    #[test]
    fn every_operator_parses_to_its_expression() {
        let sel =
            parse_label_selector("a=b,c==d,e!=f,g in (x, y),h notin (z),i,!j,example.com/k=v")
                .unwrap();
        let expected: Selector = vec![
            Expression::Equal("a".into(), "b".into()),
            Expression::Equal("c".into(), "d".into()),
            Expression::NotEqual("e".into(), "f".into()),
            Expression::In("g".into(), set(&["x", "y"])),
            Expression::NotIn("h".into(), set(&["z"])),
            Expression::Exists("i".into()),
            Expression::DoesNotExist("j".into()),
            Expression::Equal("example.com/k".into(), "v".into()),
        ]
        .into_iter()
        .collect();
        assert_eq!(sel, expected);
    }

    #[test]
    fn empty_value_is_allowed_like_apimachinery() {
        let sel = parse_label_selector("a=").unwrap();
        assert_eq!(
            sel,
            Selector::from(Expression::Equal("a".into(), String::new()))
        );
    }

    #[test]
    fn parsed_selector_matches_like_the_api_server() {
        let sel = parse_label_selector("app=web,tier notin (db),!canary").unwrap();
        assert!(sel.matches(&labels(&[("app", "web")])));
        assert!(sel.matches(&labels(&[("app", "web"), ("tier", "fe")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("tier", "db")])));
        assert!(!sel.matches(&labels(&[("app", "web"), ("canary", "")])));
        assert!(!sel.matches(&labels(&[("app", "api")])));
    }

    #[test]
    fn display_round_trips() {
        let text = "a=b,c!=d,e in (x,y),f notin (z),g,!h";
        assert_eq!(parse_label_selector(text).unwrap().to_string(), text);
    }

    #[test]
    fn malformed_selectors_are_errors_not_panics() {
        for bad in [
            "a in (x",
            "a in (x y)",
            "a in (x)(",
            "-x/k=v",
            "x./k=v",
            "x.-y/k=v",
            "a in x",
            "a=b,",
            ",a",
            "a=(b)",
            "!a=b",
            "a>1",
            "a<1",
            "=b",
            "a b",
            "a=b c",
            "-a=b",
            "a=-b",
            "a==",
            "a,,b",
            "a notin",
            "UPPER/x=y",
            "a=b=c",
            "(",
            ")",
            "!",
        ] {
            let r = parse_label_selector(bad);
            if bad == "a==" {
                // `a==` is `a` equal to the empty value, valid in apimachinery too.
                assert!(r.is_ok(), "{bad:?} should parse");
                continue;
            }
            assert!(r.is_err(), "{bad:?} should be rejected, got {r:?}");
        }
    }

    #[test]
    fn numeric_requirements_parse_and_match_only_where_the_fake_server_reads_them() {
        let r = LabelRequirements::parse("tier>5,!canary").unwrap();
        assert!(r.matches(&labels(&[("tier", "10")])));
        assert!(!r.matches(&labels(&[("tier", "5")])));
        assert!(!r.matches(&labels(&[("tier", "10"), ("canary", "")])));
        assert!(!r.matches(&labels(&[("tier", "ten")])));
        assert!(!r.matches(&labels(&[])));
        let r = LabelRequirements::parse("tier<5").unwrap();
        assert!(r.matches(&labels(&[("tier", "4")])));
        assert!(!r.matches(&labels(&[("tier", "5")])));
        // Same grammar otherwise; an integer value is required.
        for bad in [
            "tier>", "tier>x", "tier>-1", "tier>1.5", "tier>(1)", "a in (x",
        ] {
            assert!(LabelRequirements::parse(bad).is_err(), "{bad:?}");
        }
        assert!(LabelRequirements::parse("").unwrap().selects_all());
        // The public parser still refuses them: `Expression` has no numeric form.
        let e = parse_label_selector("tier>5").unwrap_err();
        assert!(e.reason.contains("numeric"), "{e}");
    }

    #[test]
    fn error_names_the_selector() {
        let err = parse_label_selector("a in (x").unwrap_err();
        assert_eq!(err.selector, "a in (x");
        assert!(err.to_string().contains("in set"), "{err}");
    }

    /// apimachinery reads `in` and `notin` as identifiers where a key or a value is due, and
    /// a missing value in a set as the empty value (its own doc's example:
    /// `x in (foo,,baz),y,z notin ()`).
    #[test]
    fn keywords_as_keys_and_values_and_empty_values_in_sets_parse_as_apimachinery() {
        let cases: [(&str, Vec<Expression>); 7] = [
            ("env=in", vec![Expression::Equal("env".into(), "in".into())]),
            (
                "in=notin",
                vec![Expression::Equal("in".into(), "notin".into())],
            ),
            (
                "a in (in,notin)",
                vec![Expression::In("a".into(), set(&["in", "notin"]))],
            ),
            ("a in ()", vec![Expression::In("a".into(), set(&[""]))]),
            (
                "a notin (,b)",
                vec![Expression::NotIn("a".into(), set(&["", "b"]))],
            ),
            (
                "a in (b,)",
                vec![Expression::In("a".into(), set(&["", "b"]))],
            ),
            (
                "x in (foo,,baz),y,z notin ()",
                vec![
                    Expression::In("x".into(), set(&["", "baz", "foo"])),
                    Expression::Exists("y".into()),
                    Expression::NotIn("z".into(), set(&[""])),
                ],
            ),
        ];
        for (text, want) in cases {
            let want: Selector = want.into_iter().collect();
            assert_eq!(parse_label_selector(text), Ok(want), "{text:?}");
        }
        // What kube prints, this reads back.
        let typed: Selector = Expression::Equal("env".into(), "in".into()).into();
        assert_eq!(parse_label_selector(&typed.to_string()), Ok(typed));
        assert!(parse_label_selector("example.com/k=v").is_ok());
    }
}
