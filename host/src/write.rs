//! How the host writes to the API server: as one field manager ([`FIELD_MANAGER`]), and only
//! through the leader fence ([`before_write`]). Every module that writes (the executor, the
//! status writer, the policy status writer, finalizers, the CRD installer) takes both from
//! here, so none has to import another's.

/// The field manager the host uses for everything it applies.
pub const FIELD_MANAGER: &str = "wasmop";

/// Every write to the API server first passes the leader fence
/// ([`crate::leader::ensure_leading`]), and is logged (debug) as it is sent: which replica
/// wrote when, for the fault tests' check that two never act at once.
pub fn before_write(verb: &'static str, kind: &str) {
    crate::leader::ensure_leading();
    tracing::debug!(verb, kind, "writing to the API server");
}
