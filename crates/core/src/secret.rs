//! A secret value (a bearer token, an API key) that never leaves the process by accident.
//!
//! `Debug` prints `***`, and so does serialisation: `trawl config`, a `{:?}` in a log line or
//! an error built from a config struct show that a secret is set, never what it is. The value
//! is read only through [`Secret::expose`], at the one place that sends it.

use serde::{Deserialize, Serialize, Serializer};

/// What a set secret shows in `Debug` and serialisation.
pub const MASK: &str = "***";

/// A string that is never printed.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself: only for sending it where it belongs.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Self::new(s)
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("\"\"")
        } else {
            f.write_str(MASK)
        }
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0.is_empty() { "" } else { MASK })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_serialisation_never_show_the_value() {
        let s = Secret::from("ghp_0123456789abcdefghij");
        assert_eq!(format!("{s:?}"), "***");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"***\"");
        assert_eq!(s.expose(), "ghp_0123456789abcdefghij");
        let back: Secret = serde_json::from_str("\"abc\"").unwrap();
        assert_eq!(back.expose(), "abc");
        assert_eq!(format!("{:?}", Secret::default()), "\"\"");
    }
}
