//! `tritonforge train rl --config rl.toml`: multi-turn GRPO. The `tritonforge-rl` crate
//! runs the loop; this builds its parts from the config and the global flags (evaluator,
//! suite, Python environment), and shows progress.

use std::path::PathBuf;
use std::sync::Arc;

use tritonforge_agent::episode::EpisodeConfig;
use tritonforge_agent::{bundled, runner, Prompts, Sampling};
use tritonforge_protocol::DeviceKind;
use tritonforge_rl::engines::WorkerLaunch;
use tritonforge_rl::run::source_name;
use tritonforge_rl::{
    Environment, HeldoutSet, Parts, RlConfig, RlError, RlEvent, RlSummary, Standing, SuiteEnv,
    Timeline,
};
use tritonforge_store::Store;

use crate::args::{EvalFlags, Global, GuardOpts, PoolArgs};
use crate::exit::{self, usage};
use crate::runlog::RunLog;
use tritonforge_store::{RunKind, RunStatus};

#[derive(clap::Args)]
pub struct RlArgs {
    #[arg(long)]
    config: PathBuf,
    /// One JSON line per event on stdout.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    eval: EvalFlags,
    #[command(flatten)]
    pool: PoolArgs,
    #[command(flatten)]
    guard: GuardOpts,
}

