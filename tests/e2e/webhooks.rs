//! Admission and conversion by plugins (issue 41), through the real API server: the host serves
//! the hello plugin's `validate` and `convert` for a kind bound to it (`Greeting`), with
//! certificates it makes itself. `kubectl apply` of an instance the plugin refuses fails with the
//! plugin's field path and message; its warnings reach `kubectl`; the host's own writes
//! (finalizers, status) are never held; with the host down a `Fail` webhook blocks writes of that kind only;
//! deleting the binding removes its configuration and the CRD's conversion; a `v1alpha1`
//! instance is stored and served as `v1` through the plugin; when the storage version moves,
//! every object is stored anew at it and the old version can leave the CRD; certificates rotate (CA included)
//! under a stream of admission calls that never fails.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::{
    api::{admissionregistration::v1::ValidatingWebhookConfiguration, core::v1::Secret},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{DeleteParams, PostParams},
};
use serde_json::json;
use wasmop_host::binding::PluginBinding;

use crate::{
    apps::Host,
    bound::{Cleanup, apply_crd, binding, bound_kind_with, instances_of, valid, wait_ready},
    harness::{Local, TestNamespace, component, kubectl, run, unique, wait_for},
};
use wasmop_host::plugin::source::oci::OciSource;

/// The kind `Greeting` of this run (`<id>.e2e.example.com`) for the hello plugin, with the
/// CRD's versions `versions` (`plugin crd --version`), hello pushed as an image, and a binding
/// `id` of it for the host of `ns`, created; the group, the cleanup and the bindings API.
async fn greeting_kind(
    local: &Local,
    id: &str,
    ns: &str,
    versions: &[&str],
) -> anyhow::Result<(String, Cleanup, Api<PluginBinding>)> {
    let (group, cleanup) =
        bound_kind_with(local, id, "hello.wasm", "Greeting", &[id], versions).await?;
    let image = format!("{}/e2e/{}:1.0", local.registry, unique("hello"));
    OciSource::new(None, vec![])?
        .push_unchecked(&image, &component("hello.wasm")?)
        .await?;
    let mut greeting = binding(id, ns, &group, &image)?;
    greeting.spec.kind.kind = "Greeting".into();
    let bindings: Api<PluginBinding> = Api::all(local.client().await?);
    bindings.create(&PostParams::default(), &greeting).await?;
    Ok((group, cleanup, bindings))
}

/// One test's setting: its namespace, a name unique to the run (its kind's group, its binding,
/// its host's identity), and the Secret its hosts keep their certificates in (in `default`: each
/// test has its own, so that a short-lived one rotates for its test alone).
struct Setting {
    local: Local,
    client: kube::Client,
    ns: TestNamespace,
    id: String,
    secret: String,
}

impl Setting {
    /// A namespace named after `ns_prefix` and a name after `id_prefix`.
    async fn new(ns_prefix: &str, id_prefix: &str) -> anyhow::Result<Self> {
        let local = Local::discover()?;
        let client = local.client().await?;
        let ns = TestNamespace::create(&client, ns_prefix).await?;
        Ok(Self {
            local,
            client,
            ns,
            id: unique(id_prefix),
            secret: unique("wasmop-webhook-tls"),
        })
    }

    /// A host for the namespace as `identity`, serving webhooks on a port of its own with the
    /// setting's Secret, and `extra` arguments.
    async fn host(&self, identity: &str, extra: &[&str]) -> anyhow::Result<Host> {
        let mut args = vec![
            "--webhook-listen",
            "127.0.0.1:0",
            "--webhook-secret",
            self.secret.as_str(),
        ];
        args.extend_from_slice(extra);
        Host::start_with(&self.local, &self.ns.name, &args, identity).await
    }

    /// Deletes the Secret and the namespace (a test that fails leaves both to look at).
    async fn finish(self) -> anyhow::Result<()> {
        let _ = Api::<Secret>::namespaced(self.client.clone(), "default")
            .delete(&self.secret, &DeleteParams::default())
            .await;
        self.ns.delete().await
    }
}

