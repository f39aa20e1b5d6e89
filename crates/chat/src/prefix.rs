//! Tokenising shared text once. Training sets and agent prompts repeat long stretches
//! (the system prompt, the task rules, a worked example) before each row's own code;
//! tokenising them again for every row is most of the cost of counting tokens.
//!
//! Exactness is structural, not sampled. `tokenizers` first splits text at added tokens,
//! then pre-tokenises each piece with a regex into words, then runs BPE on each word
//! alone. So ids(a + b) == ids(a) ++ ids(b) whenever the cut between `a` and `b` is a word
//! boundary whatever follows it. For the pre-tokenisers recognised here (GPT-2's
//! byte-level regex, and the Llama 3 / Qwen 2 split regexes followed by a byte-level map)
//! a cut is such a boundary when the text before it ends in a single `\n` after a
//! character that is not whitespace, and the text after it starts with a character that
//! is not whitespace. In context, that newline is a word of its own (or, in the split
//! regexes, the tail of a punctuation word), and no word crosses into the non-whitespace
//! character after it: the optional lead character a word may take (a space, or in the
//! split regexes a non-newline symbol) is never a newline. The prefix tokenised alone
//! ends the same way. It would not after two newlines: at the end of a text, `\s+(?!\S)`
//! takes the whole run, where in context it leaves the last newline to the next word. No
//! added token may contain a newline, so no added token can straddle the cut either.
//! Truncation and padding must be off: they would apply to each piece alone. Any
//! other tokenizer configuration turns the cache off (`PrefixCache::new` returns `None`).
//!
//! Shared prefixes are learnt, not configured: each piece is compared with the previous
//! piece, and when they share a long start, that start (cut back to a safe boundary) is
//! tokenised once and kept.

use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value as Json;

/// Shared starts shorter than this are not worth a lookup.
const MIN_PREFIX_BYTES: usize = 256;
/// At most this many prefixes are kept (the first ones found stay).
const MAX_PREFIXES: usize = 64;
/// Recent unmatched pieces a new piece is compared with (a chat alternates roles, so the
/// previous piece alone is rarely of the same kind).
const RECENT: usize = 8;

const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

pub(crate) struct PrefixCache {
    /// Added tokens that split text before pre-tokenisation, longest first.
    anchors: Vec<String>,
    /// Bytes an added token can start with (most text never needs a comparison).
    first: [bool; 256],
    prefixes: RwLock<Vec<(String, Arc<[u32]>)>>,
    recent: Mutex<std::collections::VecDeque<String>>,
}

/// Whether `tokenizer.json` (as JSON) is one whose word boundaries this module understands.
fn recognised(config: &Json) -> bool {
    let byte_level = |p: &Json, regex: bool| {
        p["type"] == "ByteLevel"
            && p["use_regex"].as_bool() == Some(regex)
            && p["add_prefix_space"].as_bool() == Some(false)
    };
    let pre = &config["pre_tokenizer"];
    let pre_ok = byte_level(pre, true)
        || (pre["type"] == "Sequence"
            && pre["pretokenizers"].as_array().is_some_and(|steps| {
                steps.len() == 2
                    && steps[0]["type"] == "Split"
                    && steps[0]["behavior"] == "Isolated"
                    && steps[0]["invert"].as_bool() == Some(false)
                    && matches!(
                        steps[0]["pattern"]["Regex"].as_str(),
                        Some(LLAMA3_SPLIT | QWEN2_SPLIT)
                    )
                    && byte_level(&steps[1], false)
            }));
    let model = &config["model"];
    // Truncation and padding would apply to each piece alone.
    pre_ok
        && config["normalizer"].is_null()
        && config["truncation"].is_null()
        && config["padding"].is_null()
        && model["type"] == "BPE"
        && model["dropout"].is_null()
}