pub async fn run(global: &Global, args: RlArgs) -> anyhow::Result<u8> {
    let cfg = RlConfig::load(&args.config).map_err(usage)?;
    let py = global.python_env()?;
    let device = global.device_kind(&py)?;
    let ws = global.workspace();
    let path = if cfg.model.path == "bundled" { bundled::NAME } else { cfg.model.path.as_str() };
    let (model, label) = bundled::resolve(path, &ws.state_dir)?;
    // Checked before anything starts: the prompts' chat template (colocated), the
    // engines' tokenizer (disaggregated).
    tritonforge_rl::setup::check_chat_template(&cfg, &model, &py).map_err(usage)?;
    let launch = WorkerLaunch {
        python: py.interpreter.clone(),
        worker_path: py.worker_path.clone(),
        model: model.clone(),
        label: label.clone(),
        device,
        log: cfg.output.dir.join("learner.log"),
    };
    let engines = tritonforge_rl::engines::build(&cfg, &launch).map_err(usage)?;
    std::fs::create_dir_all(&cfg.output.dir)?;
    let settings = args.eval.settings()?;
    let builtin = ws.suite.root(&ws.state_dir)?;
    let tasks = tritonforge_rl::setup::load_tasks(&cfg.data.train, &builtin, &settings, device)
        .map_err(usage)?;
    let mut heldout_settings = settings.clone();
    heldout_settings.timing.enabled &= cfg.schedule.heldout_timing;
    let mut heldout_tasks = Vec::new();
    for s in &cfg.data.heldout {
        let t = tritonforge_rl::setup::load_tasks(
            std::slice::from_ref(s),
            &builtin,
            &heldout_settings,
            device,
        )
        .map_err(usage)?;
        heldout_tasks.push((source_name(s), t));
    }
    let pool = args.pool.config(usize::MAX)?;
    let guard = args.guard.load()?;
    let reward = cfg.reward.resolve().map_err(usage)?;
    let prompts = Arc::new(Prompts::load(None).map_err(usage)?);
    // A new run takes a name no run in the store has (`rl-out`, else `rl-out-2`, ...): none
    // with that id, none whose rows sit under it (`rl-out/heldout`). The store is read only
    // for a new run, once.
    let store_path = ws.store_path();
    let ids: std::cell::OnceCell<Vec<String>> = std::cell::OnceCell::new();
    let taken = |name: &str| -> Result<bool, RlError> {
        if ids.get().is_none() {
            let runs = Store::open(&store_path)
                .and_then(|s| s.runs())
                .map_err(|e| RlError::Output { path: store_path.clone(), reason: e.to_string() })?;
            let _ = ids.set(runs.into_iter().map(|r| r.id).collect());
        }
        let ids = ids.get().map(Vec::as_slice).unwrap_or_default();
        Ok(tritonforge_rl::run::name_taken(ids.iter().map(String::as_str), name))
    };
    let run_name = tritonforge_rl::run::run_name(&cfg.output.dir, &taken).map_err(usage)?;
    let json = args.json;
    let mut show = |e: RlEvent| {
        if json {
            println!("{}", describe_json(&e));
        } else {
            eprintln!("{}", describe(&e));
        }
    };
    // Where the run stands (its checkpoint, the heldout pass due there, a baseline standing
    // in for it) is read before the evaluator's pool and the policy worker start (tens of
    // seconds): a run with nothing left to do, or one whose files refuse it, is told so at
    // once. Whether candidates are timed identifies heldout figures: evaluation servers
    // tell their device in one request; a local pool runs on `device`.
    let remote = global.eval_servers().await?;
    let eval_device = remote.as_ref().map_or(device, |r| r.device());
    let sets: Vec<HeldoutSet> = heldout_tasks
        .iter()
        .map(|(name, tasks)| HeldoutSet {
            name: name.clone(),
            keys: tasks.iter().map(|t| t.key.clone()).collect(),
        })
        .collect();
    let timing = eval_device != DeviceKind::Cpu && settings.timing.enabled;
    // What pays a candidate: the flags, the device the problems' configs were resolved for
    // (variant and shape check follow it), whether candidates are timed (the timing flags
    // count only then) and the static guard (a local pool's rules; a server's own).
    let mut evaluation = settings.to_json();
    let guard_json = match (&remote, &guard) {
        (Some(_), _) => serde_json::json!("server"),
        (None, None) => serde_json::json!("off"),
        (None, Some(rules)) => {
            let text = serde_json::to_string(rules).unwrap_or_default();
            serde_json::json!(format!(
                "rules {}",
                &tritonforge_eval::sha256_hex(text.as_bytes())[..12]
            ))
        }
    };
    if let Some(m) = evaluation.as_object_mut() {
        m.insert("device".into(), serde_json::json!(device.as_str()));
        m.insert("timed".into(), serde_json::json!(timing));
        m.insert("guard".into(), guard_json);
        if !timing {
            m.remove("timing");
        }
    }
    let standing = Standing::read(&cfg, &sets, timing, &label, &evaluation).map_err(usage)?;
    if let Some(result) =
        tritonforge_rl::conclude(&cfg, &standing, &run_name, &mut show).transpose()
    {
        let run = begin_run(&ws.store_path(), &run_name, &cfg);
        return finish(&cfg, &run, result);
    }
    let evaluator = match remote {
        Some(servers) => servers,
        None => Arc::new(global.open_evaluator(pool, guard, true).await?),
    };
    let timeline = Arc::new(Timeline::new());
    let timed = Arc::new(tritonforge_rl::env::TimedEval {
        inner: evaluator.clone(),
        timeline: timeline.clone(),
    });
    let episode = EpisodeConfig {
        turns: cfg.rollout.turns,
        target_speedup: cfg.rollout.target_speedup,
        sampling: Sampling::default(),
        reward,
        target: runner::target_for(evaluator.environment(), settings.timing.enabled),
        // The behaviour log-probabilities describe the policy's own samples: no retries.
        repeat_retries: 0,
    };
    let env_of = |tasks, episode: &EpisodeConfig| -> Arc<dyn Environment> {
        Arc::new(SuiteEnv {
            tasks,
            evaluator: timed.clone(),
            prompts: prompts.clone(),
            episode: episode.clone(),
        })
    };
    // Heldout episodes play their own number of turns (`schedule.heldout_turns`).
    let heldout_episode =
        EpisodeConfig { turns: cfg.schedule.heldout_turns(&cfg.rollout), ..episode.clone() };
    let heldout =
        heldout_tasks.into_iter().map(|(n, t)| (n, env_of(t, &heldout_episode))).collect();
    let cpu = evaluator.device() == DeviceKind::Cpu;
    let setup = tritonforge_rl::setup::train_setup(&cfg, &model);
    let parts = Parts {
        env: env_of(tasks, &episode),
        heldout,
        generator: engines.generator,
        learner: engines.learner,
        setup,
        pad_id: 0,
        policy: label,
        timeline,
        timed: !cpu && settings.timing.enabled,
        run: run_name,
        tokenizer_dir: Some(PathBuf::from(&model)).filter(|d| d.join("tokenizer.json").is_file()),
        evaluation,
    };
    let store = Store::open(&ws.store_path())?;
    let run = begin_run(&ws.store_path(), &parts.run, &cfg);
    let result = tritonforge_rl::train(&cfg, parts, Some(&store), &mut show).await;
    finish(&cfg, &run, result)
}

