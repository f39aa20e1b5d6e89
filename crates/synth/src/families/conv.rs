//! Convolutions as `nn.Conv1d` / `nn.Conv2d` modules (stride, padding, dilation, with or
//! without bias), with an optional activation after. The solution keeps the module for
//! its parameters and computes the convolution directly: one program per (image, output
//! channel, block of output positions), looping over input channels and the taps.

use crate::ops::{self, Op, OpSet};
use crate::py::{self, kernel, lines, nest, Dims, Solution};
use crate::rng::Rng;
use crate::{Draft, Flaw, Mistake};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Conv {
    two_d: bool,
    k: u64,
    stride: u64,
    pad: u64,
    dil: u64,
    bias: bool,
}

impl Conv {
    fn word(self) -> &'static str {
        if self.two_d {
            "conv2d"
        } else {
            "conv1d"
        }
    }

    /// `nn.ConvNd(...)` as the constructor writes it.
    fn module(self) -> String {
        let mut extra = String::new();
        if self.stride != 1 {
            extra.push_str(&format!(", stride={}", self.stride));
        }
        if self.pad != 0 {
            extra.push_str(&format!(", padding={}", self.pad));
        }
        if self.dil != 1 {
            extra.push_str(&format!(", dilation={}", self.dil));
        }
        if !self.bias {
            extra.push_str(", bias=False");
        }
        let class = if self.two_d { "Conv2d" } else { "Conv1d" };
        format!("self.conv = nn.{class}(in_channels, out_channels, kernel_size={}{extra})", self.k)
    }

    /// The output size of an input size `n`, as Python.
    fn out(self, n: &str) -> String {
        let Conv { k, stride, pad, dil, .. } = self;
        format!("({n} + {} - {} - 1) // {stride} + 1", 2 * pad, dil * (k - 1))
    }
}

pub fn draw(rng: &mut Rng) -> Draft {
    let two_d = rng.chance(0.5);
    let k = rng.pick(&[1, 3, 3, 5]);
    let conv = Conv {
        two_d,
        k,
        stride: rng.pick(&[1, 1, 2]),
        pad: if k > 1 && rng.chance(0.5) { k / 2 } else { 0 },
        dil: if k > 1 && rng.chance(0.25) { 2 } else { 1 },
        bias: rng.chance(0.7),
    };
    let post = ops::chain(rng, &[0, 0, 1], OpSet::NoExp);
    let (ic, oc) = (rng.range(2, 5), rng.range(2, 6));
    let dims = if two_d {
        Dims::new(
            &["BATCH", "IN_CHANNELS", "OUT_CHANNELS", "HEIGHT", "WIDTH"],
            &[8, rng.pick(&[16, 32]), rng.pick(&[32, 64]), 64, 64],
            &[2, ic, oc, rng.odd(9, 15), rng.odd(9, 15)],
            &[3, rng.odd(3, 9), rng.odd(5, 17), rng.odd(33, 65), rng.odd(33, 65)],
        )
    } else {
        Dims::new(
            &["BATCH", "IN_CHANNELS", "OUT_CHANNELS", "LENGTH"],
            &[16, rng.pick(&[16, 32]), rng.pick(&[32, 64]), rng.pick(&[2048, 4096])],
            &[2, ic, oc, rng.odd(41, 121)],
            &[3, rng.odd(3, 9), rng.odd(5, 17), rng.odd(1001, 3001)],
        )
    };
    let init_args = vec!["in_channels: int".to_string(), "out_channels: int".into()];
    let init_lines = vec![conv.module()];
    let init_inputs = vec!["IN_CHANNELS".to_string(), "OUT_CHANNELS".into()];
    let mut body = vec!["x = self.conv(x)".to_string()];
    body.extend(ops::torch_lines(&post));
    body.push("return x".into());
    let shape: Vec<usize> = if two_d { vec![0, 1, 3, 4] } else { vec![0, 1, 3] };
    let inputs = vec![dims.randn(&shape, crate::Dtype::F32)];
    let doc = format!(
        "A {}-D convolution{}.",
        if two_d { 2 } else { 1 },
        if post.is_empty() { "" } else { " followed by an activation" }
    );
    let problem = py::problem(&py::Module {
        doc: &doc,
        dims: &dims,
        init_args: &init_args,
        init_lines: &init_lines,
        forward_args: &["x"],
        body: &body,
        inputs: &inputs,
        init_inputs: &init_inputs,
    });
    let (k_src, mut mistakes) = solve(conv, &post);
    let (fbody, m) = forward(conv);
    mistakes.push(m);
    let solution = py::solution(&Solution {
        kernels: &[k_src],
        init_args: &init_args,
        init_lines: &init_lines,
        forward_args: &["x"],
        body: &fbody,
    });
    let mut words = vec![conv.word().to_string()];
    if conv.stride > 1 {
        words.push("strided".into());
    }
    if conv.dil > 1 {
        words.push("dilated".into());
    }
    words.extend(ops::names(&post));
    let odd = conv.stride > 1 || conv.pad > 0 || conv.dil > 1;
    Draft {
        words,
        level: if post.is_empty() { 1 } else { 2 },
        difficulty: 3 + u32::from(two_d) + u32::from(odd),
        dims,
        // Direct fp32 sums against cuDNN's (TF32 where allowed) order.
        tolerance: Some((1e-3, 1e-3)),
        problem,
        solution,
        mistakes,
    }
}

