//! Synthetic problems with verified-to-be reference Triton solutions, at graded
//! difficulty, for fine-tuning and RL: elementwise chains, broadcasting binary ops,
//! reductions, row-wise patterns (softmax, norms), GEMMs with epilogues, scans, losses,
//! pooling and convolutions, drawn from a
//! seed. Each problem is KernelBench-format text in the suite's style, with a `small`
//! variant fit for the Triton interpreter and an odd-sized `heldout` one; a share also
//! gets a plausible wrong first attempt (a missing mask, a wrong operator, ...).
//!
//! This crate only writes text, deterministically. Whether a solution is right and an
//! attempt wrong is the evaluator's to say: [`build`] runs both through a [`Checker`]
//! the caller supplies (the binary's is the real evaluator) and keeps what passes.

pub mod build;
mod families;
mod ops;
mod py;
pub mod rng;
pub mod twins;
pub mod write;

use serde::{Deserialize, Serialize};

pub use build::{build, AttemptOutcome, Checker, Failure, Summary};
pub use py::Dims;

use rng::Rng;

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error("{path}: {reason}")]
    Io { path: std::path::PathBuf, reason: String },
    #[error("{0}")]
    Settings(String),
    #[error("checking the generated problems: {0}")]
    Check(String),
    #[error("decontamination: {0}")]
    Decontaminate(String),
}

/// Kinds of problem, in the order they take turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    /// A chain of 1–5 elementwise operators over a 2-D to 4-D tensor.
    Elementwise,
    /// A binary operator with a second operand broadcast from a row, a column, a channel,
    /// a scalar, or a tensor of the same shape, with elementwise work around it.
    Broadcast,
    /// A reduction over the last or a middle dimension, with work before and after.
    Reduction,
    /// Softmax, log-softmax, layer norm, RMS norm over the last dimension.
    Rowwise,
    /// A GEMM (`nn.Linear` or two inputs) with a fused epilogue.
    Matmul,
    /// Inclusive, exclusive, reverse, masked cumulative sums and a cumulative product.
    Scan,
    /// A loss of a prediction against a target reduced to a scalar.
    Loss,
    /// Average and max pooling, 1-D and 2-D.
    Pool,
    /// `nn.Conv1d` / `nn.Conv2d` with stride, padding, dilation.
    Conv,
}

impl Family {
    pub const ALL: [Family; 9] = [
        Family::Elementwise,
        Family::Broadcast,
        Family::Reduction,
        Family::Rowwise,
        Family::Matmul,
        Family::Scan,
        Family::Loss,
        Family::Pool,
        Family::Conv,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Family::Elementwise => "elementwise",
            Family::Broadcast => "broadcast",
            Family::Reduction => "reduction",
            Family::Rowwise => "rowwise",
            Family::Matmul => "matmul",
            Family::Scan => "scan",
            Family::Loss => "loss",
            Family::Pool => "pool",
            Family::Conv => "conv",
        }
    }
}

/// The kinds of planted mistake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Flaw {
    /// Loads or stores without their bounds mask.
    MissingMask,
    /// The wrong operator (or divisor, or reduction) somewhere.
    WrongOperator,
    /// Indexing along the wrong axis or with the wrong stride.
    WrongAxis,
    /// Masked-off lanes padded with a value that changes the result.
    WrongPadding,
    /// Code that assumes a rank or a shape the input does not have.
    ShapeAssumption,
    /// A missing colon or parenthesis.
    SyntaxSlip,
}

impl Flaw {
    pub fn as_str(self) -> &'static str {
        match self {
            Flaw::MissingMask => "missing_mask",
            Flaw::WrongOperator => "wrong_operator",
            Flaw::WrongAxis => "wrong_axis",
            Flaw::WrongPadding => "wrong_padding",
            Flaw::ShapeAssumption => "shape_assumption",
            Flaw::SyntaxSlip => "syntax_slip",
        }
    }
}

/// Element type of a problem's inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

impl Dtype {
    /// `dtype=` in `torch.randn`; none for the default fp32.
    pub fn torch(self) -> Option<&'static str> {
        match self {
            Dtype::F32 => None,
            Dtype::F16 => Some("torch.float16"),
            Dtype::Bf16 => Some("torch.bfloat16"),
        }
    }

    pub fn triton(self) -> &'static str {
        match self {
            Dtype::F32 => "tl.float32",
            Dtype::F16 => "tl.float16",
            Dtype::Bf16 => "tl.bfloat16",
        }
    }

    /// The manifest's (atol, rtol): PyTorch rounds every intermediate to the narrow type,
    /// a fused kernel only the result.
    pub fn tolerance(self) -> Option<(f64, f64)> {
        match self {
            Dtype::F32 => None,
            Dtype::F16 => Some((1e-2, 1e-2)),
            Dtype::Bf16 => Some((1e-2, 2e-2)),
        }
    }

    fn word(self) -> Option<&'static str> {
        match self {
            Dtype::F32 => None,
            Dtype::F16 => Some("fp16"),
            Dtype::Bf16 => Some("bf16"),
        }
    }
}

/// A mistake a family knows how to plant in its own solution: text edits, in order.
#[derive(Debug, Clone)]
pub struct Mistake {
    pub flaw: Flaw,
    /// (text, replacement, which occurrence of the text: 0 is the first).
    pub edits: Vec<(String, String, usize)>,
}

impl Mistake {
    /// Edits of the first occurrence of each text.
    pub fn new(flaw: Flaw, edits: &[(&str, &str)]) -> Mistake {
        let edits = edits.iter().map(|(a, b)| (a.to_string(), b.to_string(), 0)).collect();
        Mistake { flaw, edits }
    }

