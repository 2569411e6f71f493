//! Admission and conversion by plugins (issue 41), served by the host over HTTPS.
//!
//! The stages, as separate modules with separate types:
//! - [`certs`]: the CA and the serving certificate the host makes, renews and rotates itself
//!   (pure decisions and certificate making; no cert-manager needed).
//!
//! Still to come: the Secret that stores them and the reload, the HTTPS server on every
//! replica, the `validate` and `convert` capabilities of the next WIT minor, and the webhook
//! configurations and CRD conversion stanzas for each bound kind.

pub mod certs;
