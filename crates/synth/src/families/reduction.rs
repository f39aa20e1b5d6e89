//! A reduction over one dimension (sum, mean, max, min, var, L2 norm, logsumexp, argmax),
//! with elementwise work before and after. Over the last dimension: one program per row,
//! looping over blocks of it. Over a middle dimension: one program per (batch, block of
//! columns), looping over the reduced rows.

use super::row_dims;
use crate::ops::{self, Op, OpSet};
use crate::py::{self, kernel, lines, nest, Dims};
use crate::rng::Rng;
use crate::{Draft, Dtype, Flaw, Mistake};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Red {
    Sum,
    Mean,
    Max,
    Min,
    Var,
    Std,
    L2,
    LogSumExp,
    Argmax,
    Argmin,
}

impl Red {
    fn torch(self) -> &'static str {
        match self {
            Red::Sum => "torch.sum",
            Red::Mean => "torch.mean",
            Red::Max => "torch.amax",
            Red::Min => "torch.amin",
            Red::Var => "torch.var",
            Red::Std => "torch.std",
            Red::L2 => "torch.linalg.vector_norm",
            Red::LogSumExp => "torch.logsumexp",
            Red::Argmax => "torch.argmax",
            Red::Argmin => "torch.argmin",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Red::Sum => "Sum",
            Red::Mean => "Mean",
            Red::Max => "Maximum",
            Red::Min => "Minimum",
            Red::Var => "Unbiased variance",
            Red::Std => "Unbiased standard deviation",
            Red::L2 => "L2 norm",
            Red::LogSumExp => "Log-sum-exp",
            Red::Argmax => "Index of the maximum",
            Red::Argmin => "Index of the minimum",
        }
    }

    fn word(self) -> &'static str {
        match self {
            Red::Sum => "sum",
            Red::Mean => "mean",
            Red::Max => "max",
            Red::Min => "min",
            Red::Var => "var",
            Red::Std => "std",
            Red::L2 => "l2norm",
            Red::LogSumExp => "logsumexp",
            Red::Argmax => "argmax",
            Red::Argmin => "argmin",
        }
    }

    /// The accumulator's start and the value masked-off lanes must hold.
    fn identity(self) -> (&'static str, &'static str) {
        match self {
            Red::Max | Red::LogSumExp | Red::Argmax => {
                ("tl.full([BLOCK], float(\"-inf\"), tl.float32)", "float(\"-inf\")")
            }
            Red::Min | Red::Argmin => {
                ("tl.full([BLOCK], float(\"inf\"), tl.float32)", "float(\"inf\")")
            }
            _ => ("tl.zeros([BLOCK], tl.float32)", "0.0"),
        }
    }

    fn is_arg(self) -> bool {
        matches!(self, Red::Argmax | Red::Argmin)
    }

    /// The comparison that takes a new best index, and its reversed slip.
    fn take(self) -> (&'static str, &'static str) {
        match self {
            Red::Argmin => ("take = x < acc", "take = x > acc"),
            _ => ("take = x > acc", "take = x < acc"),
        }
    }

    /// How one loaded block enters the accumulator (the first pass, for two-pass ones).
    fn accumulate(self) -> &'static str {
        match self {
            Red::Max | Red::LogSumExp => "acc = tl.maximum(acc, x)",
            Red::Min => "acc = tl.minimum(acc, x)",
            Red::L2 => "acc += x * x",
            _ => "acc += x",
        }
    }
}

/// Over the last dimension, or a middle one (`dim=1` of 3-D, `dim=0` of 2-D).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Last,
    Middle,
}

