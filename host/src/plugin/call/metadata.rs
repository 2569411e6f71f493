//! `metadata.get`: the smoke test at load, and what the plugin says about itself
//! ([`answers::check_metadata`]).

use super::*;

impl CompiledPlugin {
    /// Calls `metadata.get`: the smoke test at load, and what the plugin says about itself.
    pub fn call_metadata(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
    ) -> Result<(PluginMetadata, BTreeSet<Capability>), CallError> {
        // metadata gets no input, so its wall clock reads the epoch: same answer every time.
        let info = self.with_instance(engine, "metadata", limits, tags, 0, |store, instance| {
            self.exports
                .metadata
                .load(&mut *store, instance)?
                .call_get(&mut *store)
        })?;
        let kind = |k: &guest::metadata::KindRef| format!("{}/{}", k.api_version, k.kind);
        // The binding's discriminant is the case's position in the WIT enum, which the
        // capability table follows (checked against the WIT by wasmop-core's tests).
        let claimed = info
            .capabilities
            .iter()
            .map(|&c| {
                Capability::from_wit_index(c as usize).ok_or_else(|| CallError::BadOutput {
                    plugin: self.label(),
                    interface: "metadata",
                    reason: format!("capability #{} is not in this host's table", c as usize),
                })
            })
            .collect::<Result<_, _>>()?;
        let metadata = PluginMetadata {
            name: info.name,
            version: info.version,
            description: info.description,
            owns: info.owns.iter().map(kind).collect(),
            observes: info.observes.iter().map(kind).collect(),
        };
        answers::check_metadata(&metadata).map_err(|err| self.bad("metadata", err))?;
        Ok((metadata, claimed))
    }
}
