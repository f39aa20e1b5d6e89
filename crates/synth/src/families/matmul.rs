//! A GEMM with a fused epilogue: `nn.Linear` (with or without bias, 2-D or 3-D input) or
//! the product of two inputs, then 0–3 elementwise steps, in one `tl.dot` kernel with
//! small masked blocks.

use crate::ops::{self, OpSet};
use crate::py::{kernel, lines, nest, Dims, Interface};
use crate::rng::Rng;
use crate::{Draft, Dtype, Flaw, Mistake};

/// Constructor arguments, its lines, init inputs, inputs, forward arguments, first line.
type Parts = (Vec<String>, Vec<String>, Vec<String>, Vec<String>, &'static [&'static str], String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Linear { bias: bool, seq: bool },
    TwoInputs,
}

pub fn draw(rng: &mut Rng) -> Draft {
    let kind = match rng.below(3) {
        0 => Kind::TwoInputs,
        _ => Kind::Linear { bias: rng.chance(0.7), seq: rng.chance(0.3) },
    };
    let epilogue = ops::chain(rng, &[0, 1, 1, 2, 3], OpSet::NoExp);
    let (m_small, k_small, n_small) = (rng.range(17, 40), rng.range(33, 80), rng.range(17, 48));
    let (m_held, k_held, n_held) = (rng.odd(301, 1031), rng.odd(257, 1031), rng.odd(301, 1031));
    let dims = match kind {
        Kind::Linear { seq: true, .. } => Dims::new(
            &["BATCH", "SEQ", "IN_FEATURES", "OUT_FEATURES"],
            &[8, 256, 1024, 1024],
            &[2, m_small / 2, k_small, n_small],
            &[3, m_held / 3, k_held, n_held],
        ),
        Kind::Linear { .. } => Dims::new(
            &["BATCH", "IN_FEATURES", "OUT_FEATURES"],
            &[2048, 1024, 1024],
            &[m_small, k_small, n_small],
            &[m_held, k_held, n_held],
        ),
        Kind::TwoInputs => Dims::new(
            &["M", "K", "N"],
            &[2048, 1024, 1024],
            &[m_small, k_small, n_small],
            &[m_held, k_held, n_held],
        ),
    };
    let (iface, forward_args, first) = interface(kind, &dims);
    let mut body = vec![first];
    body.extend(ops::torch_lines(&epilogue));
    body.push("return x".into());
    let what = match kind {
        Kind::Linear { bias: true, .. } => "A linear layer",
        Kind::Linear { bias: false, .. } => "A linear layer without bias",
        Kind::TwoInputs => "A matrix product of two inputs",
    };
    let doc = if epilogue.is_empty() {
        format!("{what}.")
    } else {
        format!("{what} followed by an elementwise epilogue.")
    };
    let problem = iface.problem(&doc, &dims, forward_args, &body);
    let (solution, mistakes) = solve(rng, kind, &epilogue, &iface, forward_args);
    let mut words = vec![match kind {
        Kind::Linear { bias: true, .. } => "linear".to_string(),
        Kind::Linear { bias: false, .. } => "linear_nobias".into(),
        Kind::TwoInputs => "matmul".into(),
    }];
    words.extend(ops::names(&epilogue));
    let seq = matches!(kind, Kind::Linear { seq: true, .. });
    Draft {
        words,
        level: if epilogue.is_empty() { 1 } else { 2 },
        difficulty: 3 + u32::from(!epilogue.is_empty()) + u32::from(epilogue.len() >= 2 || seq),
        dims,
        tolerance: Some((1e-3, 1e-3)),
        problem,
        solution,
        mistakes,
    }
}

fn gemm_kernel(bias: bool, epilogue: &[ops::Op]) -> String {
    let bias_param = if bias { "bias_ptr, " } else { "" };
    let sig = format!(
        "matmul_kernel(\n    x_ptr, w_ptr, {bias_param}y_ptr, M, N, K,\n    stride_xm, stride_xk, stride_wk, stride_wn, stride_ym, stride_yn,\n    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,\n)"
    );
    let mut b = lines(&[
        "pid_m = tl.program_id(0)",
        "pid_n = tl.program_id(1)",
        "rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)",
        "rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)",
        "rk = tl.arange(0, BLOCK_K)",
        "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
        "for k0 in range(0, K, BLOCK_K):",
    ]);
    b.extend(nest(
        &lines(&[
            "ks = k0 + rk",
            "a = tl.load(x_ptr + rm[:, None] * stride_xm + ks[None, :] * stride_xk,",
            "            mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)",
            "w = tl.load(w_ptr + ks[:, None] * stride_wk + rn[None, :] * stride_wn,",
            "            mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)",
            "acc += tl.dot(a, w, input_precision=\"ieee\")",
        ]),
        4,
    ));
    if bias {
        b.push("x = acc + tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :]".into());
    } else {
        b.push("x = acc".into());
    }
    b.extend(ops::triton_lines(epilogue));
    b.push("tl.store(y_ptr + rm[:, None] * stride_ym + rn[None, :] * stride_yn, x,".into());
    b.push("         mask=(rm[:, None] < M) & (rn[None, :] < N))".into());
    kernel(&sig, &b)
}

