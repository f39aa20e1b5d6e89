//! Code normalised for comparison, so that a copy survives no rewording: docstrings and
//! comments go, each user-defined name becomes `v0`, `v1`, ... (`a0`, ... for attributes
//! of `self`) in order of first appearance, and layout becomes `NL`/`INDENT`/`DEDENT`
//! tokens. What carries meaning stays: keywords, builtins, imported modules and their
//! aliases (`torch`, `tl`, `F`, ...), attribute and method names (`torch.sigmoid`,
//! `x.sum`), keyword arguments of calls into libraries (`dim=`, `mask=`), numbers and
//! short string literals. So `relu` and `leaky_relu`, or a sum over dim 1 and over dim 0,
//! stay apart, while a kernel whose variables were renamed is the same kernel.
//!
//! A small Python tokenizer of our own (no parser): strings with prefixes and triple
//! quotes, f-strings roughly (a quote inside `{...}` does not end them), comments, line
//! continuations, and implicit joining inside brackets. It never fails: broken code
//! still gives tokens.

use std::collections::{HashMap, HashSet};

use crate::minhash::{self, Shingles};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Name,
    Number,
    Str,
    Op,
}

#[derive(Debug, Clone, Copy)]
struct Tok<'a> {
    kind: Kind,
    text: &'a str,
}

/// One logical line: its indentation (in columns) and its tokens.
#[derive(Debug)]
struct Line<'a> {
    indent: usize,
    toks: Vec<Tok<'a>>,
}

const KEYWORDS: &[&str] = &[
    "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue",
    "def", "del", "elif", "else", "except", "finally", "for", "from", "global", "if", "import",
    "in", "is", "lambda", "nonlocal", "not", "or", "pass", "raise", "return", "try", "while",
    "with", "yield", "match", "case",
];

const BUILTINS: &[&str] = &[
    "abs",
    "all",
    "any",
    "bool",
    "bytes",
    "callable",
    "chr",
    "dict",
    "divmod",
    "enumerate",
    "filter",
    "float",
    "format",
    "frozenset",
    "getattr",
    "hasattr",
    "hash",
    "id",
    "int",
    "isinstance",
    "issubclass",
    "iter",
    "len",
    "list",
    "map",
    "max",
    "min",
    "next",
    "object",
    "ord",
    "pow",
    "print",
    "range",
    "repr",
    "reversed",
    "round",
    "set",
    "setattr",
    "slice",
    "sorted",
    "staticmethod",
    "classmethod",
    "property",
    "str",
    "sum",
    "super",
    "tuple",
    "type",
    "vars",
    "zip",
    "Exception",
    "ValueError",
    "TypeError",
    "RuntimeError",
    "NotImplementedError",
    "AssertionError",
    "KeyError",
    "IndexError",
    "__name__",
];

/// Names with a fixed meaning in a problem or a candidate, kept even when not imported:
/// the usual module aliases and the KernelBench protocol.
const KNOWN: &[&str] = &[
    "self",
    "cls",
    "torch",
    "nn",
    "F",
    "functional",
    "triton",
    "tl",
    "math",
    "np",
    "numpy",
    "libdevice",
    "forward",
    "get_inputs",
    "get_init_inputs",
];

/// Splits source into logical lines of tokens, without comments or continuations.
fn lex(src: &str) -> Vec<Line<'_>> {
    let b = src.as_bytes();
    let mut lines = Vec::new();
    let mut cur = Line { indent: 0, toks: Vec::new() };
    let (mut i, mut depth, mut at_start) = (0usize, 0usize, true);
    while i < b.len() {
        let c = b[i];
        if at_start {
            let (cols, next) = indentation(b, i);
            cur.indent = cols;
            i = next;
            at_start = false;
            continue;
        }
        match c {
            b'\n' => {
                i += 1;
                if depth == 0 {
                    if !cur.toks.is_empty() {
                        lines.push(std::mem::replace(&mut cur, Line { indent: 0, toks: vec![] }));
                    }
                    at_start = true;
                }
            }
            b'#' => i = src[i..].find('\n').map_or(b.len(), |n| i + n),
            b'\\' if b.get(i + 1) == Some(&b'\n') => i += 2,
            b'\\' if b.get(i + 1) == Some(&b'\r') => {
                i += if b.get(i + 2) == Some(&b'\n') { 3 } else { 2 }
            }
            _ if c.is_ascii_whitespace() => i += 1,
            _ => {
                let (kind, end) = token_at(src, i);
                let text = &src[i..end];
                if kind == Kind::Op {
                    match text {
                        "(" | "[" | "{" => depth += 1,
                        ")" | "]" | "}" => depth = depth.saturating_sub(1),
                        _ => {}
                    }
                }
                cur.toks.push(Tok { kind, text });
                i = end.max(i + 1);
            }
        }
    }
    if !cur.toks.is_empty() {
        lines.push(cur);
    }
    lines
}

