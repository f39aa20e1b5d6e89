//! Device memory: what the pool may give out on one device, what a job is charged, the
//! cap its process runs under, and admission, which starts a job on a device only while
//! the charges of those running there, its own included, fit.
//!
//! A cap per process alone (`0.9 / jobs`) failed both ways: a problem with 6 GiB inputs
//! could not fit its share even when it had the GPU to itself, and neighbours' memory
//! was never counted, so a shared GPU ran out anyway. Each problem's need is measured
//! once (`measure_memory`) and stored; admission counts it against the device.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::EvalError;

/// The share of the device kept out of every grant: the caching allocator's rounding and
/// fragmentation, and what a measurement of the reference cannot see of a candidate.
pub const HEADROOM: f64 = 0.10;
/// What each executor process on a GPU holds beyond its own allocations (CUDA context,
/// cuBLAS and cuDNN workspaces, the warm-up's cached blocks). Named, not measured per
/// run: idle pool processes held 0.6 GiB each on an H100 (`results/gpu-validation.md`).
pub const GPU_PROCESS_OVERHEAD: u64 = 640 << 20;
/// The least cap a shared candidate gets, as a share of its device: at 0.9 / 12 honest
/// suite candidates ran out of memory (`results/evaluator-gpu.md#design-choices`).
pub const CAP_FLOOR: f64 = 0.25;
/// A shared candidate's cap is this many times its problem's need (above the floor): a
/// kernel may keep workspace the reference does not, and a cap must stop a runaway, not
/// an honest kernel.
pub const CAP_GROWTH: f64 = 2.0;
/// The share of its device a job holding the device alone may take (and the most any cap is).
pub const ALONE_FRACTION: f64 = 0.9;
/// Admission counts a device's memory in about this many units (one semaphore permit
/// each; `acquire_many` takes a `u32`): 80 KiB each on an 80 GiB GPU, a byte each for the
/// tests' small capacities.
const UNITS: u64 = 1 << 20;

/// What a job takes of its device's memory while it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Charge {
    /// Its problem's need and its process's overhead, in bytes.
    Bytes(u64),
    /// Not known before it runs (a measurement, a problem check, a problem that could not
    /// be measured): an even share of the device among the slot's candidates.
    Share,
    /// The whole device: nothing else of the pool's is admitted beside it (a run alone).
    Whole,
}

/// Which kind of job an admission was for (the admission log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobKind {
    Evaluate,
    MeasureMemory,
    CheckProblem,
}

/// One device's memory as the pool gives it out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryBudget {
    /// The device's memory: the GPU's total from the worker's hello, or the configured
    /// capacity (`PoolConfig::device_memory_bytes`, `TRITONFORGE_DEVICE_MEMORY_BYTES`).
    pub capacity_bytes: u64,
    /// What each of the pool's processes holds beyond its own allocations (0 on the CPU).
    pub process_overhead_bytes: u64,
    /// Processes kept started beside those running; each holds its overhead meanwhile.
    pub spares: usize,
    /// Candidates run at once per device (`--jobs`): the share an unknown job is charged.
    pub workers: usize,
    /// The cap a user set for every process (`--gpu-mem-fraction`); `None`: caps follow
    /// each job's grant.
    pub fixed_cap: Option<f64>,
}

impl MemoryBudget {
    /// What the pool may give its running jobs: the capacity less the headroom and the
    /// spares' overhead.
    pub fn usable(&self) -> u64 {
        let spares = self.process_overhead_bytes.saturating_mul(self.spares as u64);
        (((self.capacity_bytes as f64) * (1.0 - HEADROOM)) as u64).saturating_sub(spares)
    }

    /// What a job whose problem needs `need` bytes is charged: the need and its process's overhead.
    pub fn charge(&self, need: u64) -> u64 {
        need.saturating_add(self.process_overhead_bytes)
    }

    /// Whether a job charged `charge` can ever be admitted on this device.
    pub fn fits(&self, charge: u64) -> bool {
        charge <= self.usable()
    }

    /// The cap, as a share of the device, of a shared job whose problem needs `need`:
    /// twice the need, at least the floor, at most what a job alone gets.
    pub fn cap_fraction(&self, need: u64) -> f64 {
        if let Some(f) = self.fixed_cap {
            return f;
        }
        let want = CAP_GROWTH * need as f64 / (self.capacity_bytes.max(1) as f64);
        want.clamp(CAP_FLOOR, ALONE_FRACTION)
    }

    /// The bytes a charge stands for on this device.
    fn bytes(&self, charge: Charge) -> u64 {
        match charge {
            Charge::Bytes(b) => b,
            Charge::Share => self.usable() / self.workers.max(1) as u64,
            Charge::Whole => self.usable(),
        }
    }
}

/// One device's admission: a fair (first come, first served) semaphore of memory units,
/// so that a large job waiting for the device to drain is not passed forever by small ones.
#[derive(Debug)]
pub(crate) struct Admission {
    budget: MemoryBudget,
    permits: Arc<Semaphore>,
    /// Bytes per permit.
    unit: u64,
    units: u32,
}

/// A job's admission; its memory is given back when this is dropped.
pub(crate) struct Admitted {
    _permit: Option<OwnedSemaphorePermit>,
    pub bytes: u64,
    pub waited: Duration,
    pub at: Instant,
}

