//! Writing the set: `train`/`validation` as JSONL (one `{"id", "messages", ...}` per line)
//! and parquet, every dropped row with its reason, and the stats in JSON and Markdown.
//! Each file is written beside its final name and renamed into place, so an interrupted
//! run never leaves a half-written file that looks finished.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use serde_json::json;

use crate::{Bad, BuildReport, Config, DataError, Row};

fn out_err(path: &Path, e: impl std::fmt::Display) -> DataError {
    DataError::Output { path: path.to_path_buf(), reason: e.to_string() }
}

/// Writes `bytes` to `path` through a temporary sibling and a rename.
fn atomic(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> Result<(), String>,
) -> Result<(), DataError> {
    let tmp = path.with_extension("partial");
    let mut f = std::fs::File::create(&tmp).map_err(|e| out_err(&tmp, e))?;
    write(&mut f).map_err(|e| out_err(path, e))?;
    f.sync_all().map_err(|e| out_err(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| out_err(path, e))
}

fn jsonl_line(r: &Row) -> serde_json::Value {
    json!({
        "id": r.id,
        "messages": r.messages,
        "origin": r.origin,
        "tokens": r.tokens,
        "meta": r.meta,
    })
}

fn write_jsonl(path: &Path, rows: &[Row]) -> Result<(), DataError> {
    atomic(path, |f| {
        let mut w = std::io::BufWriter::new(f);
        for r in rows {
            let line = serde_json::to_string(&jsonl_line(r)).map_err(|e| e.to_string())?;
            writeln!(w, "{line}").map_err(|e| e.to_string())?;
        }
        w.flush().map_err(|e| e.to_string())
    })
}

/// Columns: `id`, `origin`, `messages` (the conversation as a JSON string), `tokens`
/// (null when not counted), `meta` (JSON string).
fn write_parquet(path: &Path, rows: &[Row]) -> Result<(), DataError> {
    let schema = parse_message_type(
        "message sft_row {
            REQUIRED BYTE_ARRAY id (UTF8);
            REQUIRED BYTE_ARRAY origin (UTF8);
            REQUIRED BYTE_ARRAY messages (UTF8);
            OPTIONAL INT64 tokens;
            REQUIRED BYTE_ARRAY meta (UTF8);
        }",
    )
    .map_err(|e| out_err(path, e))?;
    let props = WriterProperties::builder().set_compression(Compression::SNAPPY).build();
    atomic(path, |f| {
        let mut w = SerializedFileWriter::new(
            f.try_clone().map_err(|e| e.to_string())?,
            Arc::new(schema),
            Arc::new(props),
        )
        .map_err(|e| e.to_string())?;
        for chunk in rows.chunks(4096) {
            let mut rg = w.next_row_group().map_err(|e| e.to_string())?;
            let text = |f: &dyn Fn(&Row) -> String| -> Vec<ByteArray> {
                chunk.iter().map(|r| ByteArray::from(f(r).as_str())).collect()
            };
            let columns: [Vec<ByteArray>; 3] = [
                text(&|r| r.id.clone()),
                text(&|r| r.origin.clone()),
                text(&|r| serde_json::to_string(&r.messages).unwrap_or_default()),
            ];
            for values in &columns {
                let mut col = rg
                    .next_column()
                    .map_err(|e| e.to_string())?
                    .ok_or("schema has fewer columns than written")?;
                col.typed::<ByteArrayType>()
                    .write_batch(values, None, None)
                    .map_err(|e| e.to_string())?;
                col.close().map_err(|e| e.to_string())?;
            }
            let tokens: Vec<i64> =
                chunk.iter().filter_map(|r| r.tokens.map(|t| t as i64)).collect();
            let levels: Vec<i16> = chunk.iter().map(|r| i16::from(r.tokens.is_some())).collect();
            let mut col = rg
                .next_column()
                .map_err(|e| e.to_string())?
                .ok_or("schema has fewer columns than written")?;
            col.typed::<Int64Type>()
                .write_batch(&tokens, Some(&levels), None)
                .map_err(|e| e.to_string())?;
            col.close().map_err(|e| e.to_string())?;
            let meta = text(&|r| serde_json::to_string(&r.meta).unwrap_or_default());
            let mut col = rg
                .next_column()
                .map_err(|e| e.to_string())?
                .ok_or("schema has fewer columns than written")?;
            col.typed::<ByteArrayType>()
                .write_batch(&meta, None, None)
                .map_err(|e| e.to_string())?;
            col.close().map_err(|e| e.to_string())?;
            rg.close().map_err(|e| e.to_string())?;
        }
        w.close().map_err(|e| e.to_string())?;
        Ok(())
    })
}