/// Columns of leading whitespace from `i` (a tab counts as reaching the next multiple of
/// 8), and where the line's content starts.
fn indentation(b: &[u8], mut i: usize) -> (usize, usize) {
    let mut cols = 0;
    while i < b.len() {
        match b[i] {
            b' ' => cols += 1,
            b'\t' => cols = (cols / 8 + 1) * 8,
            b'\x0c' | b'\r' => {}
            _ => break,
        }
        i += 1;
    }
    (cols, i)
}

const OPS3: &[&str] = &["**=", "//=", ">>=", "<<=", "..."];
const OPS2: &[&str] = &[
    "->", ":=", "**", "//", "==", "!=", "<=", ">=", "<<", ">>", "+=", "-=", "*=", "/=", "%=", "&=",
    "|=", "^=", "@=",
];

/// The token starting at byte `i` (not whitespace, not a comment): its kind and end.
fn token_at(src: &str, i: usize) -> (Kind, usize) {
    let b = src.as_bytes();
    let c = b[i];
    let rest = &src[i..];
    if let Some(q) = string_start(rest) {
        return (Kind::Str, i + string_len(rest, q));
    }
    if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit)) {
        return (Kind::Number, i + number_len(rest));
    }
    let is_ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    if rest.chars().next().is_some_and(is_ident) {
        let len = rest.find(|ch: char| !is_ident(ch)).unwrap_or(rest.len());
        return (Kind::Name, i + len);
    }
    for ops in [OPS3, OPS2] {
        if let Some(op) = ops.iter().find(|op| rest.starts_with(**op)) {
            return (Kind::Op, i + op.len());
        }
    }
    (Kind::Op, i + rest.chars().next().map_or(1, char::len_utf8))
}

/// Where a string literal starts here: the length of its prefix (`r`, `f`, `rb`, ...).
fn string_start(rest: &str) -> Option<usize> {
    let prefix = rest.find(['\'', '"'])?;
    let p = &rest[..prefix];
    let ok = p.len() <= 2 && p.chars().all(|c| "rRbBuUfF".contains(c));
    ok.then_some(prefix)
}

/// Bytes of the string literal whose prefix is `prefix` bytes long. Escapes never end
/// it; an unterminated one-line string ends at the line's end, a triple-quoted one at
/// the end of the source. In an f-string, quotes inside `{...}` do not end it.
fn string_len(rest: &str, prefix: usize) -> usize {
    let b = rest.as_bytes();
    let q = b[prefix];
    let triple = b.len() >= prefix + 3 && b[prefix + 1] == q && b[prefix + 2] == q;
    let fmt = rest[..prefix].contains(['f', 'F']);
    let mut i = prefix + if triple { 3 } else { 1 };
    let mut braces = 0usize;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'\n' if !triple => return i,
            b'{' if fmt => {
                if b.get(i + 1) == Some(&b'{') && braces == 0 {
                    i += 1;
                } else {
                    braces += 1;
                }
            }
            b'}' if fmt && braces > 0 => braces -= 1,
            c if c == q && braces == 0 => {
                if !triple {
                    return i + 1;
                }
                if b.get(i + 1) == Some(&q) && b.get(i + 2) == Some(&q) {
                    return i + 3;
                }
            }
            _ => {}
        }
        i += 1;
    }
    b.len()
}