/// The run's row in the store, begun with its config.
fn begin_run(store: &std::path::Path, name: &str, cfg: &RlConfig) -> RunLog {
    let settings = serde_json::to_value(cfg).unwrap_or_default();
    RunLog::begin(store, name.to_string(), RunKind::Rl, &settings)
}

/// The run's row ended, its last line and its exit code: the same for a run that trained
/// and for one found complete before anything started.
fn finish(cfg: &RlConfig, run: &RunLog, result: Result<RlSummary, RlError>) -> anyhow::Result<u8> {
    match &result {
        Ok(s) => run.finish(
            if s.steps_done >= cfg.schedule.steps && s.heldout_cut.is_none() {
                RunStatus::Done
            } else {
                RunStatus::Interrupted
            },
            Some(&serde_json::json!({
                "steps_done": s.steps_done, "steps": cfg.schedule.steps,
                "last_checkpoint": s.last_checkpoint,
            })),
        ),
        Err(e) => run.finish(RunStatus::Failed, Some(&serde_json::json!({"error": e.to_string()}))),
    }
    match result {
        Ok(s) => {
            let last = s.last_checkpoint.map(|p| p.display().to_string()).unwrap_or_default();
            let pending = match s.heldout_cut {
                Some(step) => format!(" (its heldout pass at step {step} is not finished)"),
                None => String::new(),
            };
            eprintln!(
                "done: {} of {} steps{pending}; latest checkpoint: {last}",
                s.steps_done, cfg.schedule.steps
            );
            Ok(exit::CORRECT)
        }
        Err(e @ (RlError::Config(_) | RlError::Resume { .. })) => Err(usage(e)),
        Err(e) => {
            eprintln!("error: {e}");
            eprintln!("(checkpoints and metrics written so far are kept; running the same command resumes)");
            Ok(exit::ENV)
        }
    }
}

fn describe_json(e: &RlEvent) -> String {
    let v = match e {
        RlEvent::Ready { info, start, steps, recipe_changes, engines_refresh_s } => {
            serde_json::json!({
                "event": "ready", "info": info, "start": start, "steps": steps,
                "recipe_changes": recipe_changes, "engines_refresh_s": engines_refresh_s,
            })
        }
        RlEvent::Heldout(h) => serde_json::json!({"event": "heldout", "heldout": h}),
        RlEvent::Step(m) => serde_json::json!({"event": "step", "metrics": m}),
        RlEvent::Saved { dir, step } => {
            serde_json::json!({"event": "saved", "dir": dir, "step": step})
        }
        RlEvent::HeldoutCut { step, played, total } => serde_json::json!({
            "event": "heldout_cut", "step": step, "played": played, "total": total,
        }),
        RlEvent::Complete { dir, step, steps } => {
            serde_json::json!({"event": "complete", "dir": dir, "step": step, "steps": steps})
        }
    };
    v.to_string()
}

