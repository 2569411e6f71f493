//! Pull: the host's own client for reading plugins from OCI registries, bounded wherever a
//! registry could make the host wait, allocate or reach somewhere else.
//!
//! Whoever may create an App chooses the registry, so the registry is untrusted:
//! - every body is read in chunks against a cap (a manifest [`PullLimits::manifest_bytes`], a
//!   token [`PullLimits::token_bytes`], a blob exactly the size its descriptor declares), and an
//!   error response's body is never read at all;
//! - connecting, each read and the whole resolve or fetch have timeouts, so a registry that
//!   drips one byte at a time is cut off;
//! - redirects stay on the registry's scheme, host and port (a blob may go to another HTTPS host,
//!   as the large registries send blobs to their CDNs), at most [`MAX_REDIRECTS`] of them;
//! - the token `realm` of a Bearer challenge must be HTTPS (or the registry's own plain-HTTP
//!   host where plain HTTP is allowed), without credentials in the URL;
//! - no request goes to a link-local or cloud metadata address, nor to a private one (RFC 1918,
//!   loopback, CGNAT ...) unless `--allow-private-registries` or the governing policy's
//!   `registries` allow it ([`super::reach`]), checked after DNS resolution for names and
//!   before any request for addresses in URLs: nothing an App or a registry names can make the
//!   host ask its node's metadata service for credentials, or probe the host's network;
//! - what a registry says reaches errors only as a status code or a short, escaped excerpt, and
//!   every failure to get an answer at all (refused, timed out, reset, not HTTP) reads the same
//!   ([`unreachable()`]), so an App's status cannot tell a closed port from a filtered or an open
//!   one; the cause is logged at debug level for the admin.
//!
//! Pushing (`wasmop plugin push`) is a command a person runs against a registry they chose; it
//! stays on `oci-client`.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use reqwest::{Method, StatusCode, Url, header, redirect};
use serde::Deserialize;

use super::{
    reach::{PrivateNetworks, Reach, Refused},
    slots::PullSlots,
};
use crate::plugin::Digest;

/// Most redirects one request follows.
pub const MAX_REDIRECTS: usize = 3;

/// Resolves and pulls in flight at once, all sources together: each may hold up to a manifest
/// (4 MiB) or a component (8 MiB) while it reads. Within it, each namespace and each registry
/// has slots of its own ([`super::slots`]).
const MAX_PULLS_IN_FLIGHT: usize = 4;

/// HTTP clients kept at once, one per set of registries a policy vouches for (a resolver sees
/// only the name it resolves, so what it may answer is fixed per client): one per distinct
/// `registries` list in use. Past it (a policy edited many times) the set starts over; clients
/// in use live on in their requests.
const MAX_CLIENTS: usize = 64;

/// The manifest media types the host reads (the component is an image manifest's layer).
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json;q=0.9, \
     application/vnd.oci.image.index.v1+json;q=0.5";

/// What one pull may cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullLimits {
    /// Largest manifest read: 4 MiB, the size registries must accept (OCI distribution spec),
    /// for a document that names one layer.
    pub manifest_bytes: usize,
    /// Largest token response read.
    pub token_bytes: usize,
    /// Longest wait for a connection.
    pub connect: Duration,
    /// Longest wait for the next bytes of a response.
    pub read: Duration,
    /// Longest one resolve or fetch may take, every request included.
    pub total: Duration,
}

impl Default for PullLimits {
    fn default() -> Self {
        Self {
            manifest_bytes: 4 << 20,
            token_bytes: 64 << 10,
            connect: Duration::from_secs(10),
            read: Duration::from_secs(20),
            // An 8 MiB component at 200 KiB/s, with room for a token and a manifest.
            total: Duration::from_secs(60),
        }
    }
}

