//! Row-wise patterns over the last dimension: softmax and log-softmax (optionally with a
//! temperature), layer norm (affine or not) and RMS norm, with an optional activation
//! after a norm. One program per row, several passes over blocks of it.

use super::row_dims;
use crate::ops::{self, lit, Op, OpSet};
use crate::py::{kernel, lines, nest, Interface};
use crate::rng::Rng;
use crate::{Draft, Dtype, Flaw, Mistake};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Softmax { log: bool, temperature: Option<f64> },
    LayerNorm { affine: bool },
    RmsNorm,
}

pub fn draw(rng: &mut Rng) -> Draft {
    let kind = match rng.below(4) {
        0 | 1 => Kind::Softmax {
            log: rng.chance(0.4),
            temperature: rng.chance(0.4).then(|| rng.pick(&[0.5, 2.0, 4.0])),
        },
        2 => Kind::LayerNorm { affine: rng.chance(0.7) },
        _ => Kind::RmsNorm,
    };
    let ndim = rng.pick(&[2, 3]);
    let dims = row_dims(rng, ndim, "HIDDEN");
    let eps = rng.pick(&["1e-5", "1e-6", "1e-3"]);
    let post = match kind {
        Kind::Softmax { .. } => vec![],
        _ => ops::chain(rng, &[0, 0, 1], OpSet::NoExp),
    };
    let (mut body, init_args, init_lines, init_inputs, word, scale) = torch_side(kind, eps);
    body.extend(ops::torch_lines(&post));
    body.push("return x".into());
    let x = dims.randn(&dims.all(), Dtype::F32);
    let inputs = [format!("{x} * {scale}")];
    let doc = describe(kind);
    let iface = Interface { init_args, init_lines, init_inputs, inputs: inputs.to_vec() };
    let problem = iface.problem(&doc, &dims, &["x"], &body);
    let (solution, mistakes) = solve(kind, ndim, eps, word, &post, &iface);
    let mut words = vec![word.to_string()];
    let plain = match kind {
        Kind::Softmax { temperature, .. } => {
            words.extend(temperature.map(|_| "temperature".to_string()));
            temperature.is_none()
        }
        Kind::LayerNorm { affine } => {
            words.extend((!affine).then(|| "plain".to_string()));
            true
        }
        Kind::RmsNorm => true,
    };
    words.extend(ops::names(&post));
    let norm = !matches!(kind, Kind::Softmax { .. });
    Draft {
        words,
        level: if plain && post.is_empty() { 1 } else { 2 },
        difficulty: 3 + u32::from(norm) + u32::from(!plain || !post.is_empty()),
        dims,
        tolerance: None,
        problem,
        solution,
        mistakes,
    }
}

/// forward's lines, constructor arguments, lines and inputs, the name word, the input scale.
#[allow(clippy::type_complexity)]
fn torch_side(
    kind: Kind,
    eps: &str,
) -> (Vec<String>, Vec<String>, Vec<String>, Vec<String>, &'static str, String) {
    let weight = "self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))".to_string();
    let hidden = |dims_last: &str| vec![dims_last.to_string()];
    match kind {
        Kind::Softmax { log, temperature } => {
            let mut body: Vec<String> = temperature.map(|t| format!("x = x / {}", lit(t))).into_iter().collect();
            let f = if log { "log_softmax" } else { "softmax" };
            body.push(format!("x = torch.{f}(x, dim=-1)"));
            // Logits of spread 3 after the temperature: a hotter softmax over a long row
            // is otherwise nearly uniform, too flat for the tolerance to tell apart.
            let scale = lit(3.0 * temperature.unwrap_or(1.0).max(1.0));
            (body, vec![], vec![], vec![], f, scale)
        }
        Kind::LayerNorm { affine: true } => (
            vec![format!("x = torch.nn.functional.layer_norm(x, (x.shape[-1],), self.weight, self.bias, eps={eps})")],
            vec!["hidden: int".into()],
            vec![weight, "self.bias = nn.Parameter(0.1 * torch.randn(hidden))".into()],
            hidden("HIDDEN"),
            "layer_norm",
            "2.0 + 0.5".into(),
        ),
        Kind::LayerNorm { affine: false } => (
            vec![format!("x = torch.nn.functional.layer_norm(x, (x.shape[-1],), eps={eps})")],
            vec![],
            vec![],
            vec![],
            "layer_norm",
            "2.0 + 0.5".into(),
        ),
        Kind::RmsNorm => (
            vec![format!("x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + {eps}) * self.weight")],
            vec!["hidden: int".into()],
            vec![weight],
            hidden("HIDDEN"),
            "rms_norm",
            "2.0".into(),
        ),
    }
}

