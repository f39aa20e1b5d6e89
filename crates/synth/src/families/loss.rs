//! Losses of a prediction against a target, reduced to a scalar: MSE, L1, smooth L1,
//! Huber, binary cross-entropy with logits, KL divergence and hinge, by mean, sum or
//! batch mean. Two kernels: each program sums the elementwise loss of one block into a
//! partial, then one program adds the partials and divides once.

use super::activation_dims;
use crate::ops::lit;
use crate::py::{self, kernel, lines};
use crate::rng::Rng;
use crate::{Draft, Dtype, Flaw, Mistake};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Loss {
    Mse,
    L1,
    SmoothL1 { beta: f64 },
    Huber { delta: f64 },
    BceLogits,
    KlDiv,
    Hinge,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduce {
    Mean,
    Sum,
    BatchMean,
}

impl Loss {
    fn word(self) -> &'static str {
        match self {
            Loss::Mse => "mse_loss",
            Loss::L1 => "l1_loss",
            Loss::SmoothL1 { .. } => "smooth_l1_loss",
            Loss::Huber { .. } => "huber_loss",
            Loss::BceLogits => "bce_logits_loss",
            Loss::KlDiv => "kl_div_loss",
            Loss::Hinge => "hinge_loss",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Loss::Mse => "Mean squared error",
            Loss::L1 => "Mean absolute error (L1 loss)",
            Loss::SmoothL1 { .. } => "Smooth L1 loss",
            Loss::Huber { .. } => "Huber loss",
            Loss::BceLogits => "Binary cross-entropy on logits",
            Loss::KlDiv => "KL divergence of a target distribution from log-probabilities",
            Loss::Hinge => "Hinge loss against targets of -1 and 1",
        }
    }

    /// The PyTorch expression of the loss of `pred` against `target`.
    fn torch(self, r: Reduce) -> String {
        let f = "torch.nn.functional";
        let red = match r {
            Reduce::Mean => "",
            Reduce::Sum => ", reduction=\"sum\"",
            Reduce::BatchMean => ", reduction=\"batchmean\"",
        };
        match self {
            Loss::Mse => format!("{f}.mse_loss(pred, target{red})"),
            Loss::L1 => format!("{f}.l1_loss(pred, target{red})"),
            Loss::SmoothL1 { beta } => {
                format!("{f}.smooth_l1_loss(pred, target{red}, beta={})", lit(beta))
            }
            Loss::Huber { delta } => {
                format!("{f}.huber_loss(pred, target{red}, delta={})", lit(delta))
            }
            Loss::BceLogits => format!("{f}.binary_cross_entropy_with_logits(pred, target{red})"),
            Loss::KlDiv => format!("{f}.kl_div(pred, target{red})"),
            Loss::Hinge => {
                let s = "torch.clamp(1.0 - pred * target, min=0.0)";
                match r {
                    Reduce::Sum => format!("torch.sum({s})"),
                    _ => format!("torch.mean({s})"),
                }
            }
        }
    }

    /// Triton lines computing the elementwise loss `d` from `p` and `t`, and a slip in them.
    fn triton(self) -> (Vec<String>, (String, String)) {
        let one = |e: &str, from: &str, to: &str| {
            (vec![format!("d = {e}")], (from.to_string(), to.to_string()))
        };
        match self {
            Loss::Mse => one("(p - t) * (p - t)", "d = (p - t) * (p - t)", "d = tl.abs(p - t)"),
            Loss::L1 => one("tl.abs(p - t)", "d = tl.abs(p - t)", "d = p - t"),
            Loss::SmoothL1 { beta } => {
                let b = lit(beta);
                (
                    vec![
                        "diff = tl.abs(p - t)".into(),
                        format!(
                            "d = tl.where(diff < {b}, 0.5 * diff * diff / {b}, diff - 0.5 * {b})"
                        ),
                    ],
                    (format!("0.5 * diff * diff / {b}"), "0.5 * diff * diff".into()),
                )
            }
            Loss::Huber { delta } => {
                let dl = lit(delta);
                (
                    vec![
                        "diff = tl.abs(p - t)".into(),
                        format!("d = tl.where(diff < {dl}, 0.5 * diff * diff, {dl} * (diff - 0.5 * {dl}))"),
                    ],
                    (format!("{dl} * (diff - 0.5 * {dl})"), "diff".into()),
                )
            }
            Loss::BceLogits => one(
                "tl.maximum(p, 0.0) - p * t + tl.log(1.0 + tl.exp(-tl.abs(p)))",
                "tl.maximum(p, 0.0) - p * t",
                "tl.maximum(p, 0.0) + p * t",
            ),
            Loss::KlDiv => one("t * (tl.log(t) - p)", "t * (tl.log(t) - p)", "t * (p - tl.log(t))"),
            Loss::Hinge => one("tl.maximum(1.0 - p * t, 0.0)", "1.0 - p * t", "1.0 - p + t"),
        }
    }

    /// The inputs: predictions and targets over the dims. The predictions carry a scale
    /// drawn per call: a loss reduced over millions of i.i.d. elements is otherwise the
    /// same number for every seed, and a kernel returning that constant would pass.
    fn inputs(self, x: &str) -> [String; 2] {
        let shape = x.trim_start_matches("torch.randn(").trim_end_matches(')');
        let scale = "(0.5 + 1.5 * torch.rand(()))";
        match self {
            Loss::BceLogits => [format!("{x} * 2.0 * {scale}"), format!("torch.rand({shape})")],
            Loss::KlDiv => [
                format!("torch.log_softmax({x} * {scale}, dim=-1)"),
                format!("torch.softmax({x}, dim=-1)"),
            ],
            Loss::Hinge => [
                format!("{x} * {scale}"),
                format!("torch.randint(0, 2, ({shape},)).float() * 2.0 - 1.0"),
            ],
            _ => [format!("{x} * {scale}"), x.to_string()],
        }
    }
}

