//! A binary operator between the input and a second operand broadcast against it, with
//! elementwise work before and after; one kernel over the flattened input.

use super::{activation_dims, load_cast};
use crate::ops::{self, lit, OpSet};
use crate::py::{kernel, lines, Dims, Interface};
use crate::rng::Rng;
use crate::{dtype_word, Draft, Dtype, Flaw, Mistake};

/// Where the second operand comes from, and its shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operand {
    /// A second input of the same shape.
    Full,
    /// A second input of the last dimension's size.
    Row,
    /// A second input of shape `(ROWS, 1)` (2-D only).
    Col,
    /// A learned `(CHANNELS, 1, 1)` parameter (4-D only).
    Channel,
    /// A learned vector of the last dimension's size.
    RowParam,
    /// A float given to the constructor.
    Scalar,
}

/// (name, PyTorch expression, Triton expression) of `x op y`.
fn binop(rng: &mut Rng, operand: Operand) -> (&'static str, String, String) {
    let y = match operand {
        Operand::Channel => "self.scale",
        Operand::RowParam => "self.bias",
        Operand::Scalar => "self.alpha",
        _ => "y",
    };
    let ty = if operand == Operand::Scalar { "alpha" } else { "y" };
    let choices: &[usize] =
        if operand == Operand::Scalar { &[0, 1, 2] } else { &[0, 1, 2, 3, 4, 5] };
    match rng.pick(choices) {
        0 => ("add", format!("x + {y}"), format!("x + {ty}")),
        1 => ("sub", format!("x - {y}"), format!("x - {ty}")),
        2 => ("mul", format!("x * {y}"), format!("x * {ty}")),
        3 => ("div", format!("x / (torch.abs({y}) + 1.0)"), format!("x / (tl.abs({ty}) + 1.0)")),
        4 => ("maximum", format!("torch.maximum(x, {y})"), format!("tl.maximum(x, {ty})")),
        _ => ("minimum", format!("torch.minimum(x, {y})"), format!("tl.minimum(x, {ty})")),
    }
}

/// The operand's load in the kernel and the wrong-axis version of it.
fn operand_load(operand: Operand) -> Option<(&'static str, &'static str)> {
    match operand {
        Operand::Full => Some(("y = tl.load(y_ptr + offsets, mask=mask)", "")),
        Operand::Row | Operand::RowParam => Some((
            "y = tl.load(y_ptr + offsets % n_cols, mask=mask)",
            "y = tl.load(y_ptr + offsets // n_cols, mask=mask)",
        )),
        Operand::Col => Some((
            "y = tl.load(y_ptr + offsets // n_cols, mask=mask)",
            "y = tl.load(y_ptr + offsets % n_cols, mask=mask)",
        )),
        Operand::Channel => Some((
            "y = tl.load(y_ptr + (offsets // n_cols) % n_channels, mask=mask)",
            "y = tl.load(y_ptr + offsets % n_channels, mask=mask)",
        )),
        Operand::Scalar => None,
    }
}

pub fn draw(rng: &mut Rng) -> Draft {
    let ndim = rng.pick(&[2, 3, 4]);
    let mut kinds = vec![Operand::Full, Operand::Row, Operand::RowParam, Operand::Scalar];
    kinds.push(if ndim == 2 {
        Operand::Col
    } else if ndim == 4 {
        Operand::Channel
    } else {
        Operand::Row
    });
    let operand = rng.pick(&kinds);
    let dims = activation_dims(rng, ndim);
    let params = matches!(operand, Operand::Channel | Operand::RowParam);
    // A fp32 parameter would promote a narrow input: narrow types only with inputs.
    let dtype = match (rng.below(10), params) {
        (0, false) => Dtype::F16,
        (1, false) => Dtype::Bf16,
        _ => Dtype::F32,
    };
    let (pre_n, post_n) = (rng.pick(&[0, 0, 1, 1, 2]), rng.pick(&[0, 1, 1, 2]));
    let pre = ops::chain(rng, &[pre_n], OpSet::All);
    let post = ops::chain(rng, &[post_n], OpSet::NoExp);
    let (op, torch_op, triton_op) = binop(rng, operand);
    let iface = interface(rng, operand, &dims, dtype);
    let forward_args: &[&str] = if iface.inputs.len() == 2 { &["x", "y"] } else { &["x"] };
    let mut body = ops::torch_lines(&pre);
    body.push(format!("x = {torch_op}"));
    body.extend(ops::torch_lines(&post));
    body.push("return x".into());
    let doc = format!(
        "Elementwise {op} with a {} operand, broadcast against a {ndim}-D input.",
        describe(operand)
    );
    let problem = iface.problem(&doc, &dims, forward_args, &body);
    let (solution, mistakes) =
        solve(rng, operand, ndim, dtype, (&pre, &post), &triton_op, &iface, forward_args);
    let mut words = vec![op.to_string(), word(operand).to_string()];
    words.extend(ops::names(&pre).into_iter().chain(ops::names(&post)).take(2));
    words.extend(dtype_word(dtype));
    let extra = pre_n + post_n;
    Draft {
        words,
        level: if extra == 0 { 1 } else { 2 },
        difficulty: 2
            + u32::from(matches!(operand, Operand::Col | Operand::Channel))
            + u32::from(extra >= 2)
            + u32::from(dtype != Dtype::F32),
        dims,
        tolerance: dtype.tolerance(),
        problem,
        solution,
        mistakes,
    }
}