pub fn draw(rng: &mut Rng) -> Draft {
    use Red::*;
    let red = rng.pick(&[Sum, Mean, Max, Min, Var, Std, L2, LogSumExp, Argmax, Argmin]);
    let arg = matches!(red, Argmax | Argmin);
    let layout = if rng.chance(0.35) { Layout::Middle } else { Layout::Last };
    let ndim = rng.pick(&[2, 3]);
    let keepdim = !arg && rng.chance(0.25);
    // The extreme of many draws of a non-monotone operator (or one with a bound) is that
    // operator's own extreme, the same for every input at full size: only affine steps go
    // before a max or min. Norms, log-sum-exps and extremes grow with the axis's length, so
    // nothing that saturates comes after them (the GPU check of docs/synth.md found both).
    let pre_set = match red {
        Argmax | Argmin | Max | Min => OpSet::Monotone,
        LogSumExp => OpSet::NoExp,
        _ => OpSet::All,
    };
    let post_set = match red {
        Max | Min | L2 | LogSumExp => OpSet::Unsaturated,
        _ => OpSet::NoExp,
    };
    // An argmax is an index: nothing comes after it.
    let (pre, post) = if arg {
        (ops::chain(rng, &[0, 1], pre_set), vec![])
    } else {
        (ops::chain(rng, &[0, 1, 2], pre_set), ops::chain(rng, &[0, 1], post_set))
    };
    let dims = dims_for(rng, layout, ndim);
    let dim = match (layout, ndim) {
        (Layout::Last, 2) => rng.pick(&["-1", "1"]),
        (Layout::Last, _) => rng.pick(&["-1", "2"]),
        (Layout::Middle, 3) => "1",
        (Layout::Middle, _) => "0",
    };
    let mut body = ops::torch_lines(&pre);
    let keep = if keepdim { ", keepdim=True" } else { "" };
    body.push(format!("x = {}(x, dim={dim}{keep})", red.torch()));
    body.extend(ops::torch_lines(&post));
    body.push("return x".into());
    let doc = format!(
        "{} over dim {dim} of a {ndim}-D tensor{}.",
        red.title(),
        if pre.is_empty() && post.is_empty() { "" } else { ", with elementwise work around it" }
    );
    let reduced = match layout {
        Layout::Last => ndim - 1,
        Layout::Middle => ndim - 2,
    };
    let inputs = [dims.randn_spread(reduced, Dtype::F32)];
    let problem = py::plain_problem(&doc, &dims, &body, &inputs);
    let (k, mut mistakes) = match layout {
        Layout::Last => last_kernel(red, &pre, &post),
        Layout::Middle => middle_kernel(red, &pre, &post),
    };
    let (fbody, shape_mistake) = forward(red, layout, ndim, keepdim);
    mistakes.push(shape_mistake);
    let solution = py::plain_solution(k, &fbody);
    let mut words = vec![
        red.word().to_string(),
        if layout == Layout::Last { "rows".into() } else { format!("dim{dim}") },
    ];
    words.extend(ops::names(&pre).into_iter().chain(ops::names(&post)).take(2));
    let extra = pre.len() + post.len();
    let hard =
        matches!(red, Var | Std | L2 | LogSumExp | Argmax | Argmin) || layout == Layout::Middle;
    Draft {
        words,
        level: if extra == 0 { 1 } else { 2 },
        difficulty: 2 + u32::from(hard) + u32::from(extra > 0) + u32::from(extra >= 3),
        dims,
        tolerance: None,
        problem,
        solution,
        mistakes,
    }
}

/// A pass over a row: load, elementwise work, masked-off lanes reset, then `step`.
fn row_pass(red: Red, pre: &[Op], step: &[&str]) -> Vec<String> {
    let (_, identity) = red.identity();
    let other = if pre.is_empty() || red.is_arg() { identity } else { "0.0" };
    let mut inner = lines(&["cols = start + tl.arange(0, BLOCK)", "mask = cols < n_cols"]);
    inner.push(format!("x = tl.load(base + cols, mask=mask, other={other})"));
    inner.extend(ops::triton_lines(pre));
    if !pre.is_empty() && !red.is_arg() {
        inner.push(format!("x = tl.where(mask, x, {identity})"));
    }
    inner.extend(lines(step));
    let mut out = vec!["for start in range(0, n_cols, BLOCK):".to_string()];
    out.extend(nest(&inner, 4));
    out
}