/// A loop over the row's blocks with `inner` as its body.
fn pass(inner: &[String]) -> Vec<String> {
    let mut out = vec!["for start in range(0, n_cols, BLOCK):".to_string()];
    let mut body = lines(&["cols = start + tl.arange(0, BLOCK)", "mask = cols < n_cols"]);
    body.extend(inner.iter().cloned());
    out.extend(nest(&body, 4));
    out
}

fn softmax(log: bool, temperature: Option<f64>) -> (String, Vec<Mistake>, String) {
    let load = "x = tl.load(x_ptr + base + cols, mask=mask, other=float(\"-inf\"))".to_string();
    let mut read = vec![load.clone()];
    read.extend(temperature.map(|t| format!("x = x / {}", lit(t))));
    let mut b = lines(&[
        "row = tl.program_id(0)",
        "base = row * n_cols",
        "m = tl.full([BLOCK], float(\"-inf\"), tl.float32)",
    ]);
    b.extend(pass(&[read.clone(), vec!["m = tl.maximum(m, x)".into()]].concat()));
    b.extend(lines(&["row_max = tl.max(m, axis=0)", "s = tl.zeros([BLOCK], tl.float32)"]));
    b.extend(pass(&[read.clone(), vec!["s += tl.exp(x - row_max)".into()]].concat()));
    b.push("denom = tl.sum(s, axis=0)".into());
    let out =
        if log { "x = x - row_max - tl.log(denom)" } else { "x = tl.exp(x - row_max) / denom" };
    b.extend(pass(
        &[read, vec![out.into(), "tl.store(y_ptr + base + cols, x, mask=mask)".into()]].concat(),
    ));
    let name = if log { "log_softmax" } else { "softmax" };
    let k = kernel(&format!("{name}_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr)"), &b);
    let wrong = if log {
        ("x - row_max - tl.log(denom)", "x - tl.log(denom)")
    } else {
        ("tl.exp(x - row_max) / denom", "tl.exp(x) / denom")
    };
    let m = vec![
        Mistake::new(Flaw::WrongOperator, &[wrong]),
        Mistake::new(
            Flaw::WrongPadding,
            &[("s += tl.exp(x - row_max)", "s += tl.exp(tl.where(mask, x, 0.0) - row_max)")],
        ),
        Mistake::nth(Flaw::MissingMask, &load, "x = tl.load(x_ptr + base + cols)", 1),
    ];
    (k, m, String::new())
}

fn layer_norm(affine: bool, post: &[Op]) -> (String, Vec<Mistake>, String) {
    let load = "x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)";
    let mut b = lines(&[
        "row = tl.program_id(0)",
        "base = row * n_cols",
        "acc = tl.zeros([BLOCK], tl.float32)",
    ]);
    b.extend(pass(&lines(&[load, "acc += x"])));
    b.extend(lines(&[
        "mean = tl.sum(acc, axis=0) / n_cols",
        "acc = tl.zeros([BLOCK], tl.float32)",
    ]));
    b.extend(pass(&lines(&[load, "d = tl.where(mask, x - mean, 0.0)", "acc += d * d"])));
    b.push("inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)".into());
    let mut last = lines(&[load, "x = (x - mean) * inv"]);
    if affine {
        last.extend(lines(&[
            "w = tl.load(w_ptr + cols, mask=mask, other=0.0)",
            "b = tl.load(b_ptr + cols, mask=mask, other=0.0)",
            "x = x * w + b",
        ]));
    }
    last.extend(ops::triton_lines(post));
    last.push("tl.store(y_ptr + base + cols, x, mask=mask)".into());
    b.extend(pass(&last));
    let params = if affine { "x_ptr, w_ptr, b_ptr, y_ptr" } else { "x_ptr, y_ptr" };
    let k = kernel(&format!("layer_norm_kernel({params}, n_cols, eps, BLOCK: tl.constexpr)"), &b);
    let m = vec![
        Mistake::new(Flaw::WrongOperator, &[("/ n_cols + eps", "/ (n_cols - 1) + eps")]),
        Mistake::new(Flaw::WrongPadding, &[("d = tl.where(mask, x - mean, 0.0)", "d = x - mean")]),
        Mistake::new(Flaw::MissingMask, &[(load, "x = tl.load(x_ptr + base + cols)")]),
    ];
    (k, m, if affine { "self.weight, self.bias, ".into() } else { String::new() })
}

