//! What a chunk is: the `kind` of a chunk record and of a doc row. Written as these names
//! (a UTF-8 column in Parquet, a string in JSON), as they were when the field was text.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Error;

/// What a chunk is. The chunker makes every kind but [`ChunkKind::Commit`], which the
/// compactor makes of a repository's commit messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChunkKind {
    Function,
    Method,
    Class,
    Struct,
    Enum,
    Interface,
    Trait,
    Impl,
    /// A named type that is not a struct, enum, class or interface: a type alias (Rust's
    /// `type Result<T> = …`, Go's `type Level = uint32`) or a Go type defined by another
    /// (`type HandlerFunc func(…)`, `type Level uint32`).
    Type,
    /// A macro definition (`macro_rules!`).
    Macro,
    Module,
    Namespace,
    /// A named constant or variable at a file's top level (`const MAX: usize`, Go's `var
    /// AllLevels`, Python's `DEFAULT_TIMEOUT = 5`): a member of the module-code chunk that
    /// holds it, not a chunk of its own.
    Constant,
    ClassSkeleton,
    /// Code between definitions.
    Code,
    Section,
    Text,
    Window,
    Toc,
    /// A commit message.
    Commit,
}

impl ChunkKind {
    /// Every kind.
    pub const ALL: [ChunkKind; 20] = [
        ChunkKind::Function,
        ChunkKind::Method,
        ChunkKind::Class,
        ChunkKind::Struct,
        ChunkKind::Enum,
        ChunkKind::Interface,
        ChunkKind::Trait,
        ChunkKind::Impl,
        ChunkKind::Type,
        ChunkKind::Macro,
        ChunkKind::Module,
        ChunkKind::Namespace,
        ChunkKind::Constant,
        ChunkKind::ClassSkeleton,
        ChunkKind::Code,
        ChunkKind::Section,
        ChunkKind::Text,
        ChunkKind::Window,
        ChunkKind::Toc,
        ChunkKind::Commit,
    ];

    /// The name written for it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChunkKind::Function => "function",
            ChunkKind::Method => "method",
            ChunkKind::Class => "class",
            ChunkKind::Struct => "struct",
            ChunkKind::Enum => "enum",
            ChunkKind::Interface => "interface",
            ChunkKind::Trait => "trait",
            ChunkKind::Impl => "impl",
            ChunkKind::Type => "type",
            ChunkKind::Macro => "macro",
            ChunkKind::Module => "module",
            ChunkKind::Namespace => "namespace",
            ChunkKind::Constant => "constant",
            ChunkKind::ClassSkeleton => "class_skeleton",
            ChunkKind::Code => "module_code",
            ChunkKind::Section => "section",
            ChunkKind::Text => "text",
            ChunkKind::Window => "window",
            ChunkKind::Toc => "toc",
            ChunkKind::Commit => "commit",
        }
    }

    /// True for the definitions of code a name stands for: functions, methods, types and
    /// impl blocks (not modules, skeletons, module code or prose).
    pub fn is_code_definition(self) -> bool {
        matches!(
            self,
            ChunkKind::Function
                | ChunkKind::Method
                | ChunkKind::Class
                | ChunkKind::Struct
                | ChunkKind::Enum
                | ChunkKind::Interface
                | ChunkKind::Trait
                | ChunkKind::Impl
                | ChunkKind::Type
                | ChunkKind::Macro
        )
    }

    /// True for kinds whose oversize definitions split into members plus a skeleton.
    pub fn is_container(self) -> bool {
        matches!(
            self,
            ChunkKind::Class
                | ChunkKind::Struct
                | ChunkKind::Enum
                | ChunkKind::Interface
                | ChunkKind::Trait
                | ChunkKind::Impl
                | ChunkKind::Module
                | ChunkKind::Namespace
        )
    }
}

impl fmt::Display for ChunkKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ChunkKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        ChunkKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| Error::InvalidId {
                kind: "chunk kind",
                input: s.to_owned(),
            })
    }
}

impl Serialize for ChunkKind {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ChunkKind {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_read_back_from_its_name_and_no_other_name_is_a_kind() {
        for k in ChunkKind::ALL {
            assert_eq!(k.as_str().parse::<ChunkKind>().unwrap(), k);
            assert_eq!(
                serde_json::to_string(&k).unwrap(),
                format!("\"{}\"", k.as_str())
            );
        }
        assert!("Function".parse::<ChunkKind>().is_err());
        assert!("code".parse::<ChunkKind>().is_err());
    }
}