/// `kubectl apply -f` of `object` (JSON): whether it succeeded and what kubectl said.
async fn apply(local: &Local, object: &serde_json::Value) -> anyhow::Result<(bool, String)> {
    let file = std::env::temp_dir().join(format!("{}.json", unique("apply")));
    std::fs::write(&file, serde_json::to_vec(object)?)?;
    let mut command = kubectl(local)?;
    command.args(["apply", "-f"]).arg(&file);
    let result = run(command).await;
    let _ = std::fs::remove_file(&file);
    result
}

/// The configuration of binding `name` once it is there with a `caBundle`.
async fn configuration(
    api: &Api<ValidatingWebhookConfiguration>,
    name: &str,
) -> anyhow::Result<ValidatingWebhookConfiguration> {
    wait_for(
        &format!("ValidatingWebhookConfiguration wasmop.{name}"),
        Duration::from_secs(60),
        || async {
            Ok(api.get_opt(&format!("wasmop.{name}")).await?.filter(|c| {
                c.webhooks
                    .iter()
                    .flatten()
                    .all(|w| w.client_config.ca_bundle.is_some())
            }))
        },
    )
    .await
}

/// Waits until CRD `name`'s conversion calls the host (strategy `Webhook`).
async fn conversion_through_the_host(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
) -> anyhow::Result<()> {
    wait_for("the CRD's conversion", Duration::from_secs(60), || async {
        let crd = crds.get(name).await?;
        Ok(crd
            .spec
            .conversion
            .filter(|c| c.strategy == "Webhook")
            .map(drop))
    })
    .await
}

/// A `Greeting` of `group` named `name` with `spec`.
fn instance(group: &str, ns: &str, name: &str, spec: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": format!("{group}/v1"), "kind": "Greeting",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    })
}

