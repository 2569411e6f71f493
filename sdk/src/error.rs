//! The one error type plugins return, mirrored by `plugin-error` in the WIT.

use std::fmt;

/// Result of every plugin function.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Whose fault an [`Error`] is; the host reacts differently to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The user's App is wrong (usually `spec.config`): the host reports it on
    /// the App and waits for a new generation instead of retrying.
    InvalidConfig,
    /// The host sent something unreadable (malformed JSON, an object without
    /// a name): a host bug.
    InvalidInput,
    /// The plugin failed on valid input: a plugin bug.
    Internal,
}

impl ErrorKind {
    /// The kebab-case name used in the WIT and in logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidConfig => "invalid-config",
            ErrorKind::InvalidInput => "invalid-input",
            ErrorKind::Internal => "internal",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error returned to the host instead of a decision.
///
/// Construct it with [`Error::invalid_config`], [`Error::invalid_input`] or
/// [`Error::internal`]; the SDK itself produces the first two when the App or
/// an observed object cannot be read, naming the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    field: Option<String>,
}

impl Error {
    /// The user's configuration is invalid at `field` (a dotted path such as
    /// `spec.config.replicas`).
    pub fn invalid_config(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::InvalidConfig,
            message: message.into(),
            field: Some(field.into()),
        }
    }

    /// The host's input cannot be read.
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::InvalidInput,
            message: message.into(),
            field: None,
        }
    }

    /// The plugin failed on valid input.
    pub fn internal(message: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Internal,
            message: message.into(),
            field: None,
        }
    }

    /// Sets (or replaces) the field the error is about.
    pub fn with_field(mut self, field: impl Into<String>) -> Self {
        self.field = Some(field.into());
        self
    }

    /// Whose fault it is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The sentence for humans, without the field.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Dotted path of the offending field, when known.
    pub fn field(&self) -> Option<&str> {
        self.field.as_deref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.field {
            Some(field) => write!(f, "{} at {}: {}", self.kind, field, self.message),
            None => write!(f, "{}: {}", self.kind, self.message),
        }
    }
}

impl std::error::Error for Error {}

/// Turns a path-tracking serde error into an [`Error`] about `prefix.<path>`.
///
/// `prefix` is where the deserialized value sits in the App (for example
/// `spec.config`), so the user sees the full path of the bad field.
pub(crate) fn from_path_error(
    kind: ErrorKind,
    prefix: &str,
    err: serde_path_to_error::Error<serde_json::Error>,
) -> Error {
    let path = err.path().to_string();
    let field = match path.as_str() {
        // serde_path_to_error renders the root as ".".
        "." | "" => prefix.to_string(),
        _ if prefix.is_empty() => path,
        _ => format!("{prefix}.{path}"),
    };
    Error {
        kind,
        message: json_message(&err.into_inner()),
        field: Some(field),
    }
}

/// A serde_json error without the " at line 1 column 312" it appends: the
/// host sends each object on one line, so the position says nothing a field
/// path does not say better.
pub(crate) fn json_message(err: &serde_json::Error) -> String {
    let text = err.to_string();
    let position = format!(" at line {} column {}", err.line(), err.column());
    match text.strip_suffix(&position) {
        Some(message) => message.to_string(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_kind_and_field() {
        let err = Error::invalid_config("spec.config.replicas", "must be at least 1");
        assert_eq!(
            err.to_string(),
            "invalid-config at spec.config.replicas: must be at least 1"
        );
        assert_eq!(Error::internal("boom").to_string(), "internal: boom");
    }

    #[test]
    fn path_errors_are_prefixed() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Config {
            backup: Backup,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Backup {
            retain: u32,
        }
        let value = serde_json::json!({"backup": {"retain": "five"}});
        let err = serde_path_to_error::deserialize::<_, Config>(value)
            .map(|_| ())
            .map_err(|e| from_path_error(ErrorKind::InvalidConfig, "spec.config", e))
            .expect_err("a string is not a u32");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert_eq!(err.field(), Some("spec.config.backup.retain"));
        assert!(err.message().contains("expected u32"), "{}", err.message());
    }
}
