//! `hello`: the smallest useful wasmop plugin, and the template to copy.
//!
//! It runs an HTTP echo server that answers every request with
//! `spec.config.message`, as a Deployment behind a ClusterIP Service. It
//! implements `spec-diff`, and for a kind bound to it (a `Greeting`, say)
//! `validate` (the instance's name must suit its Service) and `convert` (from
//! `v1alpha1`, where the message was `text`, to `v1`); health, backups and
//! upgrade gates are left to the host's defaults. Its component exports
//! `wasmop:plugin/metadata` and those three interfaces.
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

use serde::{Deserialize, Serialize};
use wasmop_sdk::k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec};
use wasmop_sdk::k8s_openapi::api::core::v1::{
    Container, ContainerPort, PodSpec, PodTemplateSpec, Service,
};
use wasmop_sdk::k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use wasmop_sdk::objects::{Scope, ServiceBuilder};
use wasmop_sdk::schemars::{self, JsonSchema};
use wasmop_sdk::{
    Admission, Convert, Error, Metadata, Operation, Plan, PlanInput, Plugin, Result, SpecDiff,
    Validate, Verdict,
};

/// Port the echo server listens on.
const PORT: i32 = 5678;

/// The configuration of a hello echo server: a hello App's `spec.config`, or
/// the `spec` of a kind bound to the plugin (at its API version `v1`). Every
/// field has a default, so it may be left out entirely.
// Doc comments are what `kubectl explain` shows for a kind bound to the plugin, and the
// `#[schemars(...)]` limits are enforced by the API server there (`Plugin::validate` still
// checks them, for an App). Serialize: a conversion writes it.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
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

/// The configuration at the bound kind's previous API version, `v1alpha1`:
/// the text was `text`, after http-echo's `-text` flag.
#[derive(Debug, Deserialize, Serialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigV1alpha1 {
    /// The text every HTTP request is answered with.
    #[schemars(length(min = 1))]
    pub text: String,
    /// How many echo servers run (Deployment replicas), at least 1.
    #[schemars(range(min = 1))]
    pub replicas: i32,
}

impl Default for ConfigV1alpha1 {
    fn default() -> Self {
        let config = Config::default();
        ConfigV1alpha1 {
            text: config.message,
            replicas: config.replicas,
        }
    }
}

/// `v1alpha1` and `v1` hold the same, named differently: each way is a rename.
impl Convert for Hello {
    type Previous = ConfigV1alpha1;
    const PREVIOUS_VERSION: &'static str = "v1alpha1";
    const VERSION: &'static str = "v1";

    fn up(previous: ConfigV1alpha1) -> Result<Config> {
        Ok(Config {
            message: previous.text,
            replicas: previous.replicas,
        })
    }

    fn down(config: Config) -> Result<ConfigV1alpha1> {
        Ok(ConfigV1alpha1 {
            text: config.message,
            replicas: config.replicas,
        })
    }
}

/// What the API server may write of a bound kind's instance, beyond its
/// schema (the SDK has refused a configuration `validate` refuses already).
impl Validate for Hello {
    fn review(input: &Admission<Config>) -> Result<Verdict> {
        let mut verdict = Verdict::allow();
        // The instance's name is its Service's, and a Service's name is a DNS-1035 label,
        // while a custom resource's may be any DNS-1123 subdomain (`my.greeter`, `1st`):
        // refused now, not by every reconcile after. The schema, of `spec`, cannot say it.
        let name = input.object.name();
        if input.operation == Operation::Create && !is_dns_1035_label(name) {
            verdict = verdict.deny(
                "metadata.name",
                format!(
                    "{name:?} also names the Service, so it must be a DNS-1035 label: at most 63 \
                     lower-case letters, digits and '-', starting with a letter"
                ),
            );
        }
        if let (Operation::Update, Some(old)) = (input.operation, input.old_config()) {
            let (from, to) = (old.replicas, input.config().replicas);
            if to < from / 2 {
                verdict = verdict.warn(format!(
                    "scaling from {from} to {to} echo servers stops more than half of them at \
                     once; the rest take all their traffic"
                ));
            }
        }
        Ok(verdict)
    }
}

