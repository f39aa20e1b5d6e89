//! `tritonforge`: the thin binary. Parses arguments, shows progress, maps outcomes
//! to exit codes; the work happens in the library crates.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Tokenising a corpus is allocation-bound (small strings and vectors per word): with
/// glibc's allocator, malloc and free took ~40% of `data build`'s time.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod args;
mod dashboard_cmd;
mod data_cmd;
mod doctor;
mod eval_cmd;
mod exit;
mod guard_cmd;
mod progress;
mod rl_cmd;
mod run_cmd;
mod runlog;
mod serve_cmd;
mod suite_cmd;
mod synth_cmd;
mod tokenizer_cmd;
mod train_cmd;

use args::Global;

#[derive(Parser)]
#[command(
    name = "tritonforge",
    version,
    about = "Turn PyTorch modules into fast, verified Triton kernels"
)]
struct Cli {
    #[command(flatten)]
    global: Global,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Evaluate candidates against problems: compile, correctness, timing.
    Eval(eval_cmd::EvalArgs),
    /// Play a policy model on problems of the suite: it writes kernels, reads the
    /// evaluator's verdicts and refines them over several turns; report and episodes stored.
    Run(Box<run_cmd::RunArgs>),
    /// Serve the evaluator over HTTP: the native /v1 API, a KernelBench-style /eval,
    /// a durable queue, Prometheus metrics.
    Serve(Box<serve_cmd::ServeArgs>),
    /// The web dashboard alone, over a store (read-only): runs, curves, evaluations,
    /// episodes, the suite. `serve` shows the same at its own `/`.
    Dashboard(dashboard_cmd::DashboardArgs),
    /// Static checks of candidate files: is it really a Triton kernel, does it cheat.
    Guard(guard_cmd::GuardArgs),
    /// The problem suite: list, show, validate; synthesise new problems.
    #[command(subcommand, alias = "bench")]
    Suite(suite_cmd::SuiteCmd),
    /// Report the interpreter, versions, device, state directory and store.
    Doctor {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Create (or check) the managed Python environment now, rather than on first use.
    Setup,
    /// The SFT data pipeline: build a training set, show a build's stats.
    #[command(subcommand)]
    Data(data_cmd::DataCmd),
    /// A model's tokenizer and chat template: export one, render chats with it.
    #[command(subcommand)]
    Tokenizer(tokenizer_cmd::TokenizerCmd),
    /// Train a policy model: supervised fine-tuning (`train sft --config sft.toml`) and
    /// reinforcement learning (`train rl --config rl.toml`).
    #[command(subcommand)]
    Train(train_cmd::TrainCmd),
}

fn main() -> ExitCode {
    let mut cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { 0 });
        }
    };
    cli.global.absolutize();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(exit::ENV);
        }
    };
    let g = &cli.global;
    let code = runtime.block_on(async {
        match cli.command {
            Cmd::Eval(args) => eval_cmd::run(g, args).await,
            Cmd::Run(args) => run_cmd::run(g, *args).await,
            Cmd::Serve(args) => serve_cmd::run(g, *args).await,
            Cmd::Dashboard(args) => dashboard_cmd::run(g, args).await,
            Cmd::Suite(cmd) => suite_cmd::run(g, cmd).await,
            Cmd::Guard(args) => guard_cmd::run(args),
            Cmd::Doctor { json } => doctor::run(g, json).await,
            Cmd::Setup => setup(g),
            Cmd::Data(cmd) => data_cmd::run(g, cmd).await,
            Cmd::Tokenizer(cmd) => tokenizer_cmd::run(g, cmd).await,
            Cmd::Train(cmd) => train_cmd::run(g, cmd).await,
        }
    });
    match code {
        Ok(c) => ExitCode::from(c),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit::code_of(&e))
        }
    }
}

fn setup(global: &Global) -> anyhow::Result<u8> {
    let env = global.python_env()?;
    eprintln!("interpreter: {}", env.interpreter.display());
    let info = tritonforge_pyenv::probe(&env, global.device)?;
    let (py, torch, triton, numpy) = (&info.python, &info.torch, &info.triton, &info.numpy);
    eprintln!("python {py}, torch {torch}, triton {triton}, numpy {numpy}");
    Ok(exit::CORRECT)
}