#[tokio::test]
async fn a_write_the_plugin_refuses_fails_with_its_words_and_only_that_kind_waits_for_the_host()
-> anyhow::Result<()> {
    let setting = Setting::new("e2e-webhooks", "admit").await?;
    let (local, client, ns, id) = (&setting.local, &setting.client, &setting.ns, &setting.id);
    let host = setting.host(id, &[]).await?;
    let (group, _cleanup, bindings) = greeting_kind(local, id, &ns.name, &[]).await?;
    assert_eq!(valid(&bindings, id).await?.0, "True");

    // The configuration: the binding's, with the CA the host keeps in its Secret.
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let config = configuration(&configs, id).await?;
    let webhook = config
        .webhooks
        .as_ref()
        .and_then(|w| w.first())
        .context("one webhook")?;
    assert_eq!(webhook.failure_policy.as_deref(), Some("Fail"));
    assert_eq!(webhook.timeout_seconds, Some(5));
    let stored: Secret = Api::namespaced(client.clone(), "default")
        .get(&setting.secret)
        .await?;
    let bundle = stored
        .data
        .as_ref()
        .and_then(|d| d.get("ca.crt"))
        .context("ca.crt")?;
    assert_eq!(webhook.client_config.ca_bundle.as_ref(), Some(bundle));
    assert_eq!(
        config
            .metadata
            .owner_references
            .as_ref()
            .and_then(|o| o.first())
            .map(|o| o.name.as_str()),
        Some(id.as_str())
    );

    // A name that cannot name the Service hello plans: refused, in the plugin's words.
    let spec = json!({"version": "1.0.0", "message": "hi", "replicas": 4});
    let (ok, said) = apply(local, &instance(&group, &ns.name, "9lives", spec.clone())).await?;
    assert!(!ok, "{said}");
    assert!(said.contains("denied the request"), "{said}");
    assert!(said.contains("metadata.name"), "{said}");
    assert!(said.contains("DNS-1035 label"), "{said}");
    assert!(said.contains("refused by plugin hello"), "{said}");

    // A good one is admitted and served: the host's own writes (finalizer, status) pass.
    let (ok, said) = apply(local, &instance(&group, &ns.name, "greeter", spec)).await?;
    assert!(ok, "{said}");
    wait_ready(local, &ns.name, &format!("greetings.{group}/greeter")).await?;

    // An update the plugin warns about goes through, with its warning shown.
    let (ok, said) = apply(
        local,
        &instance(
            &group,
            &ns.name,
            "greeter",
            json!({"version": "1.0.0", "message": "hi", "replicas": 1}),
        ),
    )
    .await?;
    assert!(ok, "{said}");
    assert!(said.contains("Warning: scaling from 4 to 1"), "{said}");

    // The host down, under `Fail`: writes of this kind fail, naming the webhook; other kinds
    // in the namespace, and deletes of this kind, go on.
    host.kill().await?;
    let (ok, said) = apply(
        local,
        &instance(
            &group,
            &ns.name,
            "later",
            json!({"version": "1.0.0", "message": "hi", "replicas": 1}),
        ),
    )
    .await?;
    assert!(!ok, "{said}");
    assert!(said.contains("failed calling webhook"), "{said}");
    let (ok, said) = apply(
        local,
        &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "other", "namespace": ns.name}, "data": {"a": "b"}}),
    )
    .await?;
    assert!(ok, "another kind: {said}");
    let instances = instances_of(client, &ns.name, &group, "Greeting");
    instances
        .delete("greeter", &DeleteParams::default())
        .await?;

    // A host again: the instance's deletion finishes; then the binding goes, and its
    // configuration with it.
    let _host = setting.host(id, &[]).await?;
    wait_for("the instance to go", Duration::from_secs(60), || async {
        Ok(instances.get_opt("greeter").await?.is_none().then_some(()))
    })
    .await?;
    bindings.delete(id, &DeleteParams::default()).await?;
    wait_for(
        "the configuration to go with its binding",
        Duration::from_secs(60),
        || async {
            Ok(configs
                .get_opt(&format!("wasmop.{id}"))
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    setting.finish().await
}

#[tokio::test]
async fn an_instance_written_as_v1alpha1_is_served_as_v1_through_the_plugin() -> anyhow::Result<()>
{
    let setting = Setting::new("e2e-convert", "convert").await?;
    let (local, client, ns, id) = (&setting.local, &setting.client, &setting.ns, &setting.id);
    let _host = setting.host(id, &[]).await?;
    let (group, _cleanup, bindings) = greeting_kind(
        local,
        id,
        &ns.name,
        &["--version", "v1alpha1,v1", "--storage", "v1"],
    )
    .await?;
    assert_eq!(valid(&bindings, id).await?.0, "True");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd_name = format!("greetings.{group}");
    conversion_through_the_host(&crds, &crd_name).await?;

    // Written as v1alpha1 (the text as `text`), stored as v1 (`message`), served in both.
    let (ok, said) = apply(
        local,
        &json!({
            "apiVersion": format!("{group}/v1alpha1"), "kind": "Greeting",
            "metadata": {"name": "old", "namespace": ns.name},
            "spec": {"version": "1.0.0", "text": "old words", "replicas": 1},
        }),
    )
    .await?;
    assert!(ok, "{said}");
    let instances = instances_of(client, &ns.name, &group, "Greeting");
    let v1 = instances.get("old").await?;
    assert_eq!(v1.data["spec"]["message"], "old words", "{:?}", v1.data);
    assert!(v1.data["spec"].get("text").is_none(), "{:?}", v1.data);
    let mut get = kubectl(local)?;
    get.args(["get", "-n", &ns.name, "-o", "json"])
        .arg(format!("greetings.v1alpha1.{group}/old"));
    let (ok, said) = run(get).await?;
    assert!(ok, "{said}");
    let old: serde_json::Value = serde_json::from_str(&said)?;
    assert_eq!(old["spec"]["text"], "old words", "{said}");
    wait_ready(local, &ns.name, &format!("greetings.{group}/old")).await?;
    // And the other way: written as v1, read as v1alpha1 through the plugin.
    let (ok, said) = apply(
        local,
        &instance(
            &group,
            &ns.name,
            "new",
            json!({"version": "1.0.0", "message": "new words", "replicas": 1}),
        ),
    )
    .await?;
    assert!(ok, "{said}");
    let mut get = kubectl(local)?;
    get.args(["get", "-n", &ns.name, "-o", "json"])
        .arg(format!("greetings.v1alpha1.{group}/new"));
    let (ok, said) = run(get).await?;
    assert!(ok, "{said}");
    let old: serde_json::Value = serde_json::from_str(&said)?;
    assert_eq!(old["spec"]["text"], "new words", "{said}");
    assert!(old["spec"].get("message").is_none(), "{said}");
    instances.delete("new", &DeleteParams::default()).await?;

    // The binding gone, the CRD converts no more through the host.
    instances.delete("old", &DeleteParams::default()).await?;
    wait_for("the instance to go", Duration::from_secs(60), || async {
        Ok(instances.get_opt("old").await?.is_none().then_some(()))
    })
    .await?;
    bindings.delete(id, &DeleteParams::default()).await?;
    wait_for(
        "the CRD's conversion to be None again",
        Duration::from_secs(60),
        || async {
            let crd = crds.get(&crd_name).await?;
            Ok(crd
                .spec
                .conversion
                .filter(|c| c.strategy == "None")
                .map(drop))
        },
    )
    .await?;
    setting.finish().await
}

/// A kind whose CRD moves its storage version from v1alpha1 to v1 (the platform team applies
/// `plugin crd --storage v1` over it): the leader stores every object written before anew, through
/// the plugin (etcd then holds v1, the field renamed), sets `status.storedVersions` to `[v1]`,
/// and the team can drop v1alpha1 from the CRD, which the API server refuses while
/// `storedVersions` lists it (as it does before the migration); every object reads as it was
/// written.
#[tokio::test]
async fn a_moved_storage_version_has_every_object_stored_anew_and_the_old_version_can_go()
-> anyhow::Result<()> {
    let setting = Setting::new("e2e-migrate", "migrate").await?;
    let (local, client, ns, id) = (&setting.local, &setting.client, &setting.ns, &setting.id);
    let _host = setting.host(id, &[]).await?;
    let both = ["--version", "v1alpha1,v1", "--storage"];
    let (group, _cleanup, bindings) = greeting_kind(
        local,
        id,
        &ns.name,
        &[both.as_slice(), &["v1alpha1"]].concat(),
    )
    .await?;
    assert_eq!(valid(&bindings, id).await?.0, "True");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd_name = format!("greetings.{group}");
    conversion_through_the_host(&crds, &crd_name).await?;
    let names = ["one", "two", "three"];
    for name in names {
        let (ok, said) = apply(
            local,
            &json!({
                "apiVersion": format!("{group}/v1alpha1"), "kind": "Greeting",
                "metadata": {"name": name, "namespace": ns.name},
                "spec": {"version": "1.0.0", "text": format!("{name} words"), "replicas": 1},
            }),
        )
        .await?;
        assert!(ok, "{said}");
    }
    let stored = |name: &str| {
        let key = format!("/registry/{group}/greetings/{}/{name}", ns.name);
        async move {
            local
                .etcd_get(&key)
                .await?
                .with_context(|| format!("nothing in etcd at {key}"))
        }
    };
    for name in names {
        let object = stored(name).await?;
        assert_eq!(
            object["apiVersion"],
            format!("{group}/v1alpha1"),
            "{object}"
        );
    }

    // The storage version moves; v1alpha1 cannot leave the CRD yet (the leader waits for the
    // CRD to settle for 10 s), and then the leader migrates.
    apply_crd(
        local,
        id,
        "hello.wasm",
        "Greeting",
        &[both.as_slice(), &["v1"]].concat(),
    )
    .await?;
    let early = apply_crd(local, id, "hello.wasm", "Greeting", &["--version", "v1"]).await;
    let refused = early
        .err()
        .context("v1alpha1 left the CRD before its objects were stored anew")?;
    assert!(
        format!("{refused:#}").contains("storedVersions"),
        "{refused:#}"
    );
    wait_for(
        "status.storedVersions to be [v1]",
        Duration::from_secs(60),
        || async {
            let crd = crds.get(&crd_name).await?;
            let stored = crd.status.and_then(|s| s.stored_versions);
            Ok((stored == Some(vec!["v1".to_string()])).then_some(()))
        },
    )
    .await?;
    for name in names {
        let object = stored(name).await?;
        assert_eq!(object["apiVersion"], format!("{group}/v1"), "{object}");
        assert_eq!(
            object["spec"]["message"],
            format!("{name} words"),
            "{object}"
        );
        assert!(object["spec"].get("text").is_none(), "{object}");
    }
    // v1alpha1 can go, and every object reads as written.
    apply_crd(local, id, "hello.wasm", "Greeting", &["--version", "v1"]).await?;
    let served: Vec<String> = crds
        .get(&crd_name)
        .await?
        .spec
        .versions
        .iter()
        .map(|v| v.name.clone())
        .collect();
    assert_eq!(served, ["v1"]);
    let instances = instances_of(client, &ns.name, &group, "Greeting");
    for name in names {
        let object = instances.get(name).await?;
        assert_eq!(object.data["spec"]["message"], format!("{name} words"));
    }
    setting.finish().await
}

#[tokio::test]
async fn certificates_rotate_ca_included_while_every_admission_call_succeeds() -> anyhow::Result<()>
{
    let setting = Setting::new("e2e-rotate", "rotate").await?;
    let (local, client, ns, id) = (&setting.local, &setting.client, &setting.ns, &setting.id);
    // A serving certificate of 20 s, renewed at 13 s; a CA of 60 s, rolled from 40 s on in
    // steps 2 s apart.
    let _host = setting
        .host(id, &["--webhook-cert-lifetime", "20s"])
        .await?;
    let (group, _cleanup, bindings) = greeting_kind(local, id, &ns.name, &[]).await?;
    assert_eq!(valid(&bindings, id).await?.0, "True");
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configuration(&configs, id).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let key = |s: &Secret, k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| b.0.clone())
            .unwrap_or_default()
    };
    let first = secrets.get(&setting.secret).await?;
    let (first_ca, first_leaf) = (key(&first, "wasmop-ca.crt"), key(&first, "tls.crt"));

    // Dry-run creates, back to back, until the CA has been replaced and its predecessor has
    // left the bundle: every one is answered by the plugin (a refusal, in its words).
    let refused = instance(
        &group,
        &ns.name,
        "9lives",
        json!({"version": "1.0.0", "message": "hi", "replicas": 1}),
    );
    let file = std::env::temp_dir().join(format!("{id}.json"));
    std::fs::write(&file, serde_json::to_vec(&refused)?)?;
    let started = std::time::Instant::now();
    let (mut calls, mut leaves) = (0, std::collections::BTreeSet::new());
    let rotated = loop {
        let mut command = kubectl(local)?;
        command
            .args(["create", "--dry-run=server", "-f"])
            .arg(&file);
        let (ok, said) = run(command).await?;
        calls += 1;
        anyhow::ensure!(
            !ok && said.contains("metadata.name"),
            "call {calls} after {:?} was not answered by the plugin: {said}",
            started.elapsed()
        );
        let now = secrets.get(&setting.secret).await?;
        leaves.insert(key(&now, "tls.crt"));
        if key(&now, "wasmop-ca.crt") != first_ca
            && key(&now, "wasmop-previous-ca.crt").is_empty()
            && key(&now, "wasmop-next-ca.crt").is_empty()
        {
            break true;
        }
        if started.elapsed() > Duration::from_secs(150) {
            break false;
        }
    };
    let _ = std::fs::remove_file(&file);
    assert!(rotated, "the CA did not roll within 150 s ({calls} calls)");
    // Renewed (about every 14 s, and at the CA switch), but not on every look.
    assert!(
        (2..=10).contains(&leaves.len())
            && !leaves.contains(&Vec::new())
            && leaves.iter().any(|l| *l != first_leaf),
        "{} serving certificates in {:?}",
        leaves.len(),
        started.elapsed()
    );
    // The configuration comes to hold the new bundle, and only it.
    let now = secrets.get(&setting.secret).await?;
    let bundle = key(&now, "ca.crt");
    wait_for(
        "the configuration's new bundle",
        Duration::from_secs(30),
        || async {
            let config = configuration(&configs, id).await?;
            let held = config
                .webhooks
                .as_ref()
                .and_then(|w| w.first())
                .and_then(|w| w.client_config.ca_bundle.as_ref())
                .map(|b| b.0.clone());
            Ok((held.as_ref() == Some(&bundle)).then_some(()))
        },
    )
    .await?;
    eprintln!(
        "rotation: {calls} admission calls over {:?}, {} serving certificates, none failed",
        started.elapsed(),
        leaves.len()
    );
    bindings.delete(id, &DeleteParams::default()).await?;
    setting.finish().await
}

