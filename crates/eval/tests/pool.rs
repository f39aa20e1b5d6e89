//! Pool start-up against stand-in workers: real processes speaking (or breaking)
//! the protocol, so version mismatches and dead workers are reported clearly.

use std::path::Path;
use std::time::Duration;

use tritonforge_eval::{EvalError, Pool, PoolConfig, WorkerSpec};
use tritonforge_protocol::{DeviceRequest, ProtocolError, PROTOCOL_VERSION};

fn fake_worker(dir: &Path, main_py: &str) -> WorkerSpec {
    let pkg = dir.join("pkg/tritonforge_worker");
    std::fs::create_dir_all(&pkg).unwrap();
    std::fs::write(pkg.join("__init__.py"), "").unwrap();
    std::fs::write(pkg.join("__main__.py"), main_py).unwrap();
    WorkerSpec {
        python: "python3".into(),
        worker_path: dir.join("pkg"),
        scratch_root: dir.join("scratch"),
        device: DeviceRequest::Cpu,
        threads: 1,
    }
}

fn cfg() -> PoolConfig {
    PoolConfig {
        workers: 1,
        spares: 1,
        startup_timeout: Duration::from_secs(5),
        ..PoolConfig::default()
    }
}

#[tokio::test]
async fn a_worker_of_another_protocol_version_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fake_worker(
        dir.path(),
        "import sys\nprint('{\"type\":\"hello\",\"protocol\":99}', flush=True)\nsys.stdin.readline()\n",
    );
    let err = Pool::start(spec, cfg()).await.err().expect("must fail");
    assert!(
        matches!(
            err,
            EvalError::Protocol(ProtocolError::VersionMismatch {
                expected: PROTOCOL_VERSION,
                found: 99
            })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("version 99"), "{err}");
}

#[tokio::test]
async fn a_worker_that_dies_at_start_up_is_reported_with_its_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fake_worker(
        dir.path(),
        "import sys\nsys.stderr.write('ModuleNotFoundError: No module named torch\\n')\nsys.exit(1)\n",
    );
    let err = Pool::start(spec, cfg()).await.err().expect("must fail");
    let text = err.to_string();
    assert!(matches!(err, EvalError::WorkerStart { .. }), "{text}");
    assert!(text.contains("No module named torch"), "{text}");
}

#[tokio::test]
async fn a_worker_that_never_says_hello_times_out_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let spec = fake_worker(dir.path(), "import time\ntime.sleep(60)\n");
    let started = std::time::Instant::now();
    let err =
        Pool::start(spec, PoolConfig { startup_timeout: Duration::from_millis(800), ..cfg() })
            .await
            .err()
            .expect("must fail");
    assert!(err.to_string().contains("no hello"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}
