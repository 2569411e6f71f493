//! A plugin whose behaviour is chosen when it is built (`ROLLOUT_VARIANT`), so that one source
//! can serve digests that differ as a rollout must tell apart: `v1` (the default) and `v2` plan
//! one ConfigMap each (their data differ) and report healthy once it exists; `refuse` plans, for
//! an instance whose `spec.fragile` is true, a ConfigMap in `kube-system`, which the guard
//! refuses; `degraded` plans as `v2` and reports the service Degraded.

use serde::Deserialize;
use wasmop_sdk::k8s_openapi::api::core::v1::ConfigMap;
use wasmop_sdk::objects::{Scope, config_map};
use wasmop_sdk::schemars::{self, JsonSchema};
use wasmop_sdk::{
    Health, HealthInput, HealthReport, Metadata, Plan, PlanInput, Plugin, Result, SpecDiff,
};

/// The variant built.
const VARIANT: &str = match option_env!("ROLLOUT_VARIANT") {
    Some(variant) => variant,
    None => "v1",
};

/// An instance's configuration.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Written into the ConfigMap.
    pub message: String,
    /// The `refuse` variant plans past the guard for this instance.
    pub fragile: bool,
}

/// The plugin.
pub struct Rollout;

impl Plugin for Rollout {
    type Config = Config;

    fn metadata() -> Metadata {
        Metadata::new("rollout", "0.1.0")
            .description("one ConfigMap, in several variants")
            .owns::<ConfigMap>()
    }
}

fn name<C>(input: &wasmop_sdk::App<C>) -> String {
    format!("{}-rollout", input.name())
}

impl SpecDiff for Rollout {
    fn plan(input: &PlanInput<Config>) -> Result<Plan> {
        let config = input.app.config();
        let scope = Scope::new(&input.app, "rollout");
        let data = match VARIANT {
            "v1" => "v1",
            _ => "v2",
        };
        let mut object = config_map(
            &scope,
            name(&input.app),
            [("variant", data), ("message", config.message.as_str())],
        );
        if VARIANT == "refuse" && config.fragile {
            object.metadata.namespace = Some("kube-system".into());
        }
        let mut plan = Plan::new();
        plan.push(&object)?;
        Ok(plan)
    }
}

impl Health for Rollout {
    fn check(input: &HealthInput<Config>) -> Result<HealthReport> {
        if VARIANT == "degraded" {
            return Ok(HealthReport::degraded(
                "the service is down (the degraded variant)",
            ));
        }
        Ok(
            match input.observed.contains::<ConfigMap>(&name(&input.app)) {
                true => HealthReport::healthy("the ConfigMap exists").rollout_complete(true),
                false => HealthReport::progressing("the ConfigMap does not exist yet"),
            },
        )
    }
}

wasmop_sdk::export!(Rollout: SpecDiff, Health);
