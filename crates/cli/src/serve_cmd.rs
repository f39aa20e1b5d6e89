//! `tritonforge serve`: the evaluator over HTTP until SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tritonforge_server::{Limits, ServeConfig, Server};

use crate::args::{read_token, Global, GuardOpts, PoolArgs};
use crate::exit::{self, usage};

#[derive(Args)]
pub struct ServeArgs {
    /// Address to listen on; beyond loopback a --token-file is required.
    #[arg(long, default_value = "127.0.0.1:18188")]
    bind: SocketAddr,
    /// File holding the bearer token every request must carry.
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// Queued evaluations beyond which submissions get 429.
    #[arg(long, default_value_t = 10_000)]
    max_queue: u64,
    /// Unfinished evaluations one client may have.
    #[arg(long, default_value_t = 2_000)]
    per_client: u64,
    /// Largest request body, bytes.
    #[arg(long, default_value_t = 8 << 20)]
    max_body_bytes: usize,
    /// Seconds SIGTERM waits for running evaluations before queueing them for the next start.
    #[arg(long, default_value_t = 30.0)]
    grace: f64,
    /// Serve the suite's problems by id (`problem_id`) [default: yes].
    #[arg(long)]
    no_suite: bool,
    #[command(flatten)]
    pool: PoolArgs,
    #[command(flatten)]
    guard: GuardOpts,
}

pub async fn run(global: &Global, args: ServeArgs) -> anyhow::Result<u8> {
    let grace = Duration::try_from_secs_f64(args.grace).map_err(usage)?;
    let token = read_token(args.token_file.as_deref())?;
    let suite = if args.no_suite { None } else { Some(global.load_suite()?) };
    let pool = args.pool.config(usize::MAX)?;
    let evaluator = Arc::new(global.open_evaluator(pool, args.guard.load()?, true).await?);
    eprintln!("{}", tritonforge_eval::report::env_line(evaluator.environment()));
    let cfg = ServeConfig {
        bind: args.bind,
        token,
        limits: Limits {
            max_body_bytes: args.max_body_bytes,
            max_queue: args.max_queue,
            per_client: args.per_client,
            ..Limits::default()
        },
        concurrency: None,
        grace,
    };
    let store = global.workspace().store_path();
    let server = Server::start(evaluator, &store, suite, cfg).await.map_err(usage)?;
    let requeued = server.requeued();
    if requeued > 0 {
        eprintln!("{requeued} evaluation(s) left running by the last server are queued again");
    }
    eprintln!("serving on http://{} (store {}; dashboard at /)", server.addr, store.display());
    stopped().await;
    eprintln!("stopping: no new work; running evaluations get {:.0}s", grace.as_secs_f64());
    server.shutdown().await?;
    Ok(exit::CORRECT)
}

/// SIGTERM or Ctrl-C.
pub(crate) async fn stopped() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
