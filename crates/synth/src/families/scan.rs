//! Scans along the last dimension: inclusive, exclusive and reverse cumulative sums, a
//! cumulative sum under a boolean mask, and a cumulative product, with elementwise work
//! before and after. One program per row; each block is scanned with `tl.cumsum` (or
//! `tl.cumprod`) and the running total carried to the next block.

use super::row_dims;
use crate::ops::{self, Op, OpSet};
use crate::py::{self, kernel, lines, nest};
use crate::rng::Rng;
use crate::{Draft, Dtype, Flaw, Mistake};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scan {
    Cumsum,
    Exclusive,
    Reverse,
    Masked,
    Cumprod,
}

impl Scan {
    fn word(self) -> &'static str {
        match self {
            Scan::Cumsum => "cumsum",
            Scan::Exclusive => "exclusive_cumsum",
            Scan::Reverse => "reverse_cumsum",
            Scan::Masked => "masked_cumsum",
            Scan::Cumprod => "cumprod",
        }
    }

    fn doc(self, dim: &str) -> String {
        match self {
            Scan::Cumsum => format!("Cumulative sum along dim {dim}."),
            Scan::Exclusive => {
                format!("Exclusive cumulative sum along dim {dim}: each element excluded from its own sum.")
            }
            Scan::Reverse => format!("Cumulative sum from the end, along dim {dim}."),
            Scan::Masked => {
                format!("Cumulative sum along dim {dim} of the elements a boolean mask keeps.")
            }
            Scan::Cumprod => format!("Cumulative product along dim {dim}."),
        }
    }
}

pub fn draw(rng: &mut Rng) -> Draft {
    use Scan::*;
    let scan = rng.pick(&[Cumsum, Cumsum, Exclusive, Reverse, Masked, Cumprod]);
    let ndim = rng.pick(&[2, 2, 3]);
    let dims = row_dims(rng, ndim, "COLS");
    let dim = if ndim == 2 { rng.pick(&["1", "-1"]) } else { rng.pick(&["2", "-1"]) };
    // A product of many factors only stays finite near 1: no work before it.
    let (pre, post) = match scan {
        Cumprod => (vec![], vec![]),
        _ => (ops::chain(rng, &[0, 0, 1], OpSet::NoExp), ops::chain(rng, &[0, 0, 1], OpSet::NoExp)),
    };
    let mut body = ops::torch_lines(&pre);
    body.push(match scan {
        Cumsum => format!("x = torch.cumsum(x, dim={dim})"),
        Exclusive => format!("x = torch.cumsum(x, dim={dim}) - x"),
        Reverse => format!(
            "x = torch.flip(torch.cumsum(torch.flip(x, dims=[{dim}]), dim={dim}), dims=[{dim}])"
        ),
        Masked => format!("x = torch.cumsum(x * mask, dim={dim})"),
        Cumprod => format!("x = torch.cumprod(x, dim={dim})"),
    });
    body.extend(ops::torch_lines(&post));
    body.push("return x".into());
    let x = dims.randn(&dims.all(), Dtype::F32);
    // Sums along the scan shrunk to O(1): a random walk of standard normals reaches
    // sqrt(COLS), and fp32's rounding of such partials where the walk crosses zero is
    // larger than the absolute tolerance, for the reference order and a blocked one alike.
    let mut inputs = vec![match scan {
        Cumprod => format!("1.0 + 0.01 * {x}"),
        _ => format!("{x} / COLS ** 0.5"),
    }];
    let args: &[&str] = if scan == Masked {
        inputs.push(format!("torch.rand({}) > 0.5", dims.names.join(", ")));
        &["x", "mask"]
    } else {
        &["x"]
    };
    let mut doc = scan.doc(dim);
    if !pre.is_empty() || !post.is_empty() {
        doc.pop();
        doc.push_str(", with elementwise work around it.");
    }
    let problem = py::args_problem(&doc, &dims, args, &body, &inputs);
    let (kernels, mistakes) = solve(scan, &pre, &post);
    let fbody = forward(scan);
    let solution = py::args_solution(&kernels, args, &fbody);
    let mut words = vec![scan.word().to_string()];
    words.extend(ops::names(&pre).into_iter().chain(ops::names(&post)).take(2));
    let extra = pre.len() + post.len();
    Draft {
        words,
        level: if extra == 0 { 1 } else { 2 },
        difficulty: 2 + u32::from(scan != Cumsum) + u32::from(extra > 0) + u32::from(ndim == 3),
        dims,
        tolerance: None,
        problem,
        solution,
        mistakes,
    }
}