fn describe(o: Operand) -> &'static str {
    match o {
        Operand::Full => "same-shape",
        Operand::Row => "row-vector",
        Operand::Col => "column-vector",
        Operand::Channel => "per-channel learned",
        Operand::RowParam => "learned row-vector",
        Operand::Scalar => "scalar",
    }
}

fn word(o: Operand) -> &'static str {
    match o {
        Operand::Full => "tensor",
        Operand::Row => "row",
        Operand::Col => "col",
        Operand::Channel => "channel",
        Operand::RowParam => "bias",
        Operand::Scalar => "scalar",
    }
}

#[allow(clippy::too_many_arguments)]
fn solve(
    rng: &mut Rng,
    operand: Operand,
    ndim: usize,
    dtype: Dtype,
    (pre, post): (&[ops::Op], &[ops::Op]),
    triton_op: &str,
    iface: &Interface,
    forward_args: &[&str],
) -> (String, Vec<Mistake>) {
    let (cast, out) = load_cast(dtype);
    let load = operand_load(operand);
    let mut kbody = lines(&[
        "pid = tl.program_id(0)",
        "offsets = pid * BLOCK + tl.arange(0, BLOCK)",
        "mask = offsets < n_elements",
    ]);
    kbody.push(format!("x = tl.load(x_ptr + offsets, mask=mask){cast}"));
    if let Some((l, _)) = load {
        kbody.push(format!("{l}{cast}"));
    }
    kbody.extend(ops::triton_lines(pre));
    kbody.push(format!("x = {triton_op}"));
    kbody.extend(ops::triton_lines(post));
    kbody.push(format!("tl.store(out_ptr + offsets, {out}, mask=mask)"));
    let (args, launch_extra, setup) = launch(operand);
    let kname = "broadcast_kernel";
    let k = kernel(&format!("{kname}({args}, BLOCK: tl.constexpr)"), &kbody);
    let mut fbody = vec!["x = x.contiguous()".to_string()];
    fbody.extend(setup.iter().map(|s| s.to_string()));
    fbody.extend(lines(&["out = torch.empty_like(x)", "n = x.numel()", "BLOCK = 1024"]));
    fbody.push(format!("{kname}[(triton.cdiv(n, BLOCK),)]({launch_extra}, BLOCK=BLOCK)"));
    fbody.push("return out".into());
    let solution = iface.solution(k, forward_args, &fbody);
    let mistakes =
        mistakes(rng, operand, ndim, (cast, &out), triton_op, pre.first().or(post.first()));
    (solution, mistakes)
}

/// The kernel's parameters, the launch's arguments and the inputs to make contiguous.
fn launch(operand: Operand) -> (&'static str, &'static str, Vec<&'static str>) {
    match operand {
        Operand::Full => {
            ("x_ptr, y_ptr, out_ptr, n_elements", "x, y, out, n", vec!["y = y.contiguous()"])
        }
        Operand::Row => (
            "x_ptr, y_ptr, out_ptr, n_elements, n_cols",
            "x, y, out, n, x.shape[-1]",
            vec!["y = y.contiguous()"],
        ),
        Operand::Col => (
            "x_ptr, y_ptr, out_ptr, n_elements, n_cols",
            "x, y, out, n, x.shape[1]",
            vec!["y = y.contiguous()"],
        ),
        Operand::RowParam => (
            "x_ptr, y_ptr, out_ptr, n_elements, n_cols",
            "x, self.bias, out, n, x.shape[-1]",
            vec![],
        ),
        Operand::Channel => (
            "x_ptr, y_ptr, out_ptr, n_elements, n_cols, n_channels",
            "x, self.scale, out, n, x.shape[2] * x.shape[3], x.shape[1]",
            vec![],
        ),
        Operand::Scalar => ("x_ptr, out_ptr, n_elements, alpha", "x, out, n, self.alpha", vec![]),
    }
}

