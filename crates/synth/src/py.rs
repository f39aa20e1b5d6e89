//! Python source text in the suite's style: a problem file (`Model`, `get_inputs`,
//! `get_init_inputs`, size constants) and a solution file (`@triton.jit` kernels and a
//! `ModelNew` wrapper with the same constructor).

use crate::Dtype;

/// Module-level size constants with their values per shape variant.
#[derive(Debug, Clone, PartialEq)]
pub struct Dims {
    pub names: Vec<&'static str>,
    pub full: Vec<u64>,
    pub small: Vec<u64>,
    pub heldout: Vec<u64>,
}

impl Dims {
    pub fn new(names: &[&'static str], full: &[u64], small: &[u64], heldout: &[u64]) -> Dims {
        Dims {
            names: names.to_vec(),
            full: full.to_vec(),
            small: small.to_vec(),
            heldout: heldout.to_vec(),
        }
    }

    /// `torch.randn(A, B)` over some of the dims, in this dtype, times `scale` plus `shift`.
    pub fn randn(&self, which: &[usize], dtype: Dtype) -> String {
        let dims: Vec<&str> = which.iter().map(|&i| self.names[i]).collect();
        match dtype.torch() {
            None => format!("torch.randn({})", dims.join(", ")),
            Some(t) => format!("torch.randn({}, dtype={t})", dims.join(", ")),
        }
    }

    /// `torch.randn` over all dims with a spread drawn per slice along `reduced`: a
    /// reduction over a long axis of i.i.d. values concentrates (its max, mean or variance
    /// is nearly the same number for every slice), and at full size a constant answer
    /// would pass.
    pub fn randn_spread(&self, reduced: usize, dtype: Dtype) -> String {
        let x = self.randn(&self.all(), dtype);
        let shape: Vec<&str> = self
            .names
            .iter()
            .enumerate()
            .map(|(i, n)| if i == reduced { "1" } else { n })
            .collect();
        let rand = match dtype.torch() {
            None => format!("torch.rand({})", shape.join(", ")),
            Some(t) => format!("torch.rand({}, dtype={t})", shape.join(", ")),
        };
        format!("{x} * (0.25 + 1.5 * {rand})")
    }

    pub fn all(&self) -> Vec<usize> {
        (0..self.names.len()).collect()
    }
}

/// What a problem file says.
pub struct Module<'a> {
    pub doc: &'a str,
    pub dims: &'a Dims,
    /// Constructor arguments (`name: type`).
    pub init_args: &'a [String],
    pub init_lines: &'a [String],
    pub forward_args: &'a [&'a str],
    /// `forward`'s body, the last line a `return`.
    pub body: &'a [String],
    pub inputs: &'a [String],
    pub init_inputs: &'a [String],
}

fn signature(args: &[String]) -> String {
    std::iter::once("self".to_string()).chain(args.iter().cloned()).collect::<Vec<_>>().join(", ")
}

fn forward_signature(args: &[&str]) -> String {
    let typed: Vec<String> = args.iter().map(|a| format!("{a}: torch.Tensor")).collect();
    signature(&typed)
}

fn indented(lines: &[String], depth: usize) -> String {
    let pad = " ".repeat(depth);
    lines.iter().map(|l| format!("{pad}{l}\n")).collect()
}

fn init_block(init_args: &[String], init_lines: &[String]) -> String {
    let mut s = format!("    def __init__({}):\n", signature(init_args));
    s.push_str("        super().__init__()\n");
    s.push_str(&indented(init_lines, 8));
    s
}

pub fn problem(m: &Module) -> String {
    let mut s = String::from("import torch\nimport torch.nn as nn\n\n");
    for (name, v) in m.dims.names.iter().zip(&m.dims.full) {
        s.push_str(&format!("{name} = {v}\n"));
    }
    s.push_str("\n\nclass Model(nn.Module):\n");
    s.push_str(&format!("    \"\"\"{}\"\"\"\n\n", m.doc));
    s.push_str(&init_block(m.init_args, m.init_lines));
    s.push_str(&format!(
        "\n    def forward({}) -> torch.Tensor:\n",
        forward_signature(m.forward_args)
    ));
    s.push_str(&indented(m.body, 8));
    s.push_str(&format!("\n\ndef get_inputs():\n    return [{}]\n", m.inputs.join(", ")));
    s.push_str(&format!("\n\ndef get_init_inputs():\n    return [{}]\n", m.init_inputs.join(", ")));
    s
}