/// At most 63 lower-case letters, digits and `-`, starting with a letter and
/// not ending with `-`.
fn is_dns_1035_label(name: &str) -> bool {
    (1..=63).contains(&name.len())
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
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

wasmop_sdk::export!(Hello: SpecDiff, Validate, Convert);

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
    fn metadata_lists_its_capabilities_and_versions() {
        let metadata = Fixture::metadata::<Hello>();
        assert_eq!(metadata.name, "hello");
        assert_eq!(
            metadata.capabilities,
            [
                Capability::SpecDiff,
                Capability::Validate,
                Capability::Convert
            ]
        );
        assert_eq!(metadata.owns.len(), 2);
        let versions: Vec<&str> = metadata.versions.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(versions, ["v1alpha1", "v1"]);
    }

    /// An instance of a kind bound to hello, `Greeting` in `greet.example.com/<version>`.
    fn greeting(name: &str, version: &str, spec: serde_json::Value) -> String {
        testing::instance(
            &format!("greet.example.com/{version}"),
            "Greeting",
            name,
            "default",
            "1.0.0",
            spec,
        )
    }

    #[test]
    fn a_greeting_is_named_as_its_service_must_be() {
        let create = |name: &str| {
            Fixture::new(greeting(name, "v1", json!({})))
                .validate::<Hello>(Operation::Create)
                .expect("a verdict")
        };
        assert!(create("greeter").allowed());
        for name in ["my.greeter", "1st", "greeter-"] {
            let verdict = create(name);
            assert_eq!(verdict.violations.len(), 1, "{name}");
            assert_eq!(verdict.violations[0].field, "metadata.name");
            assert!(
                verdict.violations[0].message.contains("DNS-1035"),
                "{verdict:?}"
            );
        }
        // Once created, the name is what it is: an update or a deletion is not refused for it.
        for operation in [Operation::Update, Operation::Delete] {
            let verdict = Fixture::new(greeting("my.greeter", "v1", json!({})))
                .validate::<Hello>(operation)
                .expect("a verdict");
            assert!(verdict.allowed(), "{operation:?}: {verdict:?}");
        }
    }

    #[test]
    fn a_steep_scale_down_is_warned_about() {
        let update = |from: i32, to: i32| {
            Fixture::new(greeting("greeter", "v1", json!({"replicas": to})))
                .old_object(greeting("greeter", "v1", json!({"replicas": from})))
                .validate::<Hello>(Operation::Update)
                .expect("a verdict")
        };
        let steep = update(6, 2);
        assert!(steep.allowed());
        assert_eq!(
            steep.warnings,
            [
                "scaling from 6 to 2 echo servers stops more than half of them at once; the rest \
              take all their traffic"
            ]
        );
        assert!(update(6, 3).warnings.is_empty());
        assert!(update(2, 4).warnings.is_empty());
    }

    /// What the SDK refuses before `review`: a configuration that does not read, or that
    /// `Plugin::validate` refuses, named where the kind has it.
    #[test]
    fn a_bad_greeting_is_refused_naming_the_field() {
        for (spec, field) in [
            (json!({"replicas": "two"}), "spec.replicas"),
            (json!({"message": ""}), "spec.message"),
        ] {
            let verdict = Fixture::new(greeting("greeter", "v1", spec))
                .validate::<Hello>(Operation::Create)
                .expect("a verdict");
            assert_eq!(verdict.violations[0].field, field);
        }
    }

    #[test]
    fn v1alpha1_text_is_v1_message() {
        let old = greeting("greeter", "v1alpha1", json!({"text": "hi", "replicas": 2}));
        let new = Fixture::convert::<Hello>(&old, "greet.example.com/v1").expect("up");
        assert_eq!(new["apiVersion"], "greet.example.com/v1");
        assert_eq!(
            new["spec"],
            json!({"message": "hi", "replicas": 2, "version": "1.0.0"})
        );
        let back = Fixture::convert::<Hello>(&new.to_string(), "greet.example.com/v1alpha1")
            .expect("down");
        assert_eq!(back["spec"]["text"], "hi");
        assert_eq!(back["metadata"], new["metadata"]);
        // A v1 field at v1alpha1 is no v1alpha1 field.
        let mixed = greeting("greeter", "v1alpha1", json!({"message": "hi"}));
        let err = Fixture::convert::<Hello>(&mixed, "greet.example.com/v1").expect_err("unknown");
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.message().contains("message"), "{err}");
    }

    #[test]
    fn every_greeting_round_trips() {
        for (version, spec) in [
            ("v1", json!({})),
            ("v1", json!({"message": "hi", "replicas": 3})),
            ("v1alpha1", json!({"text": "hello", "replicas": 1})),
            ("v1alpha1", json!({})),
        ] {
            Fixture::round_trip::<Hello>(&greeting("greeter", version, spec.clone()))
                .unwrap_or_else(|err| panic!("{version} {spec}: {err}"));
        }
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
