//! The one hash behind [`ChunkId`] and [`ContentHash`].
//!
//! BLAKE3 in `derive_key` mode, truncated to 128 bits. Why BLAKE3:
//! - **stable**: a fixed, published specification with test vectors; the output does not
//!   depend on platform, endianness, SIMD level or crate release (unlike `std::hash`, or
//!   seeded hashers), so ids written today match ids computed by any future release;
//! - **fast**: several GB/s per core with SIMD, far above what the chunker produces;
//! - **collision resistant**: content hashes decide org-wide embedding dedupe, so a crafted
//!   collision would let one repository poison another's vectors; a non-cryptographic hash
//!   (xxh3, FNV) would allow that. 128 bits keeps the birthday bound far beyond 10^15 chunks.
//!
//! Each use has its own domain-separation context, and every field is length-prefixed, so
//! `("ab", "c")` and `("a", "bc")` never hash alike. Changing a context string or the field
//! order is a breaking change to every stored id: don't.

use crate::ids::{ChunkId, ContentHash, RepoId};

const CHUNK_ID_CONTEXT: &str = "trawl 2026-11-29 chunk id v1";
const CONTENT_HASH_CONTEXT: &str = "trawl 2026-11-29 content hash v1";

struct Fields(blake3::Hasher);

impl Fields {
    fn new(context: &str) -> Self {
        Self(blake3::Hasher::new_derive_key(context))
    }

    fn field(&mut self, bytes: &[u8]) -> &mut Self {
        self.0.update(&(bytes.len() as u64).to_le_bytes());
        self.0.update(bytes);
        self
    }

    fn finish(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out.copy_from_slice(&self.0.finalize().as_bytes()[..16]);
        out
    }
}

/// `chunk_id = H(repo_id, path, kind, qualified symbol, ordinal among same-named siblings)`.
///
/// No byte offsets or line numbers go in, so an edit elsewhere in the file keeps the id.
pub fn chunk_id(
    repo: &RepoId,
    path: &str,
    kind: &str,
    qualified_symbol: &str,
    ordinal: u32,
) -> ChunkId {
    ChunkId::from_bytes(
        Fields::new(CHUNK_ID_CONTEXT)
            .field(repo.as_str().as_bytes())
            .field(path.as_bytes())
            .field(kind.as_bytes())
            .field(qualified_symbol.as_bytes())
            .field(&ordinal.to_le_bytes())
            .finish(),
    )
}

/// `content_hash = H(input_version, header, text)`: what the embedder sees, plus the version
/// of how it is put together (the chunker's `EMBED_INPUT_VERSION`, not its chunking rules:
/// a chunk that a new chunker cuts the same keeps its vector). Equal across forks and paths
/// when the header is equal.
pub fn content_hash(input_version: &str, header: &str, text: &str) -> ContentHash {
    ContentHash::from_bytes(
        Fields::new(CONTENT_HASH_CONTEXT)
            .field(input_version.as_bytes())
            .field(header.as_bytes())
            .field(text.as_bytes())
            .finish(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_pinned_across_releases() {
        // If this fails, every id in every store changes: that needs a migration, not a
        // new expected value.
        let repo = RepoId::parse("github.com/pallets/flask").unwrap();
        let id = chunk_id(&repo, "src/flask/app.py", "method", "Flask.run", 0);
        let h = content_hash("1", "src/flask/app.py", "def run(): pass");
        assert_eq!(id.to_hex().len(), 32);
        assert_eq!(
            id,
            chunk_id(&repo, "src/flask/app.py", "method", "Flask.run", 0)
        );
        assert_eq!(h, content_hash("1", "src/flask/app.py", "def run(): pass"));
        assert_eq!(id.to_hex(), PINNED_CHUNK_ID);
        assert_eq!(h.to_hex(), PINNED_CONTENT_HASH);
    }

    const PINNED_CHUNK_ID: &str = "b138545ae9c53154e396be4d4be8571c";
    const PINNED_CONTENT_HASH: &str = "b4ce551d2012a1fe7f439d6be3e7b273";

    #[test]
    fn fields_are_unambiguous() {
        assert_ne!(content_hash("1", "ab", "c"), content_hash("1", "a", "bc"));
        let repo = RepoId::parse("github.com/a/b").unwrap();
        assert_ne!(
            chunk_id(&repo, "p", "function", "f", 0),
            chunk_id(&repo, "p", "function", "f", 1)
        );
        assert_ne!(
            chunk_id(&repo, "p", "function", "f", 0),
            chunk_id(&repo, "p", "method", "f", 0)
        );
    }
}
