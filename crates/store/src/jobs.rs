//! The evaluation server's queue: every accepted request is a row here before the
//! server replies, so a crash or `kill -9` loses nothing that was accepted. A job moves
//! `queued` → `running` → `done` | `failed` | `cancelled`; a restart puts the `running`
//! ones back in the queue (the evaluation cache then answers any that had already ended,
//! so none is evaluated twice).

use rusqlite::{params, OptionalExtension, Row};

use crate::{Store, StoreError};

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobState {
    Queued,
    Running,
    Done,
    /// The evaluator could not give a verdict (a broken problem, the pool's own failure).
    Failed,
    Cancelled,
}

impl JobState {
    pub const ALL: [JobState; 5] = [
        JobState::Queued,
        JobState::Running,
        JobState::Done,
        JobState::Failed,
        JobState::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "queued",
            JobState::Running => "running",
            JobState::Done => "done",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether the job will not change any more.
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Done | JobState::Failed | JobState::Cancelled)
    }
}

/// A job as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    pub id: String,
    /// Insertion order (the queue's order).
    pub seq: i64,
    pub client: String,
    pub idempotency_key: Option<String>,
    /// Hash of the request's content: an identical request finds this job.
    pub request_hash: String,
    /// The request as the server will run it (JSON).
    pub request: String,
    pub problem: String,
    pub candidate: String,
    pub state: JobState,
    /// The evaluation record's key once done.
    pub record_key: Option<String>,
    pub error: Option<String>,
    /// Whether the verdict came from the evaluation cache.
    pub cached: bool,
    /// How many times a server started it (more than 1 only after a restart).
    pub attempts: u32,
    pub created_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
}

/// A job to add.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub id: String,
    pub client: String,
    pub idempotency_key: Option<String>,
    pub request_hash: String,
    pub request: String,
    pub problem: String,
    pub candidate: String,
}

/// What adding a job did.
#[derive(Debug, Clone, PartialEq)]
pub enum Added {
    /// A new row, queued.
    New(String),
    /// The client's idempotency key (or, when asked, an identical request) names an
    /// existing job: its id and state.
    Existing(String, JobState),
}

impl Added {
    pub fn id(&self) -> &str {
        match self {
            Added::New(id) | Added::Existing(id, _) => id,
        }
    }
}

/// Which jobs `list_jobs` returns.
#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub client: Option<String>,
    pub problem: Option<String>,
    /// Only jobs inserted before this `seq` (paging backwards).
    pub before_seq: Option<i64>,
    pub limit: u32,
}

/// A job as the dashboard's queue page lists it: no request body (it holds the sources,
/// which a listing has no use for), the error cut short.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueRow {
    pub id: String,
    pub seq: i64,
    pub client: String,
    pub problem: String,
    pub candidate: String,
    pub state: JobState,
    pub record_key: Option<String>,
    pub error: Option<String>,
    pub cached: bool,
    pub attempts: u32,
    pub created_ms: i64,
    pub started_ms: Option<i64>,
    pub finished_ms: Option<i64>,
}

const QUEUE_COLUMNS: &str = "id, seq, client, problem, candidate, state, record_key, \
                             substr(error, 1, 300), cached, attempts, created_ms, started_ms, finished_ms";

fn row_to_queue_row(r: &Row<'_>) -> rusqlite::Result<QueueRow> {
    let state: String = r.get(5)?;
    Ok(QueueRow {
        id: r.get(0)?,
        seq: r.get(1)?,
        client: r.get(2)?,
        problem: r.get(3)?,
        candidate: r.get(4)?,
        state: JobState::parse(&state).unwrap_or(JobState::Failed),
        record_key: r.get(6)?,
        error: r.get(7)?,
        cached: r.get::<_, i64>(8)? != 0,
        attempts: u32::try_from(r.get::<_, i64>(9)?).unwrap_or(0),
        created_ms: r.get(10)?,
        started_ms: r.get(11)?,
        finished_ms: r.get(12)?,
    })
}

const COLUMNS: &str = "id, seq, client, idem_key, request_hash, request, problem, candidate, \
                       state, record_key, error, cached, attempts, created_ms, started_ms, finished_ms";

pub(crate) const CREATE: &str = "BEGIN;
     CREATE TABLE IF NOT EXISTS jobs (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         id TEXT NOT NULL UNIQUE,
         client TEXT NOT NULL,
         idem_key TEXT,
         request_hash TEXT NOT NULL,
         request TEXT NOT NULL,
         problem TEXT NOT NULL,
         candidate TEXT NOT NULL,
         state TEXT NOT NULL,
         record_key TEXT,
         error TEXT,
         cached INTEGER NOT NULL DEFAULT 0,
         attempts INTEGER NOT NULL DEFAULT 0,
         created_ms INTEGER NOT NULL,
         started_ms INTEGER,
         finished_ms INTEGER
     );
     CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs(client, idem_key) WHERE idem_key IS NOT NULL;
     CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, seq);
     CREATE INDEX IF NOT EXISTS jobs_hash ON jobs(request_hash);
     PRAGMA user_version = 6;
     COMMIT;";

