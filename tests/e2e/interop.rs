//! Interop with the ecosystem's OCI clients, through a registry that asks for basic auth: each
//! of `wasmop plugin push`, `wkg oci push` (Bytecode Alliance) and `oras push` publishes
//! kvstore; each of `wasmop plugin pull`, `wkg oci pull` and `oras pull` reads every one back,
//! and the host loads every one for an App. Credentials come from a docker `config.json` (for
//! wkg and oras, as `DOCKER_CONFIG` finds it) and from the same file named `.dockerconfigjson`
//! (for wasmop, as a `kubernetes.io/dockerconfigjson` Secret mounts it; and for the host, from
//! such a Secret).

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context as _;
use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, api::PostParams};
use serde_json::{Value, json};
use wasmop_host::{app::App, plugin::Digest};

use crate::{
    apps::{Host, app, condition, wait_app},
    harness::{Local, TestNamespace, component_path, tool, unique, wasmop_binary},
    plugin_sources::PrivateRegistry,
};

const USER: &str = "wasmop";
const PASSWORD: &str = "s3cret-interop";
/// What `wasmop plugin push --source` is given, for the annotation.
const SOURCE: &str = "https://example.com/wasmop/kvstore";

/// The three clients, as pushers and pullers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Client {
    Wasmop,
    Wkg,
    Oras,
}

impl Client {
    const ALL: [Client; 3] = [Client::Wasmop, Client::Wkg, Client::Oras];

    fn name(self) -> &'static str {
        match self {
            Client::Wasmop => "wasmop",
            Client::Wkg => "wkg",
            Client::Oras => "oras",
        }
    }
}

/// Where each client finds the credentials, and the registry.
struct Setup {
    registry: String,
    dir: PathBuf,
}

impl Setup {
    /// `DOCKER_CONFIG` for wkg and oras.
    fn docker_dir(&self) -> PathBuf {
        self.dir.join("docker")
    }

    /// The same `config.json` as a mounted dockerconfigjson Secret names it, for wasmop.
    fn mounted_secret(&self) -> PathBuf {
        self.dir.join("secret/.dockerconfigjson")
    }

    fn reference(&self, pusher: Client) -> String {
        format!("{}/interop/{}:1.0", self.registry, pusher.name())
    }
}

