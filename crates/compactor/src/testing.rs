//! Deterministic vectors for tests and benchmarks (no RNG dependency, same values everywhere).

/// A pseudo-random unit vector of `dims` dimensions, a function of `seed`.
pub fn unit(seed: u64, dims: usize) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let v: Vec<f32> = (0..dims)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s % 20_000) as f32 / 10_000.0 - 1.0
        })
        .collect();
    normalized(v)
}

/// `v` scaled to length 1.
pub fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    for x in &mut v {
        *x /= n;
    }
    v
}

/// Vector `i` of a set with structure, as real embeddings have: one of 1,000 cluster centres
/// plus noise.
pub fn clustered(i: u64, dims: usize) -> Vec<f32> {
    let c = unit(i % 1000 + 7_000_000, dims);
    let noise = unit(i, dims);
    normalized(c.iter().zip(&noise).map(|(a, b)| a + 0.6 * b).collect())
}