/// Writes the splits in every configured format and the dropped-row log; returns the paths.
pub fn write_all(
    cfg: &Config,
    train: &[Row],
    validation: &[Row],
    bad: &[Bad],
) -> Result<Vec<String>, DataError> {
    let dir = &cfg.output.dir;
    std::fs::create_dir_all(dir).map_err(|e| out_err(dir, e))?;
    let mut outputs: Vec<PathBuf> = Vec::new();
    for (name, rows) in [("train", train), ("validation", validation)] {
        for format in &cfg.output.formats {
            let path = dir.join(format!("{name}.{format}"));
            match format.as_str() {
                "jsonl" => write_jsonl(&path, rows)?,
                _ => write_parquet(&path, rows)?,
            }
            outputs.push(path);
        }
    }
    let dropped = dir.join("dropped.jsonl");
    atomic(&dropped, |f| {
        let mut w = std::io::BufWriter::new(f);
        for b in bad {
            let line = serde_json::to_string(b).map_err(|e| e.to_string())?;
            writeln!(w, "{line}").map_err(|e| e.to_string())?;
        }
        w.flush().map_err(|e| e.to_string())
    })?;
    outputs.push(dropped);
    Ok(outputs.iter().map(|p| p.display().to_string()).collect())
}

/// The report as Markdown: a row per stage, the drop reasons, the length histogram.
pub fn markdown(report: &BuildReport) -> String {
    let mut out = String::from("# SFT data build\n\n| stage | rows in | rows out | dropped | seconds | note |\n| --- | ---: | ---: | ---: | ---: | --- |\n");
    for s in &report.stages {
        let dropped: usize = s.dropped.values().sum();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.3} | {} |",
            s.stage,
            s.rows_in,
            s.rows_out,
            dropped,
            s.seconds,
            s.note.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(
        out,
        "\n## Dropped, by stage and reason\n\n| stage | reason | rows |\n| --- | --- | ---: |"
    );
    for s in &report.stages {
        for (reason, n) in &s.dropped {
            let _ = writeln!(out, "| {} | {reason} | {n} |", s.stage);
        }
    }
    let _ = writeln!(
        out,
        "\n## Output\n\n- train: {} rows\n- validation: {} rows\n- {:.2} s end to end, {:.0} input rows/s",
        report.train, report.validation, report.seconds, report.rows_per_second
    );
    if !report.token_histogram.is_empty() {
        let _ =
            writeln!(out, "\n## Token lengths (kept rows)\n\n| tokens | rows |\n| --- | ---: |");
        for (b, n) in &report.token_histogram {
            let _ = writeln!(out, "| {b} | {n} |");
        }
    }
    out
}

pub fn write_stats(cfg: &Config, report: &BuildReport) -> Result<(), DataError> {
    let dir = &cfg.output.dir;
    let json_path = dir.join("stats.json");
    let text = serde_json::to_string_pretty(report).map_err(|e| out_err(&json_path, e))?;
    atomic(&json_path, |f| f.write_all(text.as_bytes()).map_err(|e| e.to_string()))?;
    let md_path = dir.join("stats.md");
    let md = markdown(report);
    atomic(&md_path, |f| f.write_all(md.as_bytes()).map_err(|e| e.to_string()))
}

/// The stats of a finished build, read back from its output directory.
pub fn read_stats(dir: &Path) -> Result<BuildReport, DataError> {
    let path = dir.join("stats.json");
    let bad = |reason: String| DataError::Input {
        path: path.clone(),
        reason: format!("{reason} (is it a `data build` output directory?)"),
    };
    let text = std::fs::read_to_string(&path).map_err(|e| bad(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| bad(e.to_string()))
}
