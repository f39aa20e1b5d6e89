//! Synthetic KernelBook-shaped rows, for tests and throughput figures: each a PyTorch
//! module of random elementwise steps and a Triton translation of it, in the real column
//! layout. With `defects`, rows that each stage must drop are planted, with uuids that
//! name what they are (`bad-...`), so a test can check every keep/drop decision.

use std::path::Path;
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::{json, Value};

use crate::DataError;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn float(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// (torch expression, triton expression) of one step on `v`, with a constant `c`.
fn step(rng: &mut Rng, v: &str) -> (String, String) {
    let c = format!("{:.4}", 0.1 + rng.float() * 3.0);
    match rng.below(8) {
        0 => (format!("{v} * {c}"), format!("{v} * {c}")),
        1 => (format!("{v} + {c}"), format!("{v} + {c}")),
        2 => (format!("torch.sigmoid({v})"), format!("tl.sigmoid({v})")),
        3 => (format!("torch.exp(-{v} * {v} * {c})"), format!("tl.exp(-{v} * {v} * {c})")),
        4 => (
            format!("torch.clamp({v}, min=-{c}, max={c})"),
            format!("tl.minimum(tl.maximum({v}, -{c}), {c})"),
        ),
        5 => (format!("torch.relu({v} - {c})"), format!("tl.maximum({v} - {c}, 0.0)")),
        6 => (format!("torch.abs({v}) * {c}"), format!("tl.abs({v}) * {c}")),
        _ => {
            (format!("torch.tanh({v} / {c})"), format!("2.0 * tl.sigmoid(2.0 * ({v} / {c})) - 1.0"))
        }
    }
}

const WORDS: [&str; 12] = [
    "Scaled", "Gated", "Shifted", "Clipped", "Smooth", "Fused", "Twisted", "Damped", "Folded",
    "Bounded", "Stacked", "Warped",
];

/// One valid row: `(python_code, triton_code, entry_point, reasoning)`.
fn pair(rng: &mut Rng, i: usize) -> (String, String, String, String) {
    let name = format!("{}{}Act{i}", WORDS[rng.below(WORDS.len())], WORDS[rng.below(WORDS.len())]);
    let var = ["x", "h", "a", "t"][rng.below(4)];
    let steps = 4 + rng.below(7);
    let mut torch_lines = Vec::new();
    let mut triton_lines = Vec::new();
    for s in 0..steps {
        let (t, k) = step(rng, var);
        torch_lines.push(format!("        {var} = {t}  # step {s}"));
        triton_lines.push(format!("    {var} = {k}"));
    }
    let dim = 64 * (1 + rng.below(64));
    let block = [256, 512, 1024, 2048][rng.below(4)];
    let python = format!(
        "import torch\nimport torch.nn as nn\n\n\nclass {name}(nn.Module):\n    \"\"\"{steps} elementwise steps.\"\"\"\n\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, {var}):\n{}\n        return {var}\n\n\ndef get_inputs():\n    return [torch.rand([4, {dim}])]\n\n\ndef get_init_inputs():\n    return [[], {{}}]\n",
        torch_lines.join("\n")
    );
    let triton = format!(
        "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\ndef {lname}_kernel(in_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n    {var} = tl.load(in_ptr + offs, mask=mask)\n{}\n    tl.store(out_ptr + offs, {var}, mask=mask)\n\n\nclass {name}New(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n    def forward(self, {var}):\n        {var} = {var}.contiguous()\n        out = torch.empty_like({var})\n        n = {var}.numel()\n        {lname}_kernel[(triton.cdiv(n, {block}),)]({var}, out, n, BLOCK={block})\n        return out\n",
        triton_lines.join("\n"),
        lname = name.to_lowercase()
    );
    let reasoning = format!("The module applies {steps} elementwise steps; one program per block of {block} elements loads once, applies them in registers and stores once.");
    (python, triton, name, reasoning)
}

fn row(
    uuid: &str,
    python: &str,
    triton: &str,
    entry: &str,
    reasoning: Option<&str>,
    i: usize,
) -> Value {
    let mut v = json!({
        "python_code": python,
        "triton_code": triton,
        "entry_point": entry,
        "uuid": uuid,
        "repo_name": format!("synthetic/repo{}", i % 97),
        "module_name": entry,
        "synthetic": true,
        "licenses": "[\"MIT\"]",
        "stars": (i * 7) % 500,
        "sha": format!("{:040x}", i),
        "repo_link": format!("https://example.invalid/synthetic/repo{}", i % 97),
    });
    if let Some(r) = reasoning {
        v["reasoning"] = json!(r);
    }
    v
}

/// `n` valid rows, plus the planted defects when asked; `heldout` is a heldout suite
/// problem's source to plant as a contaminated row.
pub fn rows(n: usize, seed: u64, defects: bool, heldout: Option<&str>) -> Vec<Value> {
    let mut rng = Rng(seed);
    let mut out = Vec::with_capacity(n + 16);
    for i in 0..n {
        let (p, t, e, r) = pair(&mut rng, i);
        let reasoning = (i % 3 == 0).then_some(r.as_str());
        out.push(row(&format!("ok-{i:06}"), &p, &t, &e, reasoning, i));
    }
    if !defects || n < 3 {
        return out;
    }
    let (p, t, e, _) = pair(&mut rng, n);
    // Exact duplicate of row 0 (comments and blank lines changed only).
    let first = out[0].clone();
    let mut dup = first.clone();
    dup["uuid"] = json!("bad-exact-dup");
    dup["stars"] = json!(0);
    if let Some(o) = dup.as_object_mut() {
        o.remove("reasoning");
    }
    dup["triton_code"] =
        json!(format!("# a copy\n{}\n", first["triton_code"].as_str().unwrap_or_default()));
    out.push(dup);
    // Near duplicate of row 1: one constant changed.
    let mut near = out[1].clone();
    near["uuid"] = json!("bad-near-dup");
    near["stars"] = json!(0);
    let answer = near["triton_code"].as_str().unwrap_or_default().to_string();
    let changed = match answer.find("    tl.store") {
        Some(at) => format!("{}    x_extra = 0.5\n{}", &answer[..at], &answer[at..]),
        None => answer,
    };
    near["triton_code"] = json!(changed);
    out.push(near);
    // The answer falls back to PyTorch: no kernel launched.
    let fallback_forward = format!(
        "import torch\nimport torch.nn as nn\n\n\nclass {e}New(nn.Module):\n    def forward(self, x):\n        return torch.relu(x) * 2.0 + torch.sigmoid(x) - torch.tanh(x) * 0.5 + x.abs().clamp(max=3.0)\n"
    );
    out.push(row("bad-guard-torch", &p, &fallback_forward, &e, None, n + 2));
    // Unparsable problem, unparsable answer.
    out.push(row(
        "bad-problem-syntax",
        &p.replace("def forward(self", "def forward(self,,"),
        &t,
        &e,
        None,
        n + 3,
    ));
    out.push(row("bad-answer-syntax", &p, &t.replace("tl.store(", "tl.store(("), &e, None, n + 4));
    // Missing and empty fields.
    let mut missing = row("bad-missing-triton", &p, &t, &e, None, n + 5);
    if let Some(o) = missing.as_object_mut() {
        o.remove("triton_code");
    }
    out.push(missing);
    out.push(row("bad-empty-python", "  ", &t, &e, None, n + 6));
    // Far too long for the length filter: thousands of steps.
    let long_steps: String = (0..3000).map(|k| format!("    x = x * 1.{k:04}\n")).collect();
    let long = t.replace("    tl.store(", &format!("{long_steps}    tl.store("));
    out.push(row("bad-too-long", &p, &long, &e, None, n + 9));
    // A stub answer with no kernel at all.
    out.push(row(
        "bad-tiny",
        "import torch\nclass T(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
        "class TNew:\n    pass\n",
        "T",
        None,
        n + 7,
    ));
    // A heldout suite problem under another name, its docstrings reworded and a comment
    // added: decontamination compares normalised code, so none of that hides it.
    if let Some(src) = heldout {
        let renamed = format!(
            "# found in the wild\n{}",
            reword_docstrings(&src.replace("class Model(", &format!("class {e}Leak(")))
        );
        let (_, t2, e2, _) = pair(&mut rng, n + 8);
        let t2 = t2.replace(&format!("class {e2}New("), &format!("class {e}LeakNew("));
        out.push(row("bad-heldout-leak", &renamed, &t2, &format!("{e}Leak"), None, n + 8));
    }
    out
}

/// Every `"""..."""` docstring's text replaced by other words.
fn reword_docstrings(src: &str) -> String {
    let parts: Vec<&str> = src.split("\"\"\"").collect();
    let mut out = String::with_capacity(src.len());
    for (i, part) in parts.iter().enumerate() {
        if i > 0 {
            out.push_str("\"\"\"");
        }
        // Odd parts are the insides of triple-quoted strings.
        out.push_str(if i % 2 == 1 { "Said in other words." } else { part });
    }
    out
}

const COLUMNS: [&str; 11] = [
    "python_code",
    "triton_code",
    "entry_point",
    "uuid",
    "repo_name",
    "module_name",
    "synthetic",
    "licenses",
    "stars",
    "sha",
    "repo_link",
];

/// JSONL, with (when `defects`) a malformed line and a non-UTF-8 line among the rows.
pub fn write_jsonl(path: &Path, rows: &[Value], defects: bool) -> Result<(), DataError> {
    let mut bytes = Vec::new();
    for (i, r) in rows.iter().enumerate() {
        bytes.extend_from_slice(r.to_string().as_bytes());
        bytes.push(b'\n');
        if defects && i == 2 {
            bytes.extend_from_slice(b"{\"python_code\": \"import torch\", \"triton_code\": \n");
            bytes.extend_from_slice(
                b"{\"python_code\": \"\xff\xfe not utf-8\", \"triton_code\": \"x\"}\n",
            );
        }
    }
    std::fs::write(path, bytes)
        .map_err(|e| DataError::Output { path: path.to_path_buf(), reason: e.to_string() })
}

/// Parquet in the KernelBook column layout (reasoning as an optional column).
pub fn write_parquet(path: &Path, rows: &[Value]) -> Result<(), DataError> {
    let err = |e: String| DataError::Output { path: path.to_path_buf(), reason: e };
    let schema = parse_message_type(
        "message kernelbook {
            OPTIONAL BYTE_ARRAY python_code (UTF8);
            OPTIONAL BYTE_ARRAY triton_code (UTF8);
            OPTIONAL BYTE_ARRAY entry_point (UTF8);
            OPTIONAL BYTE_ARRAY uuid (UTF8);
            OPTIONAL BYTE_ARRAY repo_name (UTF8);
            OPTIONAL BYTE_ARRAY module_name (UTF8);
            OPTIONAL BOOLEAN synthetic;
            OPTIONAL BYTE_ARRAY licenses (UTF8);
            OPTIONAL INT64 stars;
            OPTIONAL BYTE_ARRAY sha (UTF8);
            OPTIONAL BYTE_ARRAY repo_link (UTF8);
            OPTIONAL BYTE_ARRAY reasoning (UTF8);
        }",
    )
    .map_err(|e| err(e.to_string()))?;
    let file = std::fs::File::create(path).map_err(|e| err(e.to_string()))?;
    let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
    let mut w = SerializedFileWriter::new(file, Arc::new(schema), Arc::new(props))
        .map_err(|e| err(e.to_string()))?;
    let mut names: Vec<&str> = COLUMNS.to_vec();
    names.push("reasoning");
    for chunk in rows.chunks(2048) {
        let mut rg = w.next_row_group().map_err(|e| err(e.to_string()))?;
        for name in &names {
            let mut col = rg
                .next_column()
                .map_err(|e| err(e.to_string()))?
                .ok_or_else(|| err("schema has fewer columns".into()))?;
            let levels: Vec<i16> = chunk.iter().map(|r| i16::from(!r[*name].is_null())).collect();
            match *name {
                "synthetic" => {
                    let vals: Vec<bool> = chunk.iter().filter_map(|r| r[*name].as_bool()).collect();
                    col.typed::<parquet::data_type::BoolType>()
                        .write_batch(&vals, Some(&levels), None)
                        .map_err(|e| err(e.to_string()))?;
                }
                "stars" => {
                    let vals: Vec<i64> = chunk.iter().filter_map(|r| r[*name].as_i64()).collect();
                    col.typed::<Int64Type>()
                        .write_batch(&vals, Some(&levels), None)
                        .map_err(|e| err(e.to_string()))?;
                }
                _ => {
                    let vals: Vec<ByteArray> = chunk
                        .iter()
                        .filter_map(|r| r[*name].as_str().map(ByteArray::from))
                        .collect();
                    col.typed::<ByteArrayType>()
                        .write_batch(&vals, Some(&levels), None)
                        .map_err(|e| err(e.to_string()))?;
                }
            }
            col.close().map_err(|e| err(e.to_string()))?;
        }
        rg.close().map_err(|e| err(e.to_string()))?;
    }
    w.close().map_err(|e| err(e.to_string()))?;
    Ok(())
}

/// Write `n` synthetic rows as `kernelbook.jsonl` and `kernelbook.parquet` in `out`.
pub fn write_set(
    out: &Path,
    n: usize,
    seed: u64,
    defects: bool,
    heldout: Option<&str>,
) -> Result<usize, DataError> {
    let made = rows(n, seed, defects, heldout);
    std::fs::create_dir_all(out)
        .map_err(|e| DataError::Output { path: out.to_path_buf(), reason: e.to_string() })?;
    write_jsonl(&out.join("kernelbook.jsonl"), &made, defects)?;
    write_parquet(&out.join("kernelbook.parquet"), &made)?;
    Ok(made.len())
}
