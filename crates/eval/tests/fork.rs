//! CPU mode's fork server, driven through the real Python worker: processes are
//! forked, each is as isolated as a started one, and losing the server costs
//! nothing but speed.

use std::time::Duration;

use tritonforge_eval::{Evaluator, Pool, PoolConfig};
use tritonforge_protocol::{EvalConfig, EvalRecord, Stage, Status};
use tritonforge_suite::{Candidate, Problem};

mod common;
use common::{fixture, spec};

async fn evaluator(state: &std::path::Path, fork: bool) -> Evaluator {
    let cfg = PoolConfig { workers: 1, spares: 1, fork, ..PoolConfig::default() };
    let pool = Pool::start(spec(state), cfg).await.expect("pool");
    Evaluator::new(pool, None, "test".into())
}

async fn eval(ev: &Evaluator, candidate: &str) -> EvalRecord {
    let problem = Problem::load(&fixture("problems/relu_small.py")).unwrap();
    let candidate = Candidate::load(&fixture(&format!("candidates/{candidate}"))).unwrap();
    let config = EvalConfig { trials: 2, budget_ms: 60_000, ..EvalConfig::default() };
    tokio::time::timeout(Duration::from_secs(120), ev.evaluate(&problem, &candidate, &config))
        .await
        .expect("in time")
        .expect("evaluation")
        .record
}

/// Send the pool's fork server `signal` (as a candidate could, where signals are not
/// scoped); its pid.
fn signal_server(ev: &Evaluator, signal: nix::sys::signal::Signal) -> i32 {
    let server = ev.pool().fork_server().expect("a fork server");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(server), signal).unwrap();
    server
}

/// The `FACTS ...` line `inspects_its_process.py` wrote before exiting with 17.
fn facts(r: &EvalRecord) -> String {
    assert_eq!(r.verdict.stage, Stage::Process, "{r:#?}");
    assert!(r.verdict.message.contains("status 17"), "{}", r.verdict.message);
    let tail = r.stderr_tail.clone().unwrap_or_default();
    tail.lines()
        .find_map(|l| l.strip_prefix("FACTS ").map(str::to_owned))
        .unwrap_or_else(|| panic!("no FACTS line in {tail}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cpu_processes_are_forked_fresh_and_isolated() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(state.path(), true).await;
    assert!(ev.pool().fork_server().is_some(), "CPU mode forks");
    // Each candidate sees a process no candidate ran in before.
    for _ in 0..3 {
        let r = eval(&ev, "fresh_process.py").await;
        assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
    }
    let r = eval(&ev, "inspects_its_process.py").await;
    let f = facts(&r);
    // Its own stdin and stdout pipes, nothing else: not the server's control socket,
    // not its reply pipe (which would let it forge what the host reads).
    assert!(f.contains("sockets=0 pipes=2 "), "{f}");
    // Its own session, so the host kills its whole group and nothing else.
    assert!(f.contains("own_session=True"), "{f}");
    // Its own scratch directory, not the server's.
    assert!(f.contains(&format!("cwd={}", state.path().join("scratch").display())), "{f}");
    assert!(!f.contains("/z"), "{f}");
    if ev.pool().sandbox().signals {
        assert!(f.contains("signal_parent=denied"), "{f}");
    }
    // Landlock keeps it from the server's /proc entries (its descriptors, its memory).
    if ev.pool().sandbox().filesystem {
        assert!(f.contains("parent_fds=denied"), "{f}");
    }
    // Crashes are reported with the status the server reaped.
    let r = eval(&ev, "aborts.py").await;
    assert!(r.verdict.message.contains("SIGABRT"), "{}", r.verdict.message);
    // The first process, three fresh ones, the inspector, the abort, and the spare
    // already waiting: all forked.
    assert!(ev.pool().forked() >= 6, "{}", ev.pool().forked());
}

/// A fork server that dies is replaced (a long `serve` keeps forking), at most three
/// times; after that every process is started, still correct.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_fork_server_is_replaced_a_bounded_number_of_times() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(state.path(), true).await;
    let mut seen = vec![signal_server(&ev, nix::sys::signal::Signal::SIGKILL)];
    for round in 0..4 {
        for _ in 0..2 {
            let r = eval(&ev, "fresh_process.py").await;
            assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
        }
        // Replacements are started by the pool's top-ups, in the background.
        let mut server = None;
        for _ in 0..if round == 3 { 50 } else { 1200 } {
            // A new server, and it has forked (it is set just before its first fork).
            server =
                ev.pool().fork_server().filter(|p| !seen.contains(p) && ev.pool().forked() > 0);
            if server.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if round == 3 {
            // The three replacements are spent: no server, however long one waits.
            assert_eq!(server, None, "a fourth replacement after {seen:?}");
            assert_eq!(ev.pool().fork_server(), None);
            break;
        }
        match server {
            Some(pid) => {
                assert!(!seen.contains(&pid), "a new server, not {seen:?}");
                seen.push(signal_server(&ev, nix::sys::signal::Signal::SIGKILL));
            }
            None => panic!("round {round}: no new fork server after {seen:?}"),
        }
    }
    assert_eq!(seen.len(), 4, "the first server and three replacements");
}

/// Where signals to other processes are not scoped, a candidate can stop its parent.
/// A stopped server must cost one fork's wait, not a hung pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_fork_server_is_given_up_on() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(state.path(), true).await;
    let server = signal_server(&ev, nix::sys::signal::Signal::SIGSTOP);
    let started = std::time::Instant::now();
    for _ in 0..3 {
        let r = eval(&ev, "fresh_process.py").await;
        assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
    }
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
    assert_ne!(
        ev.pool().fork_server(),
        Some(server),
        "the stopped server was dropped (a new one may have replaced it)"
    );
    // And killed, not left stopped.
    assert!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(server), None).is_err()
            || std::fs::read_to_string(format!("/proc/{server}/stat"))
                .is_ok_and(|s| s.contains(") Z ")),
        "the server is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_fork_every_process_is_started() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(state.path(), false).await;
    assert_eq!(ev.pool().fork_server(), None);
    let r = eval(&ev, "inspects_its_process.py").await;
    let f = facts(&r);
    // Started processes talk over pipes, and close whatever else they inherited.
    assert!(f.contains("sockets=0 pipes=2 "), "{f}");
    let r = eval(&ev, "relu_ok.py").await;
    assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
    assert_eq!(ev.pool().forked(), 0);
}
