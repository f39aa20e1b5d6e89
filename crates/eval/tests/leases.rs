//! GPU leases, exclusive mode, budgets and dead-worker replacement, driven through
//! the real Python worker in CPU mode. The scheduling is the same code on a GPU;
//! only what the candidate does under its leases differs.

use std::time::{Duration, Instant};

use tritonforge_eval::{Evaluator, LeaseEvent, Pool, PoolConfig, ShareMode, START_LEASE};
use tritonforge_protocol::{EvalConfig, EvalRecord, LeaseKind, Stage, Status};
use tritonforge_suite::{Candidate, Problem};

mod common;
use common::{fixture, spec};

async fn evaluator(state: &std::path::Path, cfg: PoolConfig) -> Evaluator {
    // CPU mode times nothing; ask the workers to take their timing lease anyway, and
    // their start hold (a no-op on the CPU, granted by the same host code).
    let cfg = PoolConfig { cpu_timing_lease: true, start_lease: true, ..cfg };
    let pool = Pool::start(spec(state), cfg).await.expect("pool");
    Evaluator::new(pool, None, "test".into())
}

fn config(budget_ms: u64) -> EvalConfig {
    EvalConfig { trials: 3, budget_ms, ..EvalConfig::default() }
}

fn pair(candidate: &str) -> (Problem, Candidate) {
    (
        Problem::load(&fixture("problems/relu_small.py")).unwrap(),
        Candidate::load(&fixture(&format!("candidates/{candidate}"))).unwrap(),
    )
}

async fn eval_all(ev: &Evaluator, names: &[&str], budget_ms: u64) -> Vec<EvalRecord> {
    let futures = names.iter().map(|n| {
        let (p, c) = pair(n);
        async move { ev.evaluate(&p, &c, &config(budget_ms)).await }
    });
    let out = tokio::time::timeout(Duration::from_secs(300), futures_join_all(futures.collect()))
        .await
        .expect("the batch finished (no lease was leaked)");
    out.into_iter().map(|r| r.expect("evaluation").record).collect()
}

