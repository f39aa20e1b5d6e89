//! A run's lifecycle row in the store (what the dashboard's Runs page lists): begun with
//! its settings, its evaluations linked as they finish, ended with a status and its
//! headline figures. Writing it is bookkeeping: a failure is a warning, never fatal.

use std::path::Path;
use std::sync::Mutex;

use tritonforge_store::{RunKind, RunStatus, Store};

pub struct RunLog {
    /// Behind a lock so a batch's completion callback (shared across threads) can link.
    store: Option<Mutex<Store>>,
    pub id: String,
}

impl RunLog {
    /// Register run `id` of `kind` in the store at `path`, as running.
    pub fn begin(path: &Path, id: String, kind: RunKind, settings: &serde_json::Value) -> RunLog {
        let store = match Store::open(path).and_then(|s| {
            s.begin_run(&id, kind, &settings.to_string())?;
            Ok(s)
        }) {
            Ok(s) => Some(Mutex::new(s)),
            Err(e) => {
                eprintln!("warning: recording run {id} in the store: {e}");
                None
            }
        };
        RunLog { store, id }
    }

    fn store(&self) -> Option<std::sync::MutexGuard<'_, Store>> {
        self.store.as_ref().map(|m| m.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Note that evaluation `key` belongs to this run.
    pub fn link(&self, key: &str, created_at: u64) {
        if let Some(s) = self.store() {
            let t = i64::try_from(created_at).unwrap_or(i64::MAX);
            if let Err(e) = s.link_run_evaluation(&self.id, key, t) {
                eprintln!("warning: linking an evaluation to run {}: {e}", self.id);
            }
        }
    }

    /// The run ended.
    pub fn finish(&self, status: RunStatus, summary: Option<&serde_json::Value>) {
        if let Some(s) = self.store() {
            let text = summary.map(|v| v.to_string());
            if let Err(e) = s.finish_run(&self.id, status, text.as_deref()) {
                eprintln!("warning: recording the end of run {}: {e}", self.id);
            }
        }
    }
}

/// A run id from a kind and the time: `eval-1764000000123`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", tritonforge_store::now_ms())
}
