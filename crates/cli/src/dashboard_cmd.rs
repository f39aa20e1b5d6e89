//! `tritonforge dashboard`: the web dashboard alone, over a store, read-only.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use tritonforge_dashboard::{Dashboard, DashboardServer, Mode};

use crate::args::{read_token, Global};
use crate::exit::{self, usage};

#[derive(Args)]
pub struct DashboardArgs {
    /// The store to show [default: the workspace's].
    #[arg(long)]
    store: Option<PathBuf>,
    /// Address to listen on; beyond loopback a --token-file is required.
    #[arg(long, default_value = "127.0.0.1:18189")]
    bind: SocketAddr,
    /// File holding the token a browser logs in with (and API clients send as a bearer token).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Do not load the suite (the suite page then lists evaluated problems only).
    #[arg(long)]
    no_suite: bool,
}

pub async fn run(global: &Global, args: DashboardArgs) -> anyhow::Result<u8> {
    let token = read_token(args.token_file.as_deref())?;
    let store = args.store.unwrap_or_else(|| global.workspace().store_path());
    if !store.is_file() {
        return Err(usage(format!("{}: no such store", store.display())));
    }
    // Bring an older store's schema up to date (its indexes, its run table); the
    // dashboard itself then reads through a read-only connection.
    drop(tritonforge_store::Store::open(&store)?);
    let suite = if args.no_suite { None } else { Some(global.load_suite()?) };
    let dash = Dashboard::open(&store, suite, Mode::Standalone)?;
    let server = DashboardServer::start(dash, args.bind, token).await.map_err(usage)?;
    eprintln!("dashboard on http://{} (store {}, read-only)", server.addr, store.display());
    crate::serve_cmd::stopped().await;
    server.shutdown().await?;
    Ok(exit::CORRECT)
}
