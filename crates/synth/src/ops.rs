//! The elementwise vocabulary: operators PyTorch users write, each as the PyTorch
//! expression a problem uses and the Triton statements a solution uses (on a variable
//! `x` holding fp32 values).

use crate::rng::Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Relu,
    Sigmoid,
    Tanh,
    Gelu,
    GeluTanh,
    Silu,
    Softplus,
    Mish,
    LeakyRelu,
    Elu,
    Hardtanh,
    Hardsigmoid,
    Softsign,
    Scale,
    Shift,
    Clamp,
    ClampMin,
    Exp,
    LogAbs,
    Square,
    Abs,
    Where,
    Relu6,
    Hardswish,
    LogSigmoid,
    Softshrink,
}

/// Which operators a place may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpSet {
    /// Anything (inputs are standard normal, magnitudes stay small).
    All,
    /// No `exp`: after a GEMM or a reduction magnitudes are less predictable.
    NoExp,
    /// No `exp` and nothing that saturates: after a reduction whose result grows with the
    /// axis's length (a norm, a log-sum-exp, an extreme of many draws), a bounded operator
    /// would give nearly the same value at full size whatever the input.
    Unsaturated,
    /// Strictly increasing affine steps only: an argmax must see no ties the reference
    /// does not see.
    Monotone,
}

const ALL: [OpKind; 26] = [
    OpKind::Relu,
    OpKind::Sigmoid,
    OpKind::Tanh,
    OpKind::Gelu,
    OpKind::GeluTanh,
    OpKind::Silu,
    OpKind::Softplus,
    OpKind::Mish,
    OpKind::LeakyRelu,
    OpKind::Elu,
    OpKind::Hardtanh,
    OpKind::Hardsigmoid,
    OpKind::Softsign,
    OpKind::Scale,
    OpKind::Shift,
    OpKind::Clamp,
    OpKind::ClampMin,
    OpKind::Exp,
    OpKind::LogAbs,
    OpKind::Square,
    OpKind::Abs,
    OpKind::Where,
    OpKind::Relu6,
    OpKind::Hardswish,
    OpKind::LogSigmoid,
    OpKind::Softshrink,
];

/// One step of a chain.
#[derive(Debug, Clone, PartialEq)]
pub struct Op {
    pub kind: OpKind,
    /// A word for the problem's name.
    pub name: &'static str,
    /// The PyTorch expression of `x`.
    pub torch: String,
    /// Triton statements; the last assigns `x`.
    pub triton: Vec<String>,
}

