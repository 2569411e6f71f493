//! The local OCI registry is real: a blob pushed through the distribution API comes back
//! byte-identical, and a wrong digest is refused.

use oci_client::{
    Client, Reference, RegistryOperation,
    client::{ClientConfig, ClientProtocol},
    secrets::RegistryAuth,
};
use sha2::{Digest, Sha256};

use crate::harness::{Local, unique};

fn client() -> Client {
    Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        ..Default::default()
    })
}

/// 1 MiB that no earlier run pushed, so the registry cannot answer from an old upload.
fn fresh_payload() -> Vec<u8> {
    let seed = unique("blob");
    (0u32..1 << 20)
        .map(|i| {
            seed.as_bytes()[i as usize % seed.len()] ^ (i.wrapping_mul(2_654_435_761) >> 24) as u8
        })
        .collect()
}

#[tokio::test]
async fn pushed_blob_is_pulled_back_byte_identical() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let reference: Reference =
        format!("{}/e2e/{}:latest", local.registry, unique("blob")).parse()?;
    let client = client();
    client
        .auth(
            &reference,
            &RegistryAuth::Anonymous,
            RegistryOperation::Push,
        )
        .await?;

    let payload = fresh_payload();
    let digest = format!("sha256:{:x}", Sha256::digest(&payload));
    client
        .push_blob(&reference, payload.clone(), &digest)
        .await?;

    let mut pulled = Vec::new();
    client
        .pull_blob(&reference, digest.as_str(), &mut pulled)
        .await?;
    assert_eq!(pulled.len(), payload.len());
    assert!(pulled == payload, "blob {digest} came back different");
    Ok(())
}

#[tokio::test]
async fn blob_with_wrong_digest_is_refused() -> anyhow::Result<()> {
    let local = Local::discover()?;
    let reference: Reference =
        format!("{}/e2e/{}:latest", local.registry, unique("bad")).parse()?;
    let client = client();
    client
        .auth(
            &reference,
            &RegistryAuth::Anonymous,
            RegistryOperation::Push,
        )
        .await?;
    let payload = fresh_payload();
    let wrong = format!("sha256:{:x}", Sha256::digest(b"something else"));
    let result = client.push_blob(&reference, payload, &wrong).await;
    assert!(
        result.is_err(),
        "the registry accepted a blob under a digest it does not have"
    );
    Ok(())
}
