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

/// Candidate processes get `CUDA_DEVICE_MAX_CONNECTIONS` as configured (one hardware
/// queue by default: contexts come up faster), and `None` leaves what they inherit.
#[tokio::test]
async fn candidate_processes_get_the_configured_cuda_connections() {
    let said = |cuda_connections: Option<u32>| async move {
        let dir = tempfile::tempdir().unwrap();
        let spec = fake_worker(
            dir.path(),
            "import os, sys\nsys.stderr.write('connections=%s\\n' % os.environ.get('CUDA_DEVICE_MAX_CONNECTIONS'))\nsys.exit(1)\n",
        );
        let err = Pool::start(spec, PoolConfig { cuda_connections, fork: false, ..cfg() })
            .await
            .err()
            .expect("the stand-in always exits");
        let text = err.to_string();
        let line = text.lines().find_map(|l| l.strip_prefix("connections=")).map(str::to_owned);
        line.unwrap_or_else(|| panic!("no connections line in: {text}"))
    };
    assert_eq!(PoolConfig::default().cuda_connections, Some(1));
    assert_eq!(said(PoolConfig::default().cuda_connections).await, "1");
    assert_eq!(said(Some(4)).await, "4");
    let inherited = std::env::var("CUDA_DEVICE_MAX_CONNECTIONS").unwrap_or_else(|_| "None".into());
    assert_eq!(said(None).await, inherited);
}
