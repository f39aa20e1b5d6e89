//! What the dashboard reads: runs of every kind, their metrics, a page of evaluations or
//! episodes, one problem's summary. Every list is paged by a keyset cursor on an index,
//! so a store of 100k evaluations answers a page without reading the rest.

use rusqlite::{params, params_from_iter, types::Value, OptionalExtension};

use crate::{unix_now, Store, StoreError};

/// Schema version 7.
pub(crate) const MIGRATE: &str = "BEGIN;
     CREATE TABLE IF NOT EXISTS runs (
         id TEXT PRIMARY KEY,
         kind TEXT NOT NULL,
         status TEXT NOT NULL,
         settings TEXT,
         summary TEXT,
         started_at INTEGER NOT NULL,
         updated_at INTEGER NOT NULL,
         finished_at INTEGER
     );
     CREATE TABLE IF NOT EXISTS run_evaluations (
         run TEXT NOT NULL,
         key TEXT NOT NULL,
         created_at INTEGER NOT NULL,
         PRIMARY KEY (run, key)
     ) WITHOUT ROWID;
     CREATE INDEX IF NOT EXISTS run_evaluations_page ON run_evaluations(run, created_at, key);
     CREATE INDEX IF NOT EXISTS run_evaluations_key ON run_evaluations(key);
     CREATE TABLE IF NOT EXISTS sources (
         sha256 TEXT PRIMARY KEY,
         text TEXT NOT NULL
     ) WITHOUT ROWID;
     ALTER TABLE evaluations ADD COLUMN speedup REAL;
     UPDATE evaluations SET speedup = json_extract(record, '$.timing.speedup')
         WHERE json_valid(record);
     DROP INDEX IF EXISTS evaluations_problem;
     DROP INDEX IF EXISTS evaluations_status;
     CREATE INDEX IF NOT EXISTS evaluations_created ON evaluations(created_at, key);
     CREATE INDEX IF NOT EXISTS evaluations_problem_created ON evaluations(problem, created_at, key);
     CREATE INDEX IF NOT EXISTS evaluations_status_created ON evaluations(status, created_at, key);
     CREATE INDEX IF NOT EXISTS evaluations_problem_best ON evaluations(problem, status, speedup);
     ALTER TABLE episodes ADD COLUMN outcome TEXT;
     ALTER TABLE episodes ADD COLUMN turns INTEGER;
     ALTER TABLE episodes ADD COLUMN ret REAL;
     ALTER TABLE episodes ADD COLUMN best_speedup REAL;
     UPDATE episodes SET
         outcome = json_extract(episode, '$.turns[#-1].outcome'),
         turns = json_array_length(episode, '$.turns'),
         ret = json_extract(episode, '$.turns[0].ret'),
         best_speedup = (SELECT MAX(json_extract(t.value, '$.speedup'))
                         FROM json_each(episode, '$.turns') AS t
                         WHERE json_extract(t.value, '$.outcome') = 'correct')
         WHERE json_valid(episode);
     DROP INDEX IF EXISTS episodes_run;
     CREATE INDEX IF NOT EXISTS episodes_run_page ON episodes(run, created_at, id);
     CREATE INDEX IF NOT EXISTS episodes_created ON episodes(created_at, id);
     CREATE INDEX IF NOT EXISTS episodes_problem ON episodes(problem, created_at, id);
     PRAGMA user_version = 7;
     COMMIT;";

/// Writes an episode and the columns the dashboard lists it by, taken from its JSON
/// (`?6`) by SQLite itself, so every writer keeps them right.
pub(crate) const PUT_EPISODE: &str = "INSERT OR REPLACE INTO episodes
     (id, run, problem, sample, created_at, episode, outcome, turns, ret, best_speedup)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6,
         json_extract(?6, '$.turns[#-1].outcome'),
         json_array_length(?6, '$.turns'),
         json_extract(?6, '$.turns[0].ret'),
         (SELECT MAX(json_extract(t.value, '$.speedup')) FROM json_each(?6, '$.turns') AS t
          WHERE json_extract(t.value, '$.outcome') = 'correct'))";