/// The kernel (and a combine function for the product) and what a first attempt could
/// get wrong in it.
fn solve(scan: Scan, pre: &[Op], post: &[Op]) -> (Vec<String>, Vec<Mistake>) {
    let name = format!("{}_kernel", scan.word());
    let (args, other) = match scan {
        Scan::Masked => ("x_ptr, m_ptr, y_ptr, n_cols, BLOCK: tl.constexpr", "0.0"),
        Scan::Cumprod => ("x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr", "1.0"),
        _ => ("x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr", "0.0"),
    };
    let load = format!("x = tl.load(x_ptr + base + cols, mask=mask, other={other})");
    let read = |extra: &[&str]| {
        let mut inner = lines(&["cols = start + tl.arange(0, BLOCK)", "mask = cols < n_cols"]);
        inner.push(load.clone());
        inner.extend(ops::triton_lines(pre));
        if !pre.is_empty() {
            inner.push(format!("x = tl.where(mask, x, {other})"));
        }
        if scan == Scan::Masked {
            inner.push("keep = tl.load(m_ptr + base + cols, mask=mask, other=0)".into());
            inner.push("x = tl.where(keep != 0, x, 0.0)".into());
        }
        inner.extend(lines(extra));
        let mut out = vec!["for start in range(0, n_cols, BLOCK):".to_string()];
        out.extend(nest(&inner, 4));
        out
    };
    let mut b = lines(&["row = tl.program_id(0)", "base = row * n_cols"]);
    let (step, carry_step): (&str, &str) = match scan {
        Scan::Cumprod => {
            ("y = tl.cumprod(x, axis=0) * carry", "carry = carry * tl.reduce(x, 0, _mul)")
        }
        Scan::Exclusive => {
            ("y = tl.cumsum(x, axis=0) + carry - x", "carry = carry + tl.sum(x, axis=0)")
        }
        Scan::Reverse => {
            ("y = total - (tl.cumsum(x, axis=0) + carry) + x", "carry = carry + tl.sum(x, axis=0)")
        }
        _ => ("y = tl.cumsum(x, axis=0) + carry", "carry = carry + tl.sum(x, axis=0)"),
    };
    if scan == Scan::Reverse {
        b.push("total = 0.0".into());
        b.extend(read(&["total = total + tl.sum(x, axis=0)"]));
    }
    b.push(if scan == Scan::Cumprod { "carry = 1.0" } else { "carry = 0.0" }.into());
    let mut last = vec![step.to_string(), carry_step.to_string(), "x = y".to_string()];
    last.extend(ops::triton_lines(post));
    last.push("tl.store(y_ptr + base + cols, x, mask=mask)".into());
    let last: Vec<&str> = last.iter().map(String::as_str).collect();
    b.extend(read(&last));
    let mut kernels = Vec::new();
    if scan == Scan::Cumprod {
        kernels.push(kernel("_mul(a, b)", &lines(&["return a * b"])));
    }
    kernels.push(kernel(&format!("{name}({args})"), &b));
    let mut m = vec![
        Mistake::new(Flaw::WrongOperator, &[(step, step.replace(" carry", " 0.0").as_str())]),
        Mistake::new(Flaw::WrongAxis, &[("base = row * n_cols", "base = row")]),
        Mistake::new(
            Flaw::MissingMask,
            &[
                (&load, "x = tl.load(x_ptr + base + cols)"),
                ("tl.store(y_ptr + base + cols, x, mask=mask)", "tl.store(y_ptr + base + cols, x)"),
            ],
        ),
    ];
    if scan == Scan::Cumprod {
        m.push(Mistake::new(
            Flaw::WrongPadding,
            &[("mask=mask, other=1.0)", "mask=mask, other=0.0)")],
        ));
    }
    (kernels, m)
}

/// `ModelNew.forward`: every row of the last dimension, one program each.
fn forward(scan: Scan) -> Vec<String> {
    let name = format!("{}_kernel", scan.word());
    let mut body = lines(&["x = x.contiguous()"]);
    let launch = match scan {
        Scan::Masked => {
            body.push("mask = mask.contiguous()".into());
            format!("{name}[(rows,)](x, mask, y, n_cols, BLOCK=BLOCK)")
        }
        _ => format!("{name}[(rows,)](x, y, n_cols, BLOCK=BLOCK)"),
    };
    body.extend(lines(&[
        "n_cols = x.shape[-1]",
        "rows = x.numel() // n_cols",
        "y = torch.empty_like(x)",
        "BLOCK = min(256, triton.next_power_of_2(n_cols))",
    ]));
    body.push(launch);
    body.push("return y".into());
    body
}