/// `join_all` without a futures dependency: spawn-free, polls each in turn on one task.
async fn futures_join_all<F: std::future::Future>(fs: Vec<F>) -> Vec<F::Output> {
    let mut pinned: Vec<_> = fs.into_iter().map(Box::pin).collect();
    let mut outs: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in pinned.iter_mut().zip(outs.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outs.into_iter().flatten().collect()
}

/// Exclusive holds granted so far (timing leases, exclusive mode, runs alone).
fn exclusive_holds(ev: &Evaluator) -> usize {
    ev.pool().lease_events().iter().filter(|e| e.kind == LeaseKind::Exclusive).count()
}

/// Whether a hold is a starting process's (its CUDA context, `START_LEASE`), not a job's.
fn is_start(e: &LeaseEvent) -> bool {
    e.job.starts_with(&format!("{START_LEASE}-"))
}

fn overlaps(a: &LeaseEvent, b: &LeaseEvent) -> bool {
    a.acquired < b.released && b.acquired < a.released
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn correctness_overlaps_but_a_timing_lease_holds_the_device_alone() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(state.path(), PoolConfig { workers: 3, spares: 3, ..PoolConfig::default() })
        .await;
    let records =
        eval_all(&ev, &["sleepy_relu.py", "sleepy_relu.py", "sleepy_relu.py"], 60_000).await;
    for r in &records {
        assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
    }
    let events = ev.pool().lease_events();
    let shared: Vec<_> =
        events.iter().filter(|e| e.kind == LeaseKind::Shared && !is_start(e)).collect();
    let exclusive: Vec<_> = events.iter().filter(|e| e.kind == LeaseKind::Exclusive).collect();
    // Every process (three spares, then a replacement for each job) asked for its start
    // hold before its hello.
    let starts = events.iter().filter(|e| is_start(e)).count();
    assert!(starts >= 3, "{events:#?}");
    // Every job asked for its timing lease (CPU mode then reports timing unavailable).
    assert_eq!(exclusive.len(), 3, "{events:#?}");
    // Correctness of different candidates ran side by side (each sleeps ~0.9 s in total).
    let concurrent = shared
        .iter()
        .enumerate()
        .any(|(i, a)| shared[i + 1..].iter().any(|b| a.job != b.job && overlaps(a, b)));
    assert!(concurrent, "shared leases never overlapped: {events:#?}");
    // While one candidate was timed, nothing else held the device (no process start either).
    for x in &exclusive {
        for e in &events {
            if e.job != x.job {
                assert!(!overlaps(x, e), "{x:?} overlaps {e:?}");
            }
        }
    }
    // The lane's split of the same events: all three holds, the parts adding up, and the
    // time with shared holders (alone, or draining for a timing hold) at least the longest
    // shared hold.
    let from = events.iter().map(|e| e.asked).min().unwrap();
    let to = events.iter().map(|e| e.released).max().unwrap();
    let lane = tritonforge_eval::lane::split(&events, 0, from, to);
    assert_eq!(lane.exclusive_holds, 3, "{lane:?}");
    assert!(lane.exclusive > Duration::ZERO, "{lane:?}");
    assert_eq!(lane.exclusive + lane.draining + lane.shared + lane.idle, lane.wall, "{lane:?}");
    let longest = shared.iter().map(|e| e.released - e.acquired).max().unwrap();
    assert!(lane.shared + lane.draining >= longest, "{lane:?} {longest:?}");
    assert_eq!(tritonforge_eval::lane::split(&events, 1, from, to).exclusive_holds, 0);
    // Each worker reports how long it waited for its shared holds (where a candidate's
    // time goes); the host saw the same waits from its side, a pipe's latency shorter.
    let host_waited: Duration = shared.iter().map(|e| e.acquired - e.asked).sum();
    let reported: f64 = records
        .iter()
        .map(|r| {
            let p = r.verdict.phases.as_ref().expect("phases");
            assert_eq!(p.compile_ms, Some(0.0), "nothing compiles under the interpreter");
            p.shared_wait_ms.expect("shared_wait_ms")
        })
        .sum();
    let host_ms = host_waited.as_secs_f64() * 1000.0;
    assert!(reported + 1.0 >= host_ms, "workers say {reported} ms, the host {host_ms} ms");
    // Each grant's line may wait for the worker's scheduling on a loaded machine: a
    // margin per grant (a review measured up to ~110 ms over 15 grants beside 6 busy loops).
    let margin = 40.0 * shared.len() as f64 + 100.0;
    assert!(reported <= host_ms + margin, "workers say {reported} ms, the host {host_ms} ms");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_mode_runs_one_at_a_time_and_waiting_is_not_charged_to_the_budget() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(
        state.path(),
        PoolConfig { workers: 2, spares: 2, mode: ShareMode::Exclusive, ..PoolConfig::default() },
    )
    .await;
    // Each candidate needs ~1 s of its own; the budget (2.5 s) is less than both together,
    // so the second would time out if the wait for the device were charged to it.
    let started = Instant::now();
    let records = eval_all(&ev, &["sleepy_relu.py", "sleepy_relu.py"], 2_500).await;
    for r in &records {
        assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
    }
    let waited: Vec<f64> = records.iter().map(|r| r.lease_wait_ms).collect();
    assert!(
        waited.iter().any(|w| *w > 700.0),
        "one of them must have waited for the other: {waited:?}"
    );
    let all = ev.pool().lease_events();
    let (starts, events): (Vec<LeaseEvent>, Vec<LeaseEvent>) =
        all.iter().cloned().partition(is_start);
    assert_eq!(events.len(), 2, "one whole-life hold per job: {all:#?}");
    assert!(events.iter().all(|e| e.kind == LeaseKind::Exclusive));
    assert!(!overlaps(&events[0], &events[1]), "{events:#?}");
    // Its jobs hold the device for their whole life (a process may be started for a job
    // already holding it): no start hold is asked for, which would wait for that job.
    assert!(starts.is_empty(), "{all:#?}");
    assert!(started.elapsed() >= Duration::from_millis(1800));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_and_hung_workers_release_their_leases_and_are_replaced() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(state.path(), PoolConfig { workers: 1, spares: 1, ..PoolConfig::default() })
        .await;
    // One at a time through a single slot: if a dead worker kept its lease, the next
    // job's timing lease would wait forever (the batch has a deadline).
    let records =
        eval_all(&ev, &["aborts.py", "hangs.py", "relu_ok.py", "raises.py", "relu_ok.py"], 4_000)
            .await;
    let statuses: Vec<Status> = records.iter().map(|r| r.verdict.status).collect();
    assert_eq!(
        statuses,
        vec![
            Status::RuntimeError,
            Status::Timeout,
            Status::Correct,
            Status::RuntimeError,
            Status::Correct
        ],
        "{:#?}",
        records.iter().map(|r| &r.verdict.message).collect::<Vec<_>>()
    );
    assert_eq!(records[0].verdict.stage, Stage::Process);
    assert!(records[0].verdict.message.contains("SIGABRT"), "{}", records[0].verdict.message);
    // Every hold taken was given back: each released at or after it was acquired,
    // and both correct jobs got their timing lease.
    let events = ev.pool().lease_events();
    assert!(events.iter().all(|e| e.released >= e.acquired));
    assert_eq!(exclusive_holds(&ev), 2, "{events:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_naive_mode_starts_each_process_on_demand_and_still_gets_it_right() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(
        state.path(),
        PoolConfig {
            workers: 1,
            spares: 0,
            mode: ShareMode::Exclusive,
            prestart: false,
            ..PoolConfig::default()
        },
    )
    .await;
    let records = eval_all(&ev, &["relu_ok.py", "wrong_values.py"], 60_000).await;
    assert_eq!(records[0].verdict.status, Status::Correct, "{}", records[0].verdict.message);
    assert_eq!(records[1].verdict.status, Status::Incorrect, "{}", records[1].verdict.message);
    // The start-up is on the critical path here: wall time well above the executor's own.
    for r in &records {
        let executor = r.executor_ms.unwrap_or(0.0);
        assert!(r.wall_ms > executor + 500.0, "wall {} vs executor {executor}", r.wall_ms);
    }
}

/// Sharing a device, a candidate can run out of memory because of its neighbours: such a
/// verdict is not kept but evaluated again with the device held alone (one exclusive
/// hold from start to end), and the record says so. Any other failure is not retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_while_sharing_is_evaluated_again_alone() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(state.path(), PoolConfig { workers: 2, spares: 2, ..PoolConfig::default() })
        .await;
    let raised = &eval_all(&ev, &["raises.py"], 60_000).await[0];
    assert_eq!(raised.verdict.status, Status::RuntimeError, "{}", raised.verdict.message);
    assert!(!raised.verdict.message.contains("alone"), "{}", raised.verdict.message);
    assert_eq!(exclusive_holds(&ev), 0, "a plain error is not retried");

    let oom = &eval_all(&ev, &["runs_out_of_memory.py"], 60_000).await[0];
    assert_eq!(oom.verdict.status, Status::RuntimeError, "{}", oom.verdict.message);
    assert!(oom.verdict.message.contains("evaluated again alone"), "{}", oom.verdict.message);
    assert!(oom.verdict.message.contains("OutOfMemoryError"), "{}", oom.verdict.message);
    assert_eq!(exclusive_holds(&ev), 1, "{:#?}", ev.pool().lease_events());

    // A reference that runs out of memory after the candidate ran is the candidate's
    // failure (it may have caused it), named as the reference's, and retried alone too.
    let problem = Problem::load(&fixture("problems/reference_out_of_memory.py")).unwrap();
    let relu = Candidate::load(&fixture("candidates/relu_ok.py")).unwrap();
    let r = ev.evaluate(&problem, &relu, &config(60_000)).await.unwrap().record;
    assert_eq!(r.verdict.status, Status::RuntimeError, "{}", r.verdict.message);
    assert!(r.verdict.message.contains("the reference failed"), "{}", r.verdict.message);
    assert!(r.verdict.message.contains("evaluated again alone"), "{}", r.verdict.message);
    assert_eq!(exclusive_holds(&ev), 2, "{:#?}", ev.pool().lease_events());

    // In exclusive mode every run already holds its device alone: no second run.
    let state = tempfile::tempdir().unwrap();
    let alone =
        evaluator(state.path(), PoolConfig { mode: ShareMode::Exclusive, ..PoolConfig::default() })
            .await;
    let once = &eval_all(&alone, &["runs_out_of_memory.py"], 60_000).await[0];
    assert!(!once.verdict.message.contains("alone"), "{}", once.verdict.message);
    assert_eq!(exclusive_holds(&alone), 1, "one run, one hold");
}