/// Bytes of a numeric literal: digits, `_`, `.`, letters (hex, `e`, `j`), and an
/// exponent's sign.
fn number_len(rest: &str) -> usize {
    let b = rest.as_bytes();
    let hex = matches!(b.get(..2), Some(b"0x" | b"0X"));
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let sign = (c == b'+' || c == b'-') && !hex && i > 0 && matches!(b[i - 1], b'e' | b'E');
        if !(c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || sign) {
            break;
        }
        i += 1;
    }
    i
}

/// A bare string statement (a docstring, or a string used as a comment) does nothing.
fn is_docstring(line: &Line<'_>) -> bool {
    line.toks.iter().all(|t| t.kind == Kind::Str)
}

/// A string literal as compared: short, single-word contents are kept (`'mean'`,
/// `'bij,bjk->bik'`); prose, f-strings and triple-quoted text become `STR`.
fn string_token(text: &str) -> String {
    let Some(prefix) = string_start(text) else {
        return "STR".into();
    };
    let body = &text[prefix..];
    let fmt = text[..prefix].contains(['f', 'F']);
    let q = if body.len() >= 6 && (body.starts_with("'''") || body.starts_with("\"\"\"")) {
        3
    } else {
        1
    };
    let inner = body.get(q..body.len().saturating_sub(q)).unwrap_or("");
    if fmt || q == 3 || inner.len() > 32 || inner.chars().any(char::is_whitespace) {
        return "STR".into();
    }
    format!("'{inner}'")
}

/// The numeric literal as compared: `1_000` and `1000`, `1E3` and `1e3` alike.
fn number_token(text: &str) -> String {
    text.replace('_', "").to_ascii_lowercase()
}

/// What an open bracket is: a call into code of this file (its keyword arguments are
/// this file's names), a call into a library (its keyword arguments carry meaning), a
/// `def`'s parameters, or anything else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bracket {
    OwnCall,
    LibraryCall,
    Params,
    Other,
}

/// Canonical names, in order of first appearance.
#[derive(Default)]
struct Names<'a> {
    keep: HashSet<&'a str>,
    vars: HashMap<&'a str, usize>,
    attrs: HashMap<&'a str, usize>,
}

impl<'a> Names<'a> {
    fn var(&mut self, name: &'a str) -> String {
        let n = self.vars.len();
        format!("v{}", self.vars.entry(name).or_insert(n))
    }

    fn attr(&mut self, name: &'a str) -> String {
        let n = self.attrs.len();
        format!("a{}", self.attrs.entry(name).or_insert(n))
    }
}

/// Names that are not this file's own: keywords, builtins, the usual aliases, and every
/// name of an `import` line (modules, what is imported from them, their aliases).
fn kept_names<'a>(lines: &[Line<'a>]) -> HashSet<&'a str> {
    let mut keep: HashSet<&str> = KEYWORDS.iter().chain(BUILTINS).chain(KNOWN).copied().collect();
    for line in lines {
        if matches!(line.toks.first().map(|t| t.text), Some("import" | "from")) {
            keep.extend(line.toks.iter().filter(|t| t.kind == Kind::Name).map(|t| t.text));
        }
    }
    keep
}

/// What a logical line is to a problem file: sizes (how big the inputs are) are told
/// apart from what the problem computes, since the suite's own variants change sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Code,
    Import,
    /// The body of `get_inputs`: input shapes and distributions.
    Inputs,
    /// A module constant `NAME = <number>` that `get_inputs` uses: a size.
    Size,
}

