//! Installs or updates the host's CRDs at start-up and waits until the API server serves them.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, CustomResourceExt,
    api::{Patch, PatchParams},
    runtime::wait::{await_condition, conditions},
};

use crate::app::App;

/// The field manager the host uses for everything it applies.
pub const FIELD_MANAGER: &str = "wasmop";

/// How long a freshly applied CRD may take to become Established before start-up fails.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the CRDs could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum CrdInstallError {
    /// The server-side apply of the CRD was refused.
    #[error("applying CustomResourceDefinition {name}: {source}")]
    Apply {
        /// Name of the CRD.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The CRD was applied but never became Established.
    #[error("CustomResourceDefinition {name} was not Established within {timeout:?}")]
    NotEstablished {
        /// Name of the CRD.
        name: String,
        /// How long the host waited.
        timeout: Duration,
    },
    /// Watching the CRD for its Established condition failed.
    #[error("waiting for CustomResourceDefinition {name}: {source}")]
    Wait {
        /// Name of the CRD.
        name: String,
        /// The watch error.
        #[source]
        source: kube::runtime::wait::Error,
    },
}

/// Server-side applies the App CRD and waits for it to be Established.
pub async fn ensure_crds(client: &Client) -> Result<(), CrdInstallError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = App::crd();
    let name = App::crd_name().to_string();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .map_err(|source| CrdInstallError::Apply {
        name: name.clone(),
        source,
    })?;
    let established = await_condition(api, &name, conditions::is_crd_established());
    match tokio::time::timeout(ESTABLISH_TIMEOUT, established).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => Err(CrdInstallError::Wait { name, source }),
        Err(_) => Err(CrdInstallError::NotEstablished {
            name,
            timeout: ESTABLISH_TIMEOUT,
        }),
    }
}