pub fn draw(rng: &mut Rng) -> Draft {
    let loss = match rng.below(7) {
        0 => Loss::Mse,
        1 => Loss::L1,
        2 => Loss::SmoothL1 { beta: rng.pick(&[1.0, 0.5, 2.0]) },
        3 => Loss::Huber { delta: rng.pick(&[1.0, 0.5, 2.0]) },
        4 => Loss::BceLogits,
        5 => Loss::KlDiv,
        _ => Loss::Hinge,
    };
    let reduce = match (loss, rng.below(3)) {
        (Loss::KlDiv, 0) => Reduce::Sum,
        (Loss::KlDiv, _) => Reduce::BatchMean,
        (_, 0) => Reduce::Sum,
        _ => Reduce::Mean,
    };
    let ndim = rng.pick(&[2, 2, 3]);
    let dims = activation_dims(rng, ndim);
    let x = dims.randn(&dims.all(), Dtype::F32);
    let inputs = loss.inputs(&x);
    let body = vec![format!("return {}", loss.torch(reduce))];
    let how = match reduce {
        Reduce::Mean => "averaged over all elements",
        Reduce::Sum => "summed over all elements",
        Reduce::BatchMean => "summed and divided by the batch size",
    };
    let doc = format!("{}, {how}.", loss.title());
    let args: &[&str] = &["pred", "target"];
    let problem = py::args_problem(&doc, &dims, args, &body, &inputs);
    let (kernels, mut mistakes) = solve(loss);
    let (fbody, m) = forward(loss, reduce);
    mistakes.extend(m);
    let solution = py::args_solution(&kernels, args, &fbody);
    let mut words = vec![loss.word().to_string()];
    if reduce == Reduce::Sum {
        words.push("sum".into());
    }
    let hard =
        matches!(loss, Loss::SmoothL1 { .. } | Loss::Huber { .. } | Loss::BceLogits | Loss::KlDiv);
    Draft {
        words,
        level: 1,
        difficulty: 2 + u32::from(hard) + u32::from(ndim == 3),
        dims,
        tolerance: None,
        problem,
        solution,
        mistakes,
    }
}