fn last_kernel(red: Red, pre: &[Op], post: &[Op]) -> (String, Vec<Mistake>) {
    let (init, _) = red.identity();
    let mut b = lines(&["row = tl.program_id(0)", "base = x_ptr + row * n_cols"]);
    let acc0 = format!("acc = {init}");
    let (finish, wrong): (Vec<&str>, (&str, &str)) = match red {
        Red::Sum => (
            vec!["x = tl.sum(acc, axis=0)"],
            ("x = tl.sum(acc, axis=0)", "x = tl.max(acc, axis=0)"),
        ),
        Red::Mean => (vec!["x = tl.sum(acc, axis=0) / n_cols"], ("/ n_cols", "/ BLOCK")),
        Red::L2 => (
            vec!["x = tl.sqrt(tl.sum(acc, axis=0))"],
            ("x = tl.sqrt(tl.sum(acc, axis=0))", "x = tl.sum(acc, axis=0)"),
        ),
        Red::Max => (
            vec!["x = tl.max(acc, axis=0)"],
            ("acc = tl.maximum(acc, x)", "acc = tl.minimum(acc, x)"),
        ),
        Red::Min => (
            vec!["x = tl.min(acc, axis=0)"],
            ("acc = tl.minimum(acc, x)", "acc = tl.maximum(acc, x)"),
        ),
        Red::Var => {
            (vec!["x = tl.sum(acc, axis=0) / (n_cols - 1)"], ("/ (n_cols - 1)", "/ n_cols"))
        }
        Red::Std => (
            vec!["x = tl.sqrt(tl.sum(acc, axis=0) / (n_cols - 1))"],
            (
                "x = tl.sqrt(tl.sum(acc, axis=0) / (n_cols - 1))",
                "x = tl.sum(acc, axis=0) / (n_cols - 1)",
            ),
        ),
        Red::LogSumExp => {
            (vec!["x = m + tl.log(tl.sum(acc, axis=0))"], ("x = m + tl.log(", "x = tl.log("))
        }
        Red::Argmax => (
            vec!["m = tl.max(acc, axis=0)", "x = tl.min(tl.where(acc == m, best, n_cols), axis=0)"],
            red.take(),
        ),
        Red::Argmin => (
            vec!["m = tl.min(acc, axis=0)", "x = tl.min(tl.where(acc == m, best, n_cols), axis=0)"],
            red.take(),
        ),
    };
    b.push(acc0.clone());
    match red {
        Red::Var | Red::Std => {
            b.extend(row_pass(red, pre, &["acc += x"]));
            b.push("mean = tl.sum(acc, axis=0) / n_cols".into());
            b.push(acc0);
            b.extend(row_pass(red, pre, &["d = tl.where(mask, x - mean, 0.0)", "acc += d * d"]));
        }
        Red::LogSumExp => {
            b.extend(row_pass(red, pre, &[red.accumulate()]));
            b.push("m = tl.max(acc, axis=0)".into());
            b.push("acc = tl.zeros([BLOCK], tl.float32)".into());
            b.extend(row_pass(red, pre, &["acc += tl.exp(x - m)"]));
        }
        Red::Argmax | Red::Argmin => {
            b.push("best = tl.zeros([BLOCK], tl.int32)".into());
            b.extend(row_pass(
                red,
                pre,
                &[
                    red.take().0,
                    "acc = tl.where(take, x, acc)",
                    "best = tl.where(take, cols, best)",
                ],
            ));
        }
        _ => b.extend(row_pass(red, pre, &[red.accumulate()])),
    }
    b.extend(finish.iter().map(|s| s.to_string()));
    b.extend(ops::triton_lines(post));
    let stored = if red.is_arg() { "x.to(tl.int64)" } else { "x" };
    b.push(format!("tl.store(y_ptr + row, {stored})"));
    let name = format!("{}_rows_kernel", red.word());
    let k = kernel(&format!("{name}(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr)"), &b);
    (k, last_mistakes(red, pre, wrong))
}