macro_rules! closed_str {
    ($(#[$m:meta])* pub enum $name:ident { $($(#[$vm:meta])* $v:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $v,)* }
        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$v,)*];
            pub fn as_str(self) -> &'static str {
                match self { $($name::$v => $s,)* }
            }
            pub fn parse(s: &str) -> Option<$name> {
                Self::ALL.iter().copied().find(|k| k.as_str() == s)
            }
        }
    };
}

closed_str! {
    /// What made a run.
    pub enum RunKind {
        /// `tritonforge eval` over a batch of pairs.
        Eval = "eval",
        /// `tritonforge run`: the agent playing episodes.
        Agent = "agent",
        Sft = "sft",
        Rl = "rl",
    }
}

closed_str! {
    /// Where a run is. `Recorded`: the run left metrics or episodes but no lifecycle row
    /// (written before runs were registered), so whether it ended is unknown.
    pub enum RunStatus {
        Running = "running",
        Done = "done",
        Failed = "failed",
        Interrupted = "interrupted",
        Recorded = "recorded",
    }
}

/// One run, with what the store holds of it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    pub id: String,
    pub kind: RunKind,
    pub status: RunStatus,
    /// JSON, as the command gave it.
    pub settings: Option<String>,
    /// JSON headline figures given when it ended.
    pub summary: Option<String>,
    pub started_at: i64,
    pub updated_at: i64,
    pub finished_at: Option<i64>,
    pub evaluations: u64,
    pub episodes: u64,
    pub metrics: u64,
}

/// One training metric row.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricRow {
    pub run: String,
    pub step: u64,
    pub split: String,
    pub created_at: i64,
    /// JSON.
    pub metric: String,
}

/// Where a page ends: the last row's time and key; the next page starts after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub created_at: i64,
    pub key: String,
}

impl Cursor {
    /// `TIME:KEY`, as the dashboard passes it around.
    pub fn encode(&self) -> String {
        format!("{}:{}", self.created_at, self.key)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let (t, k) = s.split_once(':')?;
        Some(Cursor { created_at: t.parse().ok()?, key: k.to_string() })
    }
}

/// A page of rows, newest first, and the cursor of the next page if there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next: Option<Cursor>,
}

/// Which evaluations a page holds. Times are Unix seconds, both ends included.
#[derive(Debug, Clone, Default)]
pub struct EvalFilter {
    pub problem: Option<String>,
    pub status: Option<String>,
    pub run: Option<String>,
    pub since: Option<i64>,
    pub until: Option<i64>,
    pub before: Option<Cursor>,
    pub limit: u32,
}

/// An evaluation as a list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalRow {
    pub key: String,
    pub problem: String,
    pub candidate: String,
    pub status: String,
    pub created_at: i64,
    pub speedup: Option<f64>,
    pub stage: Option<String>,
    pub message: Option<String>,
    /// The time the page is ordered by: `created_at`, or on a run's page the time the
    /// evaluation was linked to the run (an agent or RL run links a turn's record when
    /// its episode ends, not when the record was made). The next page's cursor uses it.
    pub listed_at: i64,
}

/// Which episodes a page holds.
#[derive(Debug, Clone, Default)]
pub struct EpisodeFilter {
    pub run: Option<String>,
    pub problem: Option<String>,
    pub before: Option<Cursor>,
    pub limit: u32,
}

/// An episode as a list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeRow {
    pub id: String,
    pub run: String,
    pub problem: String,
    pub sample: u32,
    pub created_at: i64,
    pub outcome: Option<String>,
    pub turns: u32,
    pub ret: Option<f64>,
    pub best_speedup: Option<f64>,
}

/// Per problem name: how often it was evaluated and solved, and the best speedup of a
/// correct, timed evaluation.
#[derive(Debug, Clone, PartialEq)]
pub struct ProblemSummary {
    pub problem: String,
    pub evaluations: u64,
    pub correct: u64,
    pub best_speedup: Option<f64>,
}

/// A `train_metrics` row selected as `run, step, split, created_at, metric`.
fn metric_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MetricRow> {
    Ok(MetricRow {
        run: r.get(0)?,
        step: count(r.get(1)?),
        split: r.get(2)?,
        created_at: r.get(3)?,
        metric: r.get(4)?,
    })
}

fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

impl Store {
    /// Register a run (or a resumed one) as running, with its settings (JSON).
    pub fn begin_run(&self, id: &str, kind: RunKind, settings: &str) -> Result<(), StoreError> {
        let now = unix_now();
        self.conn
            .execute(
                "INSERT INTO runs (id, kind, status, settings, started_at, updated_at)
                 VALUES (?1, ?2, 'running', ?3, ?4, ?4)
                 ON CONFLICT(id) DO UPDATE SET status = 'running', settings = excluded.settings,
                     updated_at = excluded.updated_at, finished_at = NULL",
                params![id, kind.as_str(), settings, now],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// A registered run ended, with its headline figures (JSON).
    pub fn finish_run(
        &self,
        id: &str,
        status: RunStatus,
        summary: Option<&str>,
    ) -> Result<(), StoreError> {
        let now = unix_now();
        self.conn
            .execute(
                "UPDATE runs SET status = ?2, summary = COALESCE(?3, summary), updated_at = ?4,
                     finished_at = ?4 WHERE id = ?1",
                params![id, status.as_str(), summary, now],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// Note that evaluation `key` (made at `created_at`) belongs to `run`.
    pub fn link_run_evaluation(
        &self,
        run: &str,
        key: &str,
        created_at: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .execute(
                "INSERT OR IGNORE INTO run_evaluations (run, key, created_at) VALUES (?1, ?2, ?3)",
                params![run, key, created_at],
            )
            .map_err(self.sql())?;
        Ok(())
    }

    /// Note that evaluations `keys` belong to `run`, in one transaction (the RL loop links
    /// a step's evaluations at once; one commit per key would cost a sync each).
    pub fn link_run_evaluations(
        &self,
        run: &str,
        keys: &[&str],
        created_at: i64,
    ) -> Result<(), StoreError> {
        let tx = self.conn.unchecked_transaction().map_err(self.sql())?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO run_evaluations (run, key, created_at) VALUES (?1, ?2, ?3)",
                )
                .map_err(self.sql())?;
            for key in keys {
                stmt.execute(params![run, key, created_at]).map_err(self.sql())?;
            }
        }
        tx.commit().map_err(self.sql())
    }

    /// Every run: registered ones, and runs known only by their metrics or episodes
    /// (status `Recorded`; kind `rl` for RL metrics (split `rl` or `heldout:<set>`),
    /// `sft` for others, `agent` for episodes alone). Newest activity first.
    pub fn runs(&self) -> Result<Vec<RunRow>, StoreError> {
        use std::collections::BTreeMap;
        let mut runs: BTreeMap<String, RunRow> = BTreeMap::new();
        let blank = |id: &str, kind: RunKind, first: i64, last: i64| RunRow {
            id: id.to_string(),
            kind,
            status: RunStatus::Recorded,
            settings: None,
            summary: None,
            started_at: first,
            updated_at: last,
            finished_at: None,
            evaluations: 0,
            episodes: 0,
            metrics: 0,
        };
        {
            let mut stmt = self
                .conn
                .prepare(
                    "SELECT id, kind, status, settings, summary, started_at, updated_at, finished_at
                     FROM runs",
                )
                .map_err(self.sql())?;
            let rows = stmt
                .query_map([], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, i64>(5)?,
                        r.get::<_, i64>(6)?,
                        r.get::<_, Option<i64>>(7)?,
                    ))
                })
                .map_err(self.sql())?;
            for row in rows {
                let (id, kind, status, settings, summary, started, updated, finished) =
                    row.map_err(self.sql())?;
                let mut run =
                    blank(&id, RunKind::parse(&kind).unwrap_or(RunKind::Eval), started, updated);
                run.status = RunStatus::parse(&status).unwrap_or(RunStatus::Recorded);
                run.settings = settings;
                run.summary = summary;
                run.finished_at = finished;
                runs.insert(id, run);
            }
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run, COUNT(*), MIN(created_at), MAX(created_at), MAX(split = 'rl' OR split LIKE 'heldout:%')
                 FROM train_metrics GROUP BY run",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, i64>(4)?,
                ))
            })
            .map_err(self.sql())?;
        for row in rows {
            let (id, n, first, last, rl) = row.map_err(self.sql())?;
            let kind = if rl != 0 { RunKind::Rl } else { RunKind::Sft };
            let run = runs.entry(id.clone()).or_insert_with(|| blank(&id, kind, first, last));
            run.metrics = count(n);
            run.updated_at = run.updated_at.max(last);
        }
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run, COUNT(*), MIN(created_at), MAX(created_at) FROM episodes GROUP BY run",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                    r.get::<_, i64>(3)?,
                ))
            })
            .map_err(self.sql())?;
        for row in rows {
            let (id, n, first, last) = row.map_err(self.sql())?;
            let run =
                runs.entry(id.clone()).or_insert_with(|| blank(&id, RunKind::Agent, first, last));
            run.episodes = count(n);
            run.updated_at = run.updated_at.max(last);
        }
        let mut stmt = self
            .conn
            .prepare("SELECT run, COUNT(*) FROM run_evaluations GROUP BY run")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(self.sql())?;
        for row in rows {
            let (id, n) = row.map_err(self.sql())?;
            if let Some(run) = runs.get_mut(&id) {
                run.evaluations = count(n);
            }
        }
        let mut out: Vec<RunRow> = runs.into_values().collect();
        out.sort_by(|a, b| b.updated_at.cmp(&a.updated_at).then_with(|| a.id.cmp(&b.id)));
        Ok(out)
    }

    /// Metrics of `run` after `after_step` (all with `None`), by step and split.
    pub fn metrics_after(
        &self,
        run: &str,
        after_step: Option<u64>,
    ) -> Result<Vec<MetricRow>, StoreError> {
        let after = after_step.map(|s| i64::try_from(s).unwrap_or(i64::MAX)).unwrap_or(-1);
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run, step, split, created_at, metric FROM train_metrics
                 WHERE run = ?1 AND step > ?2 ORDER BY step, split",
            )
            .map_err(self.sql())?;
        let rows = stmt.query_map(params![run, after], metric_row).map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    /// The last metric of `run` on `split`, if any.
    pub fn last_metric(&self, run: &str, split: &str) -> Result<Option<MetricRow>, StoreError> {
        self.conn
            .query_row(
                "SELECT run, step, split, created_at, metric FROM train_metrics
                 WHERE run = ?1 AND split = ?2 ORDER BY step DESC LIMIT 1",
                params![run, split],
                metric_row,
            )
            .optional()
            .map_err(self.sql())
    }

    /// The last metric of `run` on each split whose name starts with `prefix` (an RL
    /// run's heldout sets are splits `heldout:<set>`), by split.
    pub fn last_metrics_by_split(
        &self,
        run: &str,
        prefix: &str,
    ) -> Result<Vec<MetricRow>, StoreError> {
        // SQLite takes the bare columns of a row with MAX(step) from that row.
        let mut stmt = self
            .conn
            .prepare(
                "SELECT run, MAX(step), split, created_at, metric FROM train_metrics
                 WHERE run = ?1 AND substr(split, 1, length(?2)) = ?2
                 GROUP BY split ORDER BY split",
            )
            .map_err(self.sql())?;
        let rows = stmt.query_map(params![run, prefix], metric_row).map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    /// Verdict counts of a run's evaluations, by status.
    pub fn run_status_counts(&self, run: &str) -> Result<Vec<(String, u64)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT e.status, COUNT(*) FROM run_evaluations r JOIN evaluations e ON e.key = r.key
                 WHERE r.run = ?1 GROUP BY e.status ORDER BY e.status",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([run], |r| Ok((r.get::<_, String>(0)?, count(r.get(1)?))))
            .map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    /// Episode outcomes of a run: (episodes, solved, mean first-turn return).
    pub fn run_episode_counts(&self, run: &str) -> Result<(u64, u64, Option<f64>), StoreError> {
        self.conn
            .query_row(
                "SELECT COUNT(*), COALESCE(SUM(outcome = 'correct'), 0), AVG(ret)
                 FROM episodes WHERE run = ?1",
                [run],
                |r| Ok((count(r.get(0)?), count(r.get(1)?), r.get(2)?)),
            )
            .map_err(self.sql())
    }

    /// The SQL and parameters of one page of evaluations (shared with the plan test).
    fn evaluations_sql(filter: &EvalFilter) -> (String, Vec<Value>) {
        let mut sql = String::from(
            "SELECT e.key, e.problem, e.candidate, e.status, e.created_at, e.speedup,
                    json_extract(e.record, '$.stage'),
                    substr(json_extract(e.record, '$.message'), 1, 300)",
        );
        // The ordering time goes last; `t` is known only below, so it is added there.
        let mut args: Vec<Value> = Vec::new();
        let mut wheres: Vec<String> = Vec::new();
        // With a run, page by the run's own index (its rows carry the time).
        let t = if let Some(run) = &filter.run {
            sql.push_str(
                ", r.created_at FROM run_evaluations r JOIN evaluations e ON e.key = r.key",
            );
            args.push(Value::Text(run.clone()));
            wheres.push(format!("r.run = ?{}", args.len()));
            "r"
        } else {
            sql.push_str(", e.created_at FROM evaluations e");
            "e"
        };
        if let Some(p) = &filter.problem {
            args.push(Value::Text(p.clone()));
            wheres.push(format!("e.problem = ?{}", args.len()));
        }
        if let Some(s) = &filter.status {
            args.push(Value::Text(s.clone()));
            wheres.push(format!("e.status = ?{}", args.len()));
        }
        if let Some(since) = filter.since {
            args.push(Value::Integer(since));
            wheres.push(format!("{t}.created_at >= ?{}", args.len()));
        }
        if let Some(until) = filter.until {
            args.push(Value::Integer(until));
            wheres.push(format!("{t}.created_at <= ?{}", args.len()));
        }
        if let Some(c) = &filter.before {
            args.push(Value::Integer(c.created_at));
            args.push(Value::Text(c.key.clone()));
            wheres.push(format!(
                "({t}.created_at, {t}.key) < (?{}, ?{})",
                args.len() - 1,
                args.len()
            ));
        }
        if !wheres.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&wheres.join(" AND "));
        }
        args.push(Value::Integer(i64::from(filter.limit.clamp(1, 500)) + 1));
        sql.push_str(&format!(" ORDER BY {t}.created_at DESC, {t}.key DESC LIMIT ?{}", args.len()));
        (sql, args)
    }

    /// One page of evaluations, newest first.
    pub fn evaluations_page(&self, filter: &EvalFilter) -> Result<Page<EvalRow>, StoreError> {
        let (sql, args) = Store::evaluations_sql(filter);
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql())?;
        let rows = stmt
            .query_map(params_from_iter(args), |r| {
                Ok(EvalRow {
                    key: r.get(0)?,
                    problem: r.get(1)?,
                    candidate: r.get(2)?,
                    status: r.get(3)?,
                    created_at: r.get(4)?,
                    speedup: r.get(5)?,
                    stage: r.get(6)?,
                    message: r.get(7)?,
                    listed_at: r.get(8)?,
                })
            })
            .map_err(self.sql())?;
        let items = rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())?;
        Ok(paged(items, filter.limit, |e| Cursor { created_at: e.listed_at, key: e.key.clone() }))
    }

    /// SQLite's plan for a page of evaluations: one line per step (what tests assert).
    pub fn evaluations_plan(&self, filter: &EvalFilter) -> Result<Vec<String>, StoreError> {
        let (sql, args) = Store::evaluations_sql(filter);
        let mut stmt =
            self.conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).map_err(self.sql())?;
        let rows = stmt
            .query_map(params_from_iter(args), |r| r.get::<_, String>(3))
            .map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }

    /// The record's JSON as stored, and the runs it belongs to.
    pub fn evaluation_json(&self, key: &str) -> Result<Option<(String, Vec<String>)>, StoreError> {
        let Some(text) = self
            .conn
            .query_row("SELECT record FROM evaluations WHERE key = ?1", [key], |r| r.get(0))
            .optional()
            .map_err(self.sql())?
        else {
            return Ok(None);
        };
        let mut stmt = self
            .conn
            .prepare("SELECT run FROM run_evaluations WHERE key = ?1 ORDER BY run")
            .map_err(self.sql())?;
        let runs = stmt
            .query_map([key], |r| r.get(0))
            .map_err(self.sql())?
            .collect::<Result<Vec<String>, _>>()
            .map_err(self.sql())?;
        Ok(Some((text, runs)))
    }

    /// A source file kept by content hash.
    pub fn source(&self, sha256: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row("SELECT text FROM sources WHERE sha256 = ?1", [sha256], |r| r.get(0))
            .optional()
            .map_err(self.sql())
    }

    /// One page of episodes, newest first.
    pub fn episodes_page(&self, filter: &EpisodeFilter) -> Result<Page<EpisodeRow>, StoreError> {
        let mut sql = String::from(
            "SELECT id, run, problem, sample, created_at, outcome, turns, ret, best_speedup
             FROM episodes",
        );
        let mut args: Vec<Value> = Vec::new();
        let mut wheres: Vec<String> = Vec::new();
        if let Some(run) = &filter.run {
            args.push(Value::Text(run.clone()));
            wheres.push(format!("run = ?{}", args.len()));
        }
        if let Some(p) = &filter.problem {
            args.push(Value::Text(p.clone()));
            wheres.push(format!("problem = ?{}", args.len()));
        }
        if let Some(c) = &filter.before {
            args.push(Value::Integer(c.created_at));
            args.push(Value::Text(c.key.clone()));
            wheres.push(format!("(created_at, id) < (?{}, ?{})", args.len() - 1, args.len()));
        }
        if !wheres.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&wheres.join(" AND "));
        }
        args.push(Value::Integer(i64::from(filter.limit.clamp(1, 500)) + 1));
        sql.push_str(&format!(" ORDER BY created_at DESC, id DESC LIMIT ?{}", args.len()));
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql())?;
        let rows = stmt
            .query_map(params_from_iter(args), |r| {
                Ok(EpisodeRow {
                    id: r.get(0)?,
                    run: r.get(1)?,
                    problem: r.get(2)?,
                    sample: r.get(3)?,
                    created_at: r.get(4)?,
                    outcome: r.get(5)?,
                    turns: r.get::<_, Option<u32>>(6)?.unwrap_or(0),
                    ret: r.get(7)?,
                    best_speedup: r.get(8)?,
                })
            })
            .map_err(self.sql())?;
        let items = rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())?;
        Ok(paged(items, filter.limit, |e| Cursor { created_at: e.created_at, key: e.id.clone() }))
    }

    /// One episode's JSON.
    pub fn episode_json(&self, id: &str) -> Result<Option<String>, StoreError> {
        self.conn
            .query_row("SELECT episode FROM episodes WHERE id = ?1", [id], |r| r.get(0))
            .optional()
            .map_err(self.sql())
    }

    /// Every evaluated problem's counts and best speedup (one pass over an index).
    pub fn problem_summaries(&self) -> Result<Vec<ProblemSummary>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(
                "SELECT problem, COUNT(*), SUM(status = 'correct'),
                        MAX(CASE WHEN status = 'correct' THEN speedup END)
                 FROM evaluations GROUP BY problem ORDER BY problem",
            )
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| {
                Ok(ProblemSummary {
                    problem: r.get(0)?,
                    evaluations: count(r.get(1)?),
                    correct: count(r.get(2)?),
                    best_speedup: r.get(3)?,
                })
            })
            .map_err(self.sql())?;
        rows.collect::<Result<Vec<_>, _>>().map_err(self.sql())
    }
}

/// Trim the one extra row a page query asks for into the next page's cursor.
fn paged<T>(mut items: Vec<T>, limit: u32, cursor: impl Fn(&T) -> Cursor) -> Page<T> {
    let limit = limit.clamp(1, 500) as usize;
    let next = if items.len() > limit {
        items.truncate(limit);
        items.last().map(cursor)
    } else {
        None
    };
    Page { items, next }
}
