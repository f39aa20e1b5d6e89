//! The same computation as a suite problem, whatever the text around it: the calls and
//! arithmetic operators of `forward`, ignoring names, constants and sizes. A synthetic
//! `sigmoid` is the suite's heldout `sigmoid` even where the text similarity used by the
//! data pipeline's decontamination (shingles of the whole file) is low.

use std::collections::BTreeSet;

/// The calls (last name segment: `sigmoid`, `rsqrt`, `linear`) and binary operators of a
/// problem's `forward`, as one sorted signature; `None` when it has no `forward`.
pub fn computation(source: &str) -> Option<String> {
    let mut lines = source.lines().skip_while(|l| !l.trim_start().starts_with("def forward("));
    lines.next()?;
    let body: Vec<&str> = lines
        .take_while(|l| l.trim().is_empty() || l.starts_with("        "))
        .filter(|l| !l.trim().is_empty())
        .collect();
    let mut calls = BTreeSet::new();
    let mut ops = BTreeSet::new();
    for line in body {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c.is_alphabetic() || c == '_' {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                if chars.get(i) == Some(&'(') {
                    calls.insert(chars[start..i].iter().collect::<String>());
                }
                continue;
            }
            let spaced = i > 0 && chars[i - 1] == ' ' && chars.get(i + 1) == Some(&' ');
            if spaced && matches!(c, '+' | '-' | '*' | '/') {
                ops.insert(c);
            }
            i += 1;
        }
    }
    let ops: String = ops.into_iter().collect();
    Some(format!("{}|{ops}", calls.into_iter().collect::<Vec<_>>().join(",")))
}

/// For each problem source, the key of a `heldout` problem with the same computation.
pub fn heldout_twins(problems: &[&str], heldout: &[(String, String)]) -> Vec<Option<String>> {
    let known: Vec<(String, &str)> =
        heldout.iter().filter_map(|(k, src)| Some((computation(src)?, k.as_str()))).collect();
    problems
        .iter()
        .map(|p| {
            let c = computation(p)?;
            known.iter().find(|(h, _)| *h == c).map(|(_, k)| k.to_string())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUITE: &str = "class Model(nn.Module):\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)\n        return x * rms * self.weight\n\n\ndef get_inputs():\n    return [torch.randn(N)]\n";
    const OURS: &str = "class Model(nn.Module):\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        x = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * self.weight\n        return x\n";

    #[test]
    fn the_same_computation_is_found_whatever_its_text() {
        assert_eq!(computation(SUITE).unwrap(), "mean,pow,rsqrt|*+");
        assert_eq!(computation(SUITE), computation(OURS));
        let held = vec![("level1/rms_norm".to_string(), SUITE.to_string())];
        let relu = OURS.replace("x * torch.rsqrt", "torch.relu(x) * torch.rsqrt");
        assert_eq!(
            heldout_twins(&[OURS, &relu, "no forward"], &held),
            vec![Some("level1/rms_norm".to_string()), None, None]
        );
    }
}