/// A run alone takes its device's exclusive hold before it takes a process; a process
/// still starting may be asking for its start hold meanwhile. The start waits a bounded
/// time and goes on, so both retries alone end (before the bound, one waited for the
/// other until its start timed out and the evaluation failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_alone_and_a_starting_process_do_not_wait_for_each_other() {
    let state = tempfile::tempdir().unwrap();
    let cfg = PoolConfig {
        workers: 2,
        spares: 1,
        startup_timeout: Duration::from_secs(20),
        ..PoolConfig::default()
    };
    let ev = evaluator(state.path(), cfg).await;
    let started = Instant::now();
    let records =
        eval_all(&ev, &["sleepy_out_of_memory.py", "sleepy_out_of_memory.py"], 60_000).await;
    for r in &records {
        assert!(r.verdict.message.contains("evaluated again alone"), "{}", r.verdict.message);
    }
    assert!(started.elapsed() < Duration::from_secs(40), "{:?}", started.elapsed());
}

/// With one place to run, the second of two candidates sent together waits for the
/// first: its record says so in `queue_wait_ms`, outside its `wall_ms`; the first waited
/// for nothing. (On a GPU this wait hid in RL's turn times: docs/rl.md, run 8.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_waiting_for_a_place_to_run_records_the_wait() {
    let state = tempfile::tempdir().unwrap();
    let ev = evaluator(state.path(), PoolConfig { workers: 1, spares: 1, ..PoolConfig::default() })
        .await;
    let mut records = eval_all(&ev, &["sleepy_relu.py", "sleepy_relu.py"], 60_000).await;
    records.sort_by(|a, b| a.queue_wait_ms.total_cmp(&b.queue_wait_ms));
    let (first, second) = (&records[0], &records[1]);
    for r in &records {
        assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
        assert!(r.prepare_ms < 50.0, "CPU mode measures no memory need: {}", r.prepare_ms);
    }
    assert!(
        first.queue_wait_ms < 100.0,
        "the first had the place at once: {}",
        first.queue_wait_ms
    );
    // The second waited about the first's whole run (its sleeps alone are ~0.9 s).
    assert!(
        second.queue_wait_ms >= 0.5 * first.wall_ms && second.queue_wait_ms >= 500.0,
        "second waited {} ms; the first ran {} ms",
        second.queue_wait_ms,
        first.wall_ms
    );
    // Each says how long its process took to start (fork to hello), as the host saw it
    // and as the process itself did (within the host's; no CUDA context on the CPU).
    for r in &records {
        assert!(
            r.process_start_ms > 0.0 && r.process_start_ms < 60_000.0,
            "{}",
            r.process_start_ms
        );
        let own = r.process_startup.expect("the process's own account");
        assert!(own.total_ms > 0.0 && own.total_ms <= r.process_start_ms, "{own:?}");
        assert_eq!(own.context_ms, 0.0);
    }
    // A spare that had time to start waits, banked, for the next candidate.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let third = &eval_all(&ev, &["relu_ok.py"], 60_000).await[0];
    assert!(third.process_banked_ms >= 1000.0, "banked {} ms", third.process_banked_ms);
    assert!(third.start_wait_ms < third.process_banked_ms, "{} ms", third.start_wait_ms);
}

