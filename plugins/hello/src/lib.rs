//! `hello`: the smallest useful wasmop plugin, and the template to copy.
//!
//! It runs an HTTP echo server that answers every request with
//! `spec.config.message`, as a Deployment behind a ClusterIP Service. It
//! implements only `spec-diff`, so its component exports only
//! `wasmop:plugin/metadata` and `wasmop:plugin/spec-diff`; health, backups
//! and upgrade gates are left to the host's defaults.
//!
//! ```yaml
//! apiVersion: wasmop.dev/v1alpha1
//! kind: App
//! metadata: {name: greeter, namespace: default}
//! spec:
//!   plugin: {image: registry.example/wasmop/hello:0.1.0}
//!   version: "1.0.0"
//!   config: {message: "hi there", replicas: 2}
//! ```

use serde::Deserialize;
use wasmop_sdk::k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use wasmop_sdk::k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service,
};
use wasmop_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use wasmop_sdk::objects::{Scope, ServiceBuilder};
use wasmop_sdk::schemars::{self, JsonSchema};
use wasmop_sdk::{Error, Metadata, Plan, PlanInput, Plugin, Result, SpecDiff};

/// Port the echo server listens on.
const PORT: i32 = 5678;

/// The configuration of a hello echo server: a hello App's `spec.config`, or
/// the `spec` of a kind bound to the plugin. Every field has a default, so it
/// may be left out entirely.
// Doc comments are what `kubectl explain` shows for a kind bound to the plugin, and the
// `#[schemars(...)]` limits are enforced by the API server there (`Plugin::validate` still
// checks them, for an App).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The text every HTTP request is answered with.
    #[schemars(length(min = 1))]
    pub message: String,
    /// How many echo servers run (Deployment replicas), at least 1.
    #[schemars(range(min = 1))]
    pub replicas: i32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            message: "hello from wasmop".to_string(),
            replicas: 1,
        }
    }
}

/// The plugin.
pub struct Hello;

impl Plugin for Hello {
    type Config = Config;

    fn metadata() -> Metadata {
        Metadata::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION"))
            .description("An HTTP echo server")
            .owns::<Deployment>()
            .owns::<Service>()
    }

    fn validate(config: &Config) -> Result<()> {
        if config.replicas < 1 {
            return Err(Error::invalid_config(
                "spec.config.replicas",
                "must be at least 1",
            ));
        }
        if config.message.is_empty() {
            return Err(Error::invalid_config(
                "spec.config.message",
                "must not be empty",
            ));
        }
        Ok(())
    }
}

impl SpecDiff for Hello {
    fn plan(input: &PlanInput<Config>) -> Result<Plan> {
        let config = input.app.config();
        let name = input.app.name();
        let scope = Scope::new(&input.app, "hello")
            .with_component("server")
            .with_version(&input.target_version);

        // No SDK builder for Deployments: any k8s-openapi object works, as
        // long as it uses the scope's metadata and selector.
        let deployment = Deployment {
            metadata: scope.metadata(name),
            spec: DeploymentSpec {
                replicas: Some(config.replicas),
                selector: LabelSelector {
                    match_labels: Some(scope.selector()),
                    ..Default::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(scope.labels()),
                        ..Default::default()
                    }),
                    spec: Some(hardened(PodSpec {
                        containers: vec![Container {
                            name: "echo".to_string(),
                            // spec.version picks the image tag.
                            image: Some(format!("hashicorp/http-echo:{}", input.target_version)),
                            args: Some(vec![
                                format!("-text={}", config.message),
                                format!("-listen=:{PORT}"),
                            ]),
                            ports: Some(vec![ContainerPort {
                                name: Some("http".to_string()),
                                container_port: PORT,
                                ..Default::default()
                            }]),
                            ..Default::default()
                        }],
                        ..Default::default()
                    })),
                },
                ..Default::default()
            },
            status: None,
        };
        let service = ServiceBuilder::cluster_ip(&scope, name)
            .port("http", PORT)
            .build();

        let mut plan = Plan::new();
        plan.push(&deployment)?.push(&service)?;
        wasmop_sdk::log::debug(
            "planned",
            &[("objects", &plan.len()), ("version", &input.target_version)],
        );
        Ok(plan)
    }
}

wasmop_sdk::export!(Hello: SpecDiff);

