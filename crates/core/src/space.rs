//! Vector spaces: the one type the embedders write, the index records in its manifests and the
//! query service matches an embedder against.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How a vector is stored. Serialised (manifests, configuration) as Voyage names it:
/// `float`, `int8`, `uint8`, `binary`, `ubinary`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    Float,
    Int8,
    Uint8,
    /// Bit-packed, `dims / 8` bytes, offset so that bit 1 means positive.
    Binary,
    Ubinary,
}

/// A dtype name that is none of [`Dtype::ALL`].
#[derive(Debug, thiserror::Error)]
#[error("unknown dtype {0:?}: use float, int8, uint8, binary or ubinary")]
pub struct UnknownDtype(pub String);

impl Dtype {
    pub const ALL: [Dtype; 5] = [
        Dtype::Float,
        Dtype::Int8,
        Dtype::Uint8,
        Dtype::Binary,
        Dtype::Ubinary,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::Float => "float",
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Binary => "binary",
            Dtype::Ubinary => "ubinary",
        }
    }

    /// Bytes of one vector of `dims` dimensions (floats are 4 bytes each).
    pub fn bytes(self, dims: u32) -> usize {
        match self {
            Dtype::Float => dims as usize * 4,
            Dtype::Int8 | Dtype::Uint8 => dims as usize,
            Dtype::Binary | Dtype::Ubinary => dims.div_ceil(8) as usize,
        }
    }

    /// Bit-packed: compared by Hamming distance.
    pub fn is_binary(self) -> bool {
        matches!(self, Dtype::Binary | Dtype::Ubinary)
    }
}

impl FromStr for Dtype {
    type Err = UnknownDtype;
    fn from_str(s: &str) -> Result<Self, UnknownDtype> {
        Dtype::ALL
            .into_iter()
            .find(|d| d.as_str() == s)
            .ok_or_else(|| UnknownDtype(s.to_owned()))
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A vector space: embeddings are cached under `(model, dims, dtype, content_hash)`, so two
/// embedders with the same space are interchangeable and a different space re-embeds. A
/// generation's manifest records the space its vectors are in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Space {
    pub model: String,
    pub dims: u32,
    pub dtype: Dtype,
}

impl Space {
    /// `<model>.<dims>.<dtype>`, with every character outside `[A-Za-z0-9._-]` replaced by
    /// `-`: the directory name of the space's parts.
    pub fn key(&self) -> String {
        crate::store::keys::space(&self.model, self.dims, self.dtype.as_str())
    }
}

impl fmt::Display for Space {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} dims, {})", self.model, self.dims, self.dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtypes_serialise_to_the_names_stored_before_they_were_an_enum() {
        for d in Dtype::ALL {
            assert_eq!(serde_json::to_string(&d).unwrap(), format!("\"{d}\""));
            assert_eq!(d.as_str().parse::<Dtype>().unwrap(), d);
        }
        let err = "float32".parse::<Dtype>().unwrap_err().to_string();
        assert!(err.contains("use float, int8"), "{err}");
        assert!(serde_json::from_str::<Dtype>("\"Float\"").is_err());
    }

    #[test]
    fn a_space_as_manifests_store_it_still_reads_and_writes_the_same() {
        // The form written when the space's dtype was a string.
        let stored = r#"{"model":"voyage-code-3","dims":1024,"dtype":"int8"}"#;
        let s: Space = serde_json::from_str(stored).unwrap();
        assert_eq!(
            s,
            Space {
                model: "voyage-code-3".into(),
                dims: 1024,
                dtype: Dtype::Int8,
            }
        );
        assert_eq!(serde_json::to_string(&s).unwrap(), stored);
        let bad = r#"{"model":"m","dims":8,"dtype":"float16"}"#;
        assert!(serde_json::from_str::<Space>(bad).is_err());
    }
}