    /// An edit of the `nth` occurrence (passes over a row often repeat a line).
    pub fn nth(flaw: Flaw, from: &str, to: &str, nth: usize) -> Mistake {
        Mistake { flaw, edits: vec![(from.to_string(), to.to_string(), nth)] }
    }

    /// The solution with this mistake in it; `None` when an edit finds nothing to change.
    pub fn apply(&self, solution: &str) -> Option<String> {
        let mut s = solution.to_string();
        for (from, to, nth) in &self.edits {
            let (at, _) = s.match_indices(from.as_str()).nth(*nth)?;
            s.replace_range(at..at + from.len(), to);
        }
        (s != solution).then_some(s)
    }
}

/// What a family draws: everything but the name and split.
#[derive(Debug, Clone)]
pub struct Draft {
    pub words: Vec<String>,
    pub level: u32,
    pub difficulty: u32,
    pub dims: Dims,
    pub tolerance: Option<(f64, f64)>,
    pub problem: String,
    pub solution: String,
    pub mistakes: Vec<Mistake>,
}

/// A wrong first attempt at a problem.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    pub flaw: Flaw,
    pub source: String,
}

/// Train or heldout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    Train,
    Heldout,
}

/// One generated problem.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthProblem {
    /// 1-based position in the generated set (the id's number).
    pub index: usize,
    /// File stem, e.g. `s0003_sum_rows`.
    pub name: String,
    pub level: u32,
    pub family: Family,
    pub difficulty: u32,
    pub split: Split,
    pub tolerance: Option<(f64, f64)>,
    pub dims: Dims,
    pub problem: String,
    pub solution: String,
    pub attempt: Option<Attempt>,
}

impl SynthProblem {
    /// Manifest key: `level1/s0003_sum_rows`.
    pub fn key(&self) -> String {
        format!("level{}/{}", self.level, self.name)
    }

    pub fn id(&self) -> String {
        format!("SYN-{:05}", self.index)
    }
}

/// How many problems, from which seed, with which shares of attempts and heldout.
#[derive(Debug, Clone)]
pub struct Settings {
    pub count: usize,
    pub seed: u64,
    /// Share of problems that also get a planted wrong first attempt.
    pub attempt_share: f64,
    /// Share of problems marked `split = "heldout"` (chosen by a hash of the source).
    pub heldout_share: f64,
}

impl Settings {
    pub fn check(&self) -> Result<(), SynthError> {
        let share = |v: f64| (0.0..=1.0).contains(&v);
        if !share(self.attempt_share) || !share(self.heldout_share) {
            return Err(SynthError::Settings("shares must be within [0, 1]".into()));
        }
        if self.count == 0 || self.count > 99_999 {
            return Err(SynthError::Settings("count must be within 1..=99999".into()));
        }
        Ok(())
    }
}

/// The problems of a seed, in order. Problem `i` depends only on the seed and `i`.
pub fn generate(s: &Settings) -> Vec<SynthProblem> {
    (1..=s.count).map(|i| problem_at(s, i)).collect()
}

fn problem_at(s: &Settings, index: usize) -> SynthProblem {
    let family = Family::ALL[(index - 1) % Family::ALL.len()];
    let mut rng = Rng::for_item(s.seed, index, 1);
    let d = families::draw(family, &mut rng);
    let words: Vec<&str> = d.words.iter().map(String::as_str).take(5).collect();
    let name = format!("s{index:04}_{}", words.join("_"));
    let mut hash = Rng::for_item(rng::fnv(&d.problem), 0, 3);
    let split = if hash.chance(s.heldout_share) { Split::Heldout } else { Split::Train };
    let mut arng = Rng::for_item(s.seed, index, 2);
    let attempt = if arng.chance(s.attempt_share) { plant(&d, &mut arng) } else { None };
    SynthProblem {
        index,
        name,
        level: d.level,
        family,
        difficulty: d.difficulty.clamp(1, 5),
        split,
        tolerance: d.tolerance,
        dims: d.dims,
        problem: d.problem,
        solution: d.solution,
        attempt,
    }
}

/// One of the draft's mistakes, or a syntax slip, planted in its solution.
fn plant(d: &Draft, rng: &mut Rng) -> Option<Attempt> {
    // Syntax slips count as one choice among the family's own mistakes, however many
    // lines could take one.
    let mut choices = d.mistakes.clone();
    let slips = syntax_slips(&d.solution);
    if !slips.is_empty() {
        choices.push(slips[rng.below(slips.len())].clone());
    }
    let m = choices.get(rng.below(choices.len()))?;
    m.apply(&d.solution).map(|source| Attempt { flaw: m.flaw, source })
}

/// Slips any solution can have: a `for` or `def forward` without its colon, a one-line
/// `tl.store(...)` without its closing parenthesis.
fn syntax_slips(solution: &str) -> Vec<Mistake> {
    let mut out = Vec::new();
    for line in solution.lines() {
        let t = line.trim();
        let slip = (t.starts_with("for ") && t.ends_with(':'))
            || (t.starts_with("def forward(") && t.ends_with(':'))
            || (t.starts_with("tl.store(") && t.ends_with(')'));
        if slip {
            out.push(Mistake::new(Flaw::SyntaxSlip, &[(line, &line[..line.len() - 1])]));
        }
    }
    out
}

/// The name word for a dtype, if not fp32.
fn dtype_word(d: Dtype) -> Option<String> {
    d.word().map(str::to_string)
}

#[cfg(test)]
mod tests;