/// One registry as the puller addresses it.
#[derive(Debug, Clone)]
pub struct Target {
    /// `https://host[:port]` (or `http://` where plain HTTP is allowed).
    pub base: Url,
    /// The repository, e.g. `plugins/kvstore`.
    pub repository: String,
    /// Basic credentials for this registry, if the host has some.
    pub credentials: Option<(String, String)>,
    /// Hosts (`host[:port]`) besides the registry's own a token realm may name (`None`: any).
    pub realm_hosts: Option<Vec<String>>,
}

/// Whose token for what: registry, repository and a fingerprint of the credentials it was
/// issued for. A token one tenant's credentials obtained is never sent for another's request.
type TokenKey = (String, String, String);

impl Target {
    fn token_key(&self) -> TokenKey {
        let who = match &self.credentials {
            Some((user, password)) => {
                use sha2::Digest as _;
                let mut hash = sha2::Sha256::new();
                hash.update(user.as_bytes());
                hash.update([0]);
                hash.update(password.as_bytes());
                format!("{:x}", hash.finalize())
            }
            None => String::new(),
        };
        (self.base.to_string(), self.repository.clone(), who)
    }
}

/// The parts of an image manifest the host reads.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Present (and non-empty) only in an index; its entries are not read (a 4 MiB list of
    /// numbers would be a hundred MiB as JSON values).
    #[serde(default)]
    pub manifests: Vec<serde::de::IgnoredAny>,
    /// The config descriptor.
    pub config: Option<Descriptor>,
    /// The layer descriptors.
    #[serde(default)]
    pub layers: Vec<Descriptor>,
}

/// A content descriptor.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Its media type.
    pub media_type: String,
    /// `sha256:...`.
    pub digest: String,
    /// Its size in bytes, as the registry declares it.
    pub size: i64,
    /// The one annotation the host reads; the rest are skipped unread, so a manifest of many
    /// annotated layers costs no more memory than its bytes.
    #[serde(default)]
    pub annotations: Option<Annotations>,
}

/// The annotations of a descriptor the host reads.
#[derive(Debug, Clone, Deserialize)]
pub struct Annotations {
    /// A cosign signature layer's base64 signature.
    #[serde(rename = "dev.cosignproject.cosign/signature")]
    pub cosign_signature: Option<String>,
}

/// Why a blob was not delivered.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// Its descriptor declares more than the host reads.
    #[error("{0}")]
    Oversized(String),
    /// What arrived is not what the descriptor names.
    #[error("the layer's digest is {actual}, not the {expected} its descriptor declares")]
    Mismatch {
        /// The descriptor's digest.
        expected: Digest,
        /// What arrived.
        actual: Digest,
    },
    /// The registry failed, refused, sent too much or too little, or was too slow.
    #[error("{0}")]
    Failed(String),
}

/// An HTTP client and what it may reach (its resolver's and its redirect policy's rules).
type Reaching = (reqwest::Client, Arc<Reach>);

/// Reads manifests and blobs; one per host, shared by every source.
pub struct Puller {
    limits: PullLimits,
    /// Private networks every registry may be reached in (`--allow-private-registries`).
    networks: PrivateNetworks,
    /// A client and what it may reach, by the registries (`host[:port]`) a policy vouches for;
    /// the empty list's is every other request's.
    clients: Mutex<HashMap<Vec<String>, Reaching>>,
    /// Pulls in flight at once, per namespace and per registry: each may hold a manifest's or
    /// a layer's worth of memory.
    slots: PullSlots,
    /// Bearer tokens by registry, repository and credentials, until they expire.
    tokens: Mutex<HashMap<TokenKey, (String, Instant)>>,
}

impl Puller {
    /// A puller within `limits` that reaches no private address.
    pub fn new(limits: PullLimits) -> Result<Self, String> {
        let puller = Self {
            limits,
            networks: PrivateNetworks::default(),
            clients: Mutex::new(HashMap::new()),
            slots: PullSlots::new(MAX_PULLS_IN_FLIGHT),
            tokens: Mutex::new(HashMap::new()),
        };
        // Built now, so that a client that cannot be built fails the host's start.
        puller.client(None)?;
        Ok(puller)
    }

