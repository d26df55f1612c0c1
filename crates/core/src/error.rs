use std::fmt;

/// Everything that can go wrong in the core: bad identities, bad configuration, the store and
/// the bus. [`Error::is_retryable`] separates transient failures from permanent ones.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid repository id {input:?}: {reason}")]
    InvalidRepoId { input: String, reason: String },

    #[error("invalid {kind} {input:?}")]
    InvalidId { kind: &'static str, input: String },

    #[error("configuration: {0}")]
    Config(String),

    #[error("store {op} {key:?}: {source}")]
    Store {
        op: StoreOp,
        key: String,
        #[source]
        source: object_store::Error,
    },

    #[error("store URL {url:?}: {reason}")]
    StoreUrl { url: String, reason: String },

    #[error("bus: {0}")]
    Bus(String),

    #[error("bus URL {url:?}: {reason}")]
    BusUrl { url: String, reason: String },

    #[error("record {what}: {reason}")]
    Record { what: &'static str, reason: String },
}

/// The store operation that failed, for messages and retry decisions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    Get,
    Put,
    List,
    Delete,
}

impl fmt::Display for StoreOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreOp::Get => "get",
            StoreOp::Put => "put",
            StoreOp::List => "list",
            StoreOp::Delete => "delete",
        })
    }
}

impl Error {
    /// True when the same call may succeed later (network, throttling, a store that is
    /// briefly unavailable). Permanent errors — bad input, missing permissions, bad
    /// configuration — are not retried.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Store { source, .. } => !matches!(
                source,
                object_store::Error::NotFound { .. }
                    | object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. }
                    | object_store::Error::NotSupported { .. }
                    | object_store::Error::NotImplemented { .. }
                    | object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }
                    | object_store::Error::InvalidPath { .. }
                    | object_store::Error::UnknownConfigurationKey { .. }
            ),
            Error::Bus(_) => true,
            _ => false,
        }
    }
}
