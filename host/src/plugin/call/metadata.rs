//! `metadata.get`: the smoke test at load, and what the plugin says about itself
//! ([`answers::check_metadata`]), its configuration schemas made structural
//! ([`answers::config_schema`], [`answers::api_versions`]). A 0.2.0 plugin's `info` lists no
//! API versions ([`bindings::v0_2::Info`]); a 0.1.0 plugin's has neither schema nor printer
//! columns either ([`bindings::v0_1::Info`]).

use super::*;
use crate::plugin::bindings;

impl CompiledPlugin {
    /// Checks, in one instance, that `metadata.get` and every capability's function have the
    /// types the host calls them with ([`typecheck`]), so a component whose exports do not match
    /// the WIT of its version fails at load, as incompatible, rather than at its first call.
    /// The reason, when they do not.
    pub(crate) fn typecheck_exports(
        &self,
        engine: &PluginEngine,
        tags: CallTags,
    ) -> Result<(), String> {
        let wit = self.exports.wit;
        let checked = self.with_instance(
            engine,
            "metadata",
            &CallLimits::default(),
            tags,
            0,
            |store, instance| {
                let get = &self.exports.metadata;
                let metadata = match wit {
                    WitVersion::V0_3 => instance
                        .get_typed_func::<(), (guest::metadata::Info,)>(&mut *store, get)
                        .map(drop),
                    WitVersion::V0_2 => instance
                        .get_typed_func::<(), (bindings::v0_2::Info,)>(&mut *store, get)
                        .map(drop),
                    WitVersion::V0_1 => instance
                        .get_typed_func::<(), (bindings::v0_1::Info,)>(&mut *store, get)
                        .map(drop),
                };
                if let Err(err) = metadata {
                    return Ok(Err(format!(
                        "its {} does not have the types of that version: {err:#}",
                        wit.interface("metadata")
                    )));
                }
                for (&capability, func) in &self.exports.capabilities {
                    if let Err(err) = typecheck(store, instance, capability, func) {
                        return Ok(Err(format!(
                            "its {} does not have the types of {}: {err:#}",
                            wit.interface(capability.interface()),
                            WitVersion::V0_3.interface(capability.interface())
                        )));
                    }
                }
                Ok(Ok(()))
            },
        );
        match checked {
            Ok(types) => types,
            // Not a question of types (a trap while instantiating, memory): the smoke call that
            // follows reports it, with its own reason.
            Err(_) => Ok(()),
        }
    }

    /// Calls `metadata.get`: the smoke test at load, and what the plugin says about itself.
    pub fn call_metadata(
        &self,
        engine: &PluginEngine,
        limits: &CallLimits,
        tags: CallTags,
    ) -> Result<(PluginMetadata, BTreeSet<Capability>), CallError> {
        // metadata gets no input, so its wall clock reads the epoch: same answer every time.
        let info = self.with_instance(engine, "metadata", limits, tags, 0, |store, instance| {
            let get = &self.exports.metadata;
            let info = match self.exports.wit {
                WitVersion::V0_3 => {
                    let (info,) = instance
                        .get_typed_func::<(), (guest::metadata::Info,)>(&mut *store, get)?
                        .call(&mut *store, ())?;
                    info
                }
                WitVersion::V0_2 => {
                    let (old,) = instance
                        .get_typed_func::<(), (bindings::v0_2::Info,)>(&mut *store, get)?
                        .call(&mut *store, ())?;
                    old.into()
                }
                WitVersion::V0_1 => {
                    let (old,) = instance
                        .get_typed_func::<(), (bindings::v0_1::Info,)>(&mut *store, get)?
                        .call(&mut *store, ())?;
                    old.into()
                }
            };
            Ok(info)
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
        let printer_columns = info
            .printer_columns
            .into_iter()
            .map(|c| {
                // By position too, as `ColumnType::ALL` follows the WIT (wasmop-core's tests).
                let type_ = answers::ColumnType::from_wit_index(c.column_type as usize)
                    .ok_or_else(|| CallError::BadOutput {
                        plugin: self.label(),
                        interface: "metadata",
                        reason: format!(
                            "column type #{} is not in this host's table",
                            c.column_type as usize
                        ),
                    })?;
                Ok(answers::PrinterColumn {
                    name: c.name,
                    type_,
                    json_path: c.json_path,
                    description: c.description,
                })
            })
            .collect::<Result<_, CallError>>()?;
        let config_schema = answers::config_schema(info.config_schema.as_deref())
            .map_err(|err| self.bad("metadata", err))?;
        let versions = info
            .versions
            .into_iter()
            .map(|v| (v.name, v.config_schema))
            .collect();
        let versions = answers::api_versions(versions).map_err(|err| self.bad("metadata", err))?;
        let metadata = PluginMetadata {
            name: info.name,
            version: info.version,
            description: info.description,
            owns: info.owns.iter().map(kind).collect(),
            observes: info.observes.iter().map(kind).collect(),
            config_schema,
            printer_columns,
            versions,
        };
        answers::check_metadata(&metadata).map_err(|err| self.bad("metadata", err))?;
        answers::check_convertible(&metadata, &claimed).map_err(|err| self.bad("metadata", err))?;
        Ok((metadata, claimed))
    }
}