    /// Lets every registry be reached at the private addresses in `networks` (blocked ones
    /// stay refused).
    pub fn allow_private(&mut self, networks: PrivateNetworks) {
        self.networks = networks;
        self.clients
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    /// What one pull may cost.
    pub fn limits(&self) -> PullLimits {
        self.limits
    }

    /// The client for requests of a target whose policy vouches for `vouched` registries, and
    /// what it may reach.
    fn client(&self, vouched: Option<&[String]>) -> Result<Reaching, String> {
        let mut key: Vec<String> = vouched.unwrap_or_default().to_vec();
        key.sort();
        key.dedup();
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = clients.get(&key) {
            return Ok(found.clone());
        }
        let reach = Arc::new(Reach::new(self.networks.clone(), &key));
        let redirects = reach.clone();
        let http = reqwest::Client::builder()
            .connect_timeout(self.limits.connect)
            .read_timeout(self.limits.read)
            .timeout(self.limits.total)
            .redirect(redirect::Policy::custom(move |attempt| {
                redirect_policy(&redirects, attempt)
            }))
            .dns_resolver(Arc::new(GuardedResolver {
                reach: reach.clone(),
            }))
            .referer(false)
            .no_proxy()
            .user_agent(concat!("wasmop/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|err| format!("building the registry client: {err}"))?;
        if clients.len() >= MAX_CLIENTS {
            clients.clear();
        }
        clients.insert(key, (http.clone(), reach.clone()));
        Ok((http, reach))
    }

    /// The digest of the manifest `reference` (a tag or a digest) names now.
    pub async fn resolve(&self, target: &Target, reference: &str) -> Result<Digest, String> {
        self.within_total(target, "resolving", async {
            let path = format!("/v2/{}/manifests/{reference}", target.repository);
            let response = self
                .send(target, Method::HEAD, &path, "the manifest")
                .await?;
            if let Some(digest) = response
                .headers()
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| Digest::parse(v).ok())
            {
                return Ok(digest);
            }
            // No usable digest header: the digest is the manifest's own.
            let (_, digest) = self.read_manifest(target, reference).await?;
            Ok(digest)
        })
        .await
    }

    /// The manifest `reference` names, and its digest (checked against `reference` when that
    /// is a digest).
    pub async fn manifest(
        &self,
        target: &Target,
        reference: &str,
    ) -> Result<(Manifest, Digest), String> {
        self.within_total(
            target,
            "pulling the manifest",
            self.read_manifest(target, reference),
        )
        .await
    }

    /// The manifest tagged `tag`, or `None` if the registry has no such tag (as for the
    /// signature tag of an unsigned image).
    pub async fn manifest_if_tagged(
        &self,
        target: &Target,
        tag: &str,
    ) -> Result<Option<(Manifest, Digest)>, String> {
        self.within_total(target, "pulling the manifest", async {
            let path = format!("/v2/{}/manifests/{tag}", target.repository);
            match self
                .send_or_missing(target, Method::GET, &path, "the manifest")
                .await?
            {
                Some(response) => self.parse_manifest(response, tag).await.map(Some),
                None => Ok(None),
            }
        })
        .await
    }

    async fn read_manifest(
        &self,
        target: &Target,
        reference: &str,
    ) -> Result<(Manifest, Digest), String> {
        let path = format!("/v2/{}/manifests/{reference}", target.repository);
        let response = self
            .send(target, Method::GET, &path, "the manifest")
            .await?;
        self.parse_manifest(response, reference).await
    }

    async fn parse_manifest(
        &self,
        response: reqwest::Response,
        reference: &str,
    ) -> Result<(Manifest, Digest), String> {
        let body = read_capped(response, self.limits.manifest_bytes, "the manifest").await?;
        let digest = Digest::of(&body);
        if reference.starts_with("sha256:") && digest.as_str() != reference {
            return Err(format!(
                "the manifest's digest is {digest}, not the {reference} asked for"
            ));
        }
        // serde's message would quote the registry's text; the position is enough.
        let manifest: Manifest = serde_json::from_slice(&body).map_err(|err| {
            format!(
                "the manifest is not an OCI image manifest (line {}, column {})",
                err.line(),
                err.column()
            )
        })?;
        Ok((manifest, digest))
    }

    /// The blob `descriptor` names: exactly its declared size, with its digest checked.
    pub async fn blob(
        &self,
        target: &Target,
        descriptor: &Descriptor,
        max_bytes: usize,
    ) -> Result<Vec<u8>, BlobError> {
        let expected = Digest::parse(&descriptor.digest).map_err(|_| {
            BlobError::Failed(format!(
                "the layer's digest {} is not sha256:<64 hex digits>",
                excerpt(&descriptor.digest)
            ))
        })?;
        let size = usize::try_from(descriptor.size).map_err(|_| {
            BlobError::Failed(format!("the layer declares {} bytes", descriptor.size))
        })?;
        if size > max_bytes {
            return Err(BlobError::Oversized(format!(
                "the layer declares {size} bytes, over the {max_bytes} byte limit"
            )));
        }
        let bytes = self
            .within_total(target, "pulling the layer", async {
                let path = format!("/v2/{}/blobs/{expected}", target.repository);
                let response = self.send(target, Method::GET, &path, "the layer").await?;
                let bytes = read_capped(response, size, "the layer").await?;
                if bytes.len() != size {
                    return Err(format!(
                        "the layer ended after {} of its declared {size} bytes",
                        bytes.len()
                    ));
                }
                Ok(bytes)
            })
            .await
            .map_err(BlobError::Failed)?;
        let actual = Digest::of(&bytes);
        if actual != expected {
            return Err(BlobError::Mismatch { expected, actual });
        }
        Ok(bytes)
    }

    async fn within_total<T>(
        &self,
        target: &Target,
        what: &str,
        work: impl std::future::Future<Output = Result<T, String>>,
    ) -> Result<T, String> {
        // Taken before the operation's clock starts: waiting behind other pulls is not this
        // registry's slowness.
        let _slot = self.slots.acquire(&authority(&target.base)).await;
        tokio::time::timeout(self.limits.total, work)
            .await
            .unwrap_or_else(|_| {
                // This may run out while a connection is still being made (after a slow
                // first request, at a redirect's host): it reads as any other failure to get
                // an answer.
                tracing::debug!(registry = %authority(&target.base), what, limit = ?self.limits.total, "registry operation timed out");
                Err(unreachable(&target.base))
            })
    }

    /// Sends one request, answering an authentication challenge once; a success or an error
    /// naming the status.
    async fn send(
        &self,
        target: &Target,
        method: Method,
        path: &str,
        what: &str,
    ) -> Result<reqwest::Response, String> {
        self.send_or_missing(target, method, path, what)
            .await?
            .ok_or_else(|| format!("the registry answered {} for {what}", StatusCode::NOT_FOUND))
    }

    /// [`Self::send`], with a 404 answered as `None`.
    async fn send_or_missing(
        &self,
        target: &Target,
        method: Method,
        path: &str,
        what: &str,
    ) -> Result<Option<reqwest::Response>, String> {
        let url = target
            .base
            .join(path)
            .map_err(|err| format!("{what}: {path:?} is not a URL path: {err}"))?;
        let (http, reach) = self.client(target.realm_hosts.as_deref())?;
        reach
            .check_url(&url)
            .map_err(|refused| refused.to_string())?;
        let key = target.token_key();
        let unreachable = || unreachable(&target.base);
        let request = |auth: Option<&Auth>| {
            let request = http
                .request(method.clone(), url.clone())
                .header(header::ACCEPT, MANIFEST_ACCEPT);
            match auth {
                Some(Auth::Bearer(token)) => request.bearer_auth(token),
                Some(Auth::Basic(user, password)) => request.basic_auth(user, Some(password)),
                None => request,
            }
        };
        let cached = self.token(&key).map(Auth::Bearer);
        let response = request(cached.as_ref())
            .send()
            .await
            .map_err(|err| send_failed(what, err, unreachable))?;
        // Only the registry itself may ask for credentials: a 401 from where a redirect led
        // (a blob's CDN) is a failure, not a challenge to answer with the registry's secrets.
        let from_registry = response.url().host_str() == target.base.host_str()
            && response.url().port_or_known_default() == target.base.port_or_known_default();
        let response = if response.status() == StatusCode::UNAUTHORIZED && from_registry {
            let challenge = response
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(Challenge::parse);
            let auth = match challenge {
                Some(Challenge::Bearer { realm, service }) => Auth::Bearer(
                    self.fetch_token(target, &key, &realm, service.as_deref())
                        .await?,
                ),
                Some(Challenge::Basic) => match &target.credentials {
                    Some((user, password)) => Auth::Basic(user.clone(), password.clone()),
                    None => {
                        return Err(format!(
                            "{what}: the registry asks for credentials, and the host has none for it"
                        ));
                    }
                },
                None => {
                    return Err(format!(
                        "{what}: the registry answered 401 without a challenge the host understands"
                    ));
                }
            };
            request(Some(&auth))
                .send()
                .await
                .map_err(|err| send_failed(what, err, unreachable))?
        } else {
            response
        };
        let status = response.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            // The body is the registry's to fill; it is not read, let alone repeated.
            return Err(format!("the registry answered {status} for {what}"));
        }
        Ok(Some(response))
    }

    fn token(&self, key: &TokenKey) -> Option<String> {
        let tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        tokens
            .get(key)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(token, _)| token.clone())
    }

