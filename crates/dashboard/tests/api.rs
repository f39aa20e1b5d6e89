//! Every endpoint the dashboard's pages read, against a real server on loopback over a
//! real SQLite file this test fills; bad parameters, access with a token, live metrics.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::StreamExt;
use serde_json::Value;

mod common;
use common::{claim_next, fill, more_sft, start, start_with, REQUEST_MARKER};

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn get(url: &str) -> (u16, Value) {
    let r = http().get(url).send().await.unwrap();
    let code = r.status().as_u16();
    (code, r.json().await.unwrap_or(Value::Null))
}

async fn ok(url: &str) -> Value {
    let (code, v) = get(url).await;
    assert_eq!(code, 200, "{url}: {v}");
    v
}

fn keys(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["key"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_list_every_kind_with_status_settings_and_headline_figures() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    let f = fill(&path);
    let (server, url) = start(&path, None).await;
    let v = ok(&format!("{url}/dash/runs")).await;
    let runs = v["runs"].as_array().unwrap();
    let by =
        |id: &str| runs.iter().find(|r| r["id"] == id).unwrap_or_else(|| panic!("{id} in {v}"));
    assert_eq!(runs.len(), 4, "{v}");

    let eval = by(&f.eval_run);
    assert_eq!((eval["kind"].as_str(), eval["status"].as_str()), (Some("eval"), Some("done")));
    assert_eq!(eval["evaluations"], 5);
    assert_eq!(eval["settings"]["pairs"], 5);
    assert_eq!(eval["headline"]["by_status"]["correct"], 2, "{eval}");
    assert_eq!(eval["headline"]["by_status"]["rejected"], 1, "{eval}");

    let agent = by(&f.agent_run);
    assert_eq!(agent["kind"], "agent");
    assert_eq!(agent["headline"]["episodes"]["episodes"], 3);
    assert_eq!(agent["headline"]["episodes"]["solved"], 3);
    assert!((agent["headline"]["episodes"]["mean_return"].as_f64().unwrap() - 0.62).abs() < 1e-9);

    let sft = by(&f.sft_run);
    assert_eq!((sft["kind"].as_str(), sft["status"].as_str()), (Some("sft"), Some("running")));
    assert_eq!(sft["metrics"], 33);
    assert_eq!(sft["headline"]["train"]["step"], 30);
    assert_eq!(sft["headline"]["validation"]["step"], 30);
    assert!(sft["headline"]["train"]["loss"].as_f64().unwrap() < 0.7);

    // Known only by its metrics: kind from the split, status "recorded".
    let rl = by(&f.rl_run);
    assert_eq!((rl["kind"].as_str(), rl["status"].as_str()), (Some("rl"), Some("recorded")));
    assert_eq!(rl["headline"]["rl"]["step"], 12);
    assert_eq!(rl["headline"]["rl"]["pass_by_turn"].as_array().unwrap().len(), 3);
    // Its evaluations are linked, and its heldout sets' last measurements are headlines.
    assert_eq!(rl["evaluations"], 2, "{rl}");
    let held = rl["headline"]["heldout"].as_array().unwrap();
    let sets: Vec<(&str, u64)> =
        held.iter().map(|h| (h["set"].as_str().unwrap(), h["step"].as_u64().unwrap())).collect();
    assert_eq!(sets, [("l2-heldout", 12), ("synth-heldout", 12)], "{rl}");
    assert!((held[0]["pass_at_1"].as_f64().unwrap() - 0.34).abs() < 1e-9, "{rl}");
    let rl_evals = ok(&format!("{url}/dash/evaluations?run={}", f.rl_run)).await;
    assert_eq!(keys(&rl_evals), ["k-correct-1", "k-compile-0"], "linked at once: by key");

    let only_rl = ok(&format!("{url}/dash/runs?kind=rl")).await;
    assert_eq!(only_rl["runs"].as_array().unwrap().len(), 1);
    let (code, e) = get(&format!("{url}/dash/runs?kind=nope")).await;
    assert_eq!((code, e["field"].as_str()), (422, Some("kind")), "{e}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_of_a_run_and_the_live_stream_follow_a_trainer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    let f = fill(&path);
    let (server, url) = start(&path, None).await;
    let all = ok(&format!("{url}/dash/runs/{}/metrics", f.sft_run)).await;
    let rows = all["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 33);
    assert_eq!((rows[0]["step"].as_u64(), rows[0]["split"].as_str()), (Some(1), Some("train")));
    assert!(rows[0]["m"]["loss"].is_f64());
    let tail = ok(&format!("{url}/dash/runs/{}/metrics?after_step=25", f.sft_run)).await;
    assert_eq!(tail["rows"].as_array().unwrap().len(), 5 + 1, "steps 26..30 and validation at 30");
    let (code, e) = get(&format!("{url}/dash/runs/{}/metrics?after_step=x", f.sft_run)).await;
    assert_eq!((code, e["field"].as_str()), (422, Some("after_step")), "{e}");

    // The stream sends what is stored, then what a trainer writes after.
    let r = http()
        .get(format!("{url}/dash/stream?runs={},{}", f.sft_run, f.rl_run))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let mut body = r.bytes_stream();
    let mut text = String::new();
    let mut events: Vec<Value> = Vec::new();
    let mut wrote = false;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while events.iter().filter(|e| e["run"] == f.sft_run.as_str()).count() < 2 {
        let chunk = tokio::time::timeout_at(deadline, body.next()).await.expect("events in time");
        text.push_str(std::str::from_utf8(&chunk.unwrap().unwrap()).unwrap());
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            if block.contains("event: metrics") {
                let data: String = block.lines().filter_map(|l| l.strip_prefix("data: ")).collect();
                events.push(serde_json::from_str(&data).unwrap());
            }
        }
        if !wrote && events.len() >= 2 {
            more_sft(&path, &f.sft_run, 31..=32);
            wrote = true;
        }
    }
    let first: Vec<&Value> = events.iter().filter(|e| e["run"] == f.sft_run.as_str()).collect();
    assert_eq!(first[0]["rows"].as_array().unwrap().len(), 33);
    let live: Vec<u64> =
        first[1]["rows"].as_array().unwrap().iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(live, vec![31, 32], "only the new rows are sent");
    let rl = events.iter().find(|e| e["run"] == f.rl_run.as_str()).expect("the RL run's metrics");
    let splits: Vec<&str> =
        rl["rows"].as_array().unwrap().iter().map(|r| r["split"].as_str().unwrap()).collect();
    assert_eq!(splits.iter().filter(|s| **s == "rl").count(), 12);
    assert_eq!(splits.iter().filter(|s| s.starts_with("heldout:")).count(), 8, "{splits:?}");

    let (code, e) = get(&format!("{url}/dash/stream")).await;
    assert_eq!((code, e["field"].as_str()), (422, Some("runs")), "{e}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evaluations_filter_and_page_and_one_shows_sources_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    let f = fill(&path);
    let (server, url) = start(&path, None).await;
    let all = ok(&format!("{url}/dash/evaluations")).await;
    assert_eq!(
        keys(&all),
        [
            "k-correct-2",
            "k-rejected-0",
            "k-compile-0",
            "k-incorrect-0",
            "k-correct-1",
            "k-correct-0"
        ],
        "newest first"
    );
    assert!(all["next"].is_null());
    let row = &all["items"][1];
    assert_eq!((row["status"].as_str(), row["stage"].as_str()), (Some("rejected"), Some("guard")));
    assert!(row["message"].as_str().unwrap().contains("torch_compute"));
    assert_eq!(all["items"][5]["speedup"], 1.7);

    let correct = ok(&format!("{url}/dash/evaluations?status=correct")).await;
    assert_eq!(keys(&correct), ["k-correct-2", "k-correct-1", "k-correct-0"]);
    let relu = ok(&format!("{url}/dash/evaluations?problem=relu")).await;
    assert_eq!(keys(&relu), ["k-incorrect-0", "k-correct-0"]);
    let run = ok(&format!("{url}/dash/evaluations?run={}", f.eval_run)).await;
    assert_eq!(keys(&run).len(), 5);
    assert!(!keys(&run).contains(&"k-correct-2".to_string()));
    let agent = ok(&format!("{url}/dash/evaluations?run={}&status=correct", f.agent_run)).await;
    assert_eq!(keys(&agent), ["k-correct-0"]);
    let window = ok(&format!("{url}/dash/evaluations?since=1764000060&until=1764000180")).await;
    assert_eq!(keys(&window), ["k-compile-0", "k-incorrect-0", "k-correct-1"]);

    // Pages of 2 cover everything once, in order.
    let mut seen = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let q = next.as_ref().map(|c| format!("&before={c}")).unwrap_or_default();
        let page = ok(&format!("{url}/dash/evaluations?limit=2{q}")).await;
        seen.extend(keys(&page));
        match page["next"].as_str() {
            Some(c) => next = Some(c.to_string()),
            None => break,
        }
    }
    assert_eq!(seen, keys(&all));

    for (q, field) in [
        ("status=great", "status"),
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("before=nonsense", "before"),
        ("since=yesterday", "since"),
        ("colour=red", "colour"),
    ] {
        let (code, e) = get(&format!("{url}/dash/evaluations?{q}")).await;
        assert_eq!((code, e["field"].as_str()), (422, Some(field)), "{q}: {e}");
        assert!(e["detail"].as_str().unwrap().contains(field), "{e}");
    }

    let one = ok(&format!("{url}/dash/evaluations/{}", f.correct_key)).await;
    assert_eq!(one["record"]["status"], "correct");
    assert_eq!(one["record"]["timing"]["speedup"], 1.7);
    assert!(one["problem_source"].as_str().unwrap().contains("class Model(nn.Module)"));
    assert_eq!(one["problem_source_from"], "store");
    assert!(one["candidate_source"].as_str().unwrap().contains("@triton.jit"));
    let runs: HashSet<&str> =
        one["runs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(runs, HashSet::from([f.eval_run.as_str(), f.agent_run.as_str()]));
    let (code, e) = get(&format!("{url}/dash/evaluations/no-such-key")).await;
    assert_eq!(code, 404, "{e}");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn episodes_page_and_one_episode_without_token_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    let f = fill(&path);
    let (server, url) = start(&path, None).await;
    let page = ok(&format!("{url}/dash/episodes?run={}", f.agent_run)).await;
    let items = page["items"].as_array().unwrap();
    assert_eq!(items.len(), 3);
    let first = items.iter().find(|e| e["id"] == f.episode_id.as_str()).unwrap();
    assert_eq!((first["outcome"].as_str(), first["turns"].as_u64()), (Some("correct"), Some(2)));
    assert_eq!(first["best_speedup"], 1.7);
    assert_eq!(first["return"], 0.62);
    let paged = ok(&format!("{url}/dash/episodes?limit=2")).await;
    let next = paged["next"].as_str().expect("a second page");
    let rest = ok(&format!("{url}/dash/episodes?limit=2&before={next}")).await;
    assert_eq!(rest["items"].as_array().unwrap().len(), 1);
    let softmax = ok(&format!("{url}/dash/episodes?problem=softmax")).await;
    assert_eq!(softmax["items"].as_array().unwrap().len(), 1);

    let id = f.episode_id.replace('/', "%2F");
    let ep = ok(&format!("{url}/dash/episodes/{id}")).await;
    assert_eq!(ep["turns"].as_array().unwrap().len(), 2);
    let c = &ep["turns"][0]["completion"];
    assert!(c.get("token_ids").is_none() && c.get("logprobs").is_none(), "{c}");
    assert_eq!(c["token_ids_count"], 4);
    assert!(c["text"].as_str().unwrap().contains("<think>"));
    assert_eq!(ep["turns"][1]["ret"], 0.8);
    let (code, _) = get(&format!("{url}/dash/episodes/nope")).await;
    assert_eq!(code, 404);
    let (code, e) = get(&format!("{url}/dash/episodes?limit=-3")).await;
    assert_eq!((code, e["field"].as_str()), (422, Some("limit")));
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_info_and_embedded_assets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    fill(&path);
    let (server, url) = start(&path, None).await;
    let s = ok(&format!("{url}/dash/suite")).await;
    let problems = s["problems"].as_array().unwrap();
    assert!(problems.len() > 100, "the whole suite");
    let p = |name: &str| problems.iter().find(|p| p["name"] == name).unwrap().clone();
    let relu = p("relu");
    assert_eq!((relu["status"].as_str(), relu["level"].as_u64()), (Some("solved"), Some(1)));
    assert_eq!((relu["evaluations"].as_u64(), relu["correct"].as_u64()), (Some(2), Some(1)));
    assert_eq!(relu["best_speedup"], 1.7);
    assert_eq!(relu["family"], "activation");
    assert_eq!(p("matmul")["status"], "attempted");
    assert_eq!(p("tanh")["status"], "unseen");
    let others = s["others"].as_array().unwrap();
    assert_eq!(others.len(), 1);
    assert_eq!(
        (others[0]["name"].as_str(), others[0]["best_speedup"].as_f64()),
        (Some("inline_only_problem"), Some(0.8))
    );

    let info = ok(&format!("{url}/dash/info")).await;
    assert_eq!((info["evaluations"].as_u64(), info["read_only"].as_bool()), (Some(6), Some(true)));
    assert_eq!(info["mode"], "dashboard");
    assert_eq!(info["by_status"]["correct"], 3);
    let queue = &info["queue"];
    assert_eq!((queue["queued"].as_u64(), queue["running"].as_u64()), (Some(2), Some(1)), "{info}");

    let r = http().get(format!("{url}/")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let csp = r.headers()["content-security-policy"].to_str().unwrap().to_string();
    assert!(csp.contains("default-src 'self'") && csp.contains("script-src 'self'"), "{csp}");
    let html = r.text().await.unwrap();
    assert!(
        html.contains("/assets/app.js") && !html.contains("http://") && !html.contains("https://")
    );
    for (asset, kind) in
        [("app.js", "text/javascript"), ("app.css", "text/css"), ("icon.svg", "image/svg+xml")]
    {
        let r = http().get(format!("{url}/assets/{asset}")).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200);
        assert!(r.headers()["content-type"].to_str().unwrap().starts_with(kind));
        let body = r.text().await.unwrap();
        // Nothing is fetched from elsewhere at run time.
        assert!(!body.contains("https://") && !body.contains("//cdn"), "{asset}");
    }
    let (code, _) = get(&format!("{url}/assets/other.js")).await;
    assert_eq!(code, 404);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_reads_need_it_or_the_session_and_the_page_never_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    fill(&path);
    let token = "s3cret-token-value";
    let (server, url) = start(&path, Some(token)).await;
    // The shell and the login form are public; data is not.
    let (code, _) = get(&format!("{url}/dash/runs")).await;
    assert_eq!(code, 401);
    let page = http().get(format!("{url}/")).send().await.unwrap().text().await.unwrap();
    assert!(!page.contains(token));
    let login = http().get(format!("{url}/dash/login")).send().await.unwrap();
    assert_eq!(login.status().as_u16(), 200);
    // Bearer works.
    let r = http().get(format!("{url}/dash/runs")).bearer_auth(token).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // A wrong token is refused; the right one gets a session cookie that is not the token.
    let huge = "x".repeat(64 * 1024);
    let r = http()
        .post(format!("{url}/dash/login"))
        .form(&[("token", huge.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 413, "the login form's body is small");
    let r = http().post(format!("{url}/dash/login")).form(&[("user", "x")]).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 422);
    let bad =
        http().post(format!("{url}/dash/login")).form(&[("token", "guess")]).send().await.unwrap();
    assert_eq!(bad.status().as_u16(), 401);
    assert!(bad.headers().get("set-cookie").is_none());
    let good =
        http().post(format!("{url}/dash/login")).form(&[("token", token)]).send().await.unwrap();
    assert_eq!(good.status().as_u16(), 303);
    let cookie = good.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"), "{cookie}");
    assert!(!cookie.contains(token), "{cookie}");
    let pair = cookie.split(';').next().unwrap().to_string();
    let r = http().get(format!("{url}/dash/runs")).header("cookie", &pair).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body = r.text().await.unwrap();
    assert!(!body.contains(token));
    // The session grants reads only.
    let r = http().post(format!("{url}/dash/runs")).header("cookie", &pair).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let forged = http()
        .get(format!("{url}/dash/runs"))
        .header("cookie", format!("tritonforge_session={token}"))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 401);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_loopback_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    fill(&path);
    let dash = tritonforge_dashboard::Dashboard::open(
        &path,
        None,
        tritonforge_dashboard::Mode::Standalone,
    )
    .unwrap();
    let err =
        tritonforge_dashboard::DashboardServer::start(dash, "0.0.0.0:0".parse().unwrap(), None)
            .await
            .err()
            .expect("refused");
    assert!(err.to_string().contains("token"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_lists_running_then_queued_in_order_then_recent_and_never_requests() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    fill(&path);
    let (server, url) = start(&path, None).await;
    let r = http().get(format!("{url}/dash/queue")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let text = r.text().await.unwrap();
    assert!(!text.contains(REQUEST_MARKER), "the requests (sources) are not sent: {text}");
    let q: Value = serde_json::from_str(&text).unwrap();
    let ids = |list: &str, q: &Value| -> Vec<String> {
        q[list].as_array().unwrap().iter().map(|j| j["id"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(q["mode"], "dashboard");
    assert_eq!(q["counts"]["queued"], 2);
    assert_eq!(q["counts"]["running"], 1);
    assert_eq!(q["counts"]["cancelled"], 0, "every state is counted, none missing");
    assert_eq!(ids("running", &q), ["job-run-1"]);
    assert_eq!(ids("queued", &q), ["job-q-1", "job-q-2"], "in the order they will run");
    assert_eq!(ids("recent", &q), ["job-fail-1", "job-done-1"], "newest first");
    let run = &q["running"][0];
    assert_eq!(
        (run["problem"].as_str(), run["client"].as_str()),
        (Some("softmax"), Some("trainer-7"))
    );
    assert_eq!((run["state"].as_str(), run["attempts"].as_u64()), (Some("running"), Some(1)));
    let now = q["now_ms"].as_i64().unwrap();
    let started = run["started_ms"].as_i64().unwrap();
    assert!(run["created_ms"].as_i64().unwrap() <= started && started <= now, "{run}");
    assert_eq!(q["recent"][1]["record"], "k-correct-0");
    assert!(q["recent"][0]["error"].as_str().unwrap().contains("shape mismatch"));

    // The server takes the next job: the page's next poll sees it running.
    assert_eq!(claim_next(&path), "job-q-1");
    let q = ok(&format!("{url}/dash/queue?limit=1")).await;
    assert_eq!(ids("running", &q), ["job-run-1"], "limit=1");
    assert_eq!(ids("queued", &q), ["job-q-2"]);
    assert_eq!(
        (q["counts"]["running"].as_u64(), q["counts"]["queued"].as_u64()),
        (Some(2), Some(1))
    );
    for (query, field) in [("limit=0", "limit"), ("state=queued", "state")] {
        let (code, e) = get(&format!("{url}/dash/queue?{query}")).await;
        assert_eq!((code, e["field"].as_str()), (422, Some(field)), "{query}: {e}");
    }
    server.shutdown().await.unwrap();

    // With a token: the queue is data, behind the token; what it sends never holds it.
    let token = "queue-s3cret-token";
    let (server, url) = start(&path, Some(token)).await;
    let (code, _) = get(&format!("{url}/dash/queue")).await;
    assert_eq!(code, 401);
    let r = http().get(format!("{url}/dash/queue")).bearer_auth(token).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body = r.text().await.unwrap();
    assert!(body.contains("job-q-2") && !body.contains(token), "{body}");
    server.shutdown().await.unwrap();
}

/// A client from `ip` (another loopback address: Linux routes all of 127/8 to `lo`).
fn http_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_are_limited_per_client_address() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    fill(&path);
    let token = "limit-s3cret-token";
    let window = Duration::from_secs(2);
    let limit = tritonforge_dashboard::Limit { failures: 3, window };
    let (server, url) =
        start_with(&path, tritonforge_dashboard::Access::with_limit(Some(token), limit)).await;
    let runs = format!("{url}/dash/runs");
    let login = format!("{url}/dash/login");
    let a = http_from("127.0.0.1");
    let status = |r: reqwest::Response| r.status().as_u16();
    let started = std::time::Instant::now();
    // Three wrong tokens, through the form, the bearer header and a forged cookie.
    assert_eq!(status(a.post(&login).form(&[("token", "guess-1")]).send().await.unwrap()), 401);
    assert_eq!(status(a.get(&runs).bearer_auth("guess-2").send().await.unwrap()), 401);
    let forged = format!("tritonforge_session={}", "0".repeat(64));
    assert_eq!(status(a.get(&runs).header("cookie", &forged).send().await.unwrap()), 401);
    // Locked out: even the right token is refused, by the header and by the form.
    let r = a.get(&runs).bearer_auth(token).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 429);
    let wait: u64 = r.headers()["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=2).contains(&wait), "Retry-After {wait}");
    let r = a.post(&login).form(&[("token", token)]).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert!(r.headers().get("set-cookie").is_none());
    assert!(r.text().await.unwrap().contains("Too many wrong tokens"));
    // What presents no token is no guess: the page shell is served, data still needs it.
    assert_eq!(status(a.get(format!("{url}/")).send().await.unwrap()), 200);
    assert_eq!(status(a.get(&runs).send().await.unwrap()), 401);
    // Another address is not held to this one's count.
    let b = http_from("127.0.0.2");
    assert_eq!(status(b.get(&runs).bearer_auth(token).send().await.unwrap()), 200);
    assert_eq!(status(b.get(&runs).bearer_auth("guess").send().await.unwrap()), 401);
    // A right cookie sent with a write is refused (it grants reads) but is no guess.
    let c = http_from("127.0.0.3");
    let good = c.post(&login).form(&[("token", token)]).send().await.unwrap();
    assert_eq!(good.status().as_u16(), 303);
    let cookie =
        good.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_string();
    for _ in 0..5 {
        assert_eq!(status(c.post(&runs).header("cookie", &cookie).send().await.unwrap()), 401);
    }
    assert_eq!(status(c.get(&runs).header("cookie", &cookie).send().await.unwrap()), 200);
    // Once the window has passed, the first address may try again.
    assert!(started.elapsed() < window, "the test ran slower than the window it checks");
    tokio::time::sleep(window.saturating_sub(started.elapsed()) + Duration::from_millis(100)).await;
    assert_eq!(status(a.get(&runs).bearer_auth(token).send().await.unwrap()), 200);
    server.shutdown().await.unwrap();
}
