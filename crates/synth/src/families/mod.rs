//! One module per family; each draws a [`Draft`]: the problem, its solution, the shape
//! variants, a difficulty grade and the mistakes it knows how to plant.

mod broadcast;
mod conv;
mod elementwise;
mod loss;
mod matmul;
mod pool;
mod reduction;
mod rowwise;
mod scan;

use crate::rng::Rng;
use crate::{Dims, Draft, Dtype, Family};

pub fn draw(family: Family, rng: &mut Rng) -> Draft {
    match family {
        Family::Elementwise => elementwise::draw(rng),
        Family::Broadcast => broadcast::draw(rng),
        Family::Reduction => reduction::draw(rng),
        Family::Rowwise => rowwise::draw(rng),
        Family::Matmul => matmul::draw(rng),
        Family::Scan => scan::draw(rng),
        Family::Loss => loss::draw(rng),
        Family::Pool => pool::draw(rng),
        Family::Conv => conv::draw(rng),
    }
}

/// A 2-D to 4-D activation tensor's dims: full size for a GPU, `small` a few thousand
/// elements with odd trailing sizes (masks matter), `heldout` odd sizes.
pub fn activation_dims(rng: &mut Rng, ndim: usize) -> Dims {
    match ndim {
        2 => Dims::new(
            &["ROWS", "COLS"],
            &[rng.pick(&[2048, 4096]), rng.pick(&[1024, 2048, 4096])],
            &[rng.range(3, 9), rng.odd(101, 701)],
            &[rng.odd(37, 131), rng.odd(1001, 5001)],
        ),
        3 => Dims::new(
            &["BATCH", "SEQ", "DIM"],
            &[16, rng.pick(&[256, 512]), rng.pick(&[768, 1024])],
            &[2, rng.range(3, 7), rng.odd(33, 201)],
            &[3, rng.odd(37, 131), rng.odd(301, 1201)],
        ),
        _ => Dims::new(
            &["BATCH", "CHANNELS", "HEIGHT", "WIDTH"],
            &[16, rng.pick(&[32, 64]), 64, 64],
            &[2, rng.range(3, 5), rng.odd(5, 11), rng.odd(5, 11)],
            &[3, rng.odd(5, 17), rng.odd(33, 65), rng.odd(33, 65)],
        ),
    }
}

/// Dims whose last size spans more than one 256-wide block in `small`, so a kernel's loop
/// and its masks both run on the CPU.
pub fn row_dims(rng: &mut Rng, ndim: usize, last: &'static str) -> Dims {
    match ndim {
        2 => Dims::new(
            &["ROWS", last],
            &[rng.pick(&[2048, 4096]), rng.pick(&[1024, 2048, 4096])],
            &[rng.range(3, 9), rng.odd(301, 701)],
            &[rng.odd(37, 131), rng.odd(1001, 5001)],
        ),
        _ => Dims::new(
            &["BATCH", "SEQ", last],
            &[8, rng.pick(&[256, 512]), rng.pick(&[1024, 2048])],
            &[2, rng.range(2, 5), rng.odd(301, 701)],
            &[3, rng.odd(37, 131), rng.odd(1001, 3001)],
        ),
    }
}

/// The load of `x` as fp32 and the value to store, for a dtype.
pub fn load_cast(dtype: Dtype) -> (&'static str, String) {
    match dtype {
        Dtype::F32 => ("", "x".into()),
        d => (".to(tl.float32)", format!("x.to({})", d.triton())),
    }
}
