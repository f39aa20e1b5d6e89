//! A small seeded generator (splitmix64): the same seed gives the same problems on every
//! machine and Rust version, which no library RNG promises.

pub struct Rng(u64);

impl Rng {
    /// The stream for item `index` of a set seeded with `seed`, for purpose `salt`: each
    /// problem has its own stream, so problem 7 is the same whatever `--count` is.
    pub fn for_item(seed: u64, index: usize, salt: u64) -> Rng {
        let mut r = Rng(seed ^ salt.wrapping_mul(0xa076_1d64_78bd_642f));
        let base = r.next_u64();
        Rng(base ^ (index as u64).wrapping_mul(0xe703_7ed1_a0b4_28db))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// An odd number in `lo..=hi` (sizes that need masks).
    pub fn odd(&mut self, lo: u64, hi: u64) -> u64 {
        self.range(lo, hi) | 1
    }

    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}

/// FNV-1a: a stable hash of text (the split of a problem is a property of its source).
pub fn fnv(text: &str) -> u64 {
    text.bytes()
        .fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_stable_and_distinct() {
        let a: Vec<u64> = (0..4).map(|i| Rng::for_item(1, i, 0).next_u64()).collect();
        let b: Vec<u64> = (0..4).map(|i| Rng::for_item(1, i, 0).next_u64()).collect();
        assert_eq!(a, b);
        assert_ne!(Rng::for_item(1, 0, 0).next_u64(), Rng::for_item(2, 0, 0).next_u64());
        assert_ne!(Rng::for_item(1, 0, 0).next_u64(), Rng::for_item(1, 0, 1).next_u64());
        let mut r = Rng::for_item(3, 3, 3);
        assert!((0..1000).all(|_| r.odd(10, 20) % 2 == 1));
    }
}
