//! The dashboard's queries: a page of a 100k-evaluation store comes from an index (the
//! query plan says so, rather than a timing), pages chain without gaps, a schema-6 store
//! is upgraded with its columns filled from the JSON, and the read-only handle refuses
//! writes.

use rusqlite::{params, Connection};
use tritonforge_store::{Cursor, EpisodeFilter, EvalFilter, RunKind, Store, StoreError};

const N: i64 = 100_000;
const PROBLEMS: i64 = 200;
const STATUSES: [&str; 4] = ["correct", "incorrect", "compile_error", "rejected"];

/// 100k evaluations over 200 problems, a run holding half of them, 20k metric rows.
fn big_store(path: &std::path::Path) {
    drop(Store::open(path).unwrap());
    let mut db = Connection::open(path).unwrap();
    let tx = db.transaction().unwrap();
    {
        let mut ins = tx
            .prepare(
                "INSERT INTO evaluations (key, problem, candidate, candidate_sha256, status, created_at, record, speedup)
                 VALUES (?1, ?2, ?3, 'sha', ?4, ?5, ?6, ?7)",
            )
            .unwrap();
        let mut link = tx
            .prepare("INSERT INTO run_evaluations (run, key, created_at) VALUES ('big', ?1, ?2)")
            .unwrap();
        for i in 0..N {
            let key = format!("k{i:06}");
            let status = STATUSES[(i % 4) as usize];
            let t = 1_700_000_000 + i;
            let speedup = (status == "correct").then_some(1.0 + (i % 7) as f64 / 10.0);
            let record = format!(
                "{{\"stage\":\"correctness\",\"message\":\"m{i}\",\"status\":\"{status}\"}}"
            );
            ins.execute(params![
                key,
                format!("p{:03}", i % PROBLEMS),
                "c",
                status,
                t,
                record,
                speedup
            ])
            .unwrap();
            if i % 2 == 0 {
                link.execute(params![key, t]).unwrap();
            }
        }
        let mut m = tx
            .prepare("INSERT INTO train_metrics (run, step, split, created_at, metric) VALUES ('sft-1', ?1, 'train', 0, '{}')")
            .unwrap();
        for step in 0..20_000 {
            m.execute([step]).unwrap();
        }
    }
    tx.commit().unwrap();
}

/// The plan reads an index, and never sorts the whole result to find a page.
fn assert_indexed(store: &Store, what: &str, filter: &EvalFilter) {
    let plan = store.evaluations_plan(filter).unwrap();
    let text = plan.join("\n");
    assert!(
        text.contains("USING INDEX") || text.contains("USING COVERING INDEX"),
        "{what}: {text}"
    );
    assert!(
        !text.contains("TEMP B-TREE"),
        "{what}: sorts instead of reading in index order:\n{text}"
    );
    assert!(
        !plan.iter().any(|l| l.starts_with("SCAN") && !l.contains("INDEX")),
        "{what}: scans a table:\n{text}"
    );
}

