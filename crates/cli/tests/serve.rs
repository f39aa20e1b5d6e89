//! `tritonforge serve`, run as the real binary on loopback with real CPU-mode workers:
//! the KernelBench-style API field by field, the native API, repeats costing one
//! evaluation, bad input, auth, `kill -9` durability, a bounded load, and the balancing
//! client failing over when a server dies.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod common;
use common::{fixture, serve, tf};

fn src(rel: &str) -> String {
    std::fs::read_to_string(fixture(rel)).unwrap()
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(600)).build().unwrap()
}

async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = http().post(url).json(body).send().await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

async fn get(url: &str) -> (u16, Value) {
    let r = http().get(url).send().await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

async fn metric(base: &str, name: &str) -> f64 {
    let text = http().get(format!("{base}/metrics")).send().await.unwrap().text().await.unwrap();
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{text}"))
}

fn kb_request(candidate: &str) -> Value {
    json!({
        "original_model_src": src("problems/relu_small.py"),
        "custom_model_src": candidate,
        "num_correct_trials": 3,
        "seed": 7,
        "backend": "triton",
    })
}

/// Their reply's documented keys and types.
fn assert_kernelbench_shape(v: &Value) {
    assert!(v["compiled"].is_boolean() && v["correctness"].is_boolean(), "{v}");
    assert!(v["runtime"].is_f64(), "{v}");
    assert!(v["runtime_stats"].is_object() && v["metadata"].is_object(), "{v}");
    for k in ["hardware", "device"] {
        assert!(v["metadata"][k].is_string(), "metadata.{k}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kernelbench_api_field_by_field_and_a_triple_post_costs_one_evaluation() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &[]);
    let url = &s.url;
    // Their client posts the same sample three times; only the first runs.
    let mut replies = Vec::new();
    for _ in 0..3 {
        let (code, v) =
            post(&format!("{url}/eval"), &kb_request(&src("candidates/relu_ok.py"))).await;
        assert_eq!(code, 200, "{v}\n{}", s.log());
        replies.push(v);
    }
    for v in &replies {
        assert_kernelbench_shape(v);
        assert_eq!((v["compiled"].as_bool(), v["correctness"].as_bool()), (Some(true), Some(true)));
        // CPU mode times nothing: their "not measured" value and an empty stats object.
        assert_eq!(v["runtime"].as_f64(), Some(-1.0));
        assert_eq!(v["runtime_stats"], json!({}));
        assert_eq!(v["metadata"]["correctness_trials"], "(3 / 3)");
        assert_eq!(v["metadata"]["tritonforge"]["status"], "correct");
    }
    assert_eq!(
        replies[0]["metadata"]["tritonforge"]["job"],
        replies[2]["metadata"]["tritonforge"]["job"]
    );
    assert_eq!(metric(url, "tritonforge_jobs_accepted_total").await, 1.0);
    assert_eq!(metric(url, "tritonforge_jobs_deduplicated_total").await, 2.0);
    // The one evaluation's own account of its compiles and shared-hold waits.
    for stage in ["trials", "compile", "shared_wait"] {
        let name = format!("tritonforge_stage_seconds_count{{stage=\"{stage}\"}}");
        assert_eq!(metric(url, &name).await, 1.0, "{name}");
    }

    // Failures carry their keys.
    let (_, bad) =
        post(&format!("{url}/eval"), &kb_request(&src("candidates/syntax_error.py"))).await;
    assert_kernelbench_shape(&bad);
    assert_eq!(bad["compiled"], false);
    assert!(bad["metadata"]["compilation_error"].as_str().is_some_and(|m| !m.is_empty()), "{bad}");
    let (_, wrong) =
        post(&format!("{url}/eval"), &kb_request(&src("candidates/wrong_values.py"))).await;
    assert_eq!(
        (wrong["compiled"].as_bool(), wrong["correctness"].as_bool()),
        (Some(true), Some(false))
    );
    assert!(wrong["metadata"]["correctness_issue"].is_string(), "{wrong}");
    assert_eq!(wrong["metadata"]["correctness_issue_name"], "correctness_issue");

    // Validation errors in FastAPI's shape, naming the field.
    let (code, v) = post(&format!("{url}/eval"), &json!({"original_model_src": "x"})).await;
    assert_eq!(code, 422);
    assert_eq!(v["detail"][0]["loc"], json!(["body", "custom_model_src"]), "{v}");
    assert_eq!(v["detail"][0]["type"], "missing");
    let mut req = kb_request("x");
    req["backend"] = json!("cuda-graphs");
    let (code, v) = post(&format!("{url}/eval"), &req).await;
    assert_eq!((code, v["detail"][0]["loc"][1].as_str()), (422, Some("backend")), "{v}");

    // Status endpoints in their shapes, from our state.
    let (code, h) = get(&format!("{url}/health")).await;
    assert_eq!((code, h["status"].as_str()), (200, Some("healthy")));
    assert_eq!(h["cuda_available"], false);
    assert!(h["devices"].as_array().is_some_and(|d| d.len() == 1 && d[0]["device_id"] == 0), "{h}");
    let (_, g) = get(&format!("{url}/gpu_status")).await;
    assert_eq!(g, json!({"error": "CUDA/ROCm not available"}));
    let (_, b) = get(&format!("{url}/backend_info")).await;
    assert_eq!(b["supported_backends"], json!(["cuda", "triton"]));
    assert_eq!(b["triton_available"], true);
    assert!(metric(url, "tritonforge_uptime_seconds").await > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn native_api_submit_wait_batch_stream_list_and_cancel() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &["--jobs", "1"]);
    let v1 = format!("{}/v1", s.url);
    let problem = json!({"name": "relu_small", "source": src("problems/relu_small.py")});
    let one = json!({"problem": problem, "candidate": {"name": "relu_ok", "source": src("candidates/relu_ok.py")},
                     "options": {"trials": 2}});
    let (code, sub) = post(&format!("{v1}/evaluations"), &one).await;
    assert_eq!(code, 202, "{sub}");
    let id = sub["id"].as_str().unwrap().to_string();
    let (code, job) = get(&format!("{v1}/evaluations/{id}?wait=300")).await;
    assert_eq!((code, job["state"].as_str()), (200, Some("done")), "{job}");
    let record = &job["record"];
    assert_eq!(record["status"], "correct");
    assert_eq!(record["config"]["trials"], 2);
    assert_eq!(record["problem"]["name"], "relu_small");

    // The same pair from `eval --json` has the same key and verdict.
    let out = common::run(
        tf(dir.path())
            .args(["eval", "--json", "--trials", "2", "--problem"])
            .arg(fixture("problems/relu_small.py"))
            .arg("--candidate")
            .arg(fixture("candidates/relu_ok.py")),
    );
    let local: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::text(&out.stderr)));
    assert_eq!((&local["key"], &local["status"]), (&record["key"], &record["status"]));

    // A batch, streamed as it finishes; one of them cancelled while queued.
    let cands = ["relu_ok", "wrong_values", "syntax_error", "sleepy_relu"];
    let evals: Vec<Value> = cands
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let source = format!("{}\n# batch {i}\n", src(&format!("candidates/{c}.py")));
            json!({"problem": problem, "candidate": {"name": c, "source": source}})
        })
        .collect();
    let (code, b) = post(&format!("{v1}/evaluations/batch"), &json!({"evaluations": evals})).await;
    assert_eq!(code, 202, "{b}");
    let ids: Vec<String> = b["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    let (code, c) = http()
        .delete(format!("{v1}/evaluations/{}", ids[3]))
        .send()
        .await
        .map(|r| (r.status().as_u16(), r))
        .unwrap();
    assert_eq!(code, 200);
    let c: Value = c.json().await.unwrap();
    assert_eq!(c["state"], "cancelled");
    let body = http()
        .get(format!("{v1}/events?ids={}", ids.join(",")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events: Vec<Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(events.len(), 4, "{body}");
    let status_of = |name: &str| -> Value {
        let e = events.iter().find(|e| e["candidate"] == name).unwrap();
        if e["state"] == "cancelled" {
            json!("cancelled")
        } else {
            e["record"]["status"].clone()
        }
    };
    assert_eq!(status_of("relu_ok"), "correct");
    assert_eq!(status_of("wrong_values"), "incorrect");
    assert_eq!(status_of("syntax_error"), "compile_error");
    assert_eq!(status_of("sleepy_relu"), "cancelled");

    let (_, list) = get(&format!("{v1}/evaluations?state=done&limit=10")).await;
    assert_eq!(list["evaluations"].as_array().unwrap().len(), 4, "{list}");
    let (code, _) = get(&format!("{v1}/evaluations/nope")).await;
    assert_eq!(code, 404);
    let (_, info) = get(&format!("{v1}/info")).await;
    assert_eq!(info["device"], "cpu");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_requests_get_a_4xx_naming_the_field_and_the_server_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &["--max-body-bytes", "200000", "--no-suite"]);
    let url = format!("{}/v1/evaluations", s.url);
    let send = |body: Vec<u8>| {
        let url = url.clone();
        async move {
            let r = http()
                .post(url)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap();
            let code = r.status().as_u16();
            (code, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let ok_candidate = json!({"source": "x = 1"});
    let cases: Vec<(Vec<u8>, u16, &str)> = vec![
        (b"{not json".to_vec(), 400, "body"),
        (vec![0xff, 0xfe, b'{', b'}'], 400, "body"),
        (json!({"candidate": ok_candidate}).to_string().into_bytes(), 422, "problem"),
        (json!({"problem": {"source": "a"}}).to_string().into_bytes(), 422, "candidate"),
        (json!({"problem": {"source": 3}, "candidate": ok_candidate}).to_string().into_bytes(), 422, "problem.source"),
        (json!({"problem": {"source": "a"}, "candidate": ok_candidate, "options": {"trials": "five"}}).to_string().into_bytes(), 422, "options.trials"),
        (json!({"problem": {"source": "a"}, "candidate": ok_candidate, "options": {"trials": 0}}).to_string().into_bytes(), 422, "options"),
        (json!({"problem": {"source": "a", "name": "../etc"}, "candidate": ok_candidate}).to_string().into_bytes(), 422, "problem.name"),
        (json!({"problem": {"source": "a"}, "candidate": ok_candidate, "colour": 1}).to_string().into_bytes(), 422, "colour"),
        (json!({"problem_id": "relu", "candidate": ok_candidate}).to_string().into_bytes(), 422, "problem_id"),
        (json!({"problem": {"source": "a".repeat(300_000)}, "candidate": ok_candidate}).to_string().into_bytes(), 413, "body"),
    ];
    for (body, want, field) in cases {
        let shown = String::from_utf8_lossy(&body[..body.len().min(80)]).into_owned();
        let (code, v) = send(body).await;
        assert_eq!(code, want, "{shown}: {v}");
        assert_eq!(v["field"].as_str(), Some(field), "{shown}: {v}");
        assert!(v["detail"].as_str().is_some_and(|d| !d.is_empty()), "{v}");
    }
    let (code, v) = get(&format!("{}/v1/evaluations/x?wait=-1", s.url)).await;
    assert_eq!((code, v["field"].as_str()), (422, Some("wait")));
    let (code, _) = get(&format!("{}/nowhere", s.url)).await;
    assert_eq!(code, 404);
    let r = http().put(format!("{}/eval", s.url)).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 405);
    let (code, _) = get(&format!("{}/health", s.url)).await;
    assert_eq!(code, 200, "{}", s.log());
    assert!(metric(&s.url, "tritonforge_http_refused_total{code=\"422\"}").await >= 8.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_is_required_when_set_and_beyond_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "s3cret\n").unwrap();
    let mut s = serve(dir.path(), &["--token-file", token.to_str().unwrap()]);
    let health = format!("{}/health", s.url);
    assert_eq!(http().get(&health).send().await.unwrap().status().as_u16(), 401);
    let wrong = http().get(&health).bearer_auth("guess").send().await.unwrap();
    assert_eq!(wrong.status().as_u16(), 401);
    let right = http().get(&health).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(right.status().as_u16(), 200);

    // The dashboard at `/`: its shell is public, its data needs the token or the session
    // the login form sets, and that session reads but never changes anything.
    let url = &s.url;
    let page = http().get(format!("{url}/")).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    let runs = format!("{url}/dash/runs");
    assert_eq!(http().get(&runs).send().await.unwrap().status().as_u16(), 401);
    let no_redirect =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let login = no_redirect
        .post(format!("{url}/dash/login"))
        .form(&[("token", "s3cret")])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 303, "{}", s.log());
    let cookie =
        login.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    assert!(!cookie.contains("s3cret"), "{cookie}");
    let info =
        http().get(format!("{url}/dash/info")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(info.status().as_u16(), 200);
    let info: Value = info.json().await.unwrap();
    assert_eq!((info["mode"].as_str(), info["suite"].as_bool()), (Some("serve"), Some(true)));
    assert!(info["queue"].is_object(), "{info}");
    let submit = http()
        .post(format!("{url}/v1/evaluations"))
        .header("cookie", &cookie)
        .json(&json!({"problem_id": "relu", "candidate": {"name": "c", "source": "x"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(submit.status().as_u16(), 401, "a session cookie must not submit work");
    // A dashboard tab left open (a live stream) does not hold up a graceful stop.
    let stream = http()
        .get(format!("{url}/dash/stream?runs=sft-none"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    // Nor does a client following the evaluator's own event stream.
    let events = http()
        .get(format!("{url}/v1/events"))
        .header("authorization", "Bearer s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(events.status().as_u16(), 200, "{}", s.log());
    // The server's own queue, as the dashboard's queue page reads it: behind the token,
    // and never holding it.
    let queue =
        http().get(format!("{url}/dash/queue")).header("cookie", &cookie).send().await.unwrap();
    assert_eq!(queue.status().as_u16(), 200);
    let queue = queue.text().await.unwrap();
    assert!(queue.contains("\"mode\":\"serve\"") && !queue.contains("s3cret"), "{queue}");
    assert_eq!(http().get(format!("{url}/dash/queue")).send().await.unwrap().status(), 401);
    // Guessing the token: ten wrong ones from an address (one above), and it is refused
    // for a minute, the right token too; another address is not.
    for _ in 0..9 {
        let r = http().get(&health).bearer_auth("guess").send().await.unwrap();
        assert_eq!(r.status().as_u16(), 401);
    }
    let locked = http().get(&health).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(locked.status().as_u16(), 429, "{}", s.log());
    assert!(locked.headers().contains_key("retry-after"));
    let other = reqwest::Client::builder()
        .local_address("127.0.0.2".parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap();
    let r = other.get(&health).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(s.child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "serve did not stop with a stream open:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop((stream, events));
    drop(s);
    let out = common::run(tf(dir.path()).args(["serve", "--bind", "0.0.0.0:0", "--no-suite"]));
    assert_eq!(out.status.code(), Some(2), "{}", common::text(&out.stderr));
    assert!(common::text(&out.stderr).contains("bearer token"), "{}", common::text(&out.stderr));
}

fn store_jobs(state: &Path) -> Vec<(String, String, i64, Option<i64>)> {
    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    let mut st =
        db.prepare("SELECT id, state, attempts, finished_ms FROM jobs ORDER BY seq").unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

/// `n` distinct slow, correct relu candidates (each a little over a second in CPU mode), as
/// a batch body's evaluations: enough queued work for a test to interrupt.
fn slow_batch(n: usize, tag: &str) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({"problem": {"name": "relu_small", "source": src("problems/relu_small.py")},
                   "candidate": {"name": format!("relu_{i}"), "source": format!("{}\n# {tag} {i}\n", src("candidates/slow_correct.py"))},
                   "options": {"trials": 3}})
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_with_a_full_queue_loses_no_accepted_job_and_runs_none_twice() {
    let dir = tempfile::tempdir().unwrap();
    let n = 8;
    let evals = slow_batch(n, "copy");
    let mut s = serve(dir.path(), &["--jobs", "1", "--no-suite"]);
    let (code, b) =
        post(&format!("{}/v1/evaluations/batch", s.url), &json!({"evaluations": evals})).await;
    assert_eq!(code, 202, "{b}");
    let ids: Vec<String> = b["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["id"].as_str().unwrap().to_string())
        .collect();
    // Wait until at least one has ended and most are still queued, then kill -9.
    let t0 = Instant::now();
    while !store_jobs(dir.path()).iter().any(|j| j.1 == "done") {
        assert!(t0.elapsed() < Duration::from_secs(300), "nothing finished: {}", s.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(s.child.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = s.child.wait();
    let before = store_jobs(dir.path());
    let done_before: Vec<_> = before.iter().filter(|j| j.1 == "done").cloned().collect();
    assert!(done_before.len() < n, "all ended before the kill; the test proves nothing");
    assert_eq!(before.len(), n);

    let s2 = serve(dir.path(), &["--jobs", "2", "--no-suite"]);
    assert!(
        s2.log().contains("queued again") || before.iter().all(|j| j.1 != "running"),
        "{}",
        s2.log()
    );
    for id in &ids {
        let (code, v) = get(&format!("{}/v1/evaluations/{id}?wait=300", s2.url)).await;
        assert_eq!((code, v["state"].as_str()), (200, Some("done")), "{v}");
        assert_eq!(v["record"]["status"], "correct", "{v}");
    }
    let after = store_jobs(dir.path());
    assert_eq!(after.len(), n, "no job was added or lost");
    for d in &done_before {
        let a = after.iter().find(|j| j.0 == d.0).unwrap();
        assert_eq!(a, d, "a job done before the kill was run again");
    }
    // Each candidate was evaluated once: one record per distinct pair.
    let db = rusqlite::Connection::open(dir.path().join("tritonforge.sqlite")).unwrap();
    let records: i64 = db.query_row("SELECT COUNT(*) FROM evaluations", [], |r| r.get(0)).unwrap();
    assert_eq!(records, n as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn five_hundred_requests_from_32_clients_all_come_back_right() {
    let dir = tempfile::tempdir().unwrap();
    let s = serve(dir.path(), &["--no-suite"]);
    // Six distinct pairs, each asked for many times by many clients.
    let kinds =
        [("relu_ok", "correct"), ("wrong_values", "incorrect"), ("syntax_error", "compile_error")];
    let pairs: Vec<(Value, &str)> = (0..6)
        .map(|i| {
            let (c, want) = kinds[i % 3];
            let body = json!({"problem": {"name": "relu_small", "source": src("problems/relu_small.py")},
                "candidate": {"name": c, "source": format!("{}\n# {i}\n", src(&format!("candidates/{c}.py")))},
                "options": {"trials": 2}});
            (body, want)
        })
        .collect();
    let pairs = Arc::new(pairs);
    let mut tasks = Vec::new();
    for client in 0..32 {
        let (pairs, base) = (pairs.clone(), s.url.clone());
        tasks.push(tokio::spawn(async move {
            let http = http();
            let mut wrong = Vec::new();
            for k in 0..16 {
                let i = (client * 7 + k) % pairs.len();
                let (body, want) = &pairs[i];
                let r = http
                    .post(format!("{base}/v1/evaluations"))
                    .header("x-tritonforge-client", format!("c{client}"))
                    .json(body)
                    .send()
                    .await
                    .unwrap();
                let sub: Value = r.json().await.unwrap();
                let id = sub["id"].as_str().unwrap().to_string();
                let v: Value = http
                    .get(format!("{base}/v1/evaluations/{id}?wait=300"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if v["record"]["status"] != *want {
                    wrong.push(format!("{id}: {v}"));
                }
            }
            wrong
        }));
    }
    let mut wrong = Vec::new();
    for t in tasks {
        wrong.extend(t.await.unwrap());
    }
    assert!(wrong.is_empty(), "{} wrong of 512: {:?}", wrong.len(), &wrong[..wrong.len().min(3)]);
    let (_, list) = get(&format!("{}/v1/evaluations?state=done&limit=1000", s.url)).await;
    assert_eq!(list["evaluations"].as_array().unwrap().len(), 512);
    // Six evaluations ran; the rest were answered from the store or waited for the first.
    let db = rusqlite::Connection::open(dir.path().join("tritonforge.sqlite")).unwrap();
    let records: i64 = db.query_row("SELECT COUNT(*) FROM evaluations", [], |r| r.get(0)).unwrap();
    assert_eq!(records, 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_client_fails_over_when_one_of_two_servers_is_killed() {
    use tritonforge_client::{ClientConfig, RemoteEvaluator};
    use tritonforge_eval::EvalService;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = serve(d1.path(), &["--jobs", "1", "--no-suite"]);
    let b = serve(d2.path(), &["--jobs", "1", "--no-suite"]);
    let mut cfg = ClientConfig::new(vec![a.url.clone(), b.url.clone()]);
    cfg.poll_wait = Duration::from_secs(1);
    cfg.breaker_cooldown = Duration::from_secs(60);
    let remote = Arc::new(RemoteEvaluator::connect(cfg).await.unwrap());
    let problem = tritonforge_suite::Problem::load(&fixture("problems/relu_small.py")).unwrap();
    let config = tritonforge_protocol::EvalConfig { trials: 3, ..Default::default() };
    let mut tasks = Vec::new();
    for i in 0..6 {
        let (remote, problem, config) = (remote.clone(), problem.clone(), config.clone());
        tasks.push(tokio::spawn(async move {
            let candidate = tritonforge_suite::Candidate {
                name: format!("relu_{i}"),
                path: PathBuf::from(format!("relu_{i}.py")),
                source: format!("{}\n# {i}\n", src("candidates/slow_correct.py")),
            };
            remote.evaluate(&problem, &candidate, &config).await
        }));
    }
    // Kill server A once it has work in hand.
    let t0 = Instant::now();
    while store_jobs(d1.path()).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(120));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = a.child.kill();
    let _ = a.child.wait();
    for t in tasks {
        let ev = t.await.unwrap().expect("every evaluation ends on the surviving server");
        assert_eq!(ev.record.verdict.status.as_str(), "correct");
    }
    assert!(!store_jobs(d2.path()).is_empty());
    drop(b);
    // With no server left, the error names them.
    let candidate = tritonforge_suite::Candidate::load(&fixture("candidates/relu_ok.py")).unwrap();
    let err = remote.evaluate(&problem, &candidate, &config).await.unwrap_err().to_string();
    assert!(err.contains("no evaluation server is healthy"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_refuses_new_work_finishes_the_running_one_and_keeps_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let n = 6;
    let evals = slow_batch(n, "term");
    let mut s = serve(dir.path(), &["--jobs", "1", "--no-suite", "--grace", "120"]);
    let (code, b) =
        post(&format!("{}/v1/evaluations/batch", s.url), &json!({"evaluations": evals})).await;
    assert_eq!(code, 202, "{b}");
    let t0 = Instant::now();
    while !store_jobs(dir.path()).iter().any(|j| j.1 == "running") {
        assert!(t0.elapsed() < Duration::from_secs(300), "nothing started: {}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = nix::unistd::Pid::from_raw(s.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    // The signal lands asynchronously: wait until the server says it is draining (its
    // health turns 503), then new work is refused with 503 and a reason.
    let mut draining = false;
    for _ in 0..500 {
        match http().get(format!("{}/health", s.url)).send().await {
            Ok(r) if r.status().as_u16() == 503 => {
                draining = true;
                break;
            }
            Ok(_) => {}
            Err(_) => break,
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(draining, "health never said draining: {}", s.log());
    let late = json!({"problem": {"name": "relu_small", "source": src("problems/relu_small.py")},
                      "candidate": {"name": "late", "source": src("candidates/relu_ok.py")}});
    let (code, v) = post(&format!("{}/v1/evaluations", s.url), &late).await;
    let refused = code == 503;
    assert!(refused, "draining, yet {code}: {v}");
    assert!(v["detail"].as_str().unwrap().contains("shutting down"), "{v}");
    assert!(refused, "no 503 while draining: {}", s.log());
    let status = s.child.wait().unwrap();
    assert!(status.success(), "SIGTERM is a clean exit: {status:?}\n{}", s.log());
    // The running one finished within the grace; nothing failed; the rest wait, queued.
    let jobs = store_jobs(dir.path());
    assert_eq!(jobs.len(), n, "the late request was not stored");
    let done = jobs.iter().filter(|j| j.1 == "done").count();
    assert!(done >= 1, "{jobs:?}");
    assert!(jobs.iter().all(|j| j.1 == "done" || j.1 == "queued"), "{jobs:?}");
    assert!(done < n, "all ended before SIGTERM; the test proves nothing");
    // The next server finishes the queue, each pair evaluated once.
    let s2 = serve(dir.path(), &["--jobs", "2", "--no-suite"]);
    for j in &jobs {
        let (code, v) = get(&format!("{}/v1/evaluations/{}?wait=300", s2.url, j.0)).await;
        assert_eq!((code, v["record"]["status"].as_str()), (200, Some("correct")), "{v}");
    }
    let db = rusqlite::Connection::open(dir.path().join("tritonforge.sqlite")).unwrap();
    let records: i64 = db.query_row("SELECT COUNT(*) FROM evaluations", [], |r| r.get(0)).unwrap();
    assert_eq!(records, n as i64);
}

/// A chat-completions mock (non-streaming, the OpenAI wire shape): a wrong relu on the
/// first turn, the suite's solution on the next.
fn mock_policy() -> String {
    use axum::{routing::post as route_post, Json, Router};
    let right =
        std::fs::read_to_string(common::repo().join("bench/solutions/level1/relu.py")).unwrap();
    let wrong = right.replace("tl.maximum(x, 0.0)", "x");
    assert_ne!(wrong, right);
    let app = Router::new().route(
        "/v1/chat/completions",
        route_post(move |Json(body): Json<Value>| {
            let (wrong, right) = (wrong.clone(), right.clone());
            async move {
                let msgs = body["messages"].as_array().cloned().unwrap_or_default();
                let turn = msgs.iter().filter(|m| m["role"] == "assistant").count();
                let code = if turn == 0 { wrong } else { right };
                Json(json!({
                    "id": "c1", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": format!("```python\n{code}```\n")}}],
                    "usage": {"prompt_tokens": 100, "completion_tokens": 50, "total_tokens": 150},
                }))
            }
        }),
    );
    format!("http://{}/v1", common::serve_on_loopback(app))
}

fn store_rows(state: &Path, sql: &str) -> Vec<(String, String)> {
    let db = rusqlite::Connection::open(state.join("tritonforge.sqlite")).unwrap();
    let mut st = db.prepare(sql).unwrap();
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect()
}

/// `run`, `suite validate` and `data build --verify` with `--eval-server` give the records
/// the local pool gives: the same keys, verdicts and decisions.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_validate_and_verify_through_a_server_match_the_local_pool() {
    let root = tempfile::tempdir().unwrap();
    let (local, remote, served) =
        (root.path().join("local"), root.path().join("remote"), root.path().join("served"));
    let srv = serve(&served, &["--jobs", "2"]);
    let llm = mock_policy();
    let with = |state: &Path, server: bool, args: &[&str]| {
        let mut c = tf(state);
        c.args(["--device", "cpu"]);
        if server {
            c.args(["--eval-server", &srv.url]);
        }
        let out = common::run(c.args(args));
        assert_eq!(out.status.code(), Some(0), "{args:?}\n{}", common::text(&out.stderr));
        common::text(&out.stdout)
    };
    let run = ["run", "--base-url", &llm, "--model", "m", "--problem", "relu", "--turns", "3"];
    with(&local, false, &run);
    with(&remote, true, &run);
    let turns = |state: &Path| -> Vec<Value> {
        let eps = common::episodes(state);
        assert_eq!(eps.len(), 1);
        eps[0]["turns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| json!([t["outcome"], t["record"], t["reward"], t["message"]]))
            .collect()
    };
    let (a, b) = (turns(&local), turns(&remote));
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!((a[0][0].as_str(), a[1][0].as_str()), (Some("incorrect"), Some("correct")));
    assert_eq!(a, b, "the same turns, verdict keys, rewards and feedback");
    let q = "SELECT key, status FROM evaluations ORDER BY key";
    let evaluated = store_rows(&served, q);
    assert_eq!(store_rows(&local, q), evaluated, "the server stored the local pool's records");

    // The suite's check, remotely: the same report, and the same records evaluated.
    let validate = ["suite", "validate", "--family", "softmax", "--json"];
    let report = |out: String| -> Value {
        let mut v: Value = serde_json::from_str(out.trim()).unwrap();
        v.as_object_mut().unwrap().remove("slow");
        v
    };
    let a = report(with(&local, false, &validate));
    assert!(a["solutions_checked"].as_u64().unwrap() > 0, "{a}");
    assert_eq!(a, report(with(&remote, true, &validate)));
    assert_eq!(store_rows(&local, q), store_rows(&served, q), "the same suite verdicts");

    // data build --verify, remotely: the same rows kept, the same verdict keys.
    let rows = root.path().join("rows.jsonl");
    let problem = src("problems/relu_small.py");
    let good = src("candidates/relu_ok.py");
    let lines: Vec<String> = [("good", good.clone()), ("wrong", src("candidates/wrong_values.py"))]
        .iter()
        .map(|(id, code)| {
            json!({"uuid": id, "entry_point": "Model", "python_code": problem, "triton_code": code})
                .to_string()
        })
        .collect();
    std::fs::write(&rows, lines.join("\n")).unwrap();
    let built = |state: &Path, server: bool| -> Vec<Value> {
        let out = root.path().join(if server { "data-remote" } else { "data-local" });
        let cfg = root.path().join("data.toml");
        std::fs::write(
            &cfg,
            format!(
                "[[input]]\nkind = \"kernelbook\"\npath = {rows:?}\n\n[output]\ndir = {out:?}\nvalidation = 0.0\n\n[decontaminate]\nenabled = false\n\n[dedup]\nnear = false\n\n[verify]\ntrials = 2\n"
            ),
        )
        .unwrap();
        let cfg = cfg.to_str().unwrap().to_string();
        with(state, server, &["data", "build", "--json", "--verify", "--config", &cfg]);
        std::fs::read_to_string(out.join("train.jsonl"))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .map(|r| json!([r["id"], r["meta"]["verdict"]["status"], r["meta"]["verdict"]["key"]]))
            .collect()
    };
    let kept = built(&local, false);
    assert_eq!(kept.len(), 1, "only the correct pair is kept: {kept:?}");
    assert_eq!(kept[0][0], "good");
    assert_eq!(kept, built(&remote, true));
    assert_eq!(store_rows(&local, q), store_rows(&served, q), "the same verify verdicts");
}

/// `tritonforge dashboard`: the UI alone over a store, read-only; refused beyond loopback
/// without a token, and over a store that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_command_serves_a_store_read_only() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("other.sqlite");
    {
        let s = tritonforge_store::Store::open(&store).unwrap();
        s.put_train_metric("sft-7", 1, "train", r#"{"loss": 1.5}"#).unwrap();
    }
    let mut child = tf(dir.path())
        .args(["dashboard", "--no-suite", "--bind", "127.0.0.1:0", "--store"])
        .arg(&store)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let line = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.starts_with("dashboard on "))
        .expect("the dashboard starts");
    let url = line.split_whitespace().nth(2).unwrap().to_string();
    let (code, runs) = get(&format!("{url}/dash/runs")).await;
    assert_eq!(code, 200);
    assert_eq!(runs["runs"][0]["id"], "sft-7");
    assert_eq!(runs["runs"][0]["kind"], "sft");
    let (_, info) = get(&format!("{url}/dash/info")).await;
    assert_eq!(
        (info["mode"].as_str(), info["read_only"].as_bool()),
        (Some("dashboard"), Some(true))
    );
    // Nothing but the dashboard: no evaluator API.
    let (code, _) = get(&format!("{url}/v1/info")).await;
    assert_eq!(code, 404);
    let _ = child.kill();
    let _ = child.wait();

    let out = common::run(
        tf(dir.path())
            .args(["dashboard", "--bind", "0.0.0.0:0", "--no-suite", "--store"])
            .arg(&store),
    );
    assert_eq!(out.status.code(), Some(2), "{}", common::text(&out.stderr));
    assert!(common::text(&out.stderr).contains("bearer token"), "{}", common::text(&out.stderr));
    let out = common::run(
        tf(dir.path()).args(["dashboard", "--store"]).arg(dir.path().join("missing.sqlite")),
    );
    assert_eq!(out.status.code(), Some(2), "{}", common::text(&out.stderr));
    assert!(common::text(&out.stderr).contains("no such store"), "{}", common::text(&out.stderr));
}
