//! The same computation as a suite problem, whatever the text around it: the calls and
//! arithmetic operators of `forward`, ignoring names, constants and sizes. A synthetic
//! `sigmoid` is the suite's heldout `sigmoid` even where the text similarity used by the
//! data pipeline's decontamination (shingles of the whole file) is low.

use std::collections::BTreeSet;

/// The calls (last name segment: `sigmoid`, `rsqrt`, `linear`) and binary operators of a
/// problem's `forward`, as one sorted signature; `None` when it has no `forward`. A call of
/// a submodule (`self.conv(x)`) counts as its class (`Conv1d`), so a 1-D convolution is not
/// taken for a 2-D one because both attributes are named `conv`.
pub fn computation(source: &str) -> Option<String> {
    let modules = submodules(source);
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
                    let name: String = chars[start..i].iter().collect();
                    let on_self =
                        start >= 5 && chars[start - 5..start].iter().collect::<String>() == "self.";
                    let class = if on_self { modules.get(name.as_str()) } else { None };
                    calls.insert(class.map_or(name, |c| c.to_string()));
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

/// `self.<name> = nn.<Class>(` lines anywhere in the source: attribute name to class.
fn submodules(source: &str) -> std::collections::BTreeMap<&str, &str> {
    let mut out = std::collections::BTreeMap::new();
    for line in source.lines() {
        let Some(rest) = line.trim().strip_prefix("self.") else { continue };
        let Some((name, value)) = rest.split_once('=') else { continue };
        let value = value.trim();
        let value = value.strip_prefix("torch.").unwrap_or(value);
        let Some(value) = value.strip_prefix("nn.") else { continue };
        if let Some((class, _)) = value.split_once('(') {
            out.insert(name.trim(), class);
        }
    }
    out
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

    #[test]
    fn a_submodule_call_is_its_class() {
        let conv = |class: &str, args: &str| {
            format!(
                "class Model(nn.Module):\n    def __init__(self, a: int, b: int):\n        super().__init__()\n        self.conv = nn.{class}(a, b, {args})\n\n    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        return self.conv(x)\n"
            )
        };
        let dilated = conv("Conv2d", "3, dilation=2");
        assert_eq!(computation(&dilated).unwrap(), "Conv2d|");
        let held = vec![("level1/conv2d_dilated".to_string(), dilated.clone())];
        let twins = heldout_twins(&[&conv("Conv2d", "5"), &conv("Conv1d", "3, dilation=2")], &held);
        // Another 2-D convolution is still its twin (arguments are not compared); a 1-D one is not.
        assert_eq!(twins, vec![Some("level1/conv2d_dilated".to_string()), None]);
    }
}
