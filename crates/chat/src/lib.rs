//! A model's chat template rendered in Rust the way transformers' `apply_chat_template`
//! renders it, and the model's tokenizer, so prompts become token ids here and nowhere
//! else. RL trains on exactly the ids a policy saw; rendering and tokenising in one place
//! (instead of re-tokenising a server's text) is what keeps them identical.
//!
//! Compatibility with transformers' Jinja environment: `trim_blocks` and `lstrip_blocks`
//! on, loop controls, Python string and dict methods, `raise_exception`, `strftime_now`,
//! a `tojson` that writes what Python's `json.dumps(ensure_ascii=False)` writes, and the
//! `{% generation %}` tag (transparent when rendering). The context is `messages`,
//! `add_generation_prompt`, `tools`/`documents` (none) and the special tokens of the
//! tokenizer's configuration.

mod json;
mod prefix;
mod time;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use minijinja::{Environment, Error as JinjaError, ErrorKind, Value};
use serde::Serialize;
use serde_json::Value as Json;

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("{path}: {reason}")]
    Config { path: PathBuf, reason: String },
    #[error(
        "{0}: no chat template (looked for chat_template.jinja, chat_template.json and \
         `chat_template` in tokenizer_config.json)"
    )]
    NoTemplate(PathBuf),
    #[error("chat template: {0}")]
    Template(String),
    #[error("tokenizer {path}: {reason}")]
    Tokenizer { path: PathBuf, reason: String },
}

fn template_error(e: JinjaError) -> ChatError {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    ChatError::Template(msg)
}

/// A compiled chat template plus the special-token strings it may refer to.
pub struct ChatTemplate {
    env: Environment<'static>,
    special: BTreeMap<String, Json>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("special", &self.special).finish_non_exhaustive()
    }
}

/// `{%- generation %}` / `{% endgeneration -%}` become an always-true `if`, keeping their
/// whitespace control: the tag marks assistant text for masks and renders nothing.
fn drop_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else {
            break;
        };
        let tag = &rest[start..start + len + 2];
        let inner = &tag[2..tag.len() - 2];
        let (l, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, r) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[body.len() - 1..]),
            None => (body, ""),
        };
        out.push_str(&rest[..start]);
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{l} if true {r}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{l} endif {r}%}}")),
            _ => out.push_str(tag),
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

impl ChatTemplate {
    /// Compiles `source`. `special` maps names (`bos_token`, `eos_token`, ...) to values.
    pub fn new(source: &str, special: BTreeMap<String, Json>) -> Result<ChatTemplate, ChatError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_keep_trailing_newline(false);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, JinjaError> {
            Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |fmt: String| time::strftime_now(&fmt));
        env.add_filter("tojson", json::tojson);
        env.add_template_owned("chat", drop_generation_tags(source)).map_err(template_error)?;
        Ok(ChatTemplate { env, special })
    }

    /// Another template with this one's special tokens (a template override for a model).
    pub fn with_source(&self, source: &str) -> Result<ChatTemplate, ChatError> {
        Self::new(source, self.special.clone())
    }

    /// Reads the template and special tokens from a model directory the way transformers
    /// does: `chat_template.jinja`, else `chat_template.json`, else `tokenizer_config.json`'s
    /// `chat_template` (a string, or named templates of which `default` is used).
    pub fn from_dir(dir: &Path) -> Result<ChatTemplate, ChatError> {
        let config_path = dir.join("tokenizer_config.json");
        let config: Json = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_json::from_str(&text).map_err(|e| ChatError::Config {
                path: config_path.clone(),
                reason: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Json::Null,
            Err(e) => return Err(ChatError::Config { path: config_path, reason: e.to_string() }),
        };
        let mut special = BTreeMap::new();
        let map_path = dir.join("special_tokens_map.json");
        let map: Json = std::fs::read_to_string(&map_path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Json::Null);
        for source in [&map, &config] {
            if let Some(obj) = source.as_object() {
                for (k, v) in obj {
                    if k.ends_with("_token") {
                        // An AddedToken object carries its text under `content`.
                        let text = v.get("content").cloned().unwrap_or_else(|| v.clone());
                        if text.is_string() {
                            special.insert(k.clone(), text);
                        }
                    }
                }
                if let Some(extra) = obj.get("additional_special_tokens") {
                    special.insert("additional_special_tokens".into(), extra.clone());
                }
            }
        }
        let source = Self::find_source(dir, &config)?;
        Self::new(&source, special)
    }

    fn find_source(dir: &Path, config: &Json) -> Result<String, ChatError> {
        let jinja = dir.join("chat_template.jinja");
        if jinja.is_file() {
            return std::fs::read_to_string(&jinja)
                .map_err(|e| ChatError::Config { path: jinja, reason: e.to_string() });
        }
        let json_path = dir.join("chat_template.json");
        if json_path.is_file() {
            let v: Json = std::fs::read_to_string(&json_path)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
                .map_err(|reason| ChatError::Config { path: json_path.clone(), reason })?;
            if let Some(s) = v["chat_template"].as_str() {
                return Ok(s.to_string());
            }
        }
        match &config["chat_template"] {
            Json::String(s) => Ok(s.clone()),
            Json::Array(named) => named
                .iter()
                .find(|t| t["name"] == "default")
                .and_then(|t| t["template"].as_str())
                .map(str::to_owned)
                .ok_or_else(|| ChatError::Config {
                    path: dir.join("tokenizer_config.json"),
                    reason: "named chat templates but none called `default`".into(),
                }),
            _ => Err(ChatError::NoTemplate(dir.to_path_buf())),
        }
    }

    /// The prompt text for `messages` (anything serialising to `[{role, content}, ...]`).
    pub fn render<M: Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
    ) -> Result<String, ChatError> {
        let mut ctx: BTreeMap<String, Value> =
            self.special.iter().map(|(k, v)| (k.clone(), Value::from_serialize(v))).collect();
        ctx.insert("messages".into(), Value::from_serialize(messages));
        ctx.insert("add_generation_prompt".into(), Value::from(add_generation_prompt));
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        let tmpl = self.env.get_template("chat").map_err(template_error)?;
        tmpl.render(ctx).map_err(template_error)
    }
}