    /// Asks the challenge's `realm` for a pull token for the target's repository.
    async fn fetch_token(
        &self,
        target: &Target,
        key: &TokenKey,
        realm: &str,
        service: Option<&str>,
    ) -> Result<String, String> {
        let what = "the registry's token service";
        let (http, reach) = self.client(target.realm_hosts.as_deref())?;
        let mut url = check_realm(&target.base, realm, target.realm_hosts.as_deref(), &reach)
            .map_err(|r| format!("{what}: {r}"))?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", &format!("repository:{}:pull", target.repository));
        }
        let mut request = http.get(url);
        if let Some((user, password)) = &target.credentials {
            request = request.basic_auth(user, Some(password));
        }
        let response = request.send().await.map_err(|err| {
            send_failed(what, err, || {
                format!(
                    "the token service of registry {} could not be reached",
                    authority(&target.base)
                )
            })
        })?;
        let status = response.status();
        if !status.is_success() {
            return Err(format!("{what} answered {status}"));
        }
        let body = read_capped(response, self.limits.token_bytes, what).await?;
        #[derive(Deserialize)]
        struct TokenResponse {
            token: Option<String>,
            access_token: Option<String>,
            expires_in: Option<u64>,
        }
        let parsed: TokenResponse = serde_json::from_slice(&body)
            .map_err(|_| format!("{what} answered something other than a token"))?;
        let token = parsed
            .token
            .or(parsed.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| format!("{what} answered without a token"))?;
        // The spec's default lifetime is 60 s; a minute's margin keeps a token from expiring
        // between the manifest and the blob.
        let lifetime = Duration::from_secs(parsed.expires_in.unwrap_or(60).clamp(60, 3600) - 30);
        let mut tokens = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        tokens.retain(|_, (_, until)| *until > now);
        tokens.insert(key.clone(), (token.clone(), now + lifetime));
        Ok(token)
    }
}

