//! `tritonforge doctor`: what this installation found, without installing anything.

use crate::args::Global;
use crate::exit;

pub async fn run(global: &Global, as_json: bool) -> anyhow::Result<u8> {
    let d = tritonforge_eval::doctor::diagnose(&global.workspace()).await?;
    if as_json {
        println!("{:#}", d.json());
    } else {
        print!("{}", d.text());
    }
    Ok(if d.ok() { exit::CORRECT } else { exit::ENV })
}
