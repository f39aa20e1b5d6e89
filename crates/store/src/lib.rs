//! The workspace's SQLite file. Each evaluation is written the moment it finishes,
//! so an interrupted batch loses nothing; its content-hash key makes a repeat a
//! cache hit. WAL mode lets a reader (a dashboard, `doctor`) look while a batch writes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension};
use tritonforge_protocol::{EvalRecord, MemoryNeed, TimingStats};

mod dash;
mod jobs;
pub use dash::{
    Cursor, EpisodeFilter, EpisodeRow, EvalFilter, EvalRow, MetricRow, Page, ProblemSummary,
    RunKind, RunRow, RunStatus,
};
pub use jobs::{now_ms, Added, Job, JobFilter, JobState, NewJob, QueueRow};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("store {path}: {source}")]
    Sqlite {
        path: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("store {path}: record {key} is unreadable ({source}); delete the row or the file")]
    Corrupt {
        path: PathBuf,
        key: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("store {path}: schema version {found} is newer than this tritonforge ({supported})")]
    TooNew { path: PathBuf, found: i64, supported: i64 },
    #[error("store {path}: schema version {found} is older than {needed}; open it once with this tritonforge (any command that writes) to upgrade it")]
    TooOld { path: PathBuf, found: i64, needed: i64 },
    #[error("store {path}: cannot create its directory: {source}")]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

const SCHEMA_VERSION: i64 = 7;

pub struct Store {
    conn: Connection,
    path: PathBuf,
}

/// Counts of stored verdicts, by status.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StoreStats {
    pub evaluations: u64,
    pub by_status: Vec<(String, u64)>,
}

