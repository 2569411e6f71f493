//! `wasmop rollout status|pause|resume|abort BINDING`: a progressive binding's rollout, read
//! from and steered through the binding itself (its status, `spec.rollout.paused`, the
//! [`ABORT_ANNOTATION`]), on the cluster of the current kubeconfig. The host does the rest.

use anyhow::Context as _;
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::json;
use wasmop_core::rollout::short;

use super::{ABORT_ANNOTATION, Strategy};
use crate::{binding::PluginBinding, cli::RolloutCommand};

/// Runs one `wasmop rollout` command.
pub async fn run(command: RolloutCommand) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("connecting to the cluster of the current kubeconfig")?;
    let api: Api<PluginBinding> = Api::all(client);
    let get = |name: String| {
        let api = api.clone();
        async move {
            let binding = api
                .get(&name)
                .await
                .with_context(|| format!("reading PluginBinding {name}"))?;
            let progressive = binding
                .spec
                .rollout
                .as_ref()
                .is_some_and(|r| r.strategy == Strategy::Progressive);
            anyhow::ensure!(
                progressive,
                "PluginBinding {name} rolls out at once (spec.rollout.strategy is not \
                 Progressive): it has no rollout to follow or steer"
            );
            anyhow::Ok(binding)
        }
    };
    match command {
        RolloutCommand::Status { binding } => {
            print!("{}", status_text(&get(binding).await?));
        }
        RolloutCommand::Pause { binding } => pause(&api, &get(binding).await?, true).await?,
        RolloutCommand::Resume { binding } => pause(&api, &get(binding).await?, false).await?,
        RolloutCommand::Abort { binding } => {
            let found = get(binding.clone()).await?;
            let state = found.status.as_ref().and_then(|s| s.rollout.as_ref());
            let Some(candidate) = state.and_then(|s| s.candidate.clone()) else {
                anyhow::bail!("PluginBinding {binding} has no rollout in progress to abort");
            };
            let patch = json!({"metadata": {"annotations": {ABORT_ANNOTATION: candidate}}});
            api.patch(&binding, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .with_context(|| format!("annotating PluginBinding {binding}"))?;
            println!(
                "PluginBinding {binding}: abort of {} asked; the host rolls it back and marks it \
                 bad",
                short(&candidate)
            );
        }
    }
    Ok(())
}

async fn pause(
    api: &Api<PluginBinding>,
    binding: &PluginBinding,
    paused: bool,
) -> anyhow::Result<()> {
    let name = kube::ResourceExt::name_any(binding);
    let patch = json!({"spec": {"rollout": {"paused": paused}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("setting spec.rollout.paused of PluginBinding {name}"))?;
    println!(
        "PluginBinding {name}: rollout {}",
        if paused { "paused" } else { "resumed" }
    );
    Ok(())
}

/// What `wasmop rollout status` prints.
pub fn status_text(binding: &PluginBinding) -> String {
    use std::fmt::Write as _;
    let name = kube::ResourceExt::name_any(binding);
    let status = binding.status.clone().unwrap_or_default();
    let state = status.rollout.unwrap_or_default();
    let counts = status.rollout_instances.unwrap_or_default();
    let paused = binding
        .spec
        .rollout
        .as_ref()
        .and_then(|r| r.paused)
        .unwrap_or(false);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "PluginBinding {name}: {}{}",
        state.phase.as_str(),
        if paused { " (paused)" } else { "" }
    );
    let digest = |d: &Option<String>| d.as_deref().map_or("-".to_string(), |d| d.to_string());
    let _ = writeln!(
        out,
        "  stable:    {} ({} instances)",
        digest(&state.stable),
        counts.stable
    );
    let _ = writeln!(
        out,
        "  candidate: {} ({} instances)",
        digest(&state.candidate),
        counts.candidate
    );
    let _ = writeln!(
        out,
        "  pinned: {}, other: {}, step: {}, target: {}",
        counts.pinned, counts.other, state.step, state.target
    );
    if let Some(shadow) = &state.shadow {
        let _ = writeln!(
            out,
            "  shadow plans of {}: {} planned, {} with changes, {} refused",
            short(&shadow.digest),
            shadow.planned,
            shadow.changed,
            shadow.refused
        );
        for refusal in &shadow.refusals {
            let _ = writeln!(out, "    {refusal}");
        }
    }
    if !state.bad.is_empty() {
        let bad: Vec<&str> = state.bad.iter().map(|d| short(d)).collect();
        let _ = writeln!(out, "  marked bad: {}", bad.join(", "));
    }
    if let Some(message) = &state.message {
        let _ = writeln!(out, "  {message}");
    }
    out
}
