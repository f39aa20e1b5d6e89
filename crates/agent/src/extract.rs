//! From a model's reply to one candidate file.
//!
//! Order of preference, each step only when the one before found nothing:
//! 1. `<think>…</think>` sections are dropped (an unclosed `<think>` drops the rest of
//!    the reply: the model ran out of tokens while thinking);
//! 2. the last fenced block tagged `python`/`py` (or untagged) that defines `ModelNew`;
//! 3. the last fenced block in any language that defines `ModelNew`;
//! 4. an unterminated last fence (a reply cut off at the token limit) that defines
//!    `ModelNew`, taken as is;
//! 5. the whole reply, when it reads as bare Python source defining `ModelNew`.
//!
//! A reply with no code at all, or code that never defines `ModelNew`, is an
//! extraction failure: its own recorded outcome, not a compile error.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExtractError {
    #[error("the reply holds no code block")]
    NoCode,
    #[error("the reply's code blocks define no `class ModelNew`")]
    NoModelNew,
}

impl ExtractError {
    /// The outcome name recorded for the turn.
    pub fn outcome(&self) -> &'static str {
        match self {
            ExtractError::NoCode => "no_code",
            ExtractError::NoModelNew => "no_model_new",
        }
    }

    /// The turn outcome recorded for it (the same name as [`ExtractError::outcome`]).
    pub fn not_extracted(&self) -> tritonforge_episode::NotExtracted {
        match self {
            ExtractError::NoCode => tritonforge_episode::NotExtracted::NoCode,
            ExtractError::NoModelNew => tritonforge_episode::NotExtracted::NoModelNew,
        }
    }
}

/// How the code was found (recorded with the turn).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    PythonFence,
    OtherFence,
    Unterminated,
    Bare,
}

struct Fence {
    lang: String,
    body: String,
    closed: bool,
}

/// Drop `<think>` sections.
pub fn strip_thinking(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    loop {
        match rest.find("<think>") {
            None => {
                out.push_str(rest);
                break;
            }
            Some(i) => {
                out.push_str(&rest[..i]);
                let after = &rest[i + "<think>".len()..];
                match after.find("</think>") {
                    Some(j) => rest = &after[j + "</think>".len()..],
                    None => break,
                }
            }
        }
    }
    // A reply may also open mid-thought (the template put `<think>` in the prompt).
    if !text.contains("<think>") {
        if let Some(j) = out.find("</think>") {
            out = out[j + "</think>".len()..].to_string();
        }
    }
    out
}

fn fences(text: &str) -> Vec<Fence> {
    let mut out = Vec::new();
    let mut current: Option<Fence> = None;
    for line in text.lines() {
        let t = line.trim_start();
        if let Some(after) = t.strip_prefix("```") {
            match current.take() {
                Some(mut f) => {
                    f.closed = true;
                    out.push(f);
                }
                None => {
                    current = Some(Fence {
                        lang: after.trim().to_ascii_lowercase(),
                        body: String::new(),
                        closed: false,
                    })
                }
            }
        } else if let Some(f) = current.as_mut() {
            f.body.push_str(line);
            f.body.push('\n');
        }
    }
    if let Some(f) = current {
        out.push(f);
    }
    out
}

fn defines_model_new(code: &str) -> bool {
    code.lines().any(|l| {
        let l = l.trim_start();
        l.starts_with("class ModelNew(") || l.starts_with("class ModelNew:")
    })
}

/// The candidate's source and how it was found.
pub fn extract_code(reply: &str) -> Result<(String, Source), ExtractError> {
    let text = strip_thinking(reply);
    let blocks = fences(&text);
    let is_python = |l: &str| l.is_empty() || l == "python" || l == "py" || l == "python3";
    if let Some(f) =
        blocks.iter().rev().find(|f| f.closed && is_python(&f.lang) && defines_model_new(&f.body))
    {
        return Ok((f.body.clone(), Source::PythonFence));
    }
    if let Some(f) = blocks.iter().rev().find(|f| f.closed && defines_model_new(&f.body)) {
        return Ok((f.body.clone(), Source::OtherFence));
    }
    if let Some(f) = blocks.last().filter(|f| !f.closed && defines_model_new(&f.body)) {
        return Ok((f.body.clone(), Source::Unterminated));
    }
    if blocks.is_empty() && defines_model_new(&text) && text.contains("import ") {
        // Bare source: from the first import line on.
        let start = text
            .lines()
            .position(|l| l.starts_with("import ") || l.starts_with("from "))
            .unwrap_or(0);
        let code: String = text.lines().skip(start).map(|l| format!("{l}\n")).collect();
        return Ok((code, Source::Bare));
    }
    if blocks.is_empty() {
        Err(ExtractError::NoCode)
    } else {
        Err(ExtractError::NoModelNew)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: &str = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n";

    #[test]
    fn takes_the_last_python_block_defining_model_new() {
        let reply = format!(
            "First try:\n```python\nclass ModelNew:\n    old = 1\n```\nBetter:\n```python\n{KERNEL}```\n\
             Usage:\n```python\nm = ModelNew()\n```\n"
        );
        let (code, src) = extract_code(&reply).unwrap();
        assert_eq!(code, KERNEL);
        assert_eq!(src, Source::PythonFence);
    }

    #[test]
    fn thinking_is_dropped_even_when_it_holds_code() {
        let reply = format!(
            "<think>maybe\n```python\nclass ModelNew:\n    thought = 1\n```\n</think>\nHere:\n```py\n{KERNEL}```"
        );
        assert_eq!(extract_code(&reply).unwrap().0, KERNEL);
        // Cut off while thinking: nothing usable.
        let cut = "<think>let me write\n```python\nclass ModelNew:\n";
        assert_eq!(extract_code(cut).unwrap_err(), ExtractError::NoCode);
        // Opened mid-thought by the template: only the part after `</think>` counts.
        let mid = format!("so I will...\n</think>\n```python\n{KERNEL}```");
        assert_eq!(extract_code(&mid).unwrap().0, KERNEL);
    }

    #[test]
    fn other_languages_unterminated_fences_and_bare_source_are_fallbacks() {
        let reply = format!("```text\n{KERNEL}```");
        assert_eq!(extract_code(&reply).unwrap().1, Source::OtherFence);
        let reply = format!("Sure!\n```python\n{KERNEL}");
        let (code, src) = extract_code(&reply).unwrap();
        assert_eq!((code.as_str(), src), (KERNEL, Source::Unterminated));
        let reply = format!("Here is the code:\n{KERNEL}");
        let (code, src) = extract_code(&reply).unwrap();
        assert_eq!((code.as_str(), src), (KERNEL, Source::Bare));
        // Indented fences (inside a list item) still count.
        let reply = format!(
            "1. the kernel:\n   ```python\n{}   ```\n",
            KERNEL.lines().map(|l| format!("{l}\n")).collect::<String>()
        );
        assert!(extract_code(&reply).is_ok());
    }

    #[test]
    fn no_code_and_no_model_new_are_distinct_failures() {
        assert_eq!(extract_code("I cannot help with that.").unwrap_err(), ExtractError::NoCode);
        assert_eq!(
            extract_code("```python\nclass Model(nn.Module):\n    pass\n```").unwrap_err(),
            ExtractError::NoModelNew
        );
        assert_eq!(ExtractError::NoModelNew.outcome(), "no_model_new");
        // `ModelNewer` is not `ModelNew`.
        assert!(extract_code("```python\nclass ModelNewer:\n    pass\n```").is_err());
    }
}