impl Store {
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .map_err(|source| StoreError::Dir { path: parent.to_owned(), source })?;
        }
        let sql = |source| StoreError::Sqlite { path: path.to_owned(), source };
        let conn = Connection::open(path).map_err(sql)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(sql)?;
        conn.pragma_update(None, "journal_mode", "WAL").map_err(sql)?;
        conn.pragma_update(None, "synchronous", "NORMAL").map_err(sql)?;
        let version: i64 =
            conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(sql)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: path.to_owned(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version < 1 {
            conn.execute_batch(
                "BEGIN;
                 CREATE TABLE IF NOT EXISTS evaluations (
                     key TEXT PRIMARY KEY,
                     problem TEXT NOT NULL,
                     candidate TEXT NOT NULL,
                     candidate_sha256 TEXT NOT NULL,
                     status TEXT NOT NULL,
                     created_at INTEGER NOT NULL,
                     record TEXT NOT NULL
                 );
                 CREATE INDEX IF NOT EXISTS evaluations_problem ON evaluations(problem);
                 CREATE INDEX IF NOT EXISTS evaluations_status ON evaluations(status);
                 PRAGMA user_version = 1;
                 COMMIT;",
            )
            .map_err(sql)?;
        }
        if version < 2 {
            // Baseline timings (e.g. torch.compile) per problem, variant and environment.
            conn.execute_batch(
                "BEGIN;
                 CREATE TABLE IF NOT EXISTS baselines (
                     key TEXT PRIMARY KEY,
                     problem TEXT NOT NULL,
                     created_at INTEGER NOT NULL,
                     stats TEXT NOT NULL
                 );
                 PRAGMA user_version = 2;
                 COMMIT;",
            )
            .map_err(sql)?;
        }
        if version < 3 {
            // Agent episodes (prompts, completions, token ids, code, verdict keys, rewards) as JSON.
            conn.execute_batch(
                "BEGIN;
                 CREATE TABLE IF NOT EXISTS episodes (
                     id TEXT PRIMARY KEY,
                     run TEXT NOT NULL,
                     problem TEXT NOT NULL,
                     sample INTEGER NOT NULL,
                     created_at INTEGER NOT NULL,
                     episode TEXT NOT NULL
                 );
                 CREATE INDEX IF NOT EXISTS episodes_run ON episodes(run);
                 PRAGMA user_version = 3;
                 COMMIT;",
            )
            .map_err(sql)?;
        }
        if version < 4 {
            // Training metrics, one row per (run, step, split), written as they happen.
            conn.execute_batch(
                "BEGIN;
                 CREATE TABLE IF NOT EXISTS train_metrics (
                     run TEXT NOT NULL,
                     step INTEGER NOT NULL,
                     split TEXT NOT NULL,
                     created_at INTEGER NOT NULL,
                     metric TEXT NOT NULL,
                     PRIMARY KEY (run, step, split)
                 );
                 PRAGMA user_version = 4;
                 COMMIT;",
            )
            .map_err(sql)?;
        }
        if version < 5 {
            // What a problem needs of its device's memory, per problem content, shapes,
            // device and worker (the pool's admission reads it; measured once).
            conn.execute_batch(
                "BEGIN;
                 CREATE TABLE IF NOT EXISTS memory_needs (
                     key TEXT PRIMARY KEY,
                     problem TEXT NOT NULL,
                     created_at INTEGER NOT NULL,
                     need TEXT NOT NULL
                 );
                 PRAGMA user_version = 5;
                 COMMIT;",
            )
            .map_err(sql)?;
        }
        if version < 6 {
            // The evaluation server's durable queue (`jobs.rs`).
            conn.execute_batch(jobs::CREATE).map_err(sql)?;
        }
        if version < 7 {
            // Runs, their evaluations, sources by content, and the columns and indexes
            // the dashboard pages by (`dash.rs`).
            conn.execute_batch(dash::MIGRATE).map_err(sql)?;
        }
        Ok(Store { conn, path: path.to_owned() })
    }

    /// Open an existing, current store for reading only (the dashboard): SQLite itself
    /// refuses any write through this connection.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        use rusqlite::OpenFlags;
        let sql = |source| StoreError::Sqlite { path: path.to_owned(), source };
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql)?;
        conn.busy_timeout(Duration::from_secs(30)).map_err(sql)?;
        let version: i64 =
            conn.pragma_query_value(None, "user_version", |r| r.get(0)).map_err(sql)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                path: path.to_owned(),
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        if version < SCHEMA_VERSION {
            return Err(StoreError::TooOld {
                path: path.to_owned(),
                found: version,
                needed: SCHEMA_VERSION,
            });
        }
        Ok(Store { conn, path: path.to_owned() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn sql(&self) -> impl FnOnce(rusqlite::Error) -> StoreError + '_ {
        |source| StoreError::Sqlite { path: self.path.clone(), source }
    }

    /// Store one episode (JSON), replacing an earlier one with the same id.
    pub fn put_episode(
        &self,
        id: &str,
        run: &str,
        problem: &str,
        sample: u32,
        episode_json: &str,
    ) -> Result<(), StoreError> {
        let now = unix_now();
        self.conn
            .execute(
                dash::PUT_EPISODE,
                rusqlite::params![id, run, problem, sample, now, episode_json],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// One training metric (JSON) of `run` at `step` on `split` (`train`, `validation`).
    /// A resumed run that repeats a step replaces its row.
    pub fn put_train_metric(
        &self,
        run: &str,
        step: u64,
        split: &str,
        metric_json: &str,
    ) -> Result<(), StoreError> {
        let now = unix_now();
        self.conn
            .execute(
                "INSERT OR REPLACE INTO train_metrics (run, step, split, created_at, metric)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![run, step as i64, split, now, metric_json],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// Every metric of `run`, as (step, split, JSON), by step.
    pub fn train_metrics(&self, run: &str) -> Result<Vec<(u64, String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT step, split, metric FROM train_metrics WHERE run = ?1 ORDER BY step, split",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([run], |r| Ok((r.get::<_, i64>(0)? as u64, r.get(1)?, r.get(2)?)))
            .map_err(self.sql())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.sql())?);
        }
        Ok(out)
    }

    /// Every stored episode of `run`, as JSON, by id.
    pub fn episodes(&self, run: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, episode FROM episodes WHERE run = ?1 ORDER BY id")
            .map_err(self.sql())?;
        let rows = stmt.query_map([run], |r| Ok((r.get(0)?, r.get(1)?))).map_err(self.sql())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.sql())?);
        }
        Ok(out)
    }

    /// The stored episodes whose id starts with `prefix`, as (id, JSON), by id: one
    /// measurement's episodes when ids are laid out as paths (a heldout pass resumed
    /// after a stop reads back the part it played).
    pub fn episodes_under(&self, prefix: &str) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, episode FROM episodes WHERE id >= ?1 AND id < ?2 ORDER BY id")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map(rusqlite::params![prefix, prefix_end(prefix)], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .map_err(self.sql())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.sql())?);
        }
        Ok(out)
    }

    /// Deletes the episodes whose id starts with `prefix`; how many went. A measurement
    /// played again under other settings must not be mixed with the part an earlier
    /// attempt left.
    pub fn delete_episodes_under(&self, prefix: &str) -> Result<usize, StoreError> {
        self.conn
            .execute(
                "DELETE FROM episodes WHERE id >= ?1 AND id < ?2",
                rusqlite::params![prefix, prefix_end(prefix)],
            )
            .map_err(self.sql())
    }

    /// Every stored episode of every run, as (run, JSON), by id.
    pub fn all_episodes(&self) -> Result<Vec<(String, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT run, episode FROM episodes ORDER BY id")
            .map_err(self.sql())?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).map_err(self.sql())?;
        let mut out = Vec::new();
        for row in rows {
            out.push(row.map_err(self.sql())?);
        }
        Ok(out)
    }

    /// The stored record for `key`, if any.
    pub fn get(&self, key: &str) -> Result<Option<EvalRecord>, StoreError> {
        let text: Option<String> = self
            .conn
            .query_row("SELECT record FROM evaluations WHERE key = ?1", params![key], |r| r.get(0))
            .optional()
            .map_err(self.sql())?;
        text.map(|t| {
            serde_json::from_str(&t).map_err(|source| StoreError::Corrupt {
                path: self.path.clone(),
                key: key.to_owned(),
                source,
            })
        })
        .transpose()
    }

    /// Write (or replace) a record; durable when this returns.
    pub fn put(&self, record: &EvalRecord) -> Result<(), StoreError> {
        let text = serde_json::to_string(record).map_err(|source| StoreError::Corrupt {
            path: self.path.clone(),
            key: record.key.clone(),
            source,
        })?;
        self.conn
            .execute(
                "INSERT OR REPLACE INTO evaluations
                 (key, problem, candidate, candidate_sha256, status, created_at, record, speedup)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                params![
                    record.key,
                    record.problem.name,
                    record.candidate.name,
                    record.candidate.sha256,
                    record.verdict.status.as_str(),
                    i64::try_from(record.created_at).unwrap_or(i64::MAX),
                    text,
                    record.verdict.timing.as_ref().map(|t| t.speedup)
                ],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// Write a record with the problem and candidate sources it names (kept once per
    /// content, so the dashboard can show what was evaluated).
    pub fn put_with_sources(
        &self,
        record: &EvalRecord,
        problem_source: &str,
        candidate_source: &str,
    ) -> Result<(), StoreError> {
        for (sha, text) in
            [(&record.problem.sha256, problem_source), (&record.candidate.sha256, candidate_source)]
        {
            self.conn
                .execute(
                    "INSERT OR IGNORE INTO sources (sha256, text) VALUES (?1, ?2)",
                    params![sha, text],
                )
                .map_err(self.sql())?;
        }
        self.put(record)
    }

    /// A stored baseline timing, if any.
    pub fn get_baseline(&self, key: &str) -> Result<Option<TimingStats>, StoreError> {
        self.get_json("SELECT stats FROM baselines WHERE key = ?1", key)
    }

    pub fn put_baseline(
        &self,
        key: &str,
        problem: &str,
        stats: &TimingStats,
    ) -> Result<(), StoreError> {
        self.put_json(
            "INSERT OR REPLACE INTO baselines (key, problem, created_at, stats) VALUES (?1, ?2, ?3, ?4)",
            key,
            problem,
            stats,
        )
    }

    /// A problem's stored memory need (`key`: its content, shapes, device and worker).
    pub fn get_memory_need(&self, key: &str) -> Result<Option<MemoryNeed>, StoreError> {
        self.get_json("SELECT need FROM memory_needs WHERE key = ?1", key)
    }

    /// Store (or replace) a problem's memory need under `key`.
    pub fn put_memory_need(
        &self,
        key: &str,
        problem: &str,
        need: &MemoryNeed,
    ) -> Result<(), StoreError> {
        self.put_json(
            "INSERT OR REPLACE INTO memory_needs (key, problem, created_at, need) VALUES (?1, ?2, ?3, ?4)",
            key,
            problem,
            need,
        )
    }

    /// One JSON value read by `sql` (one `?1` for the key); a value that does not parse is `Corrupt`.
    fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        sql: &str,
        key: &str,
    ) -> Result<Option<T>, StoreError> {
        let text: Option<String> =
            self.conn.query_row(sql, params![key], |r| r.get(0)).optional().map_err(self.sql())?;
        text.map(|t| {
            serde_json::from_str(&t).map_err(|source| StoreError::Corrupt {
                path: self.path.clone(),
                key: key.to_owned(),
                source,
            })
        })
        .transpose()
    }

    /// One JSON value written by `sql` (key, problem, created_at, value).
    fn put_json<T: serde::Serialize>(
        &self,
        sql: &str,
        key: &str,
        problem: &str,
        value: &T,
    ) -> Result<(), StoreError> {
        let text = serde_json::to_string(value).map_err(|source| StoreError::Corrupt {
            path: self.path.clone(),
            key: key.to_owned(),
            source,
        })?;
        self.conn.execute(sql, params![key, problem, unix_now(), text]).map_err(self.sql())?;
        Ok(())
    }

    pub fn stats(&self) -> Result<StoreStats, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT status, COUNT(*) FROM evaluations GROUP BY status ORDER BY status")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(self.sql())?;
        let mut stats = StoreStats::default();
        for row in rows {
            let (status, n) = row.map_err(self.sql())?;
            let n = u64::try_from(n).unwrap_or(0);
            stats.evaluations += n;
            stats.by_status.push((status, n));
        }
        Ok(stats)
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The least value above every text that starts with `prefix`, so that `id >= prefix
/// AND id < end` selects them through the primary key's index (SQLite compares text by
/// bytes, and UTF-8's byte order is its code points' order): the last character that can
/// be raised by one is. With none (only U+10FFFF, or nothing), a blob, which SQLite
/// orders above all text.
fn prefix_end(prefix: &str) -> rusqlite::types::Value {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(c) = chars.pop() {
        if let Some(next) = (u32::from(c) + 1..=0x10FFFF).find_map(char::from_u32) {
            chars.push(next);
            return rusqlite::types::Value::Text(chars.into_iter().collect());
        }
    }
    rusqlite::types::Value::Blob(Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use tritonforge_protocol::*;

    #[test]
    fn episodes_are_kept_per_run_and_replaced_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let store = Store::open(&path).unwrap();
        store.put_episode("r1/relu/0", "r1", "relu", 0, "{\"a\":1}").unwrap();
        store.put_episode("r1/relu/1", "r1", "relu", 1, "{\"a\":2}").unwrap();
        store.put_episode("r2/relu/0", "r2", "relu", 0, "{\"a\":3}").unwrap();
        store.put_episode("r1/relu/0", "r1", "relu", 0, "{\"a\":4}").unwrap();
        drop(store);
        let store = Store::open(&path).unwrap();
        let got = store.episodes("r1").unwrap();
        assert_eq!(
            got,
            vec![
                ("r1/relu/0".to_string(), "{\"a\":4}".to_string()),
                ("r1/relu/1".to_string(), "{\"a\":2}".to_string())
            ]
        );
        assert!(store.episodes("nope").unwrap().is_empty());
    }

    /// A prefix selects by id alone, across runs, and `%`/`_` in it are plain characters.
    #[test]
    fn episodes_under_a_prefix_are_read_and_deleted_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.sqlite")).unwrap();
        for (id, run) in [
            ("r/heldout-000002/a/0", "r/heldout"),
            ("r/heldout-000002/b/1", "r/heldout"),
            ("r/heldout-000020/a/0", "r/heldout"),
            ("r/heldout-00000%/a/0", "r/heldout"),
            ("q/heldout-000002/a/0", "q/heldout"),
        ] {
            store.put_episode(id, run, "a", 0, "{}").unwrap();
        }
        let ids = |prefix: &str| -> Vec<String> {
            store.episodes_under(prefix).unwrap().into_iter().map(|(id, _)| id).collect()
        };
        assert_eq!(ids("r/heldout-000002/"), ["r/heldout-000002/a/0", "r/heldout-000002/b/1"]);
        assert_eq!(ids("r/heldout-00000%/"), ["r/heldout-00000%/a/0"]);
        assert_eq!(store.delete_episodes_under("r/heldout-000002/").unwrap(), 2);
        assert!(ids("r/heldout-000002/").is_empty());
        assert_eq!(ids("r/heldout-0000").len(), 2, "the other step's and the odd one stay");
        assert_eq!(ids("q/").len(), 1);
        use rusqlite::types::Value::{Blob, Text};
        assert_eq!(
            [prefix_end("a/"), prefix_end("é"), prefix_end("a\u{D7FF}"), prefix_end("")],
            [Text("a0".into()), Text("ê".into()), Text("a\u{E000}".into()), Blob(Vec::new())]
        );
        assert_eq!(ids("").len(), 3, "an empty prefix: every id left");
    }

    fn record(key: &str, status: Status) -> EvalRecord {
        EvalRecord {
            schema: record::RECORD_SCHEMA,
            key: key.into(),
            problem: SourceRef {
                name: "relu".into(),
                path: "bench/level1/relu.py".into(),
                sha256: "aa".into(),
            },
            candidate: SourceRef {
                name: "relu".into(),
                path: "c/relu.py".into(),
                sha256: "bb".into(),
            },
            config: EvalConfig {
                overrides: BTreeMap::from([("N".into(), serde_json::json!(4))]),
                ..EvalConfig::default()
            },
            verdict: Verdict {
                timing_note: Some("cpu".into()),
                ..Verdict::decided(status, Stage::Correctness, "ok")
            },
            guard: vec![],
            sandbox: None,
            environment: EnvInfo {
                python: "3.11".into(),
                platform: "linux".into(),
                torch: "2.11.0".into(),
                triton: "3.6.0".into(),
                numpy: "2".into(),
                device: DeviceKind::Cpu,
                interpret: true,
                cuda: None,
                driver: None,
                gpus: vec![],
            },
            worker_version: "0.1.0".into(),
            stderr_tail: None,
            wall_ms: 1.0,
            executor_ms: Some(0.5),
            lease_wait_ms: 0.0,
            exclusive_ms: 0.0,
            start_wait_ms: 0.0,
            queue_wait_ms: 0.0,
            prepare_ms: 0.0,
            process_start_ms: 0.0,
            process_banked_ms: 0.0,
            process_startup: None,
            device_slot: 0,
            memory: None,
            preflight: None,
            created_at: 1,
            tritonforge_version: "0.1.0".into(),
        }
    }

    #[test]
    fn baselines_are_stored_by_key_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let stats = TimingStats {
            median_ms: 0.5,
            iqr_ms: 0.01,
            samples: 100,
            host_median_ms: 0.55,
            mean_ms: None,
            std_ms: None,
            min_ms: None,
            max_ms: None,
        };
        {
            let s = Store::open(&path).unwrap();
            assert_eq!(s.get_baseline("k1").unwrap(), None);
            s.put_baseline("k1", "relu", &stats).unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.get_baseline("k1").unwrap(), Some(stats));
        assert_eq!(s.get_baseline("k2").unwrap(), None);
    }

    #[test]
    fn memory_needs_are_stored_by_key_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let need = MemoryNeed {
            method: MemoryMethod::Allocator,
            params_bytes: 0,
            input_bytes: 6 << 30,
            output_bytes: 6 << 30,
            forward_bytes: 6 << 30,
            correctness_bytes: 30 << 30,
            timing_bytes: Some(31 << 30),
        };
        {
            let s = Store::open(&path).unwrap();
            assert_eq!(s.get_memory_need("m1").unwrap(), None);
            s.put_memory_need("m1", "relu", &need).unwrap();
        }
        let s = Store::open(&path).unwrap();
        assert_eq!(s.get_memory_need("m1").unwrap(), Some(need));
        assert_eq!(s.get_memory_need("m2").unwrap(), None);
    }

    #[test]
    fn records_survive_reopening_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/store.sqlite");
        {
            let store = Store::open(&path).unwrap();
            assert!(store.get("k1").unwrap().is_none());
            store.put(&record("k1", Status::Correct)).unwrap();
            store.put(&record("k2", Status::Incorrect)).unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert_eq!(store.get("k1").unwrap().unwrap(), record("k1", Status::Correct));
        let stats = store.stats().unwrap();
        assert_eq!(stats.evaluations, 2);
        assert_eq!(stats.by_status, vec![("correct".into(), 1), ("incorrect".into(), 1)]);
        let mode: String =
            store.conn.pragma_query_value(None, "journal_mode", |r| r.get(0)).unwrap();
        assert_eq!(mode, "wal");
    }

    #[test]
    fn a_corrupt_row_is_named_not_panicked_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let store = Store::open(&path).unwrap();
        store
            .conn
            .execute(
                "INSERT INTO evaluations (key, problem, candidate, candidate_sha256, status, created_at, record)
                 VALUES ('bad','p','c','x','correct',0,'{not json')",
                [],
            )
            .unwrap();
        let err = store.get("bad").unwrap_err();
        assert!(err.to_string().contains("bad"), "{err}");
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        {
            let c = Connection::open(&path).unwrap();
            c.pragma_update(None, "user_version", 99).unwrap();
        }
        assert!(matches!(Store::open(&path), Err(StoreError::TooNew { found: 99, .. })));
    }
}
