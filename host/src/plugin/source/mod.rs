//! Download: where plugin bytes come from. Each source kind is one module; all of them deliver
//! the same [`Fetched`] (bytes and their digest) and fail with [`LoadError::Fetch`] or
//! [`LoadError::DigestMismatch`].

use std::{fmt, path::PathBuf};

use super::{Digest, LoadError};
use crate::app::PluginSource;

pub mod config_map;
pub mod file;
pub mod oci;

/// Which plugin an App refers to, normalised so that Apps naming the same source share one
/// loaded plugin.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SourceRef {
    /// An OCI reference, as written (`registry/repo:tag` or `registry/repo@sha256:...`).
    Oci(String),
    /// A key in a ConfigMap's `binaryData`.
    ConfigMap {
        /// Namespace of the ConfigMap (the App's).
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// Key in `binaryData`.
        key: String,
    },
    /// A file on the host's filesystem (development).
    File(PathBuf),
}

impl SourceRef {
    /// The source an App's `spec.plugin` names, in the App's `namespace`.
    pub fn from_spec(namespace: &str, plugin: &PluginSource) -> Result<Self, String> {
        match (&plugin.image, &plugin.config_map, &plugin.file) {
            (Some(image), None, None) => Ok(Self::Oci(image.trim().to_string())),
            (None, Some(cm), None) => Ok(Self::ConfigMap {
                namespace: namespace.to_string(),
                name: cm.name.clone(),
                key: cm.key.clone(),
            }),
            (None, None, Some(path)) => Ok(Self::File(PathBuf::from(path))),
            _ => Err("spec.plugin must set exactly one of image, configMap or file".into()),
        }
    }
}

impl fmt::Display for SourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Oci(reference) => write!(f, "{reference}"),
            Self::ConfigMap {
                namespace,
                name,
                key,
            } => write!(f, "configmap:{namespace}/{name}#{key}"),
            Self::File(path) => write!(f, "file:{}", path.display()),
        }
    }
}

/// The bytes of one plugin version and their content digest.
#[derive(Clone)]
pub struct Fetched {
    /// The component bytes.
    pub bytes: Vec<u8>,
    /// sha256 of `bytes`.
    pub digest: Digest,
}

impl fmt::Debug for Fetched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetched")
            .field("digest", &self.digest)
            .field("size", &self.bytes.len())
            .finish()
    }
}

impl Fetched {
    /// Bytes whose digest is computed here.
    pub fn new(bytes: Vec<u8>) -> Self {
        let digest = Digest::of(&bytes);
        Self { bytes, digest }
    }
}

pub(crate) fn fetch_error(source: &SourceRef, message: impl Into<String>) -> LoadError {
    LoadError::Fetch {
        source_ref: source.to_string(),
        message: message.into(),
    }
}