fn describe(e: &RlEvent) -> String {
    match e {
        RlEvent::Ready { info, start, steps, recipe_changes, engines_refresh_s } => {
            let mut line = format!(
                "model: {:.1}M parameters ({:.1}M trained) on {}; steps {}..{steps}",
                info.parameters as f64 / 1e6,
                info.trainable as f64 / 1e6,
                info.device,
                start + 1
            );
            if let Some(secs) = engines_refresh_s {
                line.push_str(&format!(
                    "\nengines loaded the weights of step {start} ({secs:.1} s)"
                ));
            }
            if !recipe_changes.is_empty() {
                line.push_str(&format!(
                    "\nrecipe changed since step {start}: {}",
                    recipe_changes.join("; ")
                ));
            }
            line
        }
        RlEvent::Heldout(h) => {
            let sampled = if h.samples > 1 {
                format!(" × {} samples at temperature {:.2}", h.samples, h.temperature)
            } else {
                String::new()
            };
            let took = match &h.reused_from {
                Some(path) => format!("taken from {path}"),
                None if h.reused_episodes > 0 => format!(
                    "{:.0} s, {} episodes from a pass the clock cut short",
                    h.wall_s, h.reused_episodes
                ),
                None => format!("{:.0} s", h.wall_s),
            };
            format!(
                "heldout {} at step {}: pass@1 {:.1}%, solved {:.1}%, compiled {:.1}% ({} problems{sampled}, {took})",
                h.set,
                h.step,
                100.0 * h.pass_at_1,
                100.0 * h.solved,
                100.0 * h.compile_rate,
                h.problems,
            )
        }
        RlEvent::Step(m) if m.updates == 0 => format!(
            "step {}: reward {:.3}±{:.3} over {} episodes; every group's rewards were equal \
             (no signal): nothing trained",
            m.step, m.reward_mean, m.reward_std, m.episodes
        ),
        RlEvent::Step(m) => {
            let pass: Vec<String> =
                m.pass_by_turn.iter().map(|p| format!("{:.0}%", 100.0 * p)).collect();
            let worker = m.worker.as_ref().map_or(String::new(), |w| {
                let gpu = w.gpu_idle.map_or(String::new(), |g| format!(", GPU idle {:.0}%", 100.0 * g));
                let graphs = w.graphs_compiled.filter(|&n| n > 0).map_or(String::new(), |n| format!(", {n} graphs compiled"));
                let retries = w.alloc_retries.filter(|&n| n > 0).map_or(String::new(), |n| format!(", {n} allocator retries"));
                let engine = w.engine.as_ref().filter(|e| e.decode_steps > 0).map_or(String::new(), |e| {
                    format!(
                        ", {} decode steps of {:.1} ms, {:.0} rows each ({:.0}% of rows computed idle)",
                        e.decode_steps,
                        e.ms_per_step,
                        e.rows_per_step,
                        100.0 * e.idle_rows
                    )
                });
                format!(
                    "; worker: gen {:.1} s, train {:.1} s, refresh {:.2} s, idle {:.0}%{gpu}{graphs}{retries}{engine}",
                    w.generate_s,
                    w.train_s,
                    w.refresh_s,
                    100.0 * w.idle
                )
            });
            let sources: Vec<String> = m
                .by_source
                .iter()
                .map(|s| {
                    format!(
                        "{} {:.2} ({:.0}% first turn, {:.0}% no code, {:.0}% cut)",
                        s.source,
                        s.reward_mean,
                        100.0 * s.solved_first,
                        100.0 * s.no_code,
                        100.0 * s.truncated
                    )
                })
                .collect();
            let sources = if sources.len() > 1 {
                format!("; by source: {}", sources.join(", "))
            } else {
                String::new()
            };
            let engines = m
                .engines_refresh_s
                .map_or(String::new(), |s| format!("; engines loaded its weights in {s:.1} s"));
            format!(
                "step {}: reward {:.3}±{:.3}, solved by turn [{}], groups {}/{} kept, loss {:.4}, clip {:.3}, \
                 entropy {:.3}, {:.1} s (rollout {:.1}: gen {:.1}, eval {:.1}; train {:.1}), idle {:.0}%, {:.0} tok/s\
                 {worker}{engines}{sources}",
                m.step,
                m.reward_mean,
                m.reward_std,
                pass.join(" "),
                m.groups_kept,
                m.groups_drawn,
                m.loss,
                m.clip_fraction,
                m.entropy,
                m.step_s,
                m.rollout_s,
                m.generate_s,
                m.evaluate_s,
                m.score_s + m.train_s,
                100.0 * m.policy_idle,
                m.tokens_per_s
            )
        }
        RlEvent::Saved { dir, step } => format!("checkpoint at step {step}: {}", dir.display()),
        RlEvent::HeldoutCut { step, played, total } => format!(
            "heldout pass at step {step} stopped by schedule.max_seconds_now: {played} of \
             {total} episodes played and stored; the next invocation plays the rest first"
        ),
        RlEvent::Complete { dir, step, steps } => format!(
            "already complete: checkpoint {} holds step {step} of {steps}, and its heldout \
             figures (if any) are written; nothing started (raise schedule.steps to train on)",
            dir.display()
        ),
    }
}