#[tokio::test]
async fn a_plugin_that_cannot_answer_answers_per_the_bindings_failure_policy() -> anyhow::Result<()>
{
    let setting = Setting::new("e2e-webhook-faults", "wfault").await?;
    let (local, client, ns, id) = (&setting.local, &setting.client, &setting.ns, &setting.id);
    let _host = setting.host(id, &[]).await?;
    let (group, _cleanup) =
        bound_kind_with(local, id, "fault_plugin.wasm", "Fault", &[id], &[]).await?;
    let image = format!("{}/e2e/{}:1.0", local.registry, unique("fault"));
    OciSource::new(None, vec![])?
        .push_unchecked(&image, &component("fault_plugin.wasm")?)
        .await?;
    let mut faulty = binding(id, &ns.name, &group, &image)?;
    faulty.spec.kind.kind = "Fault".into();
    faulty.spec.admission = Some(serde_json::from_value(
        json!({"failurePolicy": "Fail", "timeoutSeconds": 2}),
    )?);
    let bindings: Api<PluginBinding> = Api::all(client.clone());
    bindings.create(&PostParams::default(), &faulty).await?;
    assert_eq!(valid(&bindings, id).await?.0, "True");
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configuration(&configs, id).await?;
    let fault = |name: &str, fault: &str| {
        json!({
            "apiVersion": format!("{group}/v1"), "kind": "Fault",
            "metadata": {"name": name, "namespace": ns.name},
            "spec": {"version": "1.0.0", "fault": fault},
        })
    };

    // Refused on purpose: the plugin's words. A trap, a deadline passed, an answer over the
    // caps: no answer, which `Fail` makes a refusal naming the plugin and the cause.
    let (ok, said) = apply(local, &fault("refused", "refuse")).await?;
    assert!(
        !ok && said.contains("spec.fault: refused on purpose"),
        "{said}"
    );
    // The issue's own rules, on a create and an update: at most 9 replicas, storage that never
    // shrinks (which only the old object tells); an update breaking both is refused with both.
    let sized = |replicas: i64, storage: i64| {
        let mut object = fault("sized", "rules");
        object["spec"]["replicas"] = json!(replicas);
        object["spec"]["storageGi"] = json!(storage);
        object
    };
    let (ok, said) = apply(local, &sized(12, 10)).await?;
    assert!(
        !ok && said.contains("spec.replicas: 12 replicas, at most 9"),
        "{said}"
    );
    assert!(!said.contains("spec.storageGi"), "{said}");
    let (ok, said) = apply(local, &sized(3, 10)).await?;
    assert!(ok, "{said}");
    let (ok, said) = apply(local, &sized(12, 5)).await?;
    assert!(
        !ok && said.contains(
            "spec.replicas: 12 replicas, at most 9; spec.storageGi: storage cannot shrink, \
             from 10Gi to 5Gi"
        ),
        "{said}"
    );
    let (ok, said) = apply(local, &sized(9, 20)).await?;
    assert!(ok, "{said}");
    for (name, cause) in [
        ("trapped", "panic"),
        ("spinning", "loop"),
        ("verbose", "violations"),
    ] {
        let (ok, said) = apply(local, &fault(name, cause)).await?;
        assert!(!ok, "{cause}: {said}");
        assert!(said.contains("failed calling webhook"), "{cause}: {said}");
        assert!(
            said.contains(&format!("PluginBinding {id}: plugin fault")),
            "{cause}: {said}"
        );
        assert!(said.contains("could not validate"), "{cause}: {said}");
    }

    // Under `Ignore` the same write goes through.
    let mut ignoring = bindings.get(id).await?;
    ignoring.spec.admission = Some(serde_json::from_value(json!({"failurePolicy": "Ignore"}))?);
    bindings
        .replace(id, &PostParams::default(), &ignoring)
        .await?;
    wait_for(
        "the configuration to ignore",
        Duration::from_secs(60),
        || async {
            let config = configs.get(&format!("wasmop.{id}")).await?;
            Ok(config
                .webhooks
                .as_ref()
                .and_then(|w| w.first())
                .filter(|w| w.failure_policy.as_deref() == Some("Ignore"))
                .map(drop))
        },
    )
    .await?;
    let (ok, said) = apply(local, &fault("trapped", "panic")).await?;
    assert!(ok, "{said}");

    let instances = instances_of(client, &ns.name, &group, "Fault");
    for name in ["trapped", "sized"] {
        instances.delete(name, &DeleteParams::default()).await?;
    }
    setting.finish().await
}

