//! `tritonforge doctor`: what this installation found, without installing anything.

use serde_json::json;
use tritonforge_protocol::DeviceKind;
use tritonforge_pyenv::{managed_is_ready, PythonEnv, PythonSource};
use tritonforge_store::Store;

use crate::{Global, EXIT_CORRECT, EXIT_ENV};

pub async fn run(global: &Global, as_json: bool) -> anyhow::Result<u8> {
    let mut ok = true;
    let source = global.python_source();
    let worker_path = tritonforge_pyenv::extract_worker(&global.state_dir)?;
    let (interpreter, kind, ready) = match &source {
        PythonSource::Explicit(p) => (p.clone(), "named interpreter (nothing installed)", true),
        PythonSource::Managed(v) => (
            tritonforge_pyenv::venv_python(v),
            "managed virtual environment",
            managed_is_ready(v),
        ),
    };
    let probe = if ready {
        let env = PythonEnv {
            interpreter: interpreter.clone(),
            worker_path: worker_path.clone(),
            managed: None,
        };
        match tritonforge_pyenv::probe(&env, global.device.into()) {
            Ok(info) => Some(Ok(info)),
            Err(e) => {
                ok = false;
                Some(Err(e.to_string()))
            }
        }
    } else {
        ok = false;
        None
    };
    // What confines a candidate is read from a real worker: it applies the sandbox itself.
    let sandbox = match &probe {
        Some(Ok(_)) => {
            let cfg = tritonforge_eval::PoolConfig {
                workers: 1,
                spares: 0,
                prestart: false,
                ..tritonforge_eval::PoolConfig::default()
            };
            match global.start_pool(cfg).await {
                Ok(pool) => Some(Ok(pool.sandbox().clone())),
                Err(e) => {
                    ok = false;
                    Some(Err(format!("{e:#}")))
                }
            }
        }
        _ => None,
    };
    let store_path = global.store_path();
    let store = if store_path.exists() {
        Store::open(&store_path)
            .and_then(|s| s.stats())
            .map_err(|e| e.to_string())
    } else {
        Ok(Default::default())
    };
    if as_json {
        let v = json!({
            "tritonforge": env!("CARGO_PKG_VERSION"),
            "protocol": tritonforge_protocol::PROTOCOL_VERSION,
            "state_dir": global.state_dir,
            "store": store_path,
            "store_evaluations": store.as_ref().map(|s| s.evaluations).ok(),
            "interpreter": interpreter,
            "interpreter_kind": kind,
            "ready": ready,
            "worker_path": worker_path,
            "worker_hash": tritonforge_pyenv::worker_hash(),
            "env": probe.as_ref().and_then(|p| p.as_ref().ok()),
            "sandbox": sandbox.as_ref().and_then(|p| p.as_ref().ok()),
            "error": probe.as_ref().and_then(|p| p.as_ref().err()),
        });
        println!("{v:#}");
    } else {
        println!(
            "tritonforge {} (protocol {})",
            env!("CARGO_PKG_VERSION"),
            tritonforge_protocol::PROTOCOL_VERSION
        );
        println!("state dir:   {}", global.state_dir.display());
        match &store {
            Ok(s) if store_path.exists() => {
                let by: Vec<String> = s
                    .by_status
                    .iter()
                    .map(|(k, n)| format!("{n} {k}"))
                    .collect();
                println!(
                    "store:       {} ({} evaluations{}{})",
                    store_path.display(),
                    s.evaluations,
                    if by.is_empty() { "" } else { ": " },
                    by.join(", ")
                );
            }
            Ok(_) => println!("store:       {} (not created yet)", store_path.display()),
            Err(e) => {
                ok = false;
                println!("store:       {} (unreadable: {e})", store_path.display());
            }
        }
        println!("interpreter: {} ({kind})", interpreter.display());
        println!("worker:      {}", worker_path.display());
        match &probe {
            None => println!(
                "python:      not set up yet; `tritonforge setup` (or the first `eval`) creates it"
            ),
            Some(Err(e)) => println!("python:      unusable: {e}"),
            Some(Ok(info)) => {
                println!(
                    "python:      {} | torch {} | triton {} | numpy {}",
                    info.python, info.torch, info.triton, info.numpy
                );
                match info.device {
                    DeviceKind::Cpu => println!("device:      CPU mode: Triton interpreter (no GPU visible to torch); timing unavailable"),
                    DeviceKind::Cuda => {
                        for g in &info.gpus {
                            println!(
                                "device:      GPU {}: {} ({:.0} GiB, sm {}), CUDA {}, driver {}",
                                g.index,
                                g.name,
                                g.memory_bytes as f64 / (1u64 << 30) as f64,
                                g.capability,
                                info.cuda.as_deref().unwrap_or("?"),
                                info.driver.as_deref().unwrap_or("unknown")
                            );
                        }
                    }
                }
            }
        }
        match &sandbox {
            None => {}
            Some(Err(e)) => println!("sandbox:     could not start a worker: {e}"),
            Some(Ok(s)) => println!("sandbox:     {}", sandbox_line(s)),
        }
    }
    Ok(if ok { EXIT_CORRECT } else { EXIT_ENV })
}

/// One line on what confines candidate processes, and what does not.
pub fn sandbox_line(s: &tritonforge_protocol::Sandbox) -> String {
    let mut parts = Vec::new();
    match s.landlock_abi {
        Some(abi) => parts.push(format!("landlock ABI {abi}")),
        None => parts.push("no landlock".to_string()),
    }
    let yes_no = |b: bool, yes: &str, no: &str| if b { yes.to_string() } else { no.to_string() };
    parts.push(yes_no(
        s.filesystem,
        "writes confined to scratch",
        "writes NOT confined",
    ));
    parts.push(yes_no(s.network, "TCP denied", "network NOT restricted"));
    parts.push(yes_no(s.signals, "signals scoped", "signals NOT scoped"));
    if let Some(f) = s.gpu_memory_fraction {
        parts.push(format!("GPU memory cap {:.0}%", f * 100.0));
    }
    let mut line = parts.join(", ");
    for n in &s.notes {
        line.push_str(&format!("\n             note: {n}"));
    }
    line
}