/// What a first attempt could get wrong; `around` is an elementwise step next to the operator.
fn mistakes(
    rng: &mut Rng,
    operand: Operand,
    ndim: usize,
    (cast, out): (&str, &str),
    triton_op: &str,
    around: Option<&ops::Op>,
) -> Vec<Mistake> {
    let load = operand_load(operand);
    let mut mistakes = vec![Mistake::new(
        Flaw::MissingMask,
        &[
            (
                &format!("x = tl.load(x_ptr + offsets, mask=mask){cast}"),
                &format!("x = tl.load(x_ptr + offsets){cast}"),
            ),
            (
                &format!("tl.store(out_ptr + offsets, {out}, mask=mask)"),
                &format!("tl.store(out_ptr + offsets, {out})"),
            ),
        ],
    )];
    if let Some((right, wrong)) = load.filter(|(_, w)| !w.is_empty()) {
        mistakes.push(Mistake::new(Flaw::WrongAxis, &[(right, wrong)]));
    }
    let swapped = [
        ("x + ", "x - "),
        ("x - ", "x + "),
        ("x * ", "x + "),
        ("x / ", "x * "),
        ("tl.maximum(x, ", "tl.minimum(x, "),
        ("tl.minimum(x, ", "tl.maximum(x, "),
    ];
    if let Some((a, b)) = swapped.iter().find(|(a, _)| triton_op.starts_with(a)) {
        mistakes.push(Mistake::new(
            Flaw::WrongOperator,
            &[(&format!("x = {triton_op}"), &format!("x = {}", triton_op.replacen(a, b, 1)))],
        ));
    }
    if ndim >= 3 && matches!(operand, Operand::Row | Operand::RowParam) {
        mistakes.push(Mistake::new(Flaw::ShapeAssumption, &[("n, x.shape[-1]", "n, x.shape[1]")]));
    }
    if let Some(op) = around {
        let other = ops::other_than(rng, op);
        mistakes.push(Mistake::new(
            Flaw::WrongOperator,
            &[(&op.triton.join("\n    "), &other.triton.join("\n    "))],
        ));
    }
    mistakes
}

/// The constructor and inputs that bring the second operand in.
fn interface(rng: &mut Rng, operand: Operand, dims: &Dims, dtype: Dtype) -> Interface {
    let last = dims.names.len() - 1;
    let (init_args, init_lines, init_inputs, inputs) = match operand {
        Operand::Full => (
            vec![],
            vec![],
            vec![],
            vec![dims.randn(&dims.all(), dtype), dims.randn(&dims.all(), dtype)],
        ),
        Operand::Row => (
            vec![],
            vec![],
            vec![],
            vec![dims.randn(&dims.all(), dtype), dims.randn(&[last], dtype)],
        ),
        Operand::Col => {
            let col = dims.randn(&[0], dtype).replacen("ROWS", "ROWS, 1", 1);
            (vec![], vec![], vec![], vec![dims.randn(&dims.all(), dtype), col])
        }
        Operand::Channel => (
            vec!["channels: int".into()],
            vec!["self.scale = nn.Parameter(torch.randn(channels, 1, 1))".into()],
            vec!["CHANNELS".into()],
            vec![dims.randn(&dims.all(), dtype)],
        ),
        Operand::RowParam => (
            vec!["dim: int".into()],
            vec!["self.bias = nn.Parameter(torch.randn(dim))".into()],
            vec![dims.names[last].to_string()],
            vec![dims.randn(&dims.all(), dtype)],
        ),
        Operand::Scalar => {
            let a = lit(rng.pick(&[0.5, 1.5, -0.75, 2.0]));
            (
                vec!["alpha: float".into()],
                vec!["self.alpha = alpha".into()],
                vec![a],
                vec![dims.randn(&dims.all(), dtype)],
            )
        }
    };
    Interface { init_args, init_lines, init_inputs, inputs }
}