enum Auth {
    Bearer(String),
    Basic(String, String),
}

/// A `WWW-Authenticate` challenge the puller answers.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

impl Challenge {
    /// Parses `Basic ...` or `Bearer realm="...",service="...",scope="..."`; anything else
    /// (or a Bearer challenge without a realm) is a Basic one, which needs credentials.
    fn parse(header: &str) -> Self {
        let (scheme, rest) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Self::Basic;
        }
        let mut params = HashMap::new();
        let mut rest = rest.trim();
        while let Some((key, after)) = rest.split_once('=') {
            let key = key
                .trim()
                .trim_start_matches(',')
                .trim()
                .to_ascii_lowercase();
            let after = after.trim_start();
            let (value, next) = match after.strip_prefix('"') {
                Some(quoted) => match quoted.split_once('"') {
                    Some((value, next)) => (value, next),
                    None => (quoted, ""),
                },
                None => after.split_once(',').unwrap_or((after, "")),
            };
            params.insert(key, value.to_string());
            rest = next.trim_start_matches(|c: char| c == ',' || c.is_whitespace());
        }
        match params.remove("realm") {
            Some(realm) => Self::Bearer {
                realm,
                service: params.remove("service"),
            },
            None => Self::Basic,
        }
    }
}

/// The realm as a URL the host may ask for a token: HTTPS (or plain HTTP only on the
/// registry's own host, where the registry itself is plain HTTP), no credentials in it, not an
/// address `reach` refuses.
fn check_realm(
    registry: &Url,
    realm: &str,
    allowed: Option<&[String]>,
    reach: &Reach,
) -> Result<Url, String> {
    let url = Url::parse(realm).map_err(|_| format!("realm {} is not a URL", excerpt(realm)))?;
    let same_host = url.host_str() == registry.host_str()
        && url.port_or_known_default() == registry.port_or_known_default();
    if let Some(allowed) = allowed
        && !same_host
    {
        let host = url.host_str().unwrap_or_default();
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        if !allowed.contains(&authority) {
            return Err(format!(
                "realm host {} is neither the registry nor one the policy's registries allow",
                excerpt(&authority)
            ));
        }
    }
    match url.scheme() {
        "https" => {}
        "http" if registry.scheme() == "http" && same_host => {}
        _ => {
            return Err(format!(
                "realm {} is not HTTPS (plain HTTP only on the registry's own host)",
                excerpt(realm)
            ));
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("the realm carries credentials in its URL".into());
    }
    reach
        .check_url(&url)
        .map_err(|refused| refused.to_string())?;
    Ok(url)
}

/// Resolves names as the system does, then drops the addresses its client may not reach: a
/// name left with none is an error ([`Refused`]), so no DNS answer can point the host at its
/// metadata service or into a private network nothing allowed.
struct GuardedResolver {
    reach: Arc<Reach>,
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let reach = self.reach.clone();
        Box::pin(async move {
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let allowed: Vec<SocketAddr> = reach.filter(&host, found)?;
            let addrs: reqwest::dns::Addrs = Box::new(allowed.into_iter());
            Ok(addrs)
        })
    }
}

