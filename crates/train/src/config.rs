//! `sft.toml`: the model, the data, and how to train. Unknown keys are errors (a misspelt
//! setting must not silently train with the default).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::TrainError;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftConfig {
    /// A Hugging Face model directory (a `config.json` alone: random weights), a `.gguf`
    /// file, or `smollm2` (the bundled SmolLM2-135M-Instruct).
    pub model: String,
    /// Directory with `tokenizer.json` and the chat template [default: the model directory].
    pub tokenizer: Option<PathBuf>,
    pub data: DataCfg,
    pub output: OutputCfg,
    #[serde(default)]
    pub train: TrainCfg,
    #[serde(default)]
    pub lora: LoraCfg,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataCfg {
    /// JSONL or parquet with a `messages` column (what `tritonforge data build` writes).
    pub train: PathBuf,
    pub validation: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputCfg {
    pub dir: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainCfg {
    /// Passes over the training set (ignored when `steps` is set).
    #[serde(default = "one")]
    pub epochs: u32,
    /// Optimizer steps in all; 0: as many as `epochs` make.
    #[serde(default)]
    pub steps: u64,
    /// Longest row in tokens; a longer conversation is skipped and counted.
    #[serde(default = "default_seq_len")]
    pub seq_len: usize,
    /// Rows per micro-batch.
    #[serde(default = "one_usize")]
    pub micro_batch: usize,
    /// Micro-batches per optimizer step.
    #[serde(default = "one_usize")]
    pub grad_accum: usize,
    /// Several conversations per row (attention stays inside each).
    #[serde(default = "yes")]
    pub packing: bool,
    /// With `packing = false`: conversations of like length share a micro-batch, which
    /// then holds up to `micro_batch × seq_len` tokens counting padding (rows padded to a
    /// multiple of 64). Rows of one conversation each let a GPU run attention through
    /// cuDNN, which is faster than flash attention over packed rows on Hopper.
    #[serde(default)]
    pub group_by_length: bool,
    #[serde(default = "default_lr")]
    pub lr: f64,
    #[serde(default = "default_min_lr")]
    pub min_lr: f64,
    #[serde(default)]
    pub warmup_steps: u64,
    #[serde(default)]
    pub weight_decay: f64,
    /// 0: no clipping.
    #[serde(default = "default_clip")]
    pub grad_clip: f64,
    #[serde(default)]
    pub gradient_checkpointing: bool,
    /// `auto` (`mixed` on a GPU, `fp32` on a CPU); `mixed` (fp32 master weights and optimizer
    /// state, bf16 compute); `bf16` (bf16 weights: half the memory, but small updates are
    /// lost to rounding); `fp32`.
    #[serde(default = "auto")]
    pub dtype: String,
    #[serde(default)]
    pub seed: u64,
    /// Validation loss every this many steps (and at the end); 0: only at the end.
    #[serde(default)]
    pub eval_every: u64,
    /// A checkpoint every this many steps (and at the end); 0: only at the end.
    #[serde(default)]
    pub save_every: u64,
    /// Write checkpoints at all (off: a throughput benchmark, nothing to keep).
    #[serde(default = "yes")]
    pub checkpoints: bool,
    /// Checkpoints kept (older ones are deleted); the final one is always kept.
    #[serde(default = "default_keep")]
    pub keep_checkpoints: usize,
    /// The accelerator's dense bf16 peak, TFLOP/s, for MFU [default: by GPU name].
    pub peak_tflops: Option<f64>,
    /// Processes training together (FSDP2 under `torchrun`, one per GPU); 1: one device.
    #[serde(default = "one")]
    pub gpus: u32,
    /// Arguments for `torchrun` in place of `--standalone` (several nodes: `--nnodes`,
    /// `--node-rank`, `--rdzv-endpoint`, ...; see docs/training.md).
    #[serde(default)]
    pub torchrun: Vec<String>,
    /// Attention: `auto` (`varlen` on a GPU, `sdpa` on a CPU), `varlen` (flash attention
    /// over packed rows, no dense mask), or transformers' `sdpa`, `flex_attention`, `eager`
    /// (packed rows get a dense block-diagonal mask).
    #[serde(default = "auto")]
    pub attention: String,
    /// `torch.compile` each decoder layer and the loss: `auto` (on a GPU), `on`, `off`.
    /// Fuses the element-wise work (norms, rotary embeddings, SwiGLU, casts) that
    /// otherwise dominates a small model's step.
    #[serde(default = "auto")]
    pub compile: String,
}

impl Default for TrainCfg {
    /// The same values an empty `[train]` table gets (a unit test holds them together).
    fn default() -> Self {
        TrainCfg {
            epochs: 1,
            steps: 0,
            seq_len: default_seq_len(),
            micro_batch: 1,
            grad_accum: 1,
            packing: true,
            group_by_length: false,
            lr: default_lr(),
            min_lr: default_min_lr(),
            warmup_steps: 0,
            weight_decay: 0.0,
            grad_clip: default_clip(),
            gradient_checkpointing: false,
            dtype: auto(),
            seed: 0,
            eval_every: 0,
            save_every: 0,
            checkpoints: true,
            keep_checkpoints: default_keep(),
            peak_tflops: None,
            gpus: 1,
            torchrun: Vec::new(),
            attention: auto(),
            compile: auto(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraCfg {
    #[serde(default)]
    pub enabled: bool,
    #[serde(default = "default_rank")]
    pub rank: u32,
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    #[serde(default = "default_lora_dropout")]
    pub dropout: f64,
    #[serde(default = "default_targets")]
    pub target_modules: Vec<String>,
    /// The final checkpoint holds the merged model (loadable anywhere); intermediate ones
    /// hold the adapter only.
    #[serde(default = "yes")]
    pub merge: bool,
}

impl Default for LoraCfg {
    fn default() -> Self {
        LoraCfg {
            enabled: false,
            rank: default_rank(),
            alpha: default_alpha(),
            dropout: default_lora_dropout(),
            target_modules: default_targets(),
            merge: true,
        }
    }
}

fn one() -> u32 {
    1
}
fn one_usize() -> usize {
    1
}
fn yes() -> bool {
    true
}
fn default_seq_len() -> usize {
    4096
}
fn default_lr() -> f64 {
    1e-5
}
fn default_min_lr() -> f64 {
    1e-6
}
fn default_clip() -> f64 {
    1.0
}
/// `auto`: the worker decides from the device (dtype, attention, compile).
fn auto() -> String {
    "auto".into()
}
fn default_keep() -> usize {
    2
}
fn default_rank() -> u32 {
    16
}
fn default_alpha() -> f64 {
    32.0
}
fn default_lora_dropout() -> f64 {
    0.05
}
fn default_targets() -> Vec<String> {
    ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        .map(String::from)
        .to_vec()
}

impl SftConfig {
    pub fn load(path: &Path) -> Result<SftConfig, TrainError> {
        let bad = |reason: String| TrainError::Config { path: path.to_path_buf(), reason };
        let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
        let mut cfg: SftConfig = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        // Relative paths are relative to the config file.
        let base = path.parent().unwrap_or(Path::new("."));
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix(&mut cfg.data.train);
        if let Some(v) = &mut cfg.data.validation {
            fix(v);
        }
        fix(&mut cfg.output.dir);
        if let Some(t) = &mut cfg.tokenizer {
            fix(t);
        }
        if cfg.model != "smollm2" && !Path::new(&cfg.model).is_absolute() {
            let candidate = base.join(&cfg.model);
            if candidate.exists() {
                cfg.model = candidate.display().to_string();
            }
        }
        if cfg.model != "smollm2" && !Path::new(&cfg.model).exists() {
            return Err(bad(format!("model {}: no such file or directory", cfg.model)));
        }
        cfg.check().map_err(bad)?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), String> {
        let t = &self.train;
        if t.seq_len < 2 || t.micro_batch == 0 || t.grad_accum == 0 {
            return Err(
                "train.seq_len must be at least 2, micro_batch and grad_accum at least 1".into()
            );
        }
        if t.group_by_length && t.packing {
            return Err(
                "train.group_by_length puts one conversation in each row; set train.packing = false"
                    .into(),
            );
        }
        if t.steps == 0 && t.epochs == 0 {
            return Err("train.epochs or train.steps must be positive".into());
        }
        if !(t.lr > 0.0 && t.min_lr >= 0.0 && t.min_lr <= t.lr) {
            return Err("train.lr must be positive and train.min_lr in [0, lr]".into());
        }
        if !(t.grad_clip >= 0.0 && t.weight_decay >= 0.0) {
            return Err("train.grad_clip and train.weight_decay must not be negative".into());
        }
        if !["auto", "mixed", "bf16", "fp32"].contains(&t.dtype.as_str()) {
            return Err(format!("train.dtype {:?}: auto, mixed, bf16 or fp32", t.dtype));
        }
        if !["auto", "varlen", "sdpa", "flex_attention", "eager"].contains(&t.attention.as_str()) {
            return Err(format!(
                "train.attention {:?}: auto, varlen, sdpa, flex_attention or eager",
                t.attention
            ));
        }
        if t.attention == "varlen" && t.dtype == "fp32" {
            return Err(
                "train.attention \"varlen\" computes in bf16; with train.dtype \"fp32\" use \"sdpa\""
                    .into(),
            );
        }
        if !["auto", "on", "off"].contains(&t.compile.as_str()) {
            return Err(format!("train.compile {:?}: auto, on or off", t.compile));
        }
        if t.gpus == 0 {
            return Err("train.gpus must be at least 1".into());
        }
        if t.keep_checkpoints == 0 {
            return Err("train.keep_checkpoints must be at least 1".into());
        }
        let l = &self.lora;
        if l.enabled && (l.rank == 0 || l.target_modules.is_empty()) {
            return Err("lora.rank must be positive and lora.target_modules not empty".into());
        }
        Ok(())
    }

    /// The settings that fix the schedule and data order (the data's content is added by
    /// `run`): a resumed run must match them.
    pub fn schedule_fingerprint(&self) -> String {
        use sha2::{Digest, Sha256};
        let t = &self.train;
        let mut parts = serde_json::json!({
            "model": self.model, "train": self.data.train, "epochs": t.epochs, "steps": t.steps,
            "seq_len": t.seq_len, "micro_batch": t.micro_batch, "grad_accum": t.grad_accum,
            "packing": t.packing, "seed": t.seed, "lr": t.lr, "min_lr": t.min_lr,
            "warmup": t.warmup_steps, "lora": self.lora.enabled,
            // The split of rows over ranks changes the arithmetic, not the plan; a resumed
            // run may use another number of GPUs.
        });
        // Only when on, so that runs planned before the setting existed still resume.
        if t.group_by_length {
            parts["group_by_length"] = true.into();
        }
        hex::encode(Sha256::digest(parts.to_string().as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_train_table_takes_the_documented_defaults() {
        let t: TrainCfg = toml::from_str("").unwrap();
        assert_eq!(t.seq_len, 4096);
        assert_eq!(t.lr, 1e-5);
        assert_eq!(t.min_lr, 1e-6);
        assert!(t.packing);
        assert_eq!(
            serde_json::to_value(&t).unwrap(),
            serde_json::to_value(TrainCfg::default()).unwrap()
        );
    }

    /// The documented example holds every setting, spelt as the parser wants it.
    #[test]
    fn the_example_config_parses_and_bad_modes_are_named() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/sft.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let cfg: SftConfig = toml::from_str(&text).unwrap();
        assert_eq!(cfg.train.compile, "auto");
        let mut bad = cfg.clone();
        bad.train.compile = "yes".into();
        let err = bad.check().unwrap_err();
        assert!(err.contains("train.compile \"yes\""), "{err}");
        let mut fp32 = cfg.clone();
        fp32.train.attention = "varlen".into();
        fp32.train.dtype = "fp32".into();
        let err = fp32.check().unwrap_err();
        assert!(err.contains("train.attention \"varlen\""), "{err}");
        let mut grouped = cfg.clone();
        grouped.train.group_by_length = true;
        grouped.train.packing = true;
        let err = grouped.check().unwrap_err();
        assert!(err.contains("train.packing = false"), "{err}");
        grouped.train.packing = false;
        assert!(grouped.check().is_ok());
    }

    /// The checked-in recipes load as `train sft` reads them. The repair stage trains into
    /// a run directory of its own, on the set `data-repair.toml` writes, so that it never
    /// overwrites the first stage it was played from.
    #[test]
    fn the_checked_in_sft_configs_load_and_the_repair_stage_keeps_its_own_run() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let load = |p: &str| SftConfig::load(&root.join(p)).unwrap_or_else(|e| panic!("{e}"));
        load("examples/sft.toml");
        let first = load("configs/bundled/sft.toml");
        let repair = load("configs/bundled/sft-repair.toml");
        assert_ne!(first.output.dir, repair.output.dir);
        let data: toml::Value = toml::from_str(
            &std::fs::read_to_string(root.join("configs/bundled/data-repair.toml")).unwrap(),
        )
        .unwrap();
        let set = root.join("configs/bundled").join(data["output"]["dir"].as_str().unwrap());
        assert_eq!(repair.data.train, set.join("train.jsonl"));
        assert_eq!(repair.data.validation, Some(set.join("validation.jsonl")));
        let settings = |c: &SftConfig| {
            let mut v = serde_json::to_value(c).unwrap();
            let o = v.as_object_mut().unwrap();
            o.remove("data");
            o.remove("output");
            v
        };
        assert_eq!(settings(&first), settings(&repair), "the same recipe on another set");
    }
}
