//! Where the host keeps its webhook certificates: one `kubernetes.io/tls` Secret in its own
//! namespace (`wasmop-webhook-tls` by default), so that every replica serves the same
//! certificate. `tls.crt`, `tls.key` and `ca.crt` (the bundle) are where cert-manager's
//! Secrets have them; the CAs' keys and the rotation's progress are under `wasmop-*` keys.
//!
//! The leader maintains it ([`maintain`]: read, [`certs::plan`], [`certs::perform`], write
//! with the read's `resourceVersion`, so two hosts that race never both win); every replica
//! reads it ([`read`]).

use std::collections::BTreeMap;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};

use super::certs::{self, CertError, Material, Pair, Step, Timing};

/// Why the Secret could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The API server refused or failed.
    #[error("{action} Secret {namespace}/{name}: {source}")]
    Api {
        /// Reading, creating or replacing.
        action: &'static str,
        /// The Secret's namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
    /// Making a certificate failed.
    #[error(transparent)]
    Cert(#[from] CertError),
}

const CA_CERT: &str = "wasmop-ca.crt";
const CA_KEY: &str = "wasmop-ca.key";
const NEXT_CA_CERT: &str = "wasmop-next-ca.crt";
const NEXT_CA_KEY: &str = "wasmop-next-ca.key";
const PREVIOUS_CA_CERT: &str = "wasmop-previous-ca.crt";
const STEPPED_AT: &str = "wasmop-stepped-at";

/// The Secret's data for `material`.
pub fn to_data(material: &Material) -> BTreeMap<String, ByteString> {
    let mut data = BTreeMap::new();
    let mut put = |key: &str, value: &str| {
        data.insert(key.to_string(), ByteString(value.as_bytes().to_vec()));
    };
    put("tls.crt", &material.leaf.cert_pem);
    put("tls.key", &material.leaf.key_pem);
    put("ca.crt", &material.ca_bundle());
    put(CA_CERT, &material.ca.cert_pem);
    put(CA_KEY, &material.ca.key_pem);
    if let Some(next) = &material.next_ca {
        put(NEXT_CA_CERT, &next.cert_pem);
        put(NEXT_CA_KEY, &next.key_pem);
    }
    if let Some(previous) = &material.previous_ca {
        put(PREVIOUS_CA_CERT, previous);
    }
    if let Some(at) = material.stepped_at {
        put(STEPPED_AT, &at.to_string());
    }
    data
}

/// What `secret` holds, if it holds a whole set (a Secret someone emptied or edited by hand
/// is made again, not served half).
pub fn from_secret(secret: &Secret) -> Option<Material> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .and_then(|v| String::from_utf8(v.0.clone()).ok())
    };
    let pair = |cert: &str, key: &str| {
        Some(Pair {
            cert_pem: text(cert)?,
            key_pem: text(key)?,
        })
    };
    let next_ca = match (text(NEXT_CA_CERT), text(NEXT_CA_KEY)) {
        (Some(cert_pem), Some(key_pem)) => Some(Pair { cert_pem, key_pem }),
        (None, None) => None,
        _ => return None,
    };
    Some(Material {
        ca: pair(CA_CERT, CA_KEY)?,
        leaf: pair("tls.crt", "tls.key")?,
        next_ca,
        previous_ca: text(PREVIOUS_CA_CERT),
        stepped_at: text(STEPPED_AT).and_then(|t| t.trim().parse().ok()),
    })
}

/// Reads the Secret `name`: its material, if whole, and its `resourceVersion`.
pub async fn read(
    api: &Api<Secret>,
    name: &str,
) -> Result<(Option<Material>, Option<String>), StoreError> {
    let secret = api.get_opt(name).await.map_err(|source| StoreError::Api {
        action: "reading",
        namespace: api_namespace(api),
        name: name.to_string(),
        source,
    })?;
    Ok(match secret {
        Some(secret) => (from_secret(&secret), secret.metadata.resource_version),
        None => (None, None),
    })
}