fn middle_kernel(red: Red, pre: &[Op], post: &[Op]) -> (String, Vec<Mistake>) {
    let (init, _) = red.identity();
    let mut b = lines(&[
        "batch = tl.program_id(0)",
        "cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)",
        "mask = cols < n_cols",
        "base = x_ptr + batch * n_rows * n_cols",
    ]);
    let pass = |step: &[&str]| {
        let mut inner =
            vec!["x = tl.load(base + r * n_cols + cols, mask=mask, other=0.0)".to_string()];
        inner.extend(ops::triton_lines(pre));
        inner.extend(lines(step));
        let mut out = vec!["for r in range(0, n_rows):".to_string()];
        out.extend(nest(&inner, 4));
        out
    };
    let acc0 = format!("acc = {init}");
    b.push(acc0.clone());
    let (finish, wrong): (&str, (&str, &str)) = match red {
        Red::Sum => ("x = acc", ("acc += x", "acc = tl.maximum(acc, x)")),
        Red::Mean => ("x = acc / n_rows", ("x = acc / n_rows", "x = acc / n_cols")),
        Red::L2 => ("x = tl.sqrt(acc)", ("x = tl.sqrt(acc)", "x = acc")),
        Red::Max | Red::Min => (
            "x = acc",
            if red == Red::Max {
                ("tl.maximum(acc, x)", "tl.minimum(acc, x)")
            } else {
                ("tl.minimum(acc, x)", "tl.maximum(acc, x)")
            },
        ),
        Red::Var => ("x = acc / (n_rows - 1)", ("/ (n_rows - 1)", "/ n_rows")),
        Red::Std => ("x = tl.sqrt(acc / (n_rows - 1))", ("/ (n_rows - 1)", "/ n_rows")),
        Red::LogSumExp => ("x = m + tl.log(acc)", ("x = m + tl.log(acc)", "x = tl.log(acc)")),
        Red::Argmax | Red::Argmin => ("x = best", red.take()),
    };
    match red {
        Red::Var | Red::Std => {
            b.extend(pass(&["acc += x"]));
            b.push("mean = acc / n_rows".into());
            b.push(acc0);
            b.extend(pass(&["d = x - mean", "acc += d * d"]));
        }
        Red::LogSumExp => {
            b.extend(pass(&[red.accumulate()]));
            b.push("m = acc".into());
            b.push("acc = tl.zeros([BLOCK], tl.float32)".into());
            b.extend(pass(&["acc += tl.exp(x - m)"]));
        }
        Red::Argmax | Red::Argmin => {
            b.push("best = tl.zeros([BLOCK], tl.int32)".into());
            b.extend(pass(&[
                red.take().0,
                "acc = tl.where(take, x, acc)",
                "best = tl.where(take, r, best)",
            ]));
        }
        _ => b.extend(pass(&[red.accumulate()])),
    }
    b.push(finish.into());
    b.extend(ops::triton_lines(post));
    let stored = if red.is_arg() { "x.to(tl.int64)" } else { "x" };
    b.push(format!("tl.store(y_ptr + batch * n_cols + cols, {stored}, mask=mask)"));
    let name = format!("{}_dim_kernel", red.word());
    let k = kernel(&format!("{name}(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr)"), &b);
    let m = vec![
        Mistake::new(Flaw::WrongOperator, &[wrong]),
        Mistake::new(Flaw::WrongAxis, &[("base + r * n_cols + cols", "base + r + cols * n_rows")]),
        Mistake::new(
            Flaw::MissingMask,
            &[
                (
                    "x = tl.load(base + r * n_cols + cols, mask=mask, other=0.0)",
                    "x = tl.load(base + r * n_cols + cols)",
                ),
                (&format!("{stored}, mask=mask)"), &format!("{stored})")),
            ],
        ),
    ];
    (k, m)
}