/// A candidate waiting for the timing lane gives its place to the next one (which then
/// imports, compiles and checks meanwhile) when the pool has a timing queue; with none
/// it keeps its place and the next one queues behind its wait. Two places: `holds` sits
/// 6 s in a trial holding the device shared, so `fast`'s timing lease waits for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_candidate_waiting_for_the_timing_lane_gives_its_place_to_the_next() {
    for queue in [2, 0] {
        let state = tempfile::tempdir().unwrap();
        let cfg =
            PoolConfig { workers: 2, spares: 3, timing_queue: queue, ..PoolConfig::default() };
        let ev = evaluator(state.path(), cfg).await;
        // Processes started ahead, so that no wait for a start blurs the figures below.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let records =
            eval_all(&ev, &["holds_the_device.py", "relu_ok.py", "relu_ok.py"], 60_000).await;
        for r in &records {
            assert_eq!(r.verdict.status, Status::Correct, "{}", r.verdict.message);
        }
        let (fast, next) = (&records[1], &records[2]);
        eprintln!(
            "queue {queue}: fast wall {:.0} ms, lease wait {:.0} ms; next queue wait {:.0} ms",
            fast.wall_ms, fast.lease_wait_ms, next.queue_wait_ms
        );
        assert!(
            fast.lease_wait_ms > 2_000.0,
            "queue {queue}: fast waited {} ms",
            fast.lease_wait_ms
        );
        if queue > 0 {
            // `next` had a place while `fast` was still waiting for the lane.
            assert!(
                next.queue_wait_ms + 1_500.0 < fast.wall_ms,
                "queue {queue}: next waited {} ms for a place; fast ran {} ms",
                next.queue_wait_ms,
                fast.wall_ms
            );
        } else {
            assert!(
                next.queue_wait_ms + 500.0 >= fast.wall_ms,
                "queue 0: next waited {} ms for a place; fast ran {} ms",
                next.queue_wait_ms,
                fast.wall_ms
            );
        }
    }
}
