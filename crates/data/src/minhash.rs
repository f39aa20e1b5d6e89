//! Code normalisation, token shingles, MinHash signatures and LSH banding: how near
//! duplicates (and heldout look-alikes) are found without comparing every pair.

use std::collections::HashMap;

/// A set of shingle hashes: sorted, without repeats (cheaper than a tree set to build,
/// filter and intersect).
pub type Shingles = Vec<u64>;

/// Source with `#` comments removed (quote-aware) and whitespace collapsed: two files
/// differing only in comments, blank lines or indentation width normalise alike.
pub fn normalize_code(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    // Inside a string: its quote (one character, or three for `'''`/`"""`).
    let mut quote: Option<&str> = None;
    let mut rest = src;
    while let Some(c) = rest.chars().next() {
        match quote {
            Some(q) => {
                if c == '\\' {
                    let n = c.len_utf8()
                        + rest[c.len_utf8()..].chars().next().map_or(0, char::len_utf8);
                    out.push_str(&rest[..n]);
                    rest = &rest[n..];
                    continue;
                }
                if rest.starts_with(q) {
                    out.push_str(q);
                    rest = &rest[q.len()..];
                    quote = None;
                    continue;
                }
                out.push(c);
            }
            None => match c {
                '#' => {
                    let end = rest.find('\n').unwrap_or(rest.len());
                    rest = &rest[end..];
                    continue;
                }
                '\'' | '"' => {
                    let q = if rest.starts_with("'''") {
                        "'''"
                    } else if rest.starts_with("\"\"\"") {
                        "\"\"\""
                    } else if c == '\'' {
                        "'"
                    } else {
                        "\""
                    };
                    out.push_str(q);
                    rest = &rest[q.len()..];
                    quote = Some(q);
                    continue;
                }
                _ => out.push(c),
            },
        }
        rest = &rest[c.len_utf8()..];
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Identifier/number runs and single punctuation characters.
pub fn tokens(src: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let bytes = src.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80 {
            let start = i;
            while i < bytes.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] >= 0x80)
            {
                i += 1;
            }
            out.push(&src[start..i]);
        } else {
            out.push(&src[i..i + 1]);
            i += 1;
        }
    }
    out
}

fn fnv1a(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for b in p.bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Hashes of the `k`-token shingles of (normalised) code, as a set.
pub fn shingles(code: &str, k: usize) -> Shingles {
    let norm = normalize_code(code);
    shingles_of_tokens(&tokens(&norm), k)
}

/// Hashes of the `k`-token shingles of a token sequence, as a set.
pub fn shingles_of_tokens(toks: &[&str], k: usize) -> Shingles {
    if toks.len() <= k {
        return vec![fnv1a(toks)];
    }
    let mut out: Vec<u64> = toks.windows(k).map(fnv1a).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The union of two shingle sets.
pub fn union(a: &[u64], b: &[u64]) -> Shingles {
    let mut out = Vec::with_capacity(a.len() + b.len());
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    out.sort_unstable();
    out.dedup();
    out
}

/// Drops from every set the shingles found in more than `share` of the sets (and in more
/// than 3): imports, signatures, launch boilerplate — what every file of a kind has. What
/// is left is what tells files apart. `share >= 1` keeps everything.
pub fn drop_boilerplate(sets: &mut [Shingles], share: f64) {
    if share >= 1.0 || sets.is_empty() {
        return;
    }
    let mut df: HashMap<u64, usize> = HashMap::new();
    for s in sets.iter() {
        for h in s {
            *df.entry(*h).or_default() += 1;
        }
    }
    let limit = ((share * sets.len() as f64).floor() as usize).max(3);
    for s in sets.iter_mut() {
        s.retain(|h| df.get(h).is_some_and(|n| *n <= limit));
    }
}

/// Jaccard similarity; two empty sets (nothing distinctive left) are not similar.
pub fn jaccard(a: &[u64], b: &[u64]) -> f64 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (mut i, mut j, mut inter) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            std::cmp::Ordering::Less => i += 1,
            std::cmp::Ordering::Greater => j += 1,
            std::cmp::Ordering::Equal => {
                inter += 1;
                i += 1;
                j += 1;
            }
        }
    }
    inter as f64 / (a.len() + b.len() - inter) as f64
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `n` hash functions (a seeded multiply-xorshift mix each), fixed by a seed so
/// signatures are comparable across runs.
pub struct MinHasher {
    seeds: Vec<(u64, u64)>,
}