/// How a module is built and called: constructor arguments and lines, what
/// `get_init_inputs` and `get_inputs` return.
#[derive(Debug, Clone, Default)]
pub struct Interface {
    pub init_args: Vec<String>,
    pub init_lines: Vec<String>,
    pub init_inputs: Vec<String>,
    pub inputs: Vec<String>,
}

impl Interface {
    pub fn problem(
        &self,
        doc: &str,
        dims: &Dims,
        forward_args: &[&str],
        body: &[String],
    ) -> String {
        problem(&Module {
            doc,
            dims,
            init_args: &self.init_args,
            init_lines: &self.init_lines,
            forward_args,
            body,
            inputs: &self.inputs,
            init_inputs: &self.init_inputs,
        })
    }

    /// A solution with one kernel and the same constructor.
    pub fn solution(&self, kernel: String, forward_args: &[&str], body: &[String]) -> String {
        solution(&Solution {
            kernels: &[kernel],
            init_args: &self.init_args,
            init_lines: &self.init_lines,
            forward_args,
            body,
        })
    }
}

/// A problem with no constructor arguments and one input `x`.
pub fn plain_problem(doc: &str, dims: &Dims, body: &[String], inputs: &[String]) -> String {
    args_problem(doc, dims, &["x"], body, inputs)
}

/// A problem with no constructor arguments and these `forward` inputs.
pub fn args_problem(
    doc: &str,
    dims: &Dims,
    forward_args: &[&str],
    body: &[String],
    inputs: &[String],
) -> String {
    problem(&Module {
        doc,
        dims,
        init_args: &[],
        init_lines: &[],
        forward_args,
        body,
        inputs,
        init_inputs: &[],
    })
}

/// A solution with one kernel, no constructor arguments and one input `x`.
pub fn plain_solution(kernel: String, body: &[String]) -> String {
    args_solution(&[kernel], &["x"], body)
}

/// A solution with these kernels, no constructor arguments and these `forward` inputs.
pub fn args_solution(kernels: &[String], forward_args: &[&str], body: &[String]) -> String {
    solution(&Solution { kernels, init_args: &[], init_lines: &[], forward_args, body })
}

/// What a solution file says besides its kernels.
pub struct Solution<'a> {
    pub kernels: &'a [String],
    pub init_args: &'a [String],
    pub init_lines: &'a [String],
    pub forward_args: &'a [&'a str],
    pub body: &'a [String],
}

pub fn solution(m: &Solution) -> String {
    let mut s = String::from(
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n",
    );
    for k in m.kernels {
        s.push_str("\n\n@triton.jit\n");
        s.push_str(k.trim_end());
        s.push('\n');
    }
    s.push_str("\n\nclass ModelNew(nn.Module):\n");
    s.push_str(&init_block(m.init_args, m.init_lines));
    s.push_str(&format!(
        "\n    def forward({}) -> torch.Tensor:\n",
        forward_signature(m.forward_args)
    ));
    s.push_str(&indented(m.body, 8));
    s
}

/// A kernel: its `def` line and body lines (indented by four inside).
pub fn kernel(signature: &str, body: &[String]) -> String {
    format!("def {signature}:\n{}", indented(body, 4))
}

/// Body lines for a kernel, each indented by `depth` more (loop bodies).
pub fn nest(lines: &[String], depth: usize) -> Vec<String> {
    let pad = " ".repeat(depth);
    lines.iter().map(|l| format!("{pad}{l}")).collect()
}

/// Owned lines from string slices.
pub fn lines(ls: &[&str]) -> Vec<String> {
    ls.iter().map(|l| l.to_string()).collect()
}
