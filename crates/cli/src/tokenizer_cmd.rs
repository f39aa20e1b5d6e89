//! `tritonforge tokenizer`: write a model's tokenizer where Rust can read it, and render
//! chats with a model's chat template (and tokenise them) as the agent and the data
//! pipeline do — the command the byte-for-byte comparison with transformers runs.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use tritonforge_chat::{ChatTemplate, ChatTokenizer};

use crate::{Global, EXIT_USAGE};

#[derive(Subcommand)]
pub enum TokenizerCmd {
    /// Write a model's tokenizer.json, configuration and chat template to a directory
    /// (`smollm2`, a model directory or a .gguf file; runs transformers once).
    Export {
        #[arg(long, default_value = "smollm2")]
        model: String,
        #[arg(long)]
        out: PathBuf,
    },
    /// Render chats with a chat template (and tokenise them): prints a JSON array of
    /// `{text, ids}`, one per chat.
    Render(RenderArgs),
}

#[derive(Args)]
pub struct RenderArgs {
    /// Model directory: tokenizer.json and chat template.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// A Jinja chat template file to use instead of the directory's (render only when no
    /// --tokenizer is given).
    #[arg(long)]
    template: Option<PathBuf>,
    /// JSON array of `{"messages": [...], "add_generation_prompt": bool}`.
    chats: PathBuf,
}

pub async fn run(global: &Global, cmd: TokenizerCmd) -> anyhow::Result<u8> {
    match cmd {
        TokenizerCmd::Export { model, out } => {
            let py = global.python_env()?;
            std::fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
            let status = py
                .worker(tritonforge_pyenv::WorkerMode::Tokenizer {
                    model,
                    out: out.clone(),
                })
                .command()
                .status()
                .with_context(|| format!("running {}", py.interpreter.display()))?;
            Ok(if status.success() { 0 } else { EXIT_USAGE })
        }
        TokenizerCmd::Render(args) => render(args),
    }
}

fn render(args: RenderArgs) -> anyhow::Result<u8> {
    let text = std::fs::read_to_string(&args.chats)
        .with_context(|| format!("reading {}", args.chats.display()))?;
    let chats: Vec<Value> = match serde_json::from_str(&text) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "error: {}: not a JSON array of chats: {e}",
                args.chats.display()
            );
            return Ok(EXIT_USAGE);
        }
    };
    let tokenizer = match &args.tokenizer {
        Some(dir) => match ChatTokenizer::from_dir(dir) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(EXIT_USAGE);
            }
        },
        None => None,
    };
    let own = match &args.template {
        Some(path) => {
            let source = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let made = match &tokenizer {
                Some(t) => t.template.with_source(&source),
                None => ChatTemplate::new(&source, Default::default()),
            };
            match made {
                Ok(t) => Some(t),
                Err(e) => {
                    eprintln!("error: {}: {e}", path.display());
                    return Ok(EXIT_USAGE);
                }
            }
        }
        None => None,
    };
    let Some(template) = own.as_ref().or(tokenizer.as_ref().map(|t| &t.template)) else {
        eprintln!("error: give --tokenizer DIR, --template FILE or both");
        return Ok(EXIT_USAGE);
    };
    let mut out = Vec::new();
    for (i, chat) in chats.iter().enumerate() {
        let messages = chat["messages"].as_array().cloned().unwrap_or_default();
        let gen = chat["add_generation_prompt"].as_bool().unwrap_or(true);
        let rendered = match template.render(&messages, gen) {
            Ok(r) => r,
            Err(e) => {
                out.push(json!({"error": e.to_string()}));
                eprintln!("chat {i}: {e}");
                continue;
            }
        };
        let ids = match &tokenizer {
            Some(t) => Some(t.encode(&rendered)?),
            None => None,
        };
        out.push(json!({"text": rendered, "ids": ids}));
    }
    println!("{}", serde_json::to_string(&out)?);
    Ok(0)
}