/// A float as Python source (`2.0`, `0.125`, `-1.5`).
pub fn lit(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

fn tanh_of(v: &str) -> String {
    // tanh(u) = 2 * sigmoid(2u) - 1: stable for large |u|, in every Triton version.
    format!("2.0 * tl.sigmoid(2.0 * {v}) - 1.0")
}

const SOFTPLUS: &str = "tl.where(x > 20.0, x, tl.log(1.0 + tl.exp(tl.minimum(x, 20.0))))";

impl Op {
    fn new(kind: OpKind, rng: &mut Rng) -> Op {
        let f = "torch.nn.functional";
        let one =
            |name, torch: String, triton: String| (name, torch, vec![format!("x = {triton}")]);
        let (name, torch, triton) = match kind {
            OpKind::Relu => one("relu", "torch.relu(x)".into(), "tl.maximum(x, 0.0)".into()),
            OpKind::Sigmoid => one("sigmoid", "torch.sigmoid(x)".into(), "tl.sigmoid(x)".into()),
            OpKind::Tanh => one("tanh", "torch.tanh(x)".into(), tanh_of("x")),
            OpKind::Gelu => one(
                "gelu",
                format!("{f}.gelu(x)"),
                "0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))".into(),
            ),
            OpKind::GeluTanh => (
                "gelu_tanh",
                format!("{f}.gelu(x, approximate=\"tanh\")"),
                vec![
                    "t = 0.7978845608028654 * (x + 0.044715 * x * x * x)".into(),
                    format!("x = 0.5 * x * (1.0 + ({}))", tanh_of("t")),
                ],
            ),
            OpKind::Silu => one("silu", format!("{f}.silu(x)"), "x * tl.sigmoid(x)".into()),
            OpKind::Softplus => one("softplus", format!("{f}.softplus(x)"), SOFTPLUS.into()),
            OpKind::Mish => (
                "mish",
                format!("{f}.mish(x)"),
                vec![format!("t = {SOFTPLUS}"), format!("x = x * ({})", tanh_of("t"))],
            ),
            OpKind::LeakyRelu => {
                let s = rng.pick(&[0.01, 0.05, 0.1, 0.2]);
                let (s_py, name) = (lit(s), "leaky_relu");
                one(
                    name,
                    format!("{f}.leaky_relu(x, negative_slope={s_py})"),
                    format!("tl.where(x > 0.0, x, x * {s_py})"),
                )
            }
            OpKind::Elu => {
                let a = lit(rng.pick(&[1.0, 0.5, 1.5]));
                one(
                    "elu",
                    format!("{f}.elu(x, alpha={a})"),
                    format!("tl.where(x > 0.0, x, {a} * (tl.exp(tl.minimum(x, 0.0)) - 1.0))"),
                )
            }
            OpKind::Hardtanh | OpKind::Clamp => {
                let (lo, hi) = rng.pick(&[(-1.0, 1.0), (-0.5, 0.5), (-2.0, 2.0), (-1.5, 3.0)]);
                let (lo, hi) = (lit(lo), lit(hi));
                let triton = format!("tl.minimum(tl.maximum(x, {lo}), {hi})");
                match kind {
                    OpKind::Hardtanh => one(
                        "hardtanh",
                        format!("{f}.hardtanh(x, min_val={lo}, max_val={hi})"),
                        triton,
                    ),
                    _ => one("clamp", format!("torch.clamp(x, min={lo}, max={hi})"), triton),
                }
            }
            OpKind::Hardsigmoid => one(
                "hardsigmoid",
                format!("{f}.hardsigmoid(x)"),
                "tl.minimum(tl.maximum(x / 6.0 + 0.5, 0.0), 1.0)".into(),
            ),
            OpKind::Softsign => {
                one("softsign", format!("{f}.softsign(x)"), "x / (1.0 + tl.abs(x))".into())
            }
            OpKind::Relu6 => {
                one("relu6", format!("{f}.relu6(x)"), "tl.minimum(tl.maximum(x, 0.0), 6.0)".into())
            }
            OpKind::Hardswish => one(
                "hardswish",
                format!("{f}.hardswish(x)"),
                "x * tl.minimum(tl.maximum(x + 3.0, 0.0), 6.0) / 6.0".into(),
            ),
            OpKind::LogSigmoid => one(
                "logsigmoid",
                format!("{f}.logsigmoid(x)"),
                "tl.minimum(x, 0.0) - tl.log(1.0 + tl.exp(-tl.abs(x)))".into(),
            ),
            OpKind::Softshrink => {
                let l = lit(rng.pick(&[0.5, 0.25, 1.0]));
                one(
                    "softshrink",
                    format!("{f}.softshrink(x, lambd={l})"),
                    format!("tl.where(x > {l}, x - {l}, tl.where(x < -{l}, x + {l}, 0.0))"),
                )
            }
            _ => Op::arith(kind, rng),
        };
        Op { kind, name, torch, triton }
    }

    /// Scalar arithmetic, exp/log, comparisons: the same text on both sides.
    fn arith(kind: OpKind, rng: &mut Rng) -> (&'static str, String, Vec<String>) {
        let same = |name, e: String| (name, e.clone(), vec![format!("x = {e}")]);
        match kind {
            OpKind::Scale => {
                same("scale", format!("x * {}", lit(rng.pick(&[0.5, 2.0, 1.5, 0.25, 3.0]))))
            }
            OpKind::Shift => {
                let c = rng.pick(&[0.5, -0.5, 1.0, -1.0, 0.25, 2.0]);
                let e =
                    if c < 0.0 { format!("x - {}", lit(-c)) } else { format!("x + {}", lit(c)) };
                same("shift", e)
            }
            OpKind::ClampMin => {
                let lo = lit(rng.pick(&[0.0, -0.5, 0.25, -1.0]));
                (
                    "clamp_min",
                    format!("torch.clamp(x, min={lo})"),
                    vec![format!("x = tl.maximum(x, {lo})")],
                )
            }
            OpKind::Exp => {
                let c = lit(rng.pick(&[0.5, 0.25, -0.5, 1.0]));
                ("exp", format!("torch.exp(x * {c})"), vec![format!("x = tl.exp(x * {c})")])
            }
            OpKind::LogAbs => (
                "log_abs",
                "torch.log(torch.abs(x) + 1.0)".into(),
                vec!["x = tl.log(tl.abs(x) + 1.0)".into()],
            ),
            OpKind::Square => same("square", "x * x".into()),
            OpKind::Abs => ("abs", "torch.abs(x)".into(), vec!["x = tl.abs(x)".into()]),
            _ => {
                let t = rng.pick(&[0.0, 0.5, -0.5]);
                let c = lit(rng.pick(&[0.1, 0.5, -0.25, 2.0]));
                // Continuous at the threshold: a jump there turns a rounding difference
                // just below it into an error of the jump's size.
                let below = if t == 0.0 {
                    format!("x * {c}")
                } else {
                    let t = lit(t);
                    format!("{t} + (x - {t}) * {c}")
                };
                let t = lit(t);
                (
                    "where",
                    format!("torch.where(x > {t}, x, {below})"),
                    vec![format!("x = tl.where(x > {t}, x, {below})")],
                )
            }
        }
    }

    /// Does the output stay within a small range whatever comes in?
    fn bounded(&self) -> bool {
        use OpKind::*;
        matches!(self.kind, Sigmoid | Tanh | Hardtanh | Clamp | Hardsigmoid | Softsign | Relu6)
    }
}

/// One operator allowed after `prev` in `set`.
pub fn draw(rng: &mut Rng, set: OpSet, prev: Option<&Op>) -> Op {
    loop {
        let kind = match set {
            OpSet::Monotone => rng.pick(&[OpKind::Scale, OpKind::Shift]),
            _ => rng.pick(&ALL),
        };
        let op = Op::new(kind, rng);
        let repeat = prev.is_some_and(|p| p.kind == kind);
        // exp only of bounded values (no overflow, no tolerance blow-up).
        let exp_ok = kind != OpKind::Exp || (set == OpSet::All && prev.is_none_or(Op::bounded));
        let square_ok = kind != OpKind::Square || prev.is_none_or(|p| p.kind != OpKind::Exp);
        let saturation_ok = set != OpSet::Unsaturated || !op.bounded();
        // A negative scale would reverse an argmax.
        let monotone_ok = set != OpSet::Monotone || !op.torch.contains("* -");
        if !repeat && exp_ok && square_ok && saturation_ok && monotone_ok {
            return op;
        }
    }
}

/// A chain of operators, its length drawn from `lengths`.
pub fn chain(rng: &mut Rng, lengths: &[usize], set: OpSet) -> Vec<Op> {
    let n = rng.pick(lengths);
    let mut ops: Vec<Op> = Vec::with_capacity(n);
    for _ in 0..n {
        let op = draw(rng, set, ops.last());
        ops.push(op);
    }
    ops
}

/// Another operator to put in `op`'s place (a planted wrong attempt).
pub fn other_than(rng: &mut Rng, op: &Op) -> Op {
    loop {
        let o = draw(rng, OpSet::NoExp, None);
        if o.kind != op.kind && o.triton != op.triton {
            return o;
        }
    }
}

/// PyTorch lines `x = <expr>` for a chain.
pub fn torch_lines(ops: &[Op]) -> Vec<String> {
    ops.iter().map(|o| format!("x = {}", o.torch)).collect()
}

/// Triton statements for a chain.
pub fn triton_lines(ops: &[Op]) -> Vec<String> {
    ops.iter().flat_map(|o| o.triton.iter().cloned()).collect()
}

/// Name words of a chain.
pub fn names(ops: &[Op]) -> Vec<String> {
    ops.iter().map(|o| o.name.to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_respect_their_set() {
        let mut rng = Rng::for_item(0, 0, 0);
        for _ in 0..200 {
            let c = chain(&mut rng, &[5], OpSet::Monotone);
            assert!(c.iter().all(|o| matches!(o.kind, OpKind::Scale | OpKind::Shift)));
            assert!(c.windows(2).all(|w| w[0].kind != w[1].kind));
            let c = chain(&mut rng, &[5], OpSet::NoExp);
            assert!(c.iter().all(|o| o.kind != OpKind::Exp));
            let c = chain(&mut rng, &[5], OpSet::Unsaturated);
            assert!(c.iter().all(|o| o.kind != OpKind::Exp && !o.bounded()));
        }
        assert_eq!(lit(2.0), "2.0");
        assert_eq!(lit(-0.25), "-0.25");
    }
}