#[test]
fn a_page_of_100k_evaluations_comes_from_an_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.sqlite");
    big_store(&path);
    let store = Store::open_read_only(&path).unwrap();
    let page = |f: EvalFilter| EvalFilter { limit: 50, ..f };
    let filters = [
        ("newest", page(EvalFilter::default())),
        ("problem", page(EvalFilter { problem: Some("p007".into()), ..Default::default() })),
        ("status", page(EvalFilter { status: Some("correct".into()), ..Default::default() })),
        ("run", page(EvalFilter { run: Some("big".into()), ..Default::default() })),
        (
            "time window",
            page(EvalFilter {
                since: Some(1_700_050_000),
                until: Some(1_700_060_000),
                ..Default::default()
            }),
        ),
        (
            "problem, next page",
            page(EvalFilter {
                problem: Some("p007".into()),
                before: Some(Cursor { created_at: 1_700_090_007, key: "k090007".into() }),
                ..Default::default()
            }),
        ),
        (
            "status in a window",
            page(EvalFilter {
                status: Some("rejected".into()),
                since: Some(1_700_010_000),
                ..Default::default()
            }),
        ),
    ];
    for (what, f) in &filters {
        assert_indexed(&store, what, f);
    }

    // And the pages are right: newest first, 50, chained by the cursor without gaps.
    let first = store.evaluations_page(&filters[0].1).unwrap();
    assert_eq!(first.items.len(), 50);
    assert_eq!(first.items[0].key, "k099999");
    let next = store
        .evaluations_page(&EvalFilter {
            before: first.next.clone(),
            limit: 50,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(next.items[0].key, "k099949");
    let p7 = store.evaluations_page(&filters[1].1).unwrap();
    assert!(p7.items.iter().all(|e| e.problem == "p007"));
    assert_eq!(p7.items[0].key, "k099807");
    let run = store.evaluations_page(&filters[3].1).unwrap();
    assert_eq!(run.items[0].key, "k099998", "the run holds the even ones");
    let window = store.evaluations_page(&filters[4].1).unwrap();
    assert_eq!(window.items[0].created_at, 1_700_060_000);

    // The suite's summary reads the covering index, not the records.
    let summaries = store.problem_summaries().unwrap();
    assert_eq!(summaries.len(), PROBLEMS as usize);
    let p0 = &summaries[0];
    assert_eq!((p0.problem.as_str(), p0.evaluations, p0.correct), ("p000", 500, 500));
    assert_eq!(p0.best_speedup, Some(1.6));
    let plan: Vec<String> = {
        let db = Connection::open(&path).unwrap();
        let mut st = db
            .prepare(
                "EXPLAIN QUERY PLAN SELECT problem, COUNT(*), SUM(status = 'correct'),
                 MAX(CASE WHEN status = 'correct' THEN speedup END) FROM evaluations GROUP BY problem ORDER BY problem",
            )
            .unwrap();
        st.query_map([], |r| r.get::<_, String>(3)).unwrap().map(Result::unwrap).collect()
    };
    assert!(plan.iter().any(|l| l.contains("COVERING INDEX evaluations_problem_best")), "{plan:?}");

    // A live stream's poll reads only the new metric rows, by the primary key.
    let tail = store.metrics_after("sft-1", Some(19_990)).unwrap();
    assert_eq!(tail.len(), 9);
}

/// The tables as schema version 6 left them.
const V6: &str = "
    CREATE TABLE evaluations (key TEXT PRIMARY KEY, problem TEXT NOT NULL, candidate TEXT NOT NULL,
        candidate_sha256 TEXT NOT NULL, status TEXT NOT NULL, created_at INTEGER NOT NULL, record TEXT NOT NULL);
    CREATE INDEX evaluations_problem ON evaluations(problem);
    CREATE INDEX evaluations_status ON evaluations(status);
    CREATE TABLE baselines (key TEXT PRIMARY KEY, problem TEXT NOT NULL, created_at INTEGER NOT NULL, stats TEXT NOT NULL);
    CREATE TABLE episodes (id TEXT PRIMARY KEY, run TEXT NOT NULL, problem TEXT NOT NULL, sample INTEGER NOT NULL,
        created_at INTEGER NOT NULL, episode TEXT NOT NULL);
    CREATE INDEX episodes_run ON episodes(run);
    CREATE TABLE train_metrics (run TEXT NOT NULL, step INTEGER NOT NULL, split TEXT NOT NULL,
        created_at INTEGER NOT NULL, metric TEXT NOT NULL, PRIMARY KEY (run, step, split));
    CREATE TABLE memory_needs (key TEXT PRIMARY KEY, problem TEXT NOT NULL, created_at INTEGER NOT NULL, need TEXT NOT NULL);
    PRAGMA user_version = 6;";

#[test]
fn a_schema_6_store_is_upgraded_with_its_columns_filled_and_read_only_refuses_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.sqlite");
    {
        let db = Connection::open(&path).unwrap();
        db.execute_batch(V6).unwrap();
        db.execute(
            "INSERT INTO evaluations VALUES ('k1', 'relu', 'c', 's', 'correct', 5, ?1)",
            [r#"{"status":"correct","stage":"timing","message":"ok","timing":{"speedup":2.5}}"#],
        )
        .unwrap();
        for (step, pass) in [(0, 0.1), (4, 0.25)] {
            db.execute(
                "INSERT INTO train_metrics VALUES ('rl-old', ?1, 'heldout:l2', 8, ?2)",
                params![step, format!(r#"{{"step":{step},"set":"l2","pass_at_1":{pass}}}"#)],
            )
            .unwrap();
        }
        db.execute(
            "INSERT INTO episodes VALUES ('r/relu/0', 'r', 'relu', 0, 7, ?1)",
            [r#"{"turns":[{"outcome":"incorrect","ret":0.5,"speedup":null},{"outcome":"correct","ret":0.8,"speedup":1.9}]}"#],
        )
        .unwrap();
    }
    // The dashboard's read-only handle needs the current schema and says how to get it.
    match Store::open_read_only(&path) {
        Err(StoreError::TooOld { found: 6, .. }) => {}
        other => panic!("expected TooOld, got {:?}", other.err()),
    }
    drop(Store::open(&path).unwrap());
    let store = Store::open_read_only(&path).unwrap();
    let page = store.evaluations_page(&EvalFilter { limit: 10, ..Default::default() }).unwrap();
    assert_eq!(page.items[0].speedup, Some(2.5));
    assert_eq!(page.items[0].stage.as_deref(), Some("timing"));
    let eps = store.episodes_page(&EpisodeFilter { limit: 10, ..Default::default() }).unwrap();
    let e = &eps.items[0];
    assert_eq!(
        (e.outcome.as_deref(), e.turns, e.ret, e.best_speedup),
        (Some("correct"), 2, Some(0.5), Some(1.9))
    );
    // Runs known only by episodes are listed; an RL run of an older tritonforge, known
    // by its heldout rows alone (written before its first step), is an RL run.
    let runs = store.runs().unwrap();
    assert_eq!(runs.len(), 2);
    let r = runs.iter().find(|r| r.id == "r").unwrap();
    assert_eq!((r.kind, r.episodes), (RunKind::Agent, 1));
    let rl = runs.iter().find(|r| r.id == "rl-old").unwrap();
    assert_eq!((rl.kind, rl.metrics), (RunKind::Rl, 2));
    let held = store.last_metrics_by_split("rl-old", "heldout:").unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!((held[0].split.as_str(), held[0].step), ("heldout:l2", 4));
    assert!(held[0].metric.contains("0.25"), "{:?}", held[0]);

    let err = store.put_train_metric("r", 1, "train", "{}").unwrap_err();
    assert!(err.to_string().contains("readonly") || err.to_string().contains("read-only"), "{err}");
}

/// An RL run links a step's evaluations at once (a repeat is one row); the run filter of
/// the evaluation browser then pages them, and the run counts them.
#[test]
fn evaluations_linked_in_one_transaction_page_under_their_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.sqlite");
    let store = Store::open(&path).unwrap();
    store.begin_run("rl-x", RunKind::Rl, "{}").unwrap();
    {
        let db = Connection::open(&path).unwrap();
        for (i, key) in ["a", "b", "c"].iter().enumerate() {
            db.execute(
                "INSERT INTO evaluations (key, problem, candidate, candidate_sha256, status,
                 created_at, record) VALUES (?1, 'relu', 'c', 's', 'correct', ?2, '{}')",
                params![key, i as i64],
            )
            .unwrap();
        }
    }
    store.link_run_evaluations("rl-x", &["a", "b"], 100).unwrap();
    store.link_run_evaluations("rl-x", &["b", "c"], 101).unwrap();
    store.link_run_evaluations("rl-x", &[], 102).unwrap();
    let run = store.runs().unwrap().into_iter().find(|r| r.id == "rl-x").unwrap();
    assert_eq!(run.evaluations, 3);
    let page = store
        .evaluations_page(&EvalFilter { run: Some("rl-x".into()), limit: 2, ..Default::default() })
        .unwrap();
    assert_eq!(page.items.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["c", "b"]);
    // The cursor is the link's time, not the record's (2 and 1 here): the next page
    // continues from the run's own order.
    assert_eq!(page.next.as_ref().map(|c| c.created_at), Some(100));
    let next = store
        .evaluations_page(&EvalFilter {
            run: Some("rl-x".into()),
            before: page.next,
            limit: 2,
            ..Default::default()
        })
        .unwrap();
    assert_eq!(next.items.iter().map(|e| e.key.as_str()).collect::<Vec<_>>(), ["a"]);
    assert_eq!(store.evaluation_json("b").unwrap().unwrap().1, ["rl-x"]);
}
