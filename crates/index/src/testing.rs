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

/// A doc for a Python function `symbol` in `repo` at `path`, lines `lines`, with `text`: the
/// one shape every test and benchmark of the index starts from (change fields with struct
/// update syntax).
pub fn function_doc(
    repo: &str,
    path: &str,
    symbol: &str,
    text: &str,
    lines: (u32, u32),
) -> crate::docs::DocRow {
    let repo = trawl_core::ids::RepoId::parse(repo).expect("a valid repository id");
    crate::docs::DocRow {
        schema_version: crate::docs::DOC_VERSION,
        ord: 0,
        chunk_id: trawl_core::hash::chunk_id(&repo, path, "function", symbol, 0),
        content_hash: trawl_core::hash::content_hash("1", path, text),
        has_vector: true,
        repo_id: repo,
        commit: "c".repeat(40).parse().expect("a valid commit"),
        path: path.to_owned(),
        language: "python".into(),
        kind: trawl_core::kind::ChunkKind::Function,
        symbol: Some(symbol.to_owned()),
        qualified_name: Some(symbol.to_owned()),
        header: String::new(),
        text: text.to_owned(),
        start_line: lines.0,
        end_line: lines.1,
        parent_id: None,
        children_ids: vec![],
        calls: vec![],
        call_ids: vec![],
        imports: vec![],
        members: vec![],
        touched: vec![],
    }
}

/// Doc `i` of a synthetic Python repository (ten functions a file, five lines each) with `text`.
pub fn handler_doc(i: u64, text: &str) -> crate::docs::DocRow {
    let lines = (1 + (i % 10) as u32 * 5, 5 + (i % 10) as u32 * 5);
    function_doc(
        "github.com/acme/shop",
        &format!("src/mod{}.py", i / 10),
        &format!("handler_{i}"),
        text,
        lines,
    )
}

/// A float vector space of `dims` dimensions.
pub fn float_space(dims: u32) -> trawl_core::space::Space {
    trawl_core::space::Space {
        model: "test".into(),
        dims,
        dtype: trawl_core::space::Dtype::Float,
    }
}