/// A model's tokenizer (`tokenizer.json`) with its chat template.
pub struct ChatTokenizer {
    pub template: ChatTemplate,
    tokenizer: tokenizers::Tokenizer,
    /// Shared starts of texts tokenised once (`None`: a tokenizer it cannot prove exact for).
    prefix: Option<prefix::PrefixCache>,
    path: PathBuf,
}

impl ChatTokenizer {
    /// Loads `tokenizer.json` and the chat template from a model directory.
    pub fn from_dir(dir: &Path) -> Result<ChatTokenizer, ChatError> {
        let path = dir.join("tokenizer.json");
        let fail = |reason: String| ChatError::Tokenizer { path: path.clone(), reason };
        let text = std::fs::read_to_string(&path).map_err(|e| fail(e.to_string()))?;
        let tokenizer = text.parse::<tokenizers::Tokenizer>().map_err(|e| fail(e.to_string()))?;
        let config: Json = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
        Ok(ChatTokenizer {
            template: ChatTemplate::from_dir(dir)?,
            tokenizer,
            prefix: prefix::PrefixCache::new(&config),
            path,
        })
    }

    fn fail(&self, e: impl std::fmt::Display) -> ChatError {
        ChatError::Tokenizer { path: self.path.clone(), reason: e.to_string() }
    }

    /// Token ids of `text` with no special tokens added (the chat template already wrote them).
    /// Long starts shared with earlier texts come from the prefix cache (see `prefix.rs`
    /// for why that is exact).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, ChatError> {
        match &self.prefix {
            Some(cache) => cache
                .encode(text, |t| self.encode_plain(t).map_err(|e| e.to_string()))
                .map_err(|e| self.fail(e)),
            None => self.encode_plain(text),
        }
    }

    /// `encode` without the prefix cache: `tokenizers` on the whole text.
    pub fn encode_plain(&self, text: &str) -> Result<Vec<u32>, ChatError> {
        // `encode_fast` skips character offsets, which nothing here reads.
        self.tokenizer
            .encode_fast(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| self.fail(e))
    }

    /// Whether shared starts are tokenised once (`false`: this tokenizer's configuration is
    /// not one the cache is exact for, or it was switched off).
    pub fn prefix_cache(&self) -> bool {
        self.prefix.is_some()
    }

    /// This tokenizer with another chat template (a template override for the model).
    pub fn with_template(mut self, template: ChatTemplate) -> ChatTokenizer {
        self.template = template;
        self
    }

    /// Switches the prefix cache off (to compare against, or to rule it out).
    pub fn without_prefix_cache(mut self) -> ChatTokenizer {
        self.prefix = None;
        self
    }

    /// The rendered prompt and its token ids: what `apply_chat_template(tokenize=True)` gives.
    pub fn encode_chat<M: Serialize>(
        &self,
        messages: &[M],
        add_generation_prompt: bool,
    ) -> Result<(String, Vec<u32>), ChatError> {
        let text = self.template.render(messages, add_generation_prompt)?;
        let ids = self.encode(&text)?;
        Ok((text, ids))
    }

    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, ChatError> {
        self.tokenizer.decode(ids, skip_special_tokens).map_err(|e| self.fail(e))
    }

    /// Tokens in the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    /// The id of a token string (a special token such as `<|im_end|>`), if the vocabulary has it.
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }
}