/// Redirects stay on the first URL's scheme, host and port; a blob may move to another HTTPS
/// host (registries serve blobs from CDNs; reqwest drops the credentials on such a hop). At
/// most [`MAX_REDIRECTS`], never to an address literal `reach` refuses (names are checked when
/// resolved).
fn redirect_policy(reach: &Reach, attempt: redirect::Attempt<'_>) -> redirect::Action {
    let Some(first) = attempt.previous().first().cloned() else {
        return attempt.stop();
    };
    if attempt.previous().len() > MAX_REDIRECTS {
        return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
    }
    let to = attempt.url().clone();
    if let Err(refused) = reach.check_url(&to) {
        return attempt.error(refused);
    }
    let same_origin = to.scheme() == first.scheme()
        && to.host_str() == first.host_str()
        && to.port_or_known_default() == first.port_or_known_default();
    let blob_to_https = first.path().contains("/blobs/") && to.scheme() == "https";
    if same_origin || blob_to_https {
        attempt.follow()
    } else {
        attempt.error(format!(
            "redirect to {} refused: only to the registry itself (or HTTPS for a blob)",
            excerpt(&origin(&to))
        ))
    }
}

/// `host[:port]` of a URL, the port only where it names one.
fn authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// What an App's status says when no answer came from the registry at `base`: the same words
/// whether the connection was refused, timed out, was reset or met something other than an
/// HTTP server, so status is no port scanner; the cause goes to the host's log.
pub fn unreachable(base: &Url) -> String {
    format!("registry {} could not be reached", authority(base))
}