fn row_to_job(r: &Row<'_>) -> rusqlite::Result<Job> {
    let state: String = r.get(8)?;
    Ok(Job {
        id: r.get(0)?,
        seq: r.get(1)?,
        client: r.get(2)?,
        idempotency_key: r.get(3)?,
        request_hash: r.get(4)?,
        request: r.get(5)?,
        problem: r.get(6)?,
        candidate: r.get(7)?,
        // Only this module writes the column; an unknown value reads as failed.
        state: JobState::parse(&state).unwrap_or(JobState::Failed),
        record_key: r.get(9)?,
        error: r.get(10)?,
        cached: r.get::<_, i64>(11)? != 0,
        attempts: u32::try_from(r.get::<_, i64>(12)?).unwrap_or(0),
        created_ms: r.get(13)?,
        started_ms: r.get(14)?,
        finished_ms: r.get(15)?,
    })
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl Store {
    /// Add jobs in one transaction, durable when this returns. A job whose
    /// (client, idempotency key) exists is not added: its existing id comes back. With
    /// `reuse_identical`, so is one whose request hash matches a job that is not
    /// cancelled or failed (the compatible `/eval` answers repeats from the store).
    pub fn add_jobs(
        &mut self,
        jobs: &[NewJob],
        reuse_identical: bool,
    ) -> Result<Vec<Added>, StoreError> {
        let path = self.path.clone();
        let sql = |source| StoreError::Sqlite { path: path.clone(), source };
        let tx = self.conn.transaction().map_err(sql)?;
        let mut out = Vec::with_capacity(jobs.len());
        let now = now_ms();
        for j in jobs {
            let mut existing: Option<(String, String)> = None;
            if let Some(k) = &j.idempotency_key {
                existing = tx
                    .query_row(
                        "SELECT id, state FROM jobs WHERE client = ?1 AND idem_key = ?2",
                        params![j.client, k],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()
                    .map_err(sql)?;
            }
            if existing.is_none() && reuse_identical {
                existing = tx
                    .query_row(
                        "SELECT id, state FROM jobs WHERE request_hash = ?1
                         AND state NOT IN ('cancelled', 'failed') ORDER BY seq DESC LIMIT 1",
                        params![j.request_hash],
                        |r| Ok((r.get(0)?, r.get(1)?)),
                    )
                    .optional()
                    .map_err(sql)?;
            }
            if let Some((id, state)) = existing {
                out.push(Added::Existing(id, JobState::parse(&state).unwrap_or(JobState::Failed)));
                continue;
            }
            tx.execute(
                "INSERT INTO jobs (id, client, idem_key, request_hash, request, problem, candidate,
                                   state, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', ?8)",
                params![
                    j.id,
                    j.client,
                    j.idempotency_key,
                    j.request_hash,
                    j.request,
                    j.problem,
                    j.candidate,
                    now
                ],
            )
            .map_err(sql)?;
            out.push(Added::New(j.id.clone()));
        }
        tx.commit().map_err(sql)?;
        Ok(out)
    }

    /// Take the oldest queued job (it becomes `running`, its attempts counted).
    pub fn claim_job(&self) -> Result<Option<Job>, StoreError> {
        let sql = format!(
            "UPDATE jobs SET state = 'running', started_ms = ?1, attempts = attempts + 1
             WHERE seq = (SELECT seq FROM jobs WHERE state = 'queued' ORDER BY seq LIMIT 1)
             RETURNING {COLUMNS}"
        );
        self.conn.query_row(&sql, params![now_ms()], row_to_job).optional().map_err(self.sql())
    }

    /// End a running job. Returns false when it was not running (cancelled meanwhile).
    pub fn finish_job(
        &self,
        id: &str,
        state: JobState,
        record_key: Option<&str>,
        error: Option<&str>,
        cached: bool,
    ) -> Result<bool, StoreError> {
        let n = self
            .conn
            .execute(
                "UPDATE jobs SET state = ?2, record_key = ?3, error = ?4, cached = ?5,
                 finished_ms = ?6 WHERE id = ?1 AND state = 'running'",
                params![id, state.as_str(), record_key, error, i64::from(cached), now_ms()],
            )
            .map_err(self.sql())?;
        Ok(n == 1)
    }

    /// Cancel a job that has not ended; returns its state afterwards (`None`: no such job).
    pub fn cancel_job(&self, id: &str) -> Result<Option<JobState>, StoreError> {
        self.conn
            .execute(
                "UPDATE jobs SET state = 'cancelled', finished_ms = ?2
                 WHERE id = ?1 AND state IN ('queued', 'running')",
                params![id, now_ms()],
            )
            .map_err(self.sql())?;
        Ok(self.job(id)?.map(|j| j.state))
    }

    /// Put every `running` job back in the queue (a server starting after a crash).
    pub fn requeue_running(&self) -> Result<usize, StoreError> {
        self.conn
            .execute("UPDATE jobs SET state = 'queued' WHERE state = 'running'", [])
            .map_err(self.sql())
    }

    pub fn job(&self, id: &str) -> Result<Option<Job>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM jobs WHERE id = ?1");
        self.conn.query_row(&sql, params![id], row_to_job).optional().map_err(self.sql())
    }

    /// Jobs matching `filter`, newest first.
    pub fn list_jobs(&self, filter: &JobFilter) -> Result<Vec<Job>, StoreError> {
        let sql = format!(
            "SELECT {COLUMNS} FROM jobs
             WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR client = ?2)
               AND (?3 IS NULL OR problem = ?3) AND (?4 IS NULL OR seq < ?4)
             ORDER BY seq DESC LIMIT ?5"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql())?;
        let rows = stmt
            .query_map(
                params![
                    filter.state.map(JobState::as_str),
                    filter.client,
                    filter.problem,
                    filter.before_seq,
                    i64::from(filter.limit)
                ],
                row_to_job,
            )
            .map_err(self.sql())?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(self.sql())
    }

    /// How many jobs are in each state.
    pub fn job_counts(&self) -> Result<Vec<(JobState, u64)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT state, COUNT(*) FROM jobs GROUP BY state")
            .map_err(self.sql())?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))
            .map_err(self.sql())?;
        let mut out = Vec::new();
        for row in rows {
            let (s, n) = row.map_err(self.sql())?;
            if let Some(state) = JobState::parse(&s) {
                out.push((state, u64::try_from(n).unwrap_or(0)));
            }
        }
        Ok(out)
    }

    /// Jobs in `state`, in queue order (oldest first: for `queued`, the next to run
    /// first), at most `limit`; read on the `(state, seq)` index.
    pub fn jobs_in_state(&self, state: JobState, limit: u32) -> Result<Vec<QueueRow>, StoreError> {
        let sql =
            format!("SELECT {QUEUE_COLUMNS} FROM jobs WHERE state = ?1 ORDER BY seq LIMIT ?2");
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql())?;
        let rows = stmt
            .query_map(params![state.as_str(), i64::from(limit)], row_to_queue_row)
            .map_err(self.sql())?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(self.sql())
    }

    /// The last `limit` jobs that ended (done, failed, cancelled), newest first. Walks the
    /// table backwards by `seq` (its rowid), where ended jobs are nearly all of the rows,
    /// so no index on the end time is needed.
    pub fn recent_finished_jobs(&self, limit: u32) -> Result<Vec<QueueRow>, StoreError> {
        let sql = format!(
            "SELECT {QUEUE_COLUMNS} FROM jobs WHERE state NOT IN ('queued', 'running')
             ORDER BY seq DESC LIMIT ?1"
        );
        let mut stmt = self.conn.prepare(&sql).map_err(self.sql())?;
        let rows =
            stmt.query_map(params![i64::from(limit)], row_to_queue_row).map_err(self.sql())?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(self.sql())
    }

    /// Unfinished (queued or running) jobs of one client.
    pub fn open_jobs_of(&self, client: &str) -> Result<u64, StoreError> {
        let n: i64 = self
            .conn
            .query_row(
                "SELECT COUNT(*) FROM jobs WHERE client = ?1 AND state IN ('queued', 'running')",
                params![client],
                |r| r.get(0),
            )
            .map_err(self.sql())?;
        Ok(u64::try_from(n).unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(id: &str, client: &str, key: Option<&str>, hash: &str) -> NewJob {
        NewJob {
            id: id.into(),
            client: client.into(),
            idempotency_key: key.map(str::to_string),
            request_hash: hash.into(),
            request: "{}".into(),
            problem: "relu".into(),
            candidate: "c".into(),
        }
    }

    #[test]
    fn queue_order_claims_finish_and_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sqlite");
        let mut s = Store::open(&path).unwrap();
        let added =
            s.add_jobs(&[new("a", "c1", None, "h1"), new("b", "c1", None, "h2")], false).unwrap();
        assert_eq!(added, vec![Added::New("a".into()), Added::New("b".into())]);
        let a = s.claim_job().unwrap().unwrap();
        assert_eq!((a.id.as_str(), a.state, a.attempts), ("a", JobState::Running, 1));
        assert!(s.finish_job("a", JobState::Done, Some("k"), None, false).unwrap());
        // A finished job cannot be finished again.
        assert!(!s.finish_job("a", JobState::Failed, None, Some("x"), false).unwrap());
        let b = s.claim_job().unwrap().unwrap();
        assert_eq!(b.id, "b");
        assert!(s.claim_job().unwrap().is_none());
        drop(s);
        // A crash with `b` running: the next server queues it again, `a` stays done.
        let s = Store::open(&path).unwrap();
        assert_eq!(s.requeue_running().unwrap(), 1);
        let b = s.claim_job().unwrap().unwrap();
        assert_eq!((b.id.as_str(), b.attempts), ("b", 2));
        let a = s.job("a").unwrap().unwrap();
        assert_eq!((a.state, a.record_key.as_deref(), a.attempts), (JobState::Done, Some("k"), 1));
    }

    #[test]
    fn idempotency_keys_and_identical_requests_find_the_existing_job() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("s.sqlite")).unwrap();
        s.add_jobs(&[new("a", "c1", Some("k1"), "h1")], false).unwrap();
        let again = s.add_jobs(&[new("b", "c1", Some("k1"), "h9")], false).unwrap();
        assert_eq!(again, vec![Added::Existing("a".into(), JobState::Queued)]);
        // The same key from another client is another job.
        let other = s.add_jobs(&[new("c", "c2", Some("k1"), "h1")], false).unwrap();
        assert_eq!(other, vec![Added::New("c".into())]);
        // Identical content is reused only when asked, and never a cancelled job.
        assert_eq!(
            s.add_jobs(&[new("d", "c3", None, "h1")], true).unwrap(),
            vec![Added::Existing("c".into(), JobState::Queued)]
        );
        assert_eq!(s.cancel_job("c").unwrap(), Some(JobState::Cancelled));
        assert_eq!(s.cancel_job("c").unwrap(), Some(JobState::Cancelled));
        assert_eq!(
            s.add_jobs(&[new("e", "c3", None, "h1")], true).unwrap(),
            vec![Added::Existing("a".into(), JobState::Queued)]
        );
        assert_eq!(s.open_jobs_of("c1").unwrap(), 1);
        let listed = s.list_jobs(&JobFilter { limit: 10, ..Default::default() }).unwrap();
        assert_eq!(listed.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), vec!["c", "a"]);
        let queued = s
            .list_jobs(&JobFilter {
                state: Some(JobState::Queued),
                limit: 10,
                ..Default::default()
            })
            .unwrap();
        assert_eq!(queued.len(), 1);
        assert_eq!(s.cancel_job("nope").unwrap(), None);
    }

    #[test]
    fn the_queue_page_lists_by_state_in_queue_order_on_an_index() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Store::open(&dir.path().join("s.sqlite")).unwrap();
        let jobs: Vec<NewJob> =
            (0..5).map(|i| new(&format!("j{i}"), "c1", None, &format!("h{i}"))).collect();
        s.add_jobs(&jobs, false).unwrap();
        // j0 runs, j1 ends failed with a long error, j2 is cancelled; j3, j4 wait.
        assert_eq!(s.claim_job().unwrap().unwrap().id, "j0");
        assert_eq!(s.claim_job().unwrap().unwrap().id, "j1");
        let long = "e".repeat(1000);
        assert!(s.finish_job("j1", JobState::Failed, None, Some(&long), false).unwrap());
        s.cancel_job("j2").unwrap();
        let queued = s.jobs_in_state(JobState::Queued, 10).unwrap();
        assert_eq!(queued.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["j3", "j4"]);
        assert_eq!(s.jobs_in_state(JobState::Queued, 1).unwrap().len(), 1);
        let running = s.jobs_in_state(JobState::Running, 10).unwrap();
        assert_eq!(running.len(), 1);
        assert_eq!((running[0].id.as_str(), running[0].attempts), ("j0", 1));
        assert!(running[0].started_ms.is_some() && running[0].finished_ms.is_none());
        let recent = s.recent_finished_jobs(10).unwrap();
        assert_eq!(recent.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["j2", "j1"]);
        assert_eq!(recent[1].error.as_deref().map(str::len), Some(300), "the error is cut");
        // Both lists are read in order from an index or the rowid, never sorted apart.
        for sql in [
            "SELECT id FROM jobs WHERE state = 'queued' ORDER BY seq LIMIT 10",
            "SELECT id FROM jobs WHERE state NOT IN ('queued', 'running') ORDER BY seq DESC LIMIT 10",
        ] {
            let mut stmt = s.conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let plan: Vec<String> = stmt
                .query_map([], |r| r.get::<_, String>(3))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            assert!(!plan.iter().any(|p| p.contains("TEMP B-TREE")), "{sql}: {plan:?}");
        }
    }
}