impl PrefixCache {
    pub(crate) fn new(config: &Json) -> Option<PrefixCache> {
        if !recognised(config) {
            return None;
        }
        let added = config["added_tokens"].as_array()?;
        let mut anchors = Vec::new();
        for t in added {
            let content = t["content"].as_str()?;
            if content.contains('\n') {
                return None;
            }
            // Only tokens matched verbatim split text the same way everywhere.
            let plain = t["normalized"].as_bool() == Some(false)
                && t["lstrip"].as_bool() == Some(false)
                && t["rstrip"].as_bool() == Some(false)
                && t["single_word"].as_bool() == Some(false);
            if !plain {
                return None;
            }
            anchors.push(content.to_string());
        }
        anchors.sort_by_key(|a| std::cmp::Reverse(a.len()));
        let mut first = [false; 256];
        for a in &anchors {
            if let Some(&b) = a.as_bytes().first() {
                first[usize::from(b)] = true;
            }
        }
        Some(PrefixCache {
            anchors,
            first,
            prefixes: RwLock::new(Vec::new()),
            recent: Mutex::new(std::collections::VecDeque::new()),
        })
    }

    /// `text` cut into pieces at added tokens: (piece, is an added token).
    fn pieces<'t>(&self, text: &'t str) -> Vec<(&'t str, bool)> {
        let mut out = Vec::new();
        let mut start = 0;
        let mut at = 0;
        let bytes = text.as_bytes();
        while at < text.len() {
            if !self.first[usize::from(bytes[at])] {
                at += 1;
                continue;
            }
            // Leftmost-longest, as `tokenizers` matches added tokens.
            let hit = self.anchors.iter().find(|a| bytes[at..].starts_with(a.as_bytes()));
            match hit {
                Some(a) => {
                    if start < at {
                        out.push((&text[start..at], false));
                    }
                    out.push((&text[at..at + a.len()], true));
                    at += a.len();
                    start = at;
                }
                None => at += 1,
            }
        }
        if start < text.len() {
            out.push((&text[start..], false));
        }
        out
    }

    /// The ids of `text`, with known prefixes taken from the cache; `encode` tokenises a
    /// piece the plain way.
    pub(crate) fn encode<E>(&self, text: &str, encode: E) -> Result<Vec<u32>, String>
    where
        E: Fn(&str) -> Result<Vec<u32>, String>,
    {
        let mut ids = Vec::new();
        for (piece, added) in self.pieces(text) {
            if added {
                ids.extend(encode(piece)?);
                continue;
            }
            let known = self
                .prefixes
                .read()
                .map_err(|_| "prefix cache poisoned".to_string())?
                .iter()
                .filter(|(p, _)| piece.starts_with(p.as_str()) && safe_cut(piece, p.len()))
                .max_by_key(|(p, _)| p.len())
                .map(|(p, ids)| (p.len(), ids.clone()));
            match known {
                Some((len, cached)) => {
                    ids.extend_from_slice(&cached);
                    if len < piece.len() {
                        ids.extend(encode(&piece[len..])?);
                    }
                }
                None => {
                    ids.extend(encode(piece)?);
                    self.learn(piece, &encode)?;
                }
            }
        }
        Ok(ids)
    }

    /// Compares `piece` with the previous unmatched piece; a long shared start is kept.
    fn learn<E>(&self, piece: &str, encode: &E) -> Result<(), String>
    where
        E: Fn(&str) -> Result<Vec<u32>, String>,
    {
        if piece.len() < MIN_PREFIX_BYTES {
            return Ok(());
        }
        let cut = {
            let mut recent = self.recent.lock().map_err(|_| "prefix cache poisoned".to_string())?;
            let cut = recent
                .iter()
                .filter_map(|last| {
                    let shared = common_prefix(last, piece);
                    if shared == piece.len() && shared == last.len() {
                        Some(shared)
                    } else {
                        // The cut must be safe in both pieces; below `shared` they agree.
                        (MIN_PREFIX_BYTES..shared.min(piece.len()))
                            .rev()
                            .find(|&q| safe_cut(piece, q))
                    }
                })
                .max();
            if recent.len() == RECENT {
                recent.pop_front();
            }
            recent.push_back(piece.to_string());
            cut
        };
        let Some(cut) = cut.filter(|&c| c >= MIN_PREFIX_BYTES) else {
            return Ok(());
        };
        let prefix = &piece[..cut];
        {
            let known = self.prefixes.read().map_err(|_| "prefix cache poisoned".to_string())?;
            if known.len() >= MAX_PREFIXES || known.iter().any(|(p, _)| p == prefix) {
                return Ok(());
            }
        }
        let ids: Arc<[u32]> = encode(prefix)?.into();
        let mut known = self.prefixes.write().map_err(|_| "prefix cache poisoned".to_string())?;
        if known.len() < MAX_PREFIXES && !known.iter().any(|(p, _)| p == prefix) {
            known.push((prefix.to_string(), ids));
        }
        Ok(())
    }
}