async fn run(what: &str, command: &mut tokio::process::Command) -> anyhow::Result<String> {
    let out = command
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("starting {what}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn command(setup: &Setup, client: Client) -> anyhow::Result<tokio::process::Command> {
    let binary = match client {
        Client::Wasmop => wasmop_binary()?,
        Client::Wkg => tool("WKG", "", "interop")?,
        Client::Oras => tool("ORAS_BIN", "oras", "interop")?,
    };
    let mut command = tokio::process::Command::new(binary);
    // wkg and oras read `$DOCKER_CONFIG/config.json`; wasmop is given its file explicitly, so
    // that this proves the mounted-Secret form.
    command.env("DOCKER_CONFIG", setup.docker_dir());
    Ok(command)
}

/// Pushes `file` with `pusher`; returns what it printed.
async fn push(setup: &Setup, pusher: Client, file: &Path) -> anyhow::Result<String> {
    let reference = setup.reference(pusher);
    let mut cmd = command(setup, pusher)?;
    match pusher {
        Client::Wasmop => cmd
            .args(["plugin", "push", "--source", SOURCE, "--registry-config"])
            .arg(setup.mounted_secret())
            .arg(file)
            .arg(&reference),
        Client::Wkg => cmd
            .args(["oci", "push", "--insecure", &setup.registry, &reference])
            .arg(file),
        // oras names the layer after the path it is given, so it is given a bare file name.
        Client::Oras => cmd
            .current_dir(file.parent().context("a file in a directory")?)
            .args([
                "push",
                "--plain-http",
                "--artifact-type",
                "application/vnd.wasm.config.v0+json",
                &reference,
            ])
            .arg(format!(
                "{}:application/wasm",
                file.file_name().context("a file name")?.to_string_lossy()
            )),
    };
    run(&format!("{} push {reference}", pusher.name()), &mut cmd).await
}

/// Pulls `reference` with `puller` and returns the component's bytes.
async fn pull(setup: &Setup, puller: Client, reference: &str) -> anyhow::Result<Vec<u8>> {
    let out = setup.dir.join(unique(puller.name()));
    std::fs::create_dir_all(&out)?;
    let file = out.join("kvstore.wasm");
    let mut cmd = command(setup, puller)?;
    match puller {
        Client::Wasmop => cmd
            .args(["plugin", "pull", "--registry-config"])
            .arg(setup.mounted_secret())
            .arg(reference)
            .arg("-o")
            .arg(&file),
        Client::Wkg => cmd
            .args([
                "oci",
                "pull",
                "--insecure",
                &setup.registry,
                reference,
                "-o",
            ])
            .arg(&file),
        // oras writes each layer under its title annotation: kvstore.wasm from every pusher.
        Client::Oras => cmd
            .args(["pull", "--plain-http", reference, "-o"])
            .arg(&out),
    };
    run(&format!("{} pull {reference}", puller.name()), &mut cmd).await?;
    std::fs::read(&file).with_context(|| format!("reading what {} pulled", puller.name()))
}

/// `oras manifest fetch` or `fetch-config`, parsed.
async fn oras_json(setup: &Setup, what: &str, reference: &str) -> anyhow::Result<Value> {
    let mut cmd = command(setup, Client::Oras)?;
    cmd.args(["manifest", what, "--plain-http", reference]);
    let text = run(&format!("oras manifest {what} {reference}"), &mut cmd).await?;
    serde_json::from_str(&text).with_context(|| format!("parsing {text}"))
}

#[tokio::test]
async fn wasmop_wkg_and_oras_read_each_others_plugins_through_basic_auth() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let client = local.client().await?;
    let registry = PrivateRegistry::start_with_basic_auth(USER, PASSWORD).await?;
    let dir = std::env::temp_dir().join(unique("wasmop-interop"));
    let setup = Setup {
        registry: registry.addr.clone(),
        dir: dir.clone(),
    };
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    let docker_config = json!({"auths": {setup.registry.clone(): {"auth": auth}}}).to_string();
    for file in [
        setup.docker_dir().join("config.json"),
        setup.mounted_secret(),
    ] {
        std::fs::create_dir_all(file.parent().context("a directory")?)?;
        std::fs::write(&file, &docker_config)?;
    }
    let source = component_path("kvstore.wasm")?;
    let kvstore =
        std::fs::read(&source).with_context(|| format!("reading {}", source.display()))?;
    let file = dir.join("kvstore.wasm");
    std::fs::copy(&source, &file)?;

    // Without credentials the registry refuses: the auth below is what lets the clients in.
    let mut anonymous = command(&setup, Client::Wasmop)?;
    anonymous
        .args(["plugin", "push"])
        .arg(&file)
        .arg(setup.reference(Client::Wasmop))
        .env("DOCKER_CONFIG", dir.join("nowhere"));
    let refused = match run("an anonymous push", &mut anonymous).await {
        Ok(out) => anyhow::bail!("the registry took an anonymous push: {out}"),
        Err(err) => format!("{err:#}"),
    };
    assert!(
        refused.contains("401") || refused.to_lowercase().contains("unauthorized"),
        "{refused}"
    );

    for pusher in Client::ALL {
        push(&setup, pusher, &file).await?;
    }
    // The same build pushed again is the same manifest (`created` is the file's time), so a
    // signature made for it still holds.
    let first = push(&setup, Client::Wasmop, &file).await?;
    let again = push(&setup, Client::Wasmop, &file).await?;
    assert_eq!(
        first, again,
        "a second push of the same file wrote another manifest"
    );

    // What wasmop pushes is the CNCF Wasm OCI artifact, read from the component.
    let reference = setup.reference(Client::Wasmop);
    let manifest = oras_json(&setup, "fetch", &reference).await?;
    let config = oras_json(&setup, "fetch-config", &reference).await?;
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(
        manifest["artifactType"],
        "application/vnd.wasm.config.v0+json"
    );
    assert_eq!(manifest["layers"][0]["mediaType"], "application/wasm");
    let annotations = &manifest["annotations"];
    assert_eq!(annotations["org.opencontainers.image.title"], "kvstore");
    assert_eq!(annotations["org.opencontainers.image.source"], SOURCE);
    for key in ["version", "description", "created"] {
        let value = annotations[format!("org.opencontainers.image.{key}")].as_str();
        assert!(
            value.is_some_and(|v| !v.is_empty()),
            "{key} in {annotations}"
        );
    }
    assert_eq!(config["architecture"], "wasm");
    assert_eq!(config["os"], "wasip2");
    assert_eq!(
        config["layerDigests"],
        json!([Digest::of(&kvstore).as_str()])
    );
    let created = config["created"].as_str().unwrap_or_default();
    assert!(
        chrono::DateTime::parse_from_rfc3339(created).is_ok(),
        "created {created:?} is RFC 3339"
    );
    let exports = config["component"]["exports"].to_string();
    assert!(
        exports.contains("wasmop:plugin/metadata@0.3.0"),
        "{exports}"
    );
    assert!(
        exports.contains("wasmop:plugin/spec-diff@0.3.0"),
        "{exports}"
    );
    let imports = config["component"]["imports"].to_string();
    assert!(imports.contains("wasmop:plugin/log@0.3.0"), "{imports}");
    assert_eq!(config["component"]["target"], "wasmop:plugin/plugin@0.3.0");

    // The matrix: every pusher by every puller. wkg reads only artifacts whose config is the
    // Wasm one, which a plain `oras push` does not write; that one cell is a refusal.
    let mut matrix = Vec::new();
    for pusher in Client::ALL {
        for puller in Client::ALL {
            let result = pull(&setup, puller, &setup.reference(pusher)).await;
            let outcome = match &result {
                Ok(bytes) if *bytes == kvstore => "byte-identical".to_string(),
                Ok(bytes) => format!("DIFFERENT ({} bytes)", bytes.len()),
                Err(err) => format!("refused: {}", first_line(&format!("{err:#}"))),
            };
            println!(
                "interop: {} push -> {} pull: {outcome}",
                pusher.name(),
                puller.name()
            );
            matrix.push((pusher, puller, result.is_ok_and(|b| b == kvstore)));
        }
    }
    for (pusher, puller, identical) in &matrix {
        let expected = !(*pusher == Client::Oras && *puller == Client::Wkg);
        assert_eq!(
            *identical,
            expected,
            "{} push -> {} pull",
            pusher.name(),
            puller.name()
        );
    }

    // The host loads each, with the credentials of a dockerconfigjson pull secret.
    let ns = TestNamespace::create(&client, "e2e-interop").await?;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "regcred"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": docker_config},
    }))?;
    Api::<Secret>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &secret)
        .await?;
    let _host = Host::start_with(&local, &ns.name, &[], &unique("interop-host")).await?;
    let apps: Api<App> = Api::namespaced(client.clone(), &ns.name);
    for pusher in Client::ALL {
        let plugin = json!({
            "image": setup.reference(pusher),
            "imagePullSecrets": [{"name": "regcred"}],
        });
        apps.create(
            &PostParams::default(),
            &app(pusher.name(), plugin, "7.2.4", json!({"replicas": 1}))?,
        )
        .await?;
    }
    for pusher in Client::ALL {
        let loaded = wait_app(
            &apps,
            pusher.name(),
            &format!("the host to load what {} pushed", pusher.name()),
            Duration::from_secs(90),
            |a| condition(a, "PluginReady").is_some_and(|c| c.0 == "True"),
        )
        .await?;
        let digest = loaded
            .status
            .as_ref()
            .and_then(|s| s.plugin.as_ref())
            .map(|p| p.digest.clone());
        assert_eq!(
            digest.as_deref(),
            Some(Digest::of(&kvstore).as_str()),
            "{}",
            pusher.name()
        );
        println!("interop: {} push -> wasmop host: loaded", pusher.name());
    }
    drop(registry);
    let _ = std::fs::remove_dir_all(&dir);
    ns.delete().await
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or(text)
}