/// The role of each line (see [`Role`]).
fn roles(lines: &[Line<'_>]) -> Vec<Role> {
    let mut in_inputs = Vec::with_capacity(lines.len());
    let mut block: Option<&str> = None;
    let mut used: HashSet<&str> = HashSet::new();
    for line in lines {
        if line.indent == 0 {
            block = match line.toks.as_slice() {
                [def, name, ..] if def.text == "def" => Some(name.text),
                [at, ..] if at.text == "@" => block,
                _ => None,
            };
        }
        let inputs = line.indent > 0 && block == Some("get_inputs");
        if inputs {
            used.extend(line.toks.iter().filter(|t| t.kind == Kind::Name).map(|t| t.text));
        }
        in_inputs.push(inputs);
    }
    lines
        .iter()
        .zip(in_inputs)
        .map(|(line, inputs)| {
            let texts: Vec<&str> = line.toks.iter().map(|t| t.text).collect();
            let number = line.toks.last().is_some_and(|t| t.kind == Kind::Number);
            let size = line.indent == 0
                && number
                && matches!(texts.as_slice(), [name, "=", _] | [name, "=", "-", _] if used.contains(name));
            if inputs {
                Role::Inputs
            } else if size {
                Role::Size
            } else if matches!(texts.first(), Some(&"import" | &"from")) {
                Role::Import
            } else {
                Role::Code
            }
        })
        .collect()
}

/// The normalised tokens of Python source: see the module's documentation. With
/// `shape_free`, the numbers that only set sizes (module constants `get_inputs` uses,
/// numbers in `get_inputs`) become `N`.
fn normalised(src: &str, shape_free: bool) -> Vec<String> {
    let lines: Vec<Line<'_>> = lex(src).into_iter().filter(|l| !is_docstring(l)).collect();
    let roles = roles(&lines);
    let mut names = Names { keep: kept_names(&lines), ..Names::default() };
    let mut out = Vec::new();
    let mut indents = vec![0usize];
    for (line, role) in lines.iter().zip(roles) {
        let top = indents.last().copied().unwrap_or(0);
        if line.indent > top {
            indents.push(line.indent);
            out.push("INDENT".to_string());
        }
        while indents.len() > 1 && line.indent < indents.last().copied().unwrap_or(0) {
            indents.pop();
            out.push("DEDENT".to_string());
        }
        let from = out.len();
        canonical_line(line, &mut names, &mut out);
        if shape_free && matches!(role, Role::Inputs | Role::Size) {
            for (tok, t) in out[from..].iter_mut().zip(&line.toks) {
                if t.kind == Kind::Number {
                    *tok = "N".to_string();
                }
            }
        }
        out.push("NL".to_string());
    }
    out
}

/// The normalised tokens of Python source: see the module's documentation.
pub fn canonical_tokens(src: &str) -> Vec<String> {
    normalised(src, false)
}

/// The normalised source with its sizes masked: a problem copied with other input sizes
/// (as the suite's own `small` and `heldout` variants do) is still the same problem.
pub fn shape_free_text(src: &str) -> String {
    normalised(src, true).join(" ")
}

/// Keywords that change what code computes (`return`, `pass`, `def` and the like only
/// arrange it).
const MEANINGFUL_KEYWORDS: &[&str] =
    &["True", "False", "None", "and", "or", "not", "if", "else", "for", "while", "in", "is"];

/// Punctuation that arranges code rather than computing.
const LAYOUT_OPS: &[&str] = &["(", ")", "[", "]", "{", "}", ":", ".", "=", "->", ";", ","];

/// What a problem computes: per top-level block (the class, each function), in order,
/// the library attributes and builtins it uses, its operators, keywords such as `True`,
/// numbers and string literals. Sizes are left out (the numbers in `get_inputs`, the
/// module constants it uses), and so are names of the file's own, annotations and
/// layout: a renamed or reworded copy has the same anchors. Blocks are sorted, so moving
/// a function changes nothing. Two problems with different anchors are different
/// problems however alike their text: `relu` and `leaky_relu(x, 0.01)`, a sum over
/// dim 1 and over dim -1, `y * 2 + 1` and `(y + 1) * 2`.
pub fn anchors(src: &str) -> Vec<String> {
    anchors_of(src, false)
}

/// [`anchors`] with the sizes in: for a problem that differs from another only in its
/// sizes (the suite's `matmul` and `matmul_large_k`), they are what it is.
pub fn sized_anchors(src: &str) -> Vec<String> {
    anchors_of(src, true)
}

fn anchors_of(src: &str, sized: bool) -> Vec<String> {
    let lines: Vec<Line<'_>> = lex(src).into_iter().filter(|l| !is_docstring(l)).collect();
    let roles = roles(&lines);
    let mut blocks: Vec<Vec<String>> = vec![Vec::new()];
    for (line, role) in lines.iter().zip(roles) {
        if line.indent == 0 && line.toks.first().is_some_and(|t| t.text != "@") {
            blocks.push(Vec::new());
        }
        let role = match role {
            Role::Import => continue,
            Role::Size if !sized => continue,
            Role::Size | Role::Inputs if sized => Role::Code,
            other => other,
        };
        let Some(block) = blocks.last_mut() else { continue };
        line_anchors(line, role, block);
    }
    let mut blocks: Vec<Vec<String>> = blocks.into_iter().filter(|b| !b.is_empty()).collect();
    blocks.sort();
    blocks.join(&"|".to_string())
}

/// One line's anchors (see [`anchors`]), appended to `out`.
fn line_anchors(line: &Line<'_>, role: Role, out: &mut Vec<String>) {
    let toks = &line.toks;
    let signature = toks.first().is_some_and(|t| t.text == "def");
    for (i, t) in toks.iter().enumerate() {
        let prev = |n: usize| i.checked_sub(n).map(|p| toks[p].text);
        match t.kind {
            // Input sizes and distributions are not what the problem computes; the
            // shape's rank is (the commas of `get_inputs` below).
            Kind::Number if role == Role::Inputs => {}
            Kind::Number => out.push(number_token(t.text)),
            Kind::Str => out.push(string_token(t.text)),
            // An attribute of a library or of a value (`torch.relu`, `x.T`), but not of
            // `self`, and not in a signature (annotations are not computation).
            Kind::Name if prev(1) == Some(".") => {
                if !signature && !matches!(prev(2), Some("self" | "cls")) {
                    out.push(t.text.to_string());
                }
            }
            Kind::Name => {
                let called = toks.get(i + 1).is_some_and(|n| n.text == "(");
                if MEANINGFUL_KEYWORDS.contains(&t.text) || (called && BUILTINS.contains(&t.text)) {
                    out.push(t.text.to_string());
                }
            }
            Kind::Op if role == Role::Inputs && t.text == "," => out.push(",".into()),
            // A decorator's `@` is layout; anywhere else it is a matrix product.
            Kind::Op if i == 0 && t.text == "@" => {}
            Kind::Op if !LAYOUT_OPS.contains(&t.text) => out.push(t.text.to_string()),
            Kind::Op => {}
        }
    }
}

/// One logical line's canonical tokens, appended to `out`.
fn canonical_line<'a>(line: &Line<'a>, names: &mut Names<'a>, out: &mut Vec<String>) {
    let toks = &line.toks;
    let mut brackets: Vec<(Bracket, Option<bool>)> = Vec::new();
    // Whether the name that the current expression ends in is a library's (kept) or
    // this file's: it decides what a call's keyword arguments are.
    let mut last_kept: Option<bool> = None;
    for (i, t) in toks.iter().enumerate() {
        let prev = i.checked_sub(1).map(|p| toks[p].text);
        let word = match t.kind {
            Kind::Str => {
                last_kept = None;
                string_token(t.text)
            }
            Kind::Number => {
                last_kept = None;
                number_token(t.text)
            }
            Kind::Name => {
                let (word, kept) = canonical_name(toks, i, &brackets, names);
                last_kept = Some(kept);
                word
            }
            Kind::Op => {
                last_kept = bracket_op(t.text, prev, i, toks, last_kept, &mut brackets);
                t.text.to_string()
            }
        };
        out.push(word);
    }
}