/// `ModelNew.forward` and a shape assumption a first attempt could make in it.
fn forward(red: Red, layout: Layout, ndim: usize, keepdim: bool) -> (Vec<String>, Mistake) {
    let dtype = if red.is_arg() { "torch.int64" } else { "x.dtype" };
    let name =
        format!("{}_{}_kernel", red.word(), if layout == Layout::Last { "rows" } else { "dim" });
    match layout {
        Layout::Last => {
            let shape = if keepdim { "(*x.shape[:-1], 1)" } else { "x.shape[:-1]" };
            let body = vec![
                "x = x.contiguous()".to_string(),
                "n_cols = x.shape[-1]".into(),
                "rows = x.numel() // n_cols".into(),
                format!("y = torch.empty({shape}, device=x.device, dtype={dtype})"),
                "BLOCK = min(256, triton.next_power_of_2(n_cols))".into(),
                format!("{name}[(rows,)](x, y, n_cols, BLOCK=BLOCK)"),
                "return y".into(),
            ];
            let m = match ndim {
                2 => Mistake::new(
                    Flaw::ShapeAssumption,
                    &[("n_cols = x.shape[-1]", "n_cols = x.shape[0]")],
                ),
                _ => Mistake::new(
                    Flaw::ShapeAssumption,
                    &[("rows = x.numel() // n_cols", "rows = x.shape[0]")],
                ),
            };
            (body, m)
        }
        Layout::Middle => {
            let (unpack, shape, grid0) = match (ndim, keepdim) {
                (3, false) => ("batch, n_rows, n_cols = x.shape", "(batch, n_cols)", "batch"),
                (3, true) => ("batch, n_rows, n_cols = x.shape", "(batch, 1, n_cols)", "batch"),
                (_, false) => ("n_rows, n_cols = x.shape", "(n_cols,)", "1"),
                (_, true) => ("n_rows, n_cols = x.shape", "(1, n_cols)", "1"),
            };
            let body = vec![
                "x = x.contiguous()".to_string(),
                unpack.into(),
                format!("y = torch.empty({shape}, device=x.device, dtype={dtype})"),
                "BLOCK = min(128, triton.next_power_of_2(n_cols))".into(),
                format!("grid = ({grid0}, triton.cdiv(n_cols, BLOCK))"),
                format!("{name}[grid](x, y, n_rows, n_cols, BLOCK=BLOCK)"),
                "return y".into(),
            ];
            let m = match ndim {
                3 => Mistake::new(Flaw::ShapeAssumption, &[(unpack, "n_rows, n_cols = x.shape")]),
                _ => Mistake::new(Flaw::ShapeAssumption, &[(unpack, "n_cols, n_rows = x.shape")]),
            };
            (body, m)
        }
    }
}

/// Sizes: rows of more than one block over the last dim; a short loop over a middle one.
fn dims_for(rng: &mut Rng, layout: Layout, ndim: usize) -> Dims {
    match layout {
        Layout::Last => row_dims(rng, ndim, "COLS"),
        Layout::Middle if ndim == 3 => Dims::new(
            &["BATCH", "ROWS", "COLS"],
            &[16, 256, rng.pick(&[1024, 2048])],
            &[2, rng.range(5, 12), rng.odd(65, 301)],
            &[3, rng.odd(37, 131), rng.odd(301, 1201)],
        ),
        Layout::Middle => Dims::new(
            &["ROWS", "COLS"],
            &[rng.pick(&[1024, 4096]), rng.pick(&[2048, 4096])],
            &[rng.range(5, 12), rng.odd(65, 301)],
            &[rng.odd(37, 131), rng.odd(1001, 5001)],
        ),
    }
}

/// What a first attempt at a last-dim reduction could get wrong; `wrong` is the operator slip.
fn last_mistakes(red: Red, pre: &[Op], wrong: (&str, &str)) -> Vec<Mistake> {
    let (_, identity) = red.identity();
    let other = if pre.is_empty() || red.is_arg() { identity } else { "0.0" };
    let mut m = vec![
        Mistake::new(Flaw::WrongOperator, &[wrong]),
        Mistake::new(Flaw::WrongAxis, &[("base = x_ptr + row * n_cols", "base = x_ptr + row")]),
        Mistake::new(
            Flaw::MissingMask,
            &[(
                &format!("x = tl.load(base + cols, mask=mask, other={other})"),
                "x = tl.load(base + cols)",
            )],
        ),
    ];
    if !pre.is_empty() && !red.is_arg() {
        m.push(Mistake::new(
            Flaw::WrongPadding,
            &[(&format!("\n        x = tl.where(mask, x, {identity})"), "")],
        ));
    }
    m
}
