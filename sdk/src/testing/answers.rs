//! The host's rules on answers ([`wasmop_core::answers`]) applied to what the plugin under test
//! returns: each answer is converted to the core's and checked by the same functions the host
//! calls, with the host's default output cap, so a [`Fixture`](super::Fixture) fails where the
//! host would refuse the answer as `BadOutput`, in the host's words. Here: how a refusal is
//! said, and `metadata`; each capability's answer is checked beside its trait (e.g.
//! `crate::health::native::checked`).

use wasmop_core::{
    Failure,
    answers::{self, AnswerError, BAD_OUTPUT, PluginMetadata},
};

use crate::error::Error;
use crate::metadata::{KindRef, Metadata, Plugin};

/// Names the plugin in messages, as `name@version` (the host says `name@digest`).
pub(super) fn label(metadata: &Metadata) -> String {
    format!("{}@{}", metadata.name, metadata.version)
}

/// An answer of plugin `P` to `interface` that the host would refuse, as a
/// [`Fixture`](super::Fixture) method returns it: an `internal` error (a plugin bug) saying so,
/// with the host's message.
pub(super) fn refused<P: Plugin>(interface: &'static str) -> impl FnOnce(AnswerError) -> Error {
    move |err| {
        Error::internal(format!(
            "the host would refuse this answer as {BAD_OUTPUT}: {}",
            answers::refusal(&label(&P::metadata()), interface, &err)
        ))
    }
}

/// An answer the host would refuse, as the host's reconcile reports it.
pub(super) fn failure(label: &str, interface: &str, err: &AnswerError) -> Failure {
    Failure::new(BAD_OUTPUT, answers::refusal(label, interface, err))
}

/// `metadata.get`'s answer, checked.
pub(super) fn metadata(metadata: &Metadata) -> Result<PluginMetadata, AnswerError> {
    let kinds = |refs: &[KindRef]| -> Vec<String> {
        refs.iter()
            .map(|k| format!("{}/{}", k.api_version, k.kind))
            .collect()
    };
    let checked = PluginMetadata {
        name: metadata.name.clone(),
        version: metadata.version.clone(),
        description: metadata.description.clone(),
        owns: kinds(&metadata.owns),
        observes: kinds(&metadata.observes),
        config_schema: answers::config_schema(metadata.config_schema.as_deref())?,
        printer_columns: metadata.printer_columns.clone(),
        versions: answers::api_versions(
            metadata
                .versions
                .iter()
                .map(|v| (v.name.clone(), v.config_schema.clone()))
                .collect(),
        )?,
    };
    answers::check_metadata(&checked)?;
    let capabilities = metadata.capabilities.iter().copied().collect();
    answers::check_convertible(&checked, &capabilities)?;
    Ok(checked)
}
