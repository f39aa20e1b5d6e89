//! Embeds the suite (`bench/` at the repository root: problems, manifest, reference
//! solutions) into the library, so an installed binary carries the suite it was built
//! with, as it carries the worker package.

use std::fs;
use std::path::{Path, PathBuf};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n == "__pycache__") {
                continue;
            }
            walk(&p, out);
        } else if matches!(p.extension().and_then(|e| e.to_str()), Some("py") | Some("toml")) {
            out.push(p);
        }
    }
}

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest_dir.join("../../bench");
    println!("cargo:rerun-if-changed={}", root.display());
    let root = root.canonicalize().unwrap_or(root);
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut code =
        String::from("/// The suite's files: (path relative to the suite root, text).\n");
    code.push_str("pub const SUITE_FILES: &[(&str, &str)] = &[\n");
    for f in &files {
        let rel = f.strip_prefix(&root).unwrap_or(f);
        code.push_str(&format!(
            "    ({:?}, include_str!({:?})),\n",
            rel.to_string_lossy(),
            f.to_string_lossy()
        ));
    }
    code.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("suite_files.rs");
    if let Err(e) = fs::write(&out, code) {
        panic!("writing {}: {e}", out.display());
    }
}
