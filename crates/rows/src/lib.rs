//! Records of a `.jsonl` or `.parquet` file as JSON objects, each with its place
//! (`file:line` or `file#rowN`).
//!
//! Why a crate of its own: the data pipeline reads KernelBook-shaped sets with it and the
//! trainer reads its SFT conversations with it. The trainer used to borrow the reader from
//! `tritonforge-data`, and with it the agent and the whole evaluator; one reader of rows
//! needs none of that. A record that cannot be read (malformed JSON, not an object, bytes
//! that are not UTF-8) is reported with its reason and place, never an error: one bad
//! line in a million-row set must not stop a build.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use parquet::file::reader::{FileReader, SerializedFileReader};
use serde_json::{Map, Value};

/// A record and its place (`file:line` or `file#rowN`).
pub type Placed = (String, Map<String, Value>);

/// A record that could not be read as a JSON object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// `file:line` or `file#rowN`.
    pub place: String,
    /// A short machine-readable reason: `malformed_json`, `not_an_object`, `non_utf8`,
    /// `unreadable_row: ...`.
    pub reason: String,
}

impl Unreadable {
    fn new(reason: &str, place: &str) -> Unreadable {
        Unreadable { place: place.to_string(), reason: reason.to_string() }
    }
}

/// The file as a whole could not be read (missing, unreadable, not parquet). Worded as
/// the data pipeline has always worded it (`input PATH: why`).
#[derive(Debug, thiserror::Error)]
#[error("input {path}: {reason}")]
pub struct RowsError {
    pub path: PathBuf,
    pub reason: String,
}

/// The records of a `.jsonl` or `.parquet` file as JSON objects, each with its place;
/// records that are not objects are returned as [`Unreadable`], not errors.
pub fn read(path: &Path) -> Result<(Vec<Placed>, Vec<Unreadable>), RowsError> {
    let name = path.display().to_string();
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    let is_parquet = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    let fail = |reason: String| RowsError { path: path.to_path_buf(), reason };
    let io = |e: std::io::Error| fail(e.to_string());
    if is_parquet {
        let file = std::fs::File::open(path).map_err(io)?;
        let reader = SerializedFileReader::new(file)
            .map_err(|e| fail(format!("not a readable parquet file: {e}")))?;
        let iter = reader.get_row_iter(None).map_err(|e| fail(e.to_string()))?;
        for (i, row) in iter.enumerate() {
            let place = format!("{name}#row{}", i + 1);
            match row {
                Ok(r) => match parquet_row(&r) {
                    Ok(obj) => rows.push((place, obj)),
                    Err(reason) => bad.push(Unreadable::new(&reason, &place)),
                },
                Err(e) => bad.push(Unreadable::new(&format!("unreadable_row: {e}"), &place)),
            }
        }
    } else {
        let file = std::fs::File::open(path).map_err(io)?;
        let mut reader = BufReader::new(file);
        let mut buf = Vec::new();
        let mut line_no = 0usize;
        loop {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf).map_err(io)?;
            if n == 0 {
                break;
            }
            line_no += 1;
            let place = format!("{name}:{line_no}");
            let Ok(text) = std::str::from_utf8(&buf) else {
                bad.push(Unreadable::new("non_utf8", &place));
                continue;
            };
            // A byte-order mark some editors write at the start of a file.
            let text = if line_no == 1 { text.trim_start_matches('\u{feff}') } else { text };
            if text.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(obj)) => rows.push((place, obj)),
                Ok(_) => bad.push(Unreadable::new("not_an_object", &place)),
                Err(_) => bad.push(Unreadable::new("malformed_json", &place)),
            }
        }
    }
    Ok((rows, bad))
}

/// A parquet record as a JSON object. Byte columns must be UTF-8 text; nested values
/// are kept as their display form (metadata only).
fn parquet_row(r: &parquet::record::Row) -> Result<Map<String, Value>, String> {
    use parquet::record::Field;
    let mut obj = Map::new();
    for (name, field) in r.get_column_iter() {
        let v = match field {
            Field::Null => Value::Null,
            Field::Bool(b) => Value::from(*b),
            Field::Byte(x) => Value::from(*x),
            Field::Short(x) => Value::from(*x),
            Field::Int(x) => Value::from(*x),
            Field::Long(x) => Value::from(*x),
            Field::UByte(x) => Value::from(*x),
            Field::UShort(x) => Value::from(*x),
            Field::UInt(x) => Value::from(*x),
            Field::ULong(x) => Value::from(*x),
            Field::Float(x) => Value::from(f64::from(*x)),
            Field::Double(x) => Value::from(*x),
            Field::Str(s) => Value::from(s.clone()),
            Field::Bytes(b) => match std::str::from_utf8(b.data()) {
                Ok(s) => Value::from(s),
                Err(_) => return Err("non_utf8".into()),
            },
            other => Value::from(other.to_string()),
        };
        obj.insert(name.clone(), v);
    }
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_counted_with_their_place() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.jsonl");
        std::fs::write(&p, b"\xef\xbb\xbf{\"a\":1}\n\n[1]\n{oops\n\xff\n{\"b\":2}\n").unwrap();
        let (rows, bad) = read(&p).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0].0, format!("{}:1", p.display()));
        assert_eq!(rows[1].1["b"], 2);
        let reasons: Vec<&str> = bad.iter().map(|b| b.reason.as_str()).collect();
        assert_eq!(reasons, ["not_an_object", "malformed_json", "non_utf8"]);
        assert!(read(&dir.path().join("none.jsonl")).is_err());
    }
}
