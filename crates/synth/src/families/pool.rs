//! Average and max pooling over the last one or two dimensions (1-D over `(batch,
//! channels, length)`, 2-D over `(batch, channels, height, width)`), a square window and
//! a stride, with an optional activation after. One program per (plane, block of output
//! positions); the window is unrolled with `tl.static_range`.

use crate::ops::{self, Op, OpSet};
use crate::py::{self, kernel, lines, nest, Dims};
use crate::rng::Rng;
use crate::{Draft, Flaw, Mistake};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pool {
    max: bool,
    two_d: bool,
    k: u64,
    s: u64,
}

impl Pool {
    fn word(self) -> String {
        format!("{}_pool{}d", if self.max { "max" } else { "avg" }, if self.two_d { 2 } else { 1 })
    }

    fn class(self) -> String {
        format!(
            "nn.{}Pool{}d",
            if self.max { "Max" } else { "Avg" },
            if self.two_d { 2 } else { 1 }
        )
    }
}

pub fn draw(rng: &mut Rng) -> Draft {
    let two_d = rng.chance(0.5);
    let k = rng.pick(&[2, 3, 3, 4]);
    let s = rng.pick(&[1, 2, k]);
    let pool = Pool { max: rng.chance(0.5), two_d, k, s };
    let post = ops::chain(rng, &[0, 0, 1], OpSet::NoExp);
    let dims = if two_d {
        Dims::new(
            &["BATCH", "CHANNELS", "HEIGHT", "WIDTH"],
            &[16, rng.pick(&[32, 64]), 128, 128],
            &[2, rng.range(2, 4), rng.odd(9, 19), rng.odd(9, 19)],
            &[3, rng.odd(5, 17), rng.odd(33, 97), rng.odd(33, 97)],
        )
    } else {
        Dims::new(
            &["BATCH", "CHANNELS", "LENGTH"],
            &[16, rng.pick(&[32, 64]), rng.pick(&[4096, 8192])],
            &[2, rng.range(2, 4), rng.odd(301, 701)],
            &[3, rng.odd(5, 17), rng.odd(1001, 5001)],
        )
    };
    // Half the problems hold the pool as a module, half call the functional form.
    let module = rng.chance(0.5);
    let stride = if s == k { String::new() } else { format!(", stride={s}") };
    let (init_lines, first) = if module {
        (
            vec![format!("self.pool = {}(kernel_size={k}{stride})", pool.class())],
            "x = self.pool(x)".to_string(),
        )
    } else {
        (vec![], format!("x = torch.nn.functional.{}(x, kernel_size={k}{stride})", pool.word()))
    };
    let mut body = vec![first];
    body.extend(ops::torch_lines(&post));
    body.push("return x".into());
    let what = if pool.max { "Max" } else { "Average" };
    let window = if two_d { format!("{k}x{k}") } else { k.to_string() };
    let doc = format!(
        "{what} pooling ({}-D) with a window of {window} and stride {s}{}.",
        if two_d { 2 } else { 1 },
        if post.is_empty() { "" } else { ", then an activation" }
    );
    let x = dims.randn(&dims.all(), crate::Dtype::F32);
    let problem = py::problem(&py::Module {
        doc: &doc,
        dims: &dims,
        init_args: &[],
        init_lines: &init_lines,
        forward_args: &["x"],
        body: &body,
        inputs: &[x],
        init_inputs: &[],
    });
    let (k_src, mut mistakes) = solve(pool, &post);
    let (fbody, m) = forward(pool);
    mistakes.push(m);
    let solution = py::plain_solution(k_src, &fbody);
    let mut words = vec![pool.word()];
    words.extend(ops::names(&post));
    Draft {
        words,
        level: if post.is_empty() { 1 } else { 2 },
        difficulty: 2 + u32::from(two_d) + u32::from(s != k) + u32::from(!post.is_empty()),
        dims,
        tolerance: None,
        problem,
        solution,
        mistakes,
    }
}