impl MinHasher {
    pub fn new(n: usize, seed: u64) -> MinHasher {
        let mut s = seed ^ 0x5eed;
        let seeds = (0..n).map(|_| (splitmix(&mut s), splitmix(&mut s) | 1)).collect();
        MinHasher { seeds }
    }

    pub fn signature(&self, shingles: &[u64]) -> Vec<u64> {
        self.seeds
            .iter()
            .map(|&(x0, m)| {
                shingles
                    .iter()
                    .map(|&x| {
                        let z = (x ^ x0).wrapping_mul(m);
                        let z = (z ^ (z >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                        z ^ (z >> 32)
                    })
                    .min()
                    .unwrap_or(u64::MAX)
            })
            .collect()
    }
}

/// Share of equal positions: an unbiased estimate of the Jaccard similarity.
pub fn estimate(a: &[u64], b: &[u64]) -> f64 {
    let same = a.iter().zip(b).filter(|(x, y)| x == y).count();
    same as f64 / a.len().max(1) as f64
}

/// For each LSH band (`bands` bands of equal width), the groups of indices whose band
/// values are identical: candidates for being near duplicates of each other.
pub fn band_buckets(sigs: &[Vec<u64>], bands: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let Some(width) = sigs.first().map(|s| s.len() / bands.max(1)) else {
        return out;
    };
    for band in 0..bands {
        let mut buckets: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, s) in sigs.iter().enumerate() {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for v in &s[band * width..(band + 1) * width] {
                h ^= *v;
                h = h.wrapping_mul(0x0100_0000_01b3).rotate_left(17);
            }
            buckets.entry(h).or_default().push(i);
        }
        out.extend(buckets.into_values().filter(|m| m.len() > 1));
    }
    out
}

/// Union-find over row indices.
pub struct Clusters {
    parent: Vec<usize>,
}

impl Clusters {
    pub fn new(n: usize) -> Clusters {
        Clusters { parent: (0..n).collect() }
    }

    pub fn find(&mut self, mut x: usize) -> usize {
        while self.parent[x] != x {
            self.parent[x] = self.parent[self.parent[x]];
            x = self.parent[x];
        }
        x
    }

    pub fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.parent[ra.max(rb)] = ra.min(rb);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_layout_do_not_matter() {
        let a = "def f(x):\n    # double it\n    return x * 2  # done\n";
        let b = "def f(x):\n\n  return x * 2\n";
        assert_eq!(normalize_code(a), normalize_code(b));
        let s = "s = '# not a comment'  # a comment";
        assert_eq!(normalize_code(s), "s = '# not a comment'");
        let doc = "def f():\n    '''it's # kept'''\n    return 1  # dropped\n";
        assert_eq!(normalize_code(doc), "def f(): '''it's # kept''' return 1");
    }

    #[test]
    fn signatures_estimate_jaccard() {
        let base: String = (0..200).map(|i| format!("x{i} = y{i} + {i}\n")).collect();
        let mut near = base.clone();
        near.push_str("z = 1\n");
        let far: String = (0..200).map(|i| format!("w{i} = q{i} * {i}\n")).collect();
        let h = MinHasher::new(128, 0);
        let (sa, sb, sc) = (shingles(&base, 5), shingles(&near, 5), shingles(&far, 5));
        let (ga, gb, gc) = (h.signature(&sa), h.signature(&sb), h.signature(&sc));
        assert!(estimate(&ga, &gb) > 0.9, "{}", estimate(&ga, &gb));
        assert!(estimate(&ga, &gc) < 0.1);
        assert!((estimate(&ga, &gb) - jaccard(&sa, &sb)).abs() < 0.1);
        let buckets = band_buckets(&[ga, gb, gc], 32);
        assert!(!buckets.is_empty());
        assert!(buckets.iter().all(|b| b == &vec![0, 1]), "{buckets:?}");
    }
}