fn solve(
    rng: &mut Rng,
    kind: Kind,
    epilogue: &[ops::Op],
    iface: &Interface,
    forward_args: &[&str],
) -> (String, Vec<Mistake>) {
    let bias = matches!(kind, Kind::Linear { bias: true, .. });
    let k = gemm_kernel(bias, epilogue);
    let mut f: Vec<String> = match kind {
        Kind::Linear { seq, .. } => {
            let mut f = vec!["x = x.contiguous()".to_string()];
            f.push(if seq { "x2 = x.view(-1, x.shape[-1])".into() } else { "x2 = x".into() });
            f.extend(lines(&["M, K = x2.shape", "w = self.linear.weight", "N = w.shape[0]"]));
            f
        }
        Kind::TwoInputs => lines(&[
            "x2 = a.contiguous()",
            "w = b.contiguous()",
            "M, K = x2.shape",
            "N = w.shape[1]",
        ]),
    };
    f.extend(lines(&[
        "y = torch.empty((M, N), device=x2.device, dtype=torch.float32)",
        "BM, BN, BK = 32, 32, 32",
        "grid = (triton.cdiv(M, BM), triton.cdiv(N, BN))",
        "matmul_kernel[grid](",
    ]));
    let bias_arg = if bias { "self.linear.bias, " } else { "" };
    f.push(format!("    x2, w, {bias_arg}y, M, N, K,"));
    // nn.Linear keeps W as (N, K): its K stride is stride(1); a (K, N) input's is stride(0).
    let strides = match kind {
        Kind::Linear { .. } => "w.stride(1), w.stride(0)",
        Kind::TwoInputs => "w.stride(0), w.stride(1)",
    };
    f.push(format!("    x2.stride(0), x2.stride(1), {strides}, y.stride(0), y.stride(1),"));
    f.push("    BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK,".into());
    f.push(")".into());
    f.push(match kind {
        Kind::Linear { seq: true, .. } => "return y.view(*x.shape[:-1], N)".into(),
        _ => "return y".into(),
    });
    let solution = iface.solution(k, forward_args, &f);
    (solution, mistakes(rng, kind, bias, strides, epilogue))
}

/// The constructor and inputs of a GEMM problem, `forward`'s arguments and first line.
fn interface(kind: Kind, dims: &Dims) -> (Interface, &'static [&'static str], String) {
    let (init_args, init_lines, init_inputs, inputs, forward_args, first): Parts = match kind {
        Kind::Linear { bias, seq } => {
            let x = if seq {
                dims.randn(&[0, 1, 2], Dtype::F32)
            } else {
                dims.randn(&[0, 1], Dtype::F32)
            };
            let bias_arg = if bias { "" } else { ", bias=False" };
            (
                vec!["in_features: int".into(), "out_features: int".into()],
                vec![format!("self.linear = nn.Linear(in_features, out_features{bias_arg})")],
                vec!["IN_FEATURES".into(), "OUT_FEATURES".into()],
                vec![x],
                &["x"],
                "x = self.linear(x)".into(),
            )
        }
        Kind::TwoInputs => (
            vec![],
            vec![],
            vec![],
            vec![dims.randn(&[0, 1], Dtype::F32), dims.randn(&[1, 2], Dtype::F32)],
            &["a", "b"],
            "x = torch.matmul(a, b)".into(),
        ),
    };
    (Interface { init_args, init_lines, init_inputs, inputs }, forward_args, first)
}

/// What a first attempt at the GEMM could get wrong.
fn mistakes(
    rng: &mut Rng,
    kind: Kind,
    bias: bool,
    strides: &str,
    epilogue: &[ops::Op],
) -> Vec<Mistake> {
    let swapped = match kind {
        Kind::Linear { .. } => "w.stride(0), w.stride(1)",
        Kind::TwoInputs => "w.stride(1), w.stride(0)",
    };
    let mut m = vec![
        Mistake::new(Flaw::WrongAxis, &[(strides, swapped)]),
        Mistake::new(
            Flaw::MissingMask,
            &[
                (
                    "mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)",
                    "mask=rm[:, None] < M, other=0.0)",
                ),
                (
                    "mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)",
                    "mask=rn[None, :] < N, other=0.0)",
                ),
            ],
        ),
    ];
    if bias {
        m.push(Mistake::new(
            Flaw::WrongOperator,
            &[("x = acc + tl.load(bias_ptr + rn, mask=rn < N, other=0.0)[None, :]", "x = acc")],
        ));
    }
    if let Some(op) = epilogue.first() {
        let other = ops::other_than(rng, op);
        m.push(Mistake::new(
            Flaw::WrongOperator,
            &[(&op.triton.join("\n    "), &other.triton.join("\n    "))],
        ));
    }
    if matches!(kind, Kind::Linear { seq: true, .. }) {
        m.push(Mistake::new(Flaw::ShapeAssumption, &[("x2 = x.view(-1, x.shape[-1])", "x2 = x")]));
    }
    m
}