fn solve(pool: Pool, post: &[Op]) -> (String, Vec<Mistake>) {
    let Pool { max, two_d, k, s } = pool;
    let (init, other, step) = if max {
        (
            "acc = tl.full([BLOCK], float(\"-inf\"), tl.float32)",
            "float(\"-inf\")",
            "acc = tl.maximum(acc, x)",
        )
    } else {
        ("acc = tl.zeros([BLOCK], tl.float32)", "0.0", "acc += x")
    };
    let mut b = lines(&[
        "plane = tl.program_id(0)",
        "offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)",
    ]);
    let (load, args, finish_from, finish_to) = if two_d {
        b.extend(lines(&[
            "mask = offs < out_h * out_w",
            "oh = offs // out_w",
            "ow = offs % out_w",
            "base = x_ptr + plane * height * width",
        ]));
        (
            format!("x = tl.load(base + (oh * {s} + kh) * width + ow * {s} + kw, mask=mask, other={other})"),
            "x_ptr, y_ptr, height, width, out_h, out_w, BLOCK: tl.constexpr",
            format!("acc = acc / {}", k * k),
            format!("acc = acc / {k}"),
        )
    } else {
        b.extend(lines(&["mask = offs < out_len", "base = x_ptr + plane * length"]));
        (
            format!("x = tl.load(base + offs * {s} + kk, mask=mask, other={other})"),
            "x_ptr, y_ptr, length, out_len, BLOCK: tl.constexpr",
            format!("acc = acc / {k}"),
            format!("acc = acc / {}", k + 1),
        )
    };
    b.push(init.into());
    if two_d {
        b.push(format!("for kh in tl.static_range({k}):"));
        b.extend(nest(&[format!("for kw in tl.static_range({k}):")], 4));
        b.extend(nest(&[load.clone(), step.to_string()], 8));
    } else {
        b.push(format!("for kk in tl.static_range({k}):"));
        b.extend(nest(&[load.clone(), step.to_string()], 4));
    }
    if !max {
        b.push(finish_from.clone());
    }
    if !post.is_empty() {
        b.push("x = acc".into());
        b.extend(ops::triton_lines(post));
        b.push("acc = x".into());
    }
    let out = if two_d {
        "y_ptr + plane * out_h * out_w + offs"
    } else {
        "y_ptr + plane * out_len + offs"
    };
    let store = format!("tl.store({out}, acc, mask=mask)");
    b.push(store.clone());
    let k_src = kernel(&format!("{}_kernel({args})", pool.word()), &b);
    let mut m =
        vec![Mistake::new(Flaw::MissingMask, &[(&store, &format!("tl.store({out}, acc)"))])];
    if max {
        m.push(Mistake::new(Flaw::WrongOperator, &[(step, "acc = tl.minimum(acc, x)")]));
    } else {
        m.push(Mistake::new(Flaw::WrongOperator, &[(&finish_from, &finish_to)]));
    }
    if s > 1 {
        let from =
            if two_d { format!("(oh * {s} + kh) * width") } else { format!("offs * {s} + kk") };
        let to = if two_d { "(oh + kh) * width".to_string() } else { "offs + kk".to_string() };
        m.push(Mistake::new(Flaw::WrongAxis, &[(&from, &to)]));
    } else if two_d {
        m.push(Mistake::new(
            Flaw::WrongAxis,
            &[("(oh * 1 + kh) * width", "(oh * 1 + kh) * out_w")],
        ));
    }
    (k_src, m)
}

/// `ModelNew.forward` and a wrong output size a first attempt could compute.
fn forward(pool: Pool) -> (Vec<String>, Mistake) {
    let Pool { two_d, k, s, .. } = pool;
    let name = format!("{}_kernel", pool.word());
    if two_d {
        let body = vec![
            "x = x.contiguous()".to_string(),
            "batch, channels, height, width = x.shape".into(),
            format!("out_h = (height - {k}) // {s} + 1"),
            format!("out_w = (width - {k}) // {s} + 1"),
            "y = torch.empty((batch, channels, out_h, out_w), device=x.device, dtype=x.dtype)"
                .into(),
            "BLOCK = min(256, triton.next_power_of_2(out_h * out_w))".into(),
            "grid = (batch * channels, triton.cdiv(out_h * out_w, BLOCK))".into(),
            format!("{name}[grid](x, y, height, width, out_h, out_w, BLOCK=BLOCK)"),
            "return y".into(),
        ];
        let m = Mistake::new(
            Flaw::ShapeAssumption,
            &[(
                "batch, channels, height, width = x.shape",
                "batch, channels, width, height = x.shape",
            )],
        );
        (body, m)
    } else {
        let body = vec![
            "x = x.contiguous()".to_string(),
            "batch, channels, length = x.shape".into(),
            format!("out_len = (length - {k}) // {s} + 1"),
            "y = torch.empty((batch, channels, out_len), device=x.device, dtype=x.dtype)".into(),
            "BLOCK = min(256, triton.next_power_of_2(out_len))".into(),
            "grid = (batch * channels, triton.cdiv(out_len, BLOCK))".into(),
            format!("{name}[grid](x, y, length, out_len, BLOCK=BLOCK)"),
            "return y".into(),
        ];
        let m =
            Mistake::new(Flaw::ShapeAssumption, &[("grid = (batch * channels,", "grid = (batch,")]);
        (body, m)
    }
}
