//! Conversations to token ids with a loss mask. Rendering and tokenising are the same
//! code inference uses (`tritonforge-chat`), so training sees exactly the ids a policy
//! will see.
//!
//! The mask marks every assistant turn: for assistant message `i`, the tokens between the
//! prompt rendered up to it (`messages[..i]` with the generation prompt) and the
//! conversation rendered through it (`messages[..=i]`). Both renders must be token
//! prefixes of the whole conversation; when a template renders a turn differently
//! depending on what follows (some drop earlier reasoning), they are not, and the row is
//! skipped as `template_mismatch` rather than trained with a wrong mask. An assistant turn
//! with `"weight": 0` (OpenAI's fine-tuning format) is context only and left unmasked.

use serde_json::{Map, Value};
use tritonforge_chat::ChatTokenizer;

/// One conversation, tokenised.
#[derive(Debug, Clone, PartialEq)]
pub struct Example {
    pub ids: Vec<u32>,
    /// 1 where the token belongs to an assistant turn (a target of the loss).
    pub mask: Vec<u8>,
}

/// Why a row was not trained on.
pub fn skip_reason(e: &SkipError) -> &'static str {
    match e {
        SkipError::NoMessages => "no_messages",
        SkipError::NoAssistant => "no_assistant_turn",
        SkipError::NoTargets => "no_target_tokens",
        SkipError::TooLong { .. } => "too_long",
        SkipError::TemplateMismatch(_) => "template_mismatch",
        SkipError::Template(_) => "template_error",
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SkipError {
    #[error("no `messages` list of {{role, content}} objects")]
    NoMessages,
    #[error("no assistant turn: nothing to learn from")]
    NoAssistant,
    #[error("the assistant turns render to no tokens")]
    NoTargets,
    #[error("{tokens} tokens, above seq_len {limit}")]
    TooLong { tokens: usize, limit: usize },
    #[error("the rendered prompt of turn {0} is not a token prefix of the conversation")]
    TemplateMismatch(usize),
    #[error("chat template: {0}")]
    Template(String),
}

/// The `messages` of a row (`data build` output: a list, or in parquet a JSON string).
pub fn messages_of(row: &Map<String, Value>) -> Option<Vec<Value>> {
    let m = match row.get("messages")? {
        Value::Array(a) => a.clone(),
        Value::String(s) => match serde_json::from_str::<Value>(s).ok()? {
            Value::Array(a) => a,
            _ => return None,
        },
        _ => return None,
    };
    let ok = m.iter().all(|x| {
        x.get("role").is_some_and(Value::is_string)
            && x.get("content").is_some_and(Value::is_string)
    });
    (ok && !m.is_empty()).then_some(m)
}

/// Token ids and loss mask of one conversation, at most `limit` tokens.
pub fn tokenize(
    tok: &ChatTokenizer,
    messages: &[Value],
    limit: usize,
) -> Result<Example, SkipError> {
    let template = |e: tritonforge_chat::ChatError| SkipError::Template(e.to_string());
    let turns: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| m["role"] == "assistant")
        .map(|(i, _)| i)
        .collect();
    if turns.is_empty() {
        return Err(SkipError::NoAssistant);
    }
    // An assistant turn with weight 0 is context (a failed attempt before its fix).
    let turns: Vec<usize> = turns
        .into_iter()
        .filter(|&i| messages[i].get("weight").and_then(Value::as_f64) != Some(0.0))
        .collect();
    let (_, ids) = tok.encode_chat(messages, false).map_err(template)?;
    if ids.len() > limit {
        return Err(SkipError::TooLong { tokens: ids.len(), limit });
    }
    let mut mask = vec![0u8; ids.len()];
    for &i in &turns {
        let (_, before) = tok.encode_chat(&messages[..i], true).map_err(template)?;
        let (_, through) = tok.encode_chat(&messages[..=i], false).map_err(template)?;
        if !ids.starts_with(&before) || !ids.starts_with(&through) || before.len() > through.len() {
            return Err(SkipError::TemplateMismatch(i));
        }
        for m in &mut mask[before.len()..through.len()] {
            *m = 1;
        }
    }
    // The first token is never a target (nothing precedes it to predict it from).
    if mask.iter().skip(1).all(|&m| m == 0) {
        return Err(SkipError::NoTargets);
    }
    Ok(Example { ids, mask })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A word-level tokenizer (one id per whitespace-separated word) and a template whose
    /// token layout can be counted by hand.
    fn word_tokenizer(dir: &std::path::Path) -> ChatTokenizer {
        let words = [
            "<s>",
            "</s>",
            "<unk>",
            "system",
            "user",
            "assistant",
            "be",
            "brief",
            "hi",
            "there",
            "hello",
            "again",
            "bye",
            "now",
        ];
        let vocab: serde_json::Map<String, Value> =
            words.iter().enumerate().map(|(i, w)| (w.to_string(), json!(i))).collect();
        let special = |id: usize, content: &str| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        };
        let tok = json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [special(0, "<s>"), special(1, "</s>")],
            "normalizer": null, "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": null, "decoder": null,
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
        });
        std::fs::write(dir.join("tokenizer.json"), tok.to_string()).unwrap();
        std::fs::write(
            dir.join("chat_template.jinja"),
            "{% for m in messages %}<s>{{ m.role }} {{ m.content }} </s> {% endfor %}\
             {% if add_generation_prompt %}<s>assistant {% endif %}",
        )
        .unwrap();
        ChatTokenizer::from_dir(dir).unwrap()
    }

    fn msg(role: &str, content: &str) -> Value {
        json!({"role": role, "content": content})
    }

    #[test]
    fn the_mask_covers_every_assistant_turn_and_its_end_token_only() {
        let dir = tempfile::tempdir().unwrap();
        let tok = word_tokenizer(dir.path());
        let chat = [
            msg("system", "be brief"),
            msg("user", "hi there"),
            msg("assistant", "hello"),
            msg("user", "again"),
            msg("assistant", "bye now"),
        ];
        let ex = tokenize(&tok, &chat, 100).unwrap();
        // <s> system be brief </s> | <s> user hi there </s> | <s> assistant hello </s> |
        // <s> user again </s> | <s> assistant bye now </s>
        //  0    1     2    3    4     5    6   7   8     9     10    11       12   13
        //  14   15   16    17    18   19        20  21   22
        assert_eq!(
            ex.ids,
            vec![0, 3, 6, 7, 1, 0, 4, 8, 9, 1, 0, 5, 10, 1, 0, 4, 11, 1, 0, 5, 12, 13, 1]
        );
        let ones: Vec<usize> =
            ex.mask.iter().enumerate().filter(|(_, &m)| m == 1).map(|(i, _)| i).collect();
        assert_eq!(ones, vec![12, 13, 20, 21, 22]);
    }

    #[test]
    fn an_assistant_turn_of_weight_zero_is_context_not_a_target() {
        let dir = tempfile::tempdir().unwrap();
        let tok = word_tokenizer(dir.path());
        let mut chat = vec![
            msg("system", "be brief"),
            msg("user", "hi there"),
            json!({"role": "assistant", "content": "hello", "weight": 0}),
            msg("user", "again"),
            msg("assistant", "bye now"),
        ];
        let ex = tokenize(&tok, &chat, 100).unwrap();
        let ones: Vec<usize> =
            ex.mask.iter().enumerate().filter(|(_, &m)| m == 1).map(|(i, _)| i).collect();
        assert_eq!(ones, vec![20, 21, 22], "the failed attempt (12, 13) is not a target");
        // Every assistant turn context: nothing to learn.
        chat[4] = json!({"role": "assistant", "content": "bye now", "weight": 0});
        assert_eq!(tokenize(&tok, &chat, 100), Err(SkipError::NoTargets));
    }

    #[test]
    fn rows_without_an_answer_or_too_long_are_skipped_with_a_reason() {
        let dir = tempfile::tempdir().unwrap();
        let tok = word_tokenizer(dir.path());
        let no_answer = [msg("system", "be brief"), msg("user", "hi")];
        assert_eq!(tokenize(&tok, &no_answer, 100), Err(SkipError::NoAssistant));
        let chat = [msg("user", "hi"), msg("assistant", "hello")];
        assert_eq!(tokenize(&tok, &chat, 5), Err(SkipError::TooLong { tokens: 8, limit: 5 }));
        assert!(messages_of(json!({"messages": "[]"}).as_object().unwrap()).is_none());
        assert!(messages_of(json!({"messages": [{"role": "user"}]}).as_object().unwrap()).is_none());
        let as_text = json!({"messages": serde_json::to_string(&chat).unwrap()});
        assert_eq!(messages_of(as_text.as_object().unwrap()).unwrap().len(), 2);
    }

    #[test]
    fn a_template_that_rewrites_earlier_turns_is_a_mismatch_not_a_wrong_mask() {
        let dir = tempfile::tempdir().unwrap();
        let tok = word_tokenizer(dir.path());
        // Drops the content of every assistant turn but the last, as some templates do
        // with earlier reasoning.
        let t = tok
            .template
            .with_source(
                "{% for m in messages %}<s>{{ m.role }} \
                 {% if m.role != 'assistant' or loop.last %}{{ m.content }} {% endif %}</s> \
                 {% endfor %}{% if add_generation_prompt %}<s>assistant {% endif %}",
            )
            .unwrap();
        let tok = tok.with_template(t);
        let chat = [
            msg("user", "hi"),
            msg("assistant", "hello"),
            msg("user", "again"),
            msg("assistant", "bye"),
        ];
        assert_eq!(tokenize(&tok, &chat, 100), Err(SkipError::TemplateMismatch(1)));
    }
}