#[tokio::test]
async fn a_new_digest_s_rules_are_in_force_within_a_poll_without_a_restart() -> anyhow::Result<()> {
    let setting = Setting::new("e2e-webhook-swap", "wswap").await?;
    let (local, client, ns, id) = (&setting.local, &setting.client, &setting.ns, &setting.id);
    let host = setting.host(id, &[]).await?;
    let pid = host.pid();
    // The kind of the fault plugin, bound to a tag that first holds the fault plugin (whose
    // validate refuses only `fault: refuse`), then hello (which refuses a name that cannot name
    // a Service, and a configuration it cannot read).
    let (group, _cleanup) =
        bound_kind_with(local, id, "fault_plugin.wasm", "Fault", &[id], &[]).await?;
    let image = format!("{}/e2e/{}:1.0", local.registry, unique("swap"));
    let oci = OciSource::new(None, vec![])?;
    oci.push_unchecked(&image, &component("fault_plugin.wasm")?)
        .await?;
    let mut bound = binding(id, &ns.name, &group, &image)?;
    bound.spec.kind.kind = "Fault".into();
    let bindings: Api<PluginBinding> = Api::all(client.clone());
    bindings.create(&PostParams::default(), &bound).await?;
    assert_eq!(valid(&bindings, id).await?.0, "True");
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configuration(&configs, id).await?;
    let probe = json!({
        "apiVersion": format!("{group}/v1"), "kind": "Fault",
        "metadata": {"name": "9lives", "namespace": ns.name},
        "spec": {"version": "1.0.0", "fault": "none"},
    });
    let file = std::env::temp_dir().join(format!("{id}.json"));
    std::fs::write(&file, serde_json::to_vec(&probe)?)?;
    let dry_run = || -> anyhow::Result<std::process::Command> {
        let mut command = kubectl(local)?;
        command
            .args(["create", "--dry-run=server", "-f"])
            .arg(&file);
        Ok(command)
    };
    let (ok, said) = run(dry_run()?).await?;
    assert!(ok, "the fault plugin admits it: {said}");

    // hello behind the same tag: its rules answer within a poll (1 s here) and a load.
    oci.push_unchecked(&image, &component("hello.wasm")?)
        .await?;
    let said = wait_for(
        "the new digest's rules",
        Duration::from_secs(60),
        || async {
            let (ok, said) = run(dry_run()?).await?;
            Ok((!ok && said.contains("refused by plugin hello")).then_some(said))
        },
    )
    .await?;
    let _ = std::fs::remove_file(&file);
    assert!(said.contains("denied the request"), "{said}");
    assert_eq!(host.pid(), pid, "the same host process");
    setting.finish().await
}

