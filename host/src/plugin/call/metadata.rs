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
        let claimed = info
            .capabilities
            .iter()
            .map(|c| match c {
                guest::metadata::Capability::SpecDiff => Capability::SpecDiff,
                guest::metadata::Capability::Health => Capability::Health,
                guest::metadata::Capability::Backup => Capability::Backup,
                guest::metadata::Capability::Upgrade => Capability::Upgrade,
                guest::metadata::Capability::Finalize => Capability::Finalize,
            })
            .collect();
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
