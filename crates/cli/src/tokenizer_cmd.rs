//! `tritonforge tokenizer`: write a model's tokenizer where Rust can read it, and render
//! chats with a model's chat template (and tokenise them) as the agent and the data
//! pipeline do — the command the byte-for-byte comparison with transformers runs.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::Value;
use tritonforge_chat::{ChatTemplate, ChatTokenizer};

use crate::args::Global;
use crate::exit::{usage, USAGE as EXIT_USAGE};

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
            Ok(if py.export_tokenizer(&model, &out, false)? { 0 } else { EXIT_USAGE })
        }
        TokenizerCmd::Render(args) => render(args),
    }
}

fn render(args: RenderArgs) -> anyhow::Result<u8> {
    let text = std::fs::read_to_string(&args.chats)
        .with_context(|| format!("reading {}", args.chats.display()))?;
    let chats: Vec<Value> = serde_json::from_str(&text)
        .map_err(|e| usage(format!("{}: not a JSON array of chats: {e}", args.chats.display())))?;
    let tokenizer =
        args.tokenizer.as_deref().map(ChatTokenizer::from_dir).transpose().map_err(usage)?;
    let own = match &args.template {
        Some(path) => {
            let source = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let made = match &tokenizer {
                Some(t) => t.template.with_source(&source),
                None => ChatTemplate::new(&source, Default::default()),
            };
            Some(made.map_err(|e| usage(format!("{}: {e}", path.display())))?)
        }
        None => None,
    };
    let template = own
        .as_ref()
        .or(tokenizer.as_ref().map(|t| &t.template))
        .ok_or_else(|| usage("give --tokenizer DIR, --template FILE or both"))?;
    let (out, failed) = tritonforge_chat::render_chats(template, tokenizer.as_ref(), &chats)?;
    for f in failed {
        eprintln!("{f}");
    }
    println!("{}", serde_json::to_string(&out)?);
    Ok(0)
}