fn solve(loss: Loss) -> (Vec<String>, Vec<Mistake>) {
    let name = format!("{}_kernel", loss.word());
    let (d, (from, to)) = loss.triton();
    let mut b = lines(&[
        "pid = tl.program_id(0)",
        "offsets = pid * BLOCK + tl.arange(0, BLOCK)",
        "mask = offsets < n_elements",
        "p = tl.load(pred_ptr + offsets, mask=mask, other=0.0)",
        "t = tl.load(target_ptr + offsets, mask=mask, other=0.0)",
    ]);
    b.extend(d);
    b.push("d = tl.where(mask, d, 0.0)".into());
    b.push("tl.store(partial_ptr + pid, tl.sum(d, axis=0))".into());
    let k = kernel(
        &format!("{name}(pred_ptr, target_ptr, partial_ptr, n_elements, BLOCK: tl.constexpr)"),
        &b,
    );
    let finish = kernel(
        "finish_kernel(partial_ptr, out_ptr, n_partials, divisor, BLOCK: tl.constexpr)",
        &lines(&[
            "acc = tl.zeros([BLOCK], tl.float32)",
            "for start in range(0, n_partials, BLOCK):",
            "    offs = start + tl.arange(0, BLOCK)",
            "    acc += tl.load(partial_ptr + offs, mask=offs < n_partials, other=0.0)",
            "tl.store(out_ptr, tl.sum(acc, axis=0) / divisor)",
        ]),
    );
    let mut m = vec![Mistake::new(Flaw::WrongOperator, &[(&from, &to)])];
    // Masked-off lanes of zeros cost nothing in some losses (MSE, L1): the slip only
    // counts where they do.
    if matches!(loss, Loss::BceLogits | Loss::KlDiv | Loss::Hinge) {
        m.push(Mistake::new(Flaw::WrongPadding, &[("\n    d = tl.where(mask, d, 0.0)", "")]));
    }
    m.push(Mistake::new(
        Flaw::MissingMask,
        &[
            (
                "p = tl.load(pred_ptr + offsets, mask=mask, other=0.0)",
                "p = tl.load(pred_ptr + offsets)",
            ),
            (
                "t = tl.load(target_ptr + offsets, mask=mask, other=0.0)",
                "t = tl.load(target_ptr + offsets)",
            ),
            ("\n    d = tl.where(mask, d, 0.0)", ""),
        ],
    ));
    (vec![k, finish], m)
}

fn forward(loss: Loss, reduce: Reduce) -> (Vec<String>, Vec<Mistake>) {
    let name = format!("{}_kernel", loss.word());
    let divisor = match reduce {
        Reduce::Mean => "n",
        Reduce::Sum => "1",
        Reduce::BatchMean => "pred.shape[0]",
    };
    let body = vec![
        "pred = pred.contiguous()".to_string(),
        "target = target.contiguous()".into(),
        "n = pred.numel()".into(),
        "BLOCK = 1024".into(),
        "blocks = triton.cdiv(n, BLOCK)".into(),
        "partial = torch.empty(blocks, device=pred.device, dtype=torch.float32)".into(),
        "out = torch.empty((), device=pred.device, dtype=torch.float32)".into(),
        format!("{name}[(blocks,)](pred, target, partial, n, BLOCK=BLOCK)"),
        format!("finish_kernel[(1,)](partial, out, blocks, {divisor}, BLOCK=1024)"),
        "return out".into(),
    ];
    let launch = format!("finish_kernel[(1,)](partial, out, blocks, {divisor}, BLOCK=1024)");
    let wrong_divisor = match reduce {
        Reduce::Mean => "blocks",
        Reduce::Sum => "n",
        Reduce::BatchMean => "n",
    };
    let m = vec![
        Mistake::new(
            Flaw::WrongOperator,
            &[(
                &launch,
                &launch
                    .replace(&format!("blocks, {divisor},"), &format!("blocks, {wrong_divisor},")),
            )],
        ),
        Mistake::new(Flaw::ShapeAssumption, &[("n = pred.numel()", "n = pred.shape[-1]")]),
    ];
    (body, m)
}