/// Tracks brackets for an operator token; returns what `last_kept` becomes.
fn bracket_op(
    op: &str,
    prev: Option<&str>,
    i: usize,
    toks: &[Tok<'_>],
    last_kept: Option<bool>,
    brackets: &mut Vec<(Bracket, Option<bool>)>,
) -> Option<bool> {
    let after_primary =
        i > 0 && (toks[i - 1].kind == Kind::Name || matches!(prev, Some(")" | "]")));
    match op {
        "(" => {
            let kind = if i >= 2 && toks[i - 2].text == "def" {
                Bracket::Params
            } else if after_primary && prev != Some("lambda") {
                match last_kept {
                    Some(true) => Bracket::LibraryCall,
                    _ => Bracket::OwnCall,
                }
            } else {
                Bracket::Other
            };
            brackets.push((kind, last_kept));
            None
        }
        "[" | "{" => {
            brackets.push((Bracket::Other, last_kept));
            None
        }
        ")" | "]" | "}" => brackets.pop().and_then(|(_, saved)| saved),
        "." => last_kept,
        _ => None,
    }
}

/// A name's canonical form, and whether it was kept as written.
fn canonical_name<'a>(
    toks: &[Tok<'a>],
    i: usize,
    brackets: &[(Bracket, Option<bool>)],
    names: &mut Names<'a>,
) -> (String, bool) {
    let text = toks[i].text;
    let prev = i.checked_sub(1).map(|p| toks[p].text);
    if prev == Some(".") {
        // An attribute: a library's or a method's name means something; `self.<name>`
        // is this file's own.
        let base = i.checked_sub(2).map(|p| toks[p].text);
        if matches!(base, Some("self" | "cls")) && !is_dunder(text) {
            return (names.attr(text), false);
        }
        return (text.to_string(), true);
    }
    let next = toks.get(i + 1).map(|t| t.text);
    let keyword_arg = next == Some("=")
        && matches!(prev, Some("(" | ","))
        && brackets.last().is_some_and(|(b, _)| *b == Bracket::LibraryCall);
    if keyword_arg || names.keep.contains(text) || is_dunder(text) {
        return (text.to_string(), true);
    }
    (names.var(text), false)
}

fn is_dunder(name: &str) -> bool {
    name.len() > 4 && name.starts_with("__") && name.ends_with("__")
}

/// The normalised source as one string (tokens joined by spaces), for exact matching.
pub fn canonical_text(src: &str) -> String {
    canonical_tokens(src).join(" ")
}

/// Hashes of the `k`-token shingles of the normalised source, as a set. Here every
/// name of the file's own is one placeholder (`v`, or `a` for an attribute of `self`):
/// numbered names would shift after one added variable and make every later shingle
/// differ, where a near match should see one changed statement.
pub fn canonical_shingles(src: &str, k: usize) -> Shingles {
    let toks = canonical_tokens(src);
    let refs: Vec<&str> = toks.iter().map(|t| placeholder(t)).collect();
    minhash::shingles_of_tokens(&refs, k)
}

/// `v12` -> `v`, `a3` -> `a`; any other token as it is.
fn placeholder(tok: &str) -> &str {
    let numbered = |p: char| {
        tok.strip_prefix(p).is_some_and(|n| !n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()))
    };
    if numbered('v') {
        "v"
    } else if numbered('a') {
        "a"
    } else {
        tok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docstrings_comments_and_layout_go() {
        let a = "class A:\n    \"\"\"Logistic sigmoid.\n\n    # not a comment\n    \"\"\"\n\n    def f(self, x):  # doubles\n        '''Doubles.'''\n        return (x * 2)\n";
        let b = "class A:\n  def f(self, x):\n    return (x\n            * 2)\n";
        assert_eq!(canonical_text(a), canonical_text(b));
        assert_eq!(
            canonical_text(b),
            "class v0 : NL INDENT def v1 ( self , v2 ) : NL INDENT return ( v2 * 2 ) NL"
        );
        // A line continuation joins lines; a `#` inside a string is no comment.
        assert_eq!(canonical_text("y = 1 + \\\n    2\n"), "v0 = 1 + 2 NL");
        assert_eq!(canonical_text("y = 1 + \\\r\n    2\r\n"), "v0 = 1 + 2 NL");
        assert_eq!(canonical_text("s = 'a#b'  # c\n"), "v0 = 'a#b' NL");
    }

    #[test]
    fn own_names_are_numbered_in_order_of_appearance() {
        let a = "def add_one(x, BLOCK):\n    total = x + BLOCK\n    return total\n";
        let b = "def plus1(inp, B):\n    acc = inp + B\n    return acc\n";
        assert_eq!(canonical_text(a), canonical_text(b));
        // The same names in another data flow are another program.
        let c = "def plus1(inp, B):\n    acc = B + inp\n    return acc\n";
        assert_ne!(canonical_text(a), canonical_text(c));
    }

    #[test]
    fn keywords_builtins_libraries_and_attributes_are_kept() {
        let src = "import triton.language as tl\nfrom torch import nn as mynn\n\ndef k(p, n):\n    for i in range(n):\n        v = tl.load(p + i, mask=i < n, other=0.0)\n    return mynn.ReLU(), v.sum(dim=1), self.w\n";
        let text = canonical_text(src);
        for kept in [
            "import triton . language as tl",
            "from torch import nn as mynn",
            "for v3 in range ( v2 )",
            "tl . load (",
            "mask = v3 < v2 , other = 0.0",
            "mynn . ReLU ( )",
            ". sum ( dim = 1 )",
            "self . a0",
        ] {
            assert!(text.contains(kept), "{kept:?} not in {text}");
        }
        // Keyword arguments of a call into this file's own code are its own names.
        let own = canonical_text("def k(x, BLOCK):\n    pass\nk[g](x, BLOCK=4)\n");
        assert!(own.ends_with("v0 [ v3 ] ( v1 , v2 = 4 ) NL"), "{own}");
    }

    #[test]
    fn string_literals_short_words_kept_prose_masked() {
        assert_eq!(canonical_text("f(r='mean')\n"), "v0 ( v1 = 'mean' ) NL");
        assert_eq!(canonical_text("f(\"mean\")\n"), canonical_text("f('mean')\n"));
        assert_ne!(canonical_text("f('mean')\n"), canonical_text("f('sum')\n"));
        assert_eq!(
            canonical_text("raise ValueError(f\"bad {x['k']} shape\")\n"),
            "raise ValueError ( STR ) NL"
        );
        assert_eq!(
            canonical_text("raise ValueError('must be contiguous')\n"),
            canonical_text("raise ValueError(\"another message\")\n")
        );
        // An f-string's inner quotes do not end it; a triple-quoted value is text.
        assert_eq!(canonical_text("s = f'{d[\"a\"]}' + '''x\ny'''\n"), "v0 = STR + STR NL");
    }

    #[test]
    fn numbers_are_normalised_and_significant() {
        assert_eq!(canonical_text("x = 1_000 + 1E-3\n"), canonical_text("y = 1000 + 1e-3\n"));
        assert_ne!(canonical_text("x = t.sum(dim=1)\n"), canonical_text("x = t.sum(dim=0)\n"));
    }

    #[test]
    fn sizes_are_masked_only_in_the_shape_free_form() {
        let p = |batch: u32, dim: i32| {
            format!("import torch\nB = {batch}\nD = {dim}\n\nclass Model:\n    def forward(self, x):\n        return x.sum(dim=D)\n\ndef get_inputs():\n    return [torch.rand(B, 7)]\n")
        };
        // B is a size (get_inputs uses it); D is what the problem computes.
        assert_ne!(canonical_text(&p(8, 1)), canonical_text(&p(64, 1)));
        assert_eq!(shape_free_text(&p(8, 1)), shape_free_text(&p(64, 1)));
        assert_ne!(shape_free_text(&p(8, 1)), shape_free_text(&p(8, 0)));
        assert_eq!(anchors(&p(8, 1)), anchors(&p(64, 1)));
        assert_ne!(anchors(&p(8, 1)), anchors(&p(8, 0)));
    }

    #[test]
    fn anchors_tell_one_family_apart_but_not_a_rewording() {
        let m = |body: &str| {
            format!("import torch\nclass Model(torch.nn.Module):\n    \"\"\"Doc.\"\"\"\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        {body}\n")
        };
        let relu = anchors(&m("return torch.relu(x)"));
        assert_ne!(relu, anchors(&m("return torch.nn.functional.leaky_relu(x, 0.01)")));
        assert_ne!(relu, anchors(&m("return torch.relu(x) + 1")));
        assert_ne!(anchors(&m("return x.sum(dim=-1)")), anchors(&m("return x.sum(dim=1)")));
        assert_ne!(anchors(&m("return (x + 1) * 2")), anchors(&m("return x * 2 + 1")));
        let reworded = "import torch\nclass Rect(torch.nn.Module):\n    # rectifier\n    def forward(self, inp):\n        return torch.relu(inp)\n";
        assert_eq!(relu, anchors(reworded));
    }

    #[test]
    fn broken_code_still_gives_tokens() {
        for src in [
            "s = 'unterminated\nx = (1,\n",
            "x = '''never closed",
            "\\",
            "x = 0x_ff + .5j",
            "x = 1é + 2\\\r\n",
        ] {
            assert!(!canonical_tokens(src).is_empty(), "{src:?}");
        }
    }
}