/// Render (and, with a tokenizer, tokenise) chats given as JSON
/// `{"messages": [...], "add_generation_prompt": bool}`: one `{text, ids}` per chat, or
/// `{error}` for a chat the template cannot render (named in the second list).
pub fn render_chats(
    template: &ChatTemplate,
    tokenizer: Option<&ChatTokenizer>,
    chats: &[serde_json::Value],
) -> Result<(Vec<serde_json::Value>, Vec<String>), ChatError> {
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for (i, chat) in chats.iter().enumerate() {
        let messages = chat["messages"].as_array().cloned().unwrap_or_default();
        let gen = chat["add_generation_prompt"].as_bool().unwrap_or(true);
        let rendered = match template.render(&messages, gen) {
            Ok(r) => r,
            Err(e) => {
                out.push(serde_json::json!({"error": e.to_string()}));
                failed.push(format!("chat {i}: {e}"));
                continue;
            }
        };
        let ids = tokenizer.map(|t| t.encode(&rendered)).transpose()?;
        out.push(serde_json::json!({"text": rendered, "ids": ids}));
    }
    Ok((out, failed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msgs(pairs: &[(&str, &str)]) -> Vec<Json> {
        pairs.iter().map(|(r, c)| serde_json::json!({"role": r, "content": c})).collect()
    }

    #[test]
    fn blocks_are_trimmed_like_transformers() {
        let t = ChatTemplate::new(
            "{% for m in messages %}\n  {% if m.role == 'user' %}\n<u>{{ m.content | trim }}</u>\n  {% endif %}\n{% endfor %}\n{% if add_generation_prompt %}<a>{% endif %}",
            BTreeMap::new(),
        )
        .unwrap();
        let out = t.render(&msgs(&[("user", " hi ")]), true).unwrap();
        assert_eq!(out, "<u>hi</u>\n<a>");
    }

    #[test]
    fn raise_exception_becomes_an_error_naming_the_message() {
        let t = ChatTemplate::new(
            "{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}",
            BTreeMap::new(),
        )
        .unwrap();
        let err = t.render(&msgs(&[("user", "x")]), false).unwrap_err();
        assert!(err.to_string().contains("system first"), "{err}");
    }

    #[test]
    fn generation_tags_render_nothing_and_keep_whitespace_control() {
        let t = ChatTemplate::new(
            "{% for m in messages %}{% if m.role == 'assistant' %}A: \n  {%- generation %}{{ m.content }}{% endgeneration -%}\n  .{% endif %}{% endfor %}",
            BTreeMap::new(),
        )
        .unwrap();
        assert_eq!(t.render(&msgs(&[("assistant", "ok")]), false).unwrap(), "A:ok.");
    }

    #[test]
    fn python_methods_and_special_tokens_are_available() {
        let mut special = BTreeMap::new();
        special.insert("eos_token".to_string(), Json::from("</s>"));
        let t = ChatTemplate::new(
            "{% for m in messages %}{{ m['content'].strip().split('|')[-1] }}{{ eos_token }}{% if m.content.startswith(' a') %}!{% endif %}{% endfor %}",
            special,
        )
        .unwrap();
        assert_eq!(t.render(&msgs(&[("user", " a|b ")]), false).unwrap(), "b</s>!");
    }

    #[test]
    fn a_broken_template_is_named() {
        let err = ChatTemplate::new("{% for m in messages %}", BTreeMap::new()).unwrap_err();
        assert!(matches!(err, ChatError::Template(_)), "{err}");
    }
}