fn solve(conv: Conv, post: &[Op]) -> (String, Vec<Mistake>) {
    let Conv { two_d, k, stride, pad, dil, bias } = conv;
    let mut b = lines(&[
        "pid = tl.program_id(0)",
        "n = pid // out_ch",
        "oc = pid % out_ch",
        "offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)",
    ]);
    let (args, x_at, w_at, inner_loops, ok) = if two_d {
        b.extend(lines(&[
            "mask = offs < out_h * out_w",
            "oh = offs // out_w",
            "ow = offs % out_w",
        ]));
        (
            "x_ptr, w_ptr, b_ptr, y_ptr, in_ch, out_ch, height, width, out_h, out_w, BLOCK: tl.constexpr",
            "x_ptr + ((n * in_ch + ic) * height + ih) * width + iw",
            format!("w_ptr + ((oc * in_ch + ic) * {k} + kh) * {k} + kw"),
            vec![
                format!("for kh in tl.static_range({k}):"),
                format!("    ih = oh * {stride} + kh * {dil} - {pad}"),
                format!("    for kw in tl.static_range({k}):"),
                format!("        iw = ow * {stride} + kw * {dil} - {pad}"),
            ],
            "ok = mask & (ih >= 0) & (ih < height) & (iw >= 0) & (iw < width)",
        )
    } else {
        b.push("mask = offs < out_len".into());
        (
            "x_ptr, w_ptr, b_ptr, y_ptr, in_ch, out_ch, length, out_len, BLOCK: tl.constexpr",
            "x_ptr + (n * in_ch + ic) * length + pos",
            format!("w_ptr + (oc * in_ch + ic) * {k} + kk"),
            vec![
                format!("for kk in tl.static_range({k}):"),
                format!("    pos = offs * {stride} + kk * {dil} - {pad}"),
            ],
            "ok = mask & (pos >= 0) & (pos < length)",
        )
    };
    b.push("acc = tl.zeros([BLOCK], tl.float32)".into());
    b.push("for ic in range(0, in_ch):".into());
    b.extend(nest(&inner_loops, 4));
    let depth = if two_d { 12 } else { 8 };
    let load = format!("x = tl.load({x_at}, mask=ok, other=0.0)");
    b.extend(nest(
        &[ok.to_string(), load.clone(), format!("w = tl.load({w_at})"), "acc += x * w".into()],
        depth,
    ));
    if bias {
        b.push("acc += tl.load(b_ptr + oc)".into());
    }
    if !post.is_empty() {
        b.push("x = acc".into());
        b.extend(ops::triton_lines(post));
        b.push("acc = x".into());
    }
    let plane = if two_d { "out_h * out_w" } else { "out_len" };
    let store = format!("tl.store(y_ptr + pid * {plane} + offs, acc, mask=mask)");
    b.push(store.clone());
    let k_src = kernel(&format!("{}_kernel({args})", conv.word()), &b);
    let mut m = vec![Mistake::new(Flaw::WrongAxis, &[("(oc * in_ch + ic)", "(ic * out_ch + oc)")])];
    // Without padding every tap is in bounds: only a padded convolution needs `ok`.
    if pad > 0 {
        m.push(Mistake::new(
            Flaw::MissingMask,
            &[(&load, &format!("x = tl.load({x_at}, mask=mask, other=0.0)"))],
        ));
    }
    if bias {
        m.push(Mistake::new(
            Flaw::WrongOperator,
            &[("acc += tl.load(b_ptr + oc)", "acc += tl.load(b_ptr + n)")],
        ));
    }
    if pad > 0 {
        m.push(Mistake::new(Flaw::WrongPadding, &[(&format!(" - {pad}\n"), " - 0\n")]));
    }
    (k_src, m)
}

fn forward(conv: Conv) -> (Vec<String>, Mistake) {
    let name = format!("{}_kernel", conv.word());
    let bias = if conv.bias { "self.conv.bias" } else { "w" };
    let mut body = lines(&["x = x.contiguous()", "w = self.conv.weight.contiguous()"]);
    if conv.two_d {
        body.extend(lines(&["batch, in_ch, height, width = x.shape", "out_ch = w.shape[0]"]));
        body.push(format!("out_h = {}", conv.out("height")));
        body.push(format!("out_w = {}", conv.out("width")));
        body.extend(lines(&[
            "y = torch.empty((batch, out_ch, out_h, out_w), device=x.device, dtype=x.dtype)",
            "BLOCK = min(128, triton.next_power_of_2(out_h * out_w))",
            "grid = (batch * out_ch, triton.cdiv(out_h * out_w, BLOCK))",
        ]));
        body.push(format!("{name}[grid](x, w, {bias}, y, in_ch, out_ch, height, width, out_h, out_w, BLOCK=BLOCK)"));
    } else {
        body.extend(lines(&["batch, in_ch, length = x.shape", "out_ch = w.shape[0]"]));
        body.push(format!("out_len = {}", conv.out("length")));
        body.extend(lines(&[
            "y = torch.empty((batch, out_ch, out_len), device=x.device, dtype=x.dtype)",
            "BLOCK = min(128, triton.next_power_of_2(out_len))",
            "grid = (batch * out_ch, triton.cdiv(out_len, BLOCK))",
        ]));
        body.push(format!(
            "{name}[grid](x, w, {bias}, y, in_ch, out_ch, length, out_len, BLOCK=BLOCK)"
        ));
    }
    body.push("return y".into());
    let m = Mistake::new(Flaw::ShapeAssumption, &[("out_ch = w.shape[0]", "out_ch = w.shape[1]")]);
    (body, m)
}