fn api_namespace(api: &Api<Secret>) -> String {
    api.namespace().unwrap_or("default").to_string()
}

/// One maintenance pass at `now`: reads the Secret, decides, and writes what the decision made.
/// A CA step ([`Step::SwitchToNextCa`], [`Step::DropPreviousCa`]) is taken only once
/// `published` (the bundle every webhook configuration holds) is this material's bundle: the
/// overlap alone would not stop a switch while the API server could not be written. Returns
/// the material now stored and the step taken ([`Step::Keep`] if none).
pub async fn maintain(
    api: &Api<Secret>,
    name: &str,
    now: i64,
    timing: &Timing,
    names: &[String],
    published: Option<&str>,
) -> Result<(Material, Step), StoreError> {
    let (stored, resource_version) = read(api, name).await?;
    let facts = stored.as_ref().and_then(|m| certs::facts(m).ok());
    let mut step = certs::plan(now, facts.as_ref(), timing, names);
    if let (Some(material), Step::SwitchToNextCa | Step::DropPreviousCa) = (&stored, step)
        && published != Some(material.ca_bundle().as_str())
    {
        step = Step::Keep { recheck_in: 5 };
    }
    let made = certs::perform(step, stored.as_ref(), now, timing, names)?;
    let Some(made) = made else {
        // Nothing to write: `Keep` (or a step the stored set cannot take, which `plan` never
        // gives for a set whose facts it read).
        return stored
            .map(|m| (m, step))
            .ok_or(StoreError::Cert(CertError::Read {
                what: "webhook certificates",
                message: "none stored and none made".into(),
            }));
    };
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            resource_version: resource_version.clone(),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_string(),
                "wasmop".to_string(),
            )])),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(to_data(&made)),
        ..Default::default()
    };
    let written = match resource_version {
        Some(_) => api.replace(name, &PostParams::default(), &secret).await,
        None => api.create(&PostParams::default(), &secret).await,
    };
    written.map_err(|source| StoreError::Api {
        action: "writing",
        namespace: api_namespace(api),
        name: name.to_string(),
        source,
    })?;
    Ok((made, step))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        vec!["127.0.0.1".into()]
    }

    fn secret(material: &Material) -> Secret {
        Secret {
            data: Some(to_data(material)),
            ..Default::default()
        }
    }

    #[test]
    fn every_stage_of_a_rotation_reads_back_as_written() {
        let timing = Timing::short(std::time::Duration::from_secs(3000));
        let mut material = certs::perform(Step::Create, None, 1_800_000_000, &timing, &names())
            .expect("made")
            .expect("some");
        assert_eq!(from_secret(&secret(&material)), Some(material.clone()));
        for step in [Step::AddNextCa, Step::SwitchToNextCa, Step::DropPreviousCa] {
            material = certs::perform(step, Some(&material), 1_800_000_100, &timing, &names())
                .expect("made")
                .expect("some");
            let read = from_secret(&secret(&material)).expect("whole");
            assert_eq!(read, material, "after {step:?}");
            let data = to_data(&material);
            assert_eq!(
                data.get("ca.crt").map(|b| b.0.clone()),
                Some(material.ca_bundle().into_bytes()),
                "the bundle is where cert-manager's Secrets have it"
            );
        }
    }

    #[test]
    fn a_half_written_secret_is_not_served() {
        let timing = Timing::default();
        let material = certs::perform(Step::AddNextCa, None, 1_800_000_000, &timing, &names())
            .expect("made")
            .expect("some");
        let mut data = to_data(&material);
        data.remove("tls.key");
        let broken = Secret {
            data: Some(data),
            ..Default::default()
        };
        assert_eq!(from_secret(&broken), None);
        let mut data = to_data(&material);
        data.insert(NEXT_CA_CERT.into(), ByteString(b"x".to_vec()));
        data.remove(NEXT_CA_KEY);
        assert_eq!(
            from_secret(&Secret {
                data: Some(data),
                ..Default::default()
            }),
            None,
            "a next CA without its key"
        );
        assert_eq!(from_secret(&Secret::default()), None);
    }
}