/// `spec` made to pass the host's default policy (non-root, no capabilities, no token), as
/// the SDK's builders do for theirs.
fn hardened(mut spec: PodSpec) -> PodSpec {
    // http-echo runs as root unless told otherwise; any unprivileged user serves it.
    spec.security_context = Some(wasmop_sdk::k8s_openapi::api::core::v1::PodSecurityContext {
        run_as_user: Some(65532),
        ..Default::default()
    });
    wasmop_sdk::objects::harden(&mut spec);
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wasmop_sdk::testing::{self, Fixture};
    use wasmop_sdk::{Capability, ErrorKind};

    use std::collections::BTreeMap;

    fn selector(app: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "app.kubernetes.io/component".to_string(),
                "server".to_string(),
            ),
            ("app.kubernetes.io/instance".to_string(), app.to_string()),
            ("app.kubernetes.io/name".to_string(), "hello".to_string()),
            ("wasmop.dev/app".to_string(), app.to_string()),
        ])
    }

    fn app(config: serde_json::Value) -> String {
        testing::app("greeter", "default", "1.0.0", config)
    }

    /// The whole reconcile as the host runs it: the plan applied once with the host's labels,
    /// then nothing more to write, whatever the config.
    #[test]
    fn reconcile_applies_once_then_writes_nothing() {
        for config in [
            json!(null),
            json!({"replicas": 3}),
            json!({"message": "hi"}),
        ] {
            let fixture = Fixture::new(app(config.clone()));
            let first = fixture.reconcile::<Hello>().expect("reconciles");
            assert_eq!(first.apply.len(), 2, "{config}");
            assert!(first.apply.iter().all(|o| {
                o.to_value()["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "wasmop"
            }));
            let second = fixture
                .after(&first)
                .reconcile::<Hello>()
                .expect("reconciles");
            assert!(second.writes_nothing(), "{config}: {second:#?}");
            assert_eq!(second.status, first.status, "{config}");
            assert!(second.events.is_empty(), "{config}: {:?}", second.events);
        }
    }

    #[test]
    fn plans_a_deployment_and_a_service() {
        let plan = Fixture::new(app(json!({"message": "hi", "replicas": 2})))
            .plan::<Hello>()
            .expect("plans");
        let keys: Vec<_> = plan
            .keys()
            .into_iter()
            .map(|(_, kind, name)| (kind, name))
            .collect();
        assert_eq!(
            keys,
            [
                ("Deployment".into(), "greeter".into()),
                ("Service".into(), "greeter".into())
            ]
        );

        let deployment: Deployment = plan.get("greeter").expect("typed").expect("planned");
        let spec = deployment.spec;
        assert_eq!(spec.replicas, Some(2));
        assert_eq!(spec.selector.match_labels, Some(selector("greeter")));
        let pod = spec.template.spec.expect("pod spec");
        assert_eq!(
            pod.containers[0].image.as_deref(),
            Some("hashicorp/http-echo:1.0.0")
        );
        assert!(
            pod.containers[0]
                .args
                .iter()
                .flatten()
                .any(|a| a == "-text=hi")
        );

        let service: Service = plan.get("greeter").expect("typed").expect("planned");
        assert_eq!(
            service.spec.and_then(|s| s.selector),
            Some(selector("greeter"))
        );
    }

    #[test]
    fn config_is_optional() {
        let plan = Fixture::new(app(json!(null)))
            .plan::<Hello>()
            .expect("defaults");
        let deployment: Deployment = plan.get("greeter").expect("typed").expect("planned");
        assert_eq!(deployment.spec.replicas, Some(1));
    }

    #[test]
    fn renders_the_target_version_not_the_spec_version() {
        let plan = Fixture::new(app(json!({})))
            .target_version("0.9.0")
            .plan::<Hello>()
            .expect("plans");
        let deployment: Deployment = plan.get("greeter").expect("typed").expect("planned");
        let image = deployment
            .spec
            .template
            .spec
            .map(|p| p.containers[0].image.clone());
        assert_eq!(image, Some(Some("hashicorp/http-echo:0.9.0".into())));
    }

    #[test]
    fn bad_config_is_a_typed_error_naming_the_field() {
        for (config, field) in [
            (json!({"replicas": 0}), "spec.config.replicas"),
            (json!({"message": ""}), "spec.config.message"),
            (json!({"replicas": "two"}), "spec.config.replicas"),
        ] {
            let err = Fixture::new(app(config))
                .plan::<Hello>()
                .expect_err("invalid");
            assert_eq!(err.kind(), ErrorKind::InvalidConfig);
            assert_eq!(err.field(), Some(field));
        }
        let err = Fixture::new(app(json!({"mesage": "typo"})))
            .plan::<Hello>()
            .expect_err("typo");
        assert!(err.message().contains("mesage"), "{err}");
    }

    #[test]
    fn metadata_lists_only_spec_diff() {
        let metadata = Fixture::metadata::<Hello>();
        assert_eq!(metadata.name, "hello");
        assert_eq!(metadata.capabilities, [Capability::SpecDiff]);
        assert_eq!(metadata.owns.len(), 2);
    }

    /// The schema a CRD made for the plugin gets: the fields' docs and limits.
    #[test]
    fn the_config_schema_documents_and_bounds_each_field() {
        let schema = Fixture::config_schema::<Hello>()
            .expect("the host would load it")
            .expect("a schema");
        let fields = &schema["properties"];
        assert_eq!(
            fields["message"]["description"],
            "The text every HTTP request is answered with."
        );
        assert_eq!(fields["message"]["minLength"], 1);
        assert_eq!(fields["replicas"]["minimum"], 1);
        assert_eq!(fields["replicas"]["default"], 1);
        assert!(
            schema.get("required").is_none(),
            "every field has a default"
        );
    }
}