fn rms_norm(post: &[Op]) -> (String, Vec<Mistake>, String) {
    let load = "x = tl.load(x_ptr + base + cols, mask=mask, other=0.0)";
    let mut b = lines(&[
        "row = tl.program_id(0)",
        "base = row * n_cols",
        "acc = tl.zeros([BLOCK], tl.float32)",
    ]);
    b.extend(pass(&lines(&[load, "acc += x * x"])));
    b.push("inv = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)".into());
    let mut last =
        lines(&[load, "w = tl.load(w_ptr + cols, mask=mask, other=0.0)", "x = x * inv * w"]);
    last.extend(ops::triton_lines(post));
    last.push("tl.store(y_ptr + base + cols, x, mask=mask)".into());
    b.extend(pass(&last));
    let k = kernel("rms_norm_kernel(x_ptr, w_ptr, y_ptr, n_cols, eps, BLOCK: tl.constexpr)", &b);
    let m = vec![
        Mistake::new(Flaw::WrongOperator, &[("/ n_cols + eps", "/ BLOCK + eps")]),
        Mistake::new(Flaw::MissingMask, &[(load, "x = tl.load(x_ptr + base + cols)")]),
    ];
    (k, m, "self.weight, ".into())
}

fn describe(kind: Kind) -> String {
    match kind {
        Kind::Softmax { log, temperature } => format!(
            "{} over the last dimension{}.",
            if log { "Log-softmax" } else { "Softmax" },
            if temperature.is_some() { " with a temperature" } else { "" }
        ),
        Kind::LayerNorm { affine } => format!(
            "Layer normalisation over the last dimension{}.",
            if affine { " with a learned scale and shift" } else { "" }
        ),
        Kind::RmsNorm => "RMS normalisation over the last dimension with a learned scale.".into(),
    }
}

/// The kernel, its launch, and what a first attempt could get wrong in them.
fn solve(
    kind: Kind,
    ndim: usize,
    eps: &str,
    word: &str,
    post: &[Op],
    iface: &Interface,
) -> (String, Vec<Mistake>) {
    let (k, mut mistakes, args) = match kind {
        Kind::Softmax { log, temperature } => softmax(log, temperature),
        Kind::LayerNorm { affine } => layer_norm(affine, post),
        Kind::RmsNorm => rms_norm(post),
    };
    let name = format!("{word}_kernel");
    let eps_arg =
        if matches!(kind, Kind::Softmax { .. }) { String::new() } else { format!(", {eps}") };
    let fbody = vec![
        "x = x.contiguous()".to_string(),
        "n_cols = x.shape[-1]".into(),
        "rows = x.numel() // n_cols".into(),
        "y = torch.empty_like(x)".into(),
        "BLOCK = min(256, triton.next_power_of_2(n_cols))".into(),
        format!("{name}[(rows,)](x, {args}y, n_cols{eps_arg}, BLOCK=BLOCK)"),
        "return y".into(),
    ];
    mistakes.push(match ndim {
        2 => {
            Mistake::new(Flaw::ShapeAssumption, &[("n_cols = x.shape[-1]", "n_cols = x.shape[0]")])
        }
        _ => Mistake::new(
            Flaw::ShapeAssumption,
            &[("rows = x.numel() // n_cols", "rows = x.shape[0]")],
        ),
    });
    mistakes.push(Mistake::new(Flaw::WrongAxis, &[("base = row * n_cols", "base = row")]));
    let solution = iface.solution(k, &["x"], &fbody);
    (solution, mistakes)
}