/// The address the host of `identity` serves its webhooks on, from its log.
fn webhook_addr(identity: &str) -> anyhow::Result<Option<String>> {
    let log = std::env::temp_dir().join(format!("{identity}-host.log"));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    Ok(text
        .lines()
        .find(|l| l.contains("serving the plugins' webhooks"))
        .and_then(|l| l.split("addr=").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .map(|a| a.trim_matches('"').to_string()))
}

#[tokio::test]
async fn a_standby_answers_too_with_the_leaders_certificate() -> anyhow::Result<()> {
    let setting = Setting::new("e2e-webhook-replicas", "wrepl").await?;
    let (local, client, ns, id) = (&setting.local, &setting.client, &setting.ns, &setting.id);
    let elected = ["--leader-elect", "--lease-namespace", ns.name.as_str()];
    let (leader, standby) = (format!("{id}-a"), format!("{id}-b"));
    let _first = setting.host(&leader, &elected).await?;
    let _second = setting.host(&standby, &elected).await?;
    let (group, _cleanup, bindings) = greeting_kind(local, id, &ns.name, &[]).await?;
    assert_eq!(valid(&bindings, id).await?.0, "True");
    let configs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    configuration(&configs, id).await?;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
    let ca = secrets
        .get(&setting.secret)
        .await?
        .data
        .and_then(|d| d.get("ca.crt").cloned())
        .context("ca.crt")?;
    let http = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca.0)?)
        .build()?;
    let review = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": group, "version": "v1", "kind": "Greeting"},
            "resource": {"group": group, "version": "v1", "resource": "greetings"},
            "name": "9lives", "namespace": ns.name, "operation": "CREATE",
            "object": instance(&group, &ns.name, "9lives",
                json!({"version": "1.0.0", "message": "hi", "replicas": 1})),
        },
    });
    // Each replica, the standby too, answers from the plugin, over the Secret's certificate.
    for identity in [&leader, &standby] {
        let addr = wait_for(
            &format!("{identity}'s webhook address"),
            Duration::from_secs(30),
            || async { webhook_addr(identity) },
        )
        .await?;
        let answer: serde_json::Value = wait_for(
            &format!("{identity}'s answer"),
            Duration::from_secs(30),
            || async {
                let sent = http
                    .post(format!("https://{addr}/validate/{id}"))
                    .json(&review)
                    .send()
                    .await;
                Ok(match sent {
                    Ok(r) if r.status().is_success() => Some(r.json().await?),
                    _ => None,
                })
            },
        )
        .await?;
        assert_eq!(answer["response"]["uid"], "u-1", "{identity}: {answer}");
        assert_eq!(answer["response"]["allowed"], false, "{identity}: {answer}");
        assert!(
            answer["response"]["status"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("metadata.name")),
            "{identity}: {answer}"
        );
    }
    bindings.delete(id, &DeleteParams::default()).await?;
    setting.finish().await
}
