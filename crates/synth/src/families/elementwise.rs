//! A chain of 1–5 elementwise operators, one fused kernel over the flattened tensor.

use super::{activation_dims, load_cast};
use crate::ops::{self, Op, OpSet};
use crate::py::{self, kernel, lines};
use crate::rng::Rng;
use crate::{dtype_word, Draft, Dtype, Flaw, Mistake};

pub fn draw(rng: &mut Rng) -> Draft {
    let ndim = rng.pick(&[2, 2, 3, 4]);
    let dims = activation_dims(rng, ndim);
    let dtype = match rng.below(10) {
        0 => Dtype::F16,
        1 => Dtype::Bf16,
        _ => Dtype::F32,
    };
    // Narrow types round after every PyTorch op: keep their chains short.
    let n = match (rng.below(20), dtype) {
        (0..=4, _) => 1,
        (5..=9, _) => 2,
        (_, Dtype::F16 | Dtype::Bf16) => 3,
        (10..=13, _) => 3,
        (14..=16, _) => 4,
        _ => 5,
    };
    let chain = ops::chain(rng, &[n], OpSet::All);
    let mut body = ops::torch_lines(&chain);
    body.push("return x".into());
    let doc = match n {
        1 => format!("Elementwise {} over a {ndim}-D tensor.", chain[0].name),
        _ => format!("A chain of {n} elementwise operations over a {ndim}-D tensor."),
    };
    let inputs = [dims.randn(&dims.all(), dtype)];
    let problem = py::plain_problem(&doc, &dims, &body, &inputs);
    let (solution, mistakes) = solve(rng, &chain, dtype, ndim);
    let mut words = ops::names(&chain);
    words.extend(dtype_word(dtype));
    let narrow = u32::from(dtype != Dtype::F32);
    Draft {
        words,
        level: if n == 1 { 1 } else { 2 },
        difficulty: match n {
            1 => 1,
            2 | 3 => 2,
            _ => 3,
        } + narrow,
        dims,
        tolerance: dtype.tolerance(),
        problem,
        solution,
        mistakes,
    }
}

/// The fused kernel and its launch, and the mistakes a first attempt could make in them.
fn solve(rng: &mut Rng, chain: &[Op], dtype: Dtype, ndim: usize) -> (String, Vec<Mistake>) {
    let n = chain.len();
    let kname = if n == 1 { format!("{}_kernel", chain[0].name) } else { "fused_kernel".into() };
    let (cast, out) = load_cast(dtype);
    let mut kbody = lines(&[
        "pid = tl.program_id(0)",
        "offsets = pid * BLOCK + tl.arange(0, BLOCK)",
        "mask = offsets < n_elements",
    ]);
    kbody.push(format!("x = tl.load(x_ptr + offsets, mask=mask){cast}"));
    kbody.extend(ops::triton_lines(chain));
    kbody.push(format!("tl.store(y_ptr + offsets, {out}, mask=mask)"));
    let k = kernel(&format!("{kname}(x_ptr, y_ptr, n_elements, BLOCK: tl.constexpr)"), &kbody);
    let fbody = vec![
        "x = x.contiguous()".to_string(),
        "y = torch.empty_like(x)".into(),
        "n = x.numel()".into(),
        "BLOCK = 1024".into(),
        format!("{kname}[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)"),
        "return y".into(),
    ];
    let solution = py::plain_solution(k, &fbody);
    let mut mistakes = vec![Mistake::new(
        Flaw::MissingMask,
        &[
            (
                &format!("x = tl.load(x_ptr + offsets, mask=mask){cast}"),
                &format!("x = tl.load(x_ptr + offsets){cast}"),
            ),
            (
                &format!("tl.store(y_ptr + offsets, {out}, mask=mask)"),
                &format!("tl.store(y_ptr + offsets, {out})"),
            ),
        ],
    )];
    let victim = &chain[rng.below(n)];
    let other = ops::other_than(rng, victim);
    mistakes.push(Mistake::new(
        Flaw::WrongOperator,
        &[(&victim.triton.join("\n    "), &other.triton.join("\n    "))],
    ));
    mistakes.push(match ndim {
        2 => Mistake::new(Flaw::ShapeAssumption, &[("n = x.numel()", "n = x.shape[1]")]),
        _ => Mistake::new(
            Flaw::ShapeAssumption,
            &[("n = x.numel()", "rows, cols = x.shape\n        n = rows * cols")],
        ),
    });
    (solution, mistakes)
}