fn origin(url: &Url) -> String {
    format!(
        "{}://{}{}",
        url.scheme(),
        url.host_str().unwrap_or(""),
        url.port().map(|p| format!(":{p}")).unwrap_or_default()
    )
}

/// Reads a response body, refusing it as soon as it passes `cap` bytes.
async fn read_capped(
    mut response: reqwest::Response,
    cap: usize,
    what: &str,
) -> Result<Vec<u8>, String> {
    if let Some(declared) = response.content_length()
        && declared > cap as u64
    {
        return Err(format!(
            "{what} is {declared} bytes, over its {cap} byte limit"
        ));
    }
    let mut body = Vec::with_capacity(cap.min(1 << 20));
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|err| body_failed(what, err))?
    {
        if body.len() + chunk.len() > cap {
            return Err(format!("{what} is over its {cap} byte limit"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// A request that got no response: the host's own refusal (an address, a redirect) in its
/// words, anything else as `unreachable`'s one text, with the cause logged for the admin.
fn send_failed(what: &str, err: reqwest::Error, unreachable: impl FnOnce() -> String) -> String {
    let refused = refusal(&err);
    if err.is_redirect() {
        return match refused {
            Some(refused) => format!("{what}: redirect {refused}"),
            None => format!("{what}: redirect refused{}", last_cause(&err)),
        };
    }
    if let Some(refused) = refused {
        return refused.to_string();
    }
    let message = unreachable();
    tracing::debug!(what, error = %causes(&err).join(": "), "{message}");
    message
}

/// A response whose body failed after its status arrived: the server speaks HTTP, so saying
/// how it failed tells nothing about the network.
fn body_failed(what: &str, err: reqwest::Error) -> String {
    if err.is_timeout() {
        return format!("{what} timed out");
    }
    format!("{what}: transfer failed{}", last_cause(&err))
}

/// The host's own refusal behind `err`, if that is what it is.
fn refusal(err: &reqwest::Error) -> Option<&Refused> {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(refused) = cause.downcast_ref::<Refused>() {
            return Some(refused);
        }
        source = cause.source();
    }
    None
}

/// Each cause of `err`, outermost first, without the URL (after a redirect, one the registry
/// chose).
fn causes(err: &reqwest::Error) -> Vec<String> {
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        causes.push(cause.to_string());
        source = cause.source();
    }
    causes
}

/// `: <innermost cause>`, escaped and short, or nothing.
fn last_cause(err: &reqwest::Error) -> String {
    causes(err)
        .last()
        .map(|c| format!(": {}", excerpt(c)))
        .unwrap_or_default()
}

/// At most 120 characters of something a registry said, escaped.
pub fn excerpt(text: &str) -> String {
    let cut: String = text.chars().take(120).collect();
    let escaped = format!("{cut:?}");
    if text.chars().count() > 120 {
        format!("{escaped}...")
    } else {
        escaped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_as_registries_send_them() {
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/x:pull""#
            ),
            Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
            }
        );
        assert_eq!(
            Challenge::parse(r#"Basic realm="Registry Realm""#),
            Challenge::Basic
        );
        assert_eq!(Challenge::parse("Bearer service=x"), Challenge::Basic);
    }

    #[test]
    fn realms_must_be_https_or_the_plain_registry_itself() {
        let public = Reach::default();
        let https = Url::parse("https://ghcr.io").expect("url");
        let realm = |registry: &Url, realm: &str, allowed: Option<&[String]>, reach: &Reach| {
            check_realm(registry, realm, allowed, reach)
        };
        assert!(realm(&https, "https://ghcr.io/token", None, &public).is_ok());
        assert!(realm(&https, "https://auth.example/token", None, &public).is_ok());
        assert!(realm(&https, "http://ghcr.io/token", None, &public).is_err());
        let err = realm(
            &https,
            "https://169.254.169.254/latest/meta-data/",
            None,
            &public,
        )
        .expect_err("metadata");
        assert!(err.contains("169.254.169.254"), "{err}");
        assert!(realm(&https, "https://user:pw@auth.example/token", None, &public).is_err());
        // A realm on a private address is refused like a registry there.
        let err = realm(&https, "https://10.0.0.5/token", None, &public).expect_err("private");
        assert!(err.contains("10.0.0.5 is a private address"), "{err}");

        let loopback = Reach::new(PrivateNetworks::parse("127.0.0.0/8").expect("a CIDR"), &[]);
        let plain = Url::parse("http://127.0.0.1:15000").expect("url");
        assert!(realm(&plain, "http://127.0.0.1:15000/token", None, &loopback).is_ok());
        assert!(realm(&plain, "http://127.0.0.1:15001/token", None, &loopback).is_err());
        assert!(realm(&plain, "http://127.0.0.1:15000/token", None, &public).is_err());

        // Under a registries allowlist, a realm elsewhere must be one of its hosts.
        let allowed = ["ghcr.io".to_string(), "auth.docker.io".to_string()];
        let allowed = Some(&allowed[..]);
        assert!(realm(&https, "https://ghcr.io/token", allowed, &public).is_ok());
        assert!(realm(&https, "https://auth.docker.io/token", allowed, &public).is_ok());
        let err =
            realm(&https, "https://auth.example/token", allowed, &public).expect_err("not allowed");
        assert!(err.contains("auth.example"), "{err}");
        assert!(realm(&https, "https://auth.docker.io:444/token", allowed, &public).is_err());
    }

    #[test]
    fn unreachable_names_the_registry_only() {
        for (base, text) in [
            (
                "http://10.0.0.5:8080",
                "registry 10.0.0.5:8080 could not be reached",
            ),
            ("https://ghcr.io", "registry ghcr.io could not be reached"),
            (
                "http://[fd00::1]:5000",
                "registry [fd00::1]:5000 could not be reached",
            ),
        ] {
            assert_eq!(unreachable(&Url::parse(base).expect("url")), text);
        }
    }

    #[test]
    fn tokens_are_kept_apart_by_the_credentials_that_got_them() {
        let target = |credentials: Option<(&str, &str)>| Target {
            base: Url::parse("https://ghcr.io").expect("url"),
            repository: "acme/db".into(),
            credentials: credentials.map(|(u, p)| (u.to_string(), p.to_string())),
            realm_hosts: None,
        };
        let anonymous = target(None).token_key();
        let tenant_a = target(Some(("a", "secret-a"))).token_key();
        let tenant_b = target(Some(("a", "secret-b"))).token_key();
        assert_ne!(anonymous, tenant_a);
        assert_ne!(tenant_a, tenant_b);
        assert_eq!(tenant_a, target(Some(("a", "secret-a"))).token_key());
        assert!(
            !tenant_a.2.contains("secret-a"),
            "the key holds the password"
        );
    }

    #[test]
    fn excerpts_are_short_and_escaped() {
        assert_eq!(excerpt("a\nb"), "\"a\\nb\"");
        assert!(excerpt(&"x".repeat(500)).len() < 130);
    }
}