/// A word boundary whatever follows, at which the start also tokenises alone as it does
/// in context: the end of the piece, or after a lone newline (following a character that
/// is not whitespace) and before a character that is not whitespace.
fn safe_cut(piece: &str, at: usize) -> bool {
    if at == piece.len() {
        return true;
    }
    if at < 2 || piece.as_bytes()[at - 1] != b'\n' || !piece.is_char_boundary(at) {
        return false;
    }
    let before = piece[..at - 1].chars().next_back();
    let after = piece[at..].chars().next();
    before.is_some_and(|c| !c.is_whitespace()) && after.is_some_and(|c| !c.is_whitespace())
}

/// Length in bytes of the common start of `a` and `b`, on a character boundary.
fn common_prefix(a: &str, b: &str) -> usize {
    let mut n = a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count();
    while !b.is_char_boundary(n) {
        n -= 1;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_only_after_a_newline_before_a_visible_character() {
        assert!(safe_cut("ab\ncd", 3));
        assert!(!safe_cut("ab\n cd", 3));
        assert!(!safe_cut("ab cd", 3));
        assert!(!safe_cut("ab\n\ncd", 3));
        // Alone, a trailing "\n\n" is one word; before "cd" it is two.
        assert!(!safe_cut("ab\n\ncd", 4));
        assert!(!safe_cut("a \ncd", 3));
        assert!(safe_cut("abc", 3));
        assert!(!safe_cut("abc", 0));
    }

    #[test]
    fn common_prefix_stays_on_char_boundaries() {
        assert_eq!(common_prefix("héllo", "hèllo"), 1);
        assert_eq!(common_prefix("abc", "abd"), 2);
        assert_eq!(common_prefix("abc", "abc"), 3);
    }

    #[test]
    fn other_pre_tokenizers_turn_it_off() {
        let base = serde_json::json!({
            "truncation": null,
            "padding": null,
            "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "use_regex": true, "add_prefix_space": false},
            "model": {"type": "BPE", "dropout": null},
            "added_tokens": [{"content": "<|im_end|>", "normalized": false, "lstrip": false,
                              "rstrip": false, "single_word": false}],
        });
        assert!(PrefixCache::new(&base).is_some());
        let mut prefix_space = base.clone();
        prefix_space["pre_tokenizer"]["add_prefix_space"] = true.into();
        assert!(PrefixCache::new(&prefix_space).is_none());
        let mut normalizer = base.clone();
        normalizer["normalizer"] = serde_json::json!({"type": "NFC"});
        assert!(PrefixCache::new(&normalizer).is_none());
        let mut newline_token = base.clone();
        newline_token["added_tokens"][0]["content"] = "<a>\n".into();
        assert!(PrefixCache::new(&newline_token).is_none());
        let mut stripping = base.clone();
        stripping["added_tokens"][0]["lstrip"] = true.into();
        assert!(PrefixCache::new(&stripping).is_none());
        let mut padded = base;
        padded["padding"] = serde_json::json!({"strategy": {"Fixed": 512}});
        assert!(PrefixCache::new(&padded).is_none());
    }
}