impl Admission {
    pub(crate) fn new(budget: MemoryBudget) -> Admission {
        let unit = (budget.usable() / UNITS).max(1);
        let units = u32::try_from(budget.usable() / unit).unwrap_or(u32::MAX >> 3).max(1);
        Admission { budget, permits: Arc::new(Semaphore::new(units as usize)), unit, units }
    }

    /// Bytes admitted to running jobs now (an evaluation server's `/gpu_status`).
    pub(crate) fn admitted_bytes(&self) -> u64 {
        let free = self.permits.available_permits() as u64;
        (self.units as u64).saturating_sub(free).saturating_mul(self.unit)
    }

    /// Wait until `charge` fits beside what is admitted (and everything admitted before
    /// it has been); a charge above the device is clamped to the whole device, so that
    /// it runs alone rather than never.
    pub(crate) async fn admit(&self, charge: Charge) -> Result<Admitted, EvalError> {
        let bytes = self.budget.bytes(charge);
        let units =
            u32::try_from(bytes.div_ceil(self.unit)).unwrap_or(u32::MAX).clamp(1, self.units);
        let asked = Instant::now();
        let permit = self
            .permits
            .clone()
            .acquire_many_owned(units)
            .await
            .map_err(|_| EvalError::PoolClosed)?;
        Ok(Admitted { _permit: Some(permit), bytes, waited: asked.elapsed(), at: Instant::now() })
    }
}

/// `bytes` for a person: `6.0 GiB`, `512.0 MiB`, `16.0 KiB`, `12 B`.
pub fn human(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (name, size) in UNITS {
        if bytes >= size {
            return format!("{:.1} {name}", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} B")
}

/// A byte count as a person writes it: `85899345920`, `80GiB`, `512 MiB`, `64k` (binary
/// multiples, for `TRITONFORGE_DEVICE_MEMORY_BYTES`).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let n: u64 = number.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100(spares: usize) -> MemoryBudget {
        MemoryBudget {
            capacity_bytes: 80 << 30,
            process_overhead_bytes: GPU_PROCESS_OVERHEAD,
            spares,
            workers: 16,
            fixed_cap: None,
        }
    }

    #[test]
    fn usable_memory_leaves_headroom_and_the_spares_contexts() {
        let b = h100(16);
        let expected = (80.0 * 0.9 * (1u64 << 30) as f64) as u64 - 16 * GPU_PROCESS_OVERHEAD;
        assert_eq!(b.usable(), expected);
        // A problem of 6 GiB tensors (inputs, clones, outputs: about 32 GiB) fits; one of
        // twice that does not.
        assert!(b.fits(b.charge(32 << 30)));
        assert!(!b.fits(b.charge(64 << 30)));
        // More spares than the device can hold leave nothing, never an underflow.
        assert_eq!(MemoryBudget { spares: 10_000, ..b }.usable(), 0);
    }

    #[test]
    fn caps_follow_the_need_between_the_floor_and_the_alone_share() {
        let b = h100(2);
        assert_eq!(b.cap_fraction(1 << 20), CAP_FLOOR);
        let big = b.cap_fraction(16 << 30);
        assert!((big - 0.4).abs() < 1e-9, "{big}");
        assert_eq!(b.cap_fraction(60 << 30), ALONE_FRACTION);
        assert_eq!(MemoryBudget { fixed_cap: Some(0.3), ..b }.cap_fraction(60 << 30), 0.3);
    }

    #[test]
    fn byte_counts_parse_as_people_write_them() {
        assert_eq!(parse_bytes("85899345920"), Some(80 << 30));
        assert_eq!(parse_bytes("80GiB"), Some(80 << 30));
        assert_eq!(parse_bytes("512 MiB"), Some(512 << 20));
        assert_eq!(parse_bytes("64k"), Some(64 << 10));
        assert_eq!(parse_bytes("eighty"), None);
        assert_eq!(parse_bytes("80 GB"), None);
        assert_eq!(parse_bytes("99999999999T"), None);
        assert_eq!(human(6 << 30), "6.0 GiB");
        assert_eq!(human(1536 << 10), "1.5 MiB");
        assert_eq!(human(12), "12 B");
    }

    #[tokio::test]
    async fn admission_waits_until_the_charges_fit_and_goes_in_order() {
        let b = MemoryBudget {
            capacity_bytes: 100 << 20,
            process_overhead_bytes: 0,
            spares: 0,
            workers: 2,
            fixed_cap: None,
        };
        let a = Arc::new(Admission::new(b));
        assert_eq!(a.admitted_bytes(), 0);
        let first = a.admit(Charge::Bytes(60 << 20)).await.unwrap();
        let held = a.admitted_bytes();
        assert!((60 << 20..(60 << 20) + a.unit).contains(&held), "{held}");
        // 60 + 60 MiB do not fit in 90: the second waits for the first.
        let waiting = tokio::spawn({
            let a = a.clone();
            async move { a.admit(Charge::Bytes(60 << 20)).await.map(|x| x.bytes) }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        drop(first);
        assert_eq!(waiting.await.unwrap().unwrap(), 60 << 20);
        assert_eq!(a.admitted_bytes(), 0, "given back when the admission drops");
        // A charge above the device is clamped: it runs alone, not never.
        let whole = a.admit(Charge::Bytes(1 << 40)).await.unwrap();
        assert_eq!(whole.bytes, 1 << 40);
        drop(whole);
        assert_eq!(a.admit(Charge::Share).await.unwrap().bytes, b.usable() / 2);
    }
}
