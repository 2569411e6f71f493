//! The on-disk plugin cache: raw component bytes by digest, compiled artifacts by digest and
//! engine fingerprint, and the last digest each source reference resolved to. A restart loads
//! plugins in milliseconds from it, and works while the registry is down.
//!
//! # Safety of deserializing
//!
//! `Component::deserialize` runs machine code from the artifact without validating it, which is
//! why it is `unsafe`: a tampered artifact is arbitrary code in the host. This cache only
//! deserializes files it wrote itself: regular files (opened with `O_NOFOLLOW`) owned by the
//! host's user alone, in directories that are its alone (mode 0700), whose HMAC-SHA256 under
//! the install's [`CacheKey`] matches the tag written beside them. Someone who can write the
//! cache volume (a shared or persistent volume, another container) but cannot read the key,
//! which comes from a Secret mounted elsewhere, cannot forge an artifact the host will run; a
//! truncated or corrupt one is caught the same way and recompiled. The records of what each
//! source last resolved to carry the same HMAC, so they cannot point one source at another's
//! component. wasmtime itself refuses artifacts built by another wasmtime version or with
//! other engine settings, and the fingerprint in the path keeps those apart.
#![allow(unsafe_code)]

use std::{
    fs,
    io::{self, Write},
    path::{Path, PathBuf},
};

use aws_lc_rs::hmac;
use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

use super::{Digest, engine::PluginEngine};

/// The cache directory and its layout.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
    max_bytes: u64,
    key: CacheKey,
}

/// The secret the cache authenticates what it wrote with: one per install, from a file (a
/// mounted Secret), or else one per host process, which makes a restart recompile.
#[derive(Clone)]
pub struct CacheKey(hmac::Key);

impl std::fmt::Debug for CacheKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CacheKey(..)")
    }
}

/// The shortest key file accepted: 256 bits, HMAC-SHA256's own strength.
pub const MIN_KEY_BYTES: usize = 32;

impl CacheKey {
    /// A key from `bytes` (at least [`MIN_KEY_BYTES`]).
    pub fn new(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < MIN_KEY_BYTES {
            return Err(format!(
                "{} bytes; at least {MIN_KEY_BYTES} are needed (e.g. openssl rand -hex 32)",
                bytes.len()
            ));
        }
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, bytes)))
    }

    /// The key in `path`, surrounding whitespace aside; `None` if there is no such file (an
    /// optional Secret that was not created).
    pub fn from_file(path: &Path) -> io::Result<Option<Self>> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(err),
        };
        let text = bytes.trim_ascii();
        // `openssl rand -hex 32` writes 64 characters for 32 bytes: a hex key counts by what it
        // encodes, so that 32 hex characters (16 bytes) are not taken for a 256-bit key.
        if text.iter().all(u8::is_ascii_hexdigit) && text.len() < 2 * MIN_KEY_BYTES {
            return Err(io::Error::other(format!(
                "{}: {} hex digits encode {} bytes; at least {MIN_KEY_BYTES} are needed (e.g. openssl rand -hex 32)",
                path.display(),
                text.len(),
                text.len() / 2
            )));
        }
        Self::new(text)
            .map(Some)
            .map_err(|why| io::Error::other(format!("{}: {why}", path.display())))
    }

    /// This process's own random key, the same for every cache it opens.
    pub fn per_process() -> Self {
        static KEY: std::sync::OnceLock<CacheKey> = std::sync::OnceLock::new();
        KEY.get_or_init(|| {
            let rng = aws_lc_rs::rand::SystemRandom::new();
            // Fails only without an OS random source, where nothing else would work either.
            match hmac::Key::generate(hmac::HMAC_SHA256, &rng) {
                Ok(key) => Self(key),
                Err(_) => panic!("the operating system gave no random bytes for the cache key"),
            }
        })
        .clone()
    }

    fn tag(&self, parts: &[&[u8]]) -> String {
        hex(hmac::sign(&self.0, &framed(parts)).as_ref())
    }

    /// Whether `tag` (hex) is the HMAC of `parts`, compared in constant time.
    fn verify(&self, parts: &[&[u8]], tag: &str) -> bool {
        unhex(tag.trim()).is_some_and(|tag| hmac::verify(&self.0, &framed(parts), &tag).is_ok())
    }
}

/// `parts`, each length-prefixed, so that no two different sequences of parts read the same.
fn framed(parts: &[&[u8]]) -> Vec<u8> {
    let mut message = Vec::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
    for part in parts {
        message.extend_from_slice(&(part.len() as u64).to_be_bytes());
        message.extend_from_slice(part);
    }
    message
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// What the cache may hold on disk unless told otherwise: half the host Deployment's 1Gi
/// emptyDir, so that Apps pushing version after version cannot get the pod evicted.
pub const DEFAULT_MAX_BYTES: u64 = 512 << 20;

impl Cache {
    /// Opens (creating) the cache at `root`, holding at most [`DEFAULT_MAX_BYTES`], with this
    /// process's key.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<Self> {
        Self::bounded(root, DEFAULT_MAX_BYTES)
    }

    /// Opens (creating) the cache at `root`, holding at most `max_bytes`: past that, the
    /// entries least recently stored or loaded are deleted first. It uses this process's key
    /// until [`Self::with_key`] gives the install's.
    pub fn bounded(root: impl Into<PathBuf>, max_bytes: u64) -> io::Result<Self> {
        let root = root.into();
        for dir in ["blobs", "compiled", "refs"] {
            create_private_dir(&root.join(dir))?;
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&root, fs::Permissions::from_mode(0o700))?;
        }
        Ok(Self {
            root,
            max_bytes,
            key: CacheKey::per_process(),
        })
    }

    /// This cache, authenticating with `key`.
    pub fn with_key(mut self, key: CacheKey) -> Self {
        self.key = key;
        self
    }

    /// Deletes the least recently used files (by modification time, which loads refresh) until
    /// the cache holds at most nine tenths of its bound; called after every store.
    fn trim(&self) {
        let mut files = Vec::new();
        let mut total = 0u64;
        // What references last resolved to (`refs/`) is tiny and what a restart without the
        // registry needs: never trimmed.
        let mut walk = vec![self.root.join("blobs"), self.root.join("compiled")];
        while let Some(dir) = walk.pop() {
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let Ok(meta) = entry.metadata() else {
                    continue;
                };
                if meta.is_dir() {
                    walk.push(entry.path());
                } else if meta.is_file() {
                    total += meta.len();
                    let used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
                    files.push((used, meta.len(), entry.path()));
                }
            }
        }
        if total <= self.max_bytes {
            return;
        }
        files.sort();
        let goal = self.max_bytes / 10 * 9;
        for (_, len, path) in files {
            if total <= goal {
                break;
            }
            if fs::remove_file(&path).is_ok() {
                total -= len;
            }
        }
        tracing::info!(
            bytes = total,
            bound = self.max_bytes,
            "plugin cache trimmed to its bound"
        );
    }

    /// Marks `path` as just used, so that trimming keeps it longest.
    fn touch(path: &Path) {
        if let Ok(file) = fs::OpenOptions::new().append(true).open(path) {
            let _ = file.set_modified(std::time::SystemTime::now());
        }
    }

    /// The cache's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root.join("blobs").join(digest.hex())
    }

    fn compiled_path(&self, engine: &PluginEngine, digest: &Digest) -> PathBuf {
        self.root
            .join("compiled")
            .join(engine.fingerprint())
            .join(format!("{}.cwasm", digest.hex()))
    }

    fn ref_path(&self, reference: &str) -> PathBuf {
        self.root
            .join("refs")
            .join(format!("{:x}", Sha256::digest(reference.as_bytes())))
    }

    /// Keeps the raw bytes of a component; an error says why it could not (the cache is an
    /// optimisation: the caller serves the plugin anyway and says it is not cached).
    pub fn store_blob(&self, digest: &Digest, bytes: &[u8]) -> io::Result<()> {
        let path = self.blob_path(digest);
        // Every offer stores its bytes, a load from the cache too: what is there and intact
        // stays, so a full disk does not make a cached plugin look uncached.
        if fs::read(&path).is_ok_and(|held| Digest::of(&held) == *digest) {
            Self::touch(&path);
            return Ok(());
        }
        let result = write_atomic(&path, bytes);
        warn_on_failure("storing plugin bytes", &result);
        self.trim();
        result
    }

    /// The raw bytes of a component, if cached and intact.
    pub fn load_blob(&self, digest: &Digest) -> Option<Vec<u8>> {
        let path = self.blob_path(digest);
        let bytes = fs::read(&path).ok()?;
        Self::touch(&path);
        (Digest::of(&bytes) == *digest).then_some(bytes)
    }

    /// Keeps the compiled artifact of a component for this engine; an error says why it could
    /// not.
    pub fn store_compiled(
        &self,
        engine: &PluginEngine,
        digest: &Digest,
        component: &Component,
    ) -> io::Result<()> {
        let path = self.compiled_path(engine, digest);
        let result = component
            .serialize()
            .map_err(|e| io::Error::other(format!("{e:#}")))
            .and_then(|artifact| {
                if let Some(dir) = path.parent() {
                    create_private_dir(dir)?;
                }
                // The artifact first, its tag last: an artifact without its tag is never
                // loaded (it is compiled again), and nothing here deletes another writer's tag.
                write_atomic(&path, &artifact)?;
                write_atomic(
                    &mac_path(&path),
                    self.artifact_tag(&path, &artifact).as_bytes(),
                )
            });
        warn_on_failure("storing a compiled plugin", &result);
        self.trim();
        result
    }

    /// The compiled artifact of a component for this engine, if cached and intact.
    pub fn load_compiled(&self, engine: &PluginEngine, digest: &Digest) -> Option<Component> {
        let path = self.compiled_path(engine, digest);
        let artifact = match read_own_file(&path) {
            Ok(artifact) => artifact,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return None,
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %err, "compiled plugin refused; recompiling");
                return None;
            }
        };
        let recorded = read_own_file(&mac_path(&path)).unwrap_or_default();
        if !self.key.verify(
            &[self.artifact_name(&path).as_bytes(), &artifact],
            &String::from_utf8_lossy(&recorded),
        ) {
            // Another process's key (no key file: every restart recompiles), corruption, or
            // someone else's artifact.
            tracing::info!(path = %path.display(), "compiled plugin not authenticated by this install's cache key; recompiling");
            return None;
        }
        Self::touch(&path);
        // Trimming goes by modification time: the tag must not go before its artifact.
        Self::touch(&mac_path(&path));
        // SAFETY: see the module docs — only artifacts this cache wrote, authenticated with the
        // install's key, in a directory owned by the host, for this exact engine fingerprint.
        match unsafe { Component::deserialize(engine.engine(), &artifact) } {
            Ok(component) => Some(component),
            Err(err) => {
                tracing::warn!(path = %path.display(), error = %format!("{err:#}"), "compiled plugin unusable; recompiling");
                None
            }
        }
    }

    /// What an artifact's tag binds it to: its place (engine fingerprint and digest), so that a
    /// genuine artifact cannot be moved to stand for another component.
    fn artifact_name(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    fn artifact_tag(&self, path: &Path, artifact: &[u8]) -> String {
        self.key
            .tag(&[self.artifact_name(path).as_bytes(), artifact])
    }

    fn failure_path(&self, engine: &PluginEngine, digest: &Digest) -> PathBuf {
        let tag = engine.compiler().failure_tag();
        self.compiled_path(engine, digest)
            .with_extension(format!("{tag}.failed"))
    }

    /// Remembers that `digest` does not compile for this engine, and why, so that neither a
    /// poll nor a restart compiles it again.
    pub fn remember_failure(&self, engine: &PluginEngine, digest: &Digest, reason: &str) {
        let path = self.failure_path(engine, digest);
        let reason: String = reason.chars().take(1024).collect();
        let result = path
            .parent()
            .map_or(Ok(()), create_private_dir)
            .and_then(|()| write_atomic(&path, reason.as_bytes()));
        warn_on_failure("recording a plugin that does not compile", &result);
    }

    /// Why `digest` did not compile for this engine, if it did not.
    pub fn recall_failure(&self, engine: &PluginEngine, digest: &Digest) -> Option<String> {
        let reason = read_own_file(&self.failure_path(engine, digest)).ok()?;
        Some(String::from_utf8_lossy(&reason[..reason.len().min(1024)]).into_owned())
    }

    /// Records that `reference` resolved to `digest`, for starts while the source is down.
    pub fn remember_ref(&self, reference: &str, digest: &Digest) {
        let mac = self
            .key
            .tag(&[reference.as_bytes(), digest.as_str().as_bytes()]);
        let record =
            serde_json::json!({"reference": reference, "digest": digest.as_str(), "mac": mac});
        warn_on_failure(
            "recording a plugin reference",
            &write_atomic(&self.ref_path(reference), record.to_string().as_bytes()),
        );
    }

    /// The digest `reference` last resolved to.
    pub fn recall_ref(&self, reference: &str) -> Option<Digest> {
        let text = read_own_file(&self.ref_path(reference)).ok()?;
        let record: serde_json::Value = serde_json::from_slice(&text).ok()?;
        if record.get("reference")?.as_str()? != reference {
            return None;
        }
        let digest = record.get("digest")?.as_str()?;
        let mac = record.get("mac")?.as_str()?;
        if !self
            .key
            .verify(&[reference.as_bytes(), digest.as_bytes()], mac)
        {
            return None;
        }
        Digest::parse(digest).ok()
    }
}

/// Reads a file only if it is what this cache wrote: a regular file, not a link (opened with
/// `O_NOFOLLOW`), owned by this process's user and writable by nobody else, in a directory
/// that is not writable by others either. Anything else is refused, never deserialized.
fn read_own_file(path: &Path) -> io::Result<Vec<u8>> {
    use std::{
        io::Read,
        os::unix::fs::{MetadataExt, OpenOptionsExt},
    };
    let refuse = |why: &str| io::Error::other(format!("{}: {why}", path.display()));
    let me = rustix::process::geteuid().as_raw();
    check_private_parent(path)?;
    let mut file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refuse("not a regular file"));
    }
    if meta.uid() != me || meta.mode() & 0o022 != 0 {
        return Err(refuse("not owned by this user alone"));
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Refuses `path` unless its directory is this user's alone: a directory someone else can
/// write is one where they could plant links or files under the names the cache uses.
fn check_private_parent(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let Some(dir) = path.parent() {
        let meta = fs::symlink_metadata(dir)?;
        if !meta.is_dir()
            || meta.uid() != rustix::process::geteuid().as_raw()
            || meta.mode() & 0o022 != 0
        {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("{}: its directory is not this user's alone", path.display()),
            ));
        }
    }
    Ok(())
}

/// Creates `dir` and its parents as the host's alone (mode 0700), whatever the umask.
fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn mac_path(path: &Path) -> PathBuf {
    path.with_extension("cwasm.hmac")
}

/// Writes through a temporary file and a rename, so a crash never leaves a half-written entry
/// under the real name, and a failed write (a full disk) leaves nothing behind. The error
/// names the file.
///
/// The temporary name is unique to this write (two sources with the same bytes, or two
/// replicas on one volume, both pid 1, store the same digest at once), created anew
/// (`O_EXCL`, `O_NOFOLLOW`: never through a link someone planted), in a directory that must be
/// the host's alone; only a file this call created is removed.
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let named =
        |err: io::Error| io::Error::new(err.kind(), format!("writing {}: {err}", path.display()));
    check_private_parent(path).map_err(named)?;
    let tmp = path.with_extension(format!(
        "tmp{}-{:016x}",
        std::process::id(),
        fastrand::u64(..)
    ));
    // The host's alone, whatever the umask: `read_own_file` refuses anything else.
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(&tmp)
        .map_err(named)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| fs::rename(&tmp, path));
    written.map_err(|err| {
        let _ = fs::remove_file(&tmp);
        named(err)
    })
}

/// The cache is an optimisation: failing to write it is worth a warning, never an outage.
fn warn_on_failure(what: &str, result: &io::Result<()>) {
    if let Err(err) = result {
        tracing::warn!(error = %err, "{what} in the plugin cache failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_within_its_bound_dropping_the_least_recently_used() {
        let dir = std::env::temp_dir().join(format!("wasmop-cache-bound-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let cache = Cache::bounded(&dir, 10 << 10).expect("a cache");
        let blobs: Vec<Vec<u8>> = (0u8..5).map(|i| vec![i; 4 << 10]).collect();
        let digests: Vec<Digest> = blobs.iter().map(|b| Digest::of(b)).collect();
        for (i, (blob, digest)) in blobs.iter().zip(&digests).enumerate() {
            cache.store_blob(digest, blob).expect("stored");
            // The first one is loaded after each store: in use, so it stays.
            assert!(cache.load_blob(&digests[0]).is_some(), "after {i} stores");
            // Modification times are coarse on some file systems.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let kept: Vec<bool> = digests
            .iter()
            .map(|d| cache.load_blob(d).is_some())
            .collect();
        assert_eq!(kept, [true, false, false, false, true], "{kept:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_store_fails_with_a_reason_and_leaves_nothing_where_others_may_write() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("wasmop-cache-shared-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let cache = Cache::bounded(&dir, 1 << 20).expect("a cache");
        let blob = b"component bytes".to_vec();
        let digest = Digest::of(&blob);
        // Someone else may write here: the cache neither writes through nor reads from it.
        fs::set_permissions(dir.join("blobs"), fs::Permissions::from_mode(0o777)).expect("chmod");
        let err = cache.store_blob(&digest, &blob).expect_err("refused");
        assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
        assert!(err.to_string().contains("not this user's alone"), "{err}");
        assert_eq!(fs::read_dir(dir.join("blobs")).expect("dir").count(), 0);
        fs::set_permissions(dir.join("blobs"), fs::Permissions::from_mode(0o700)).expect("chmod");
        cache.store_blob(&digest, &blob).expect("stored");
        // Stored again while intact: nothing is rewritten, and nothing else is left behind.
        cache.store_blob(&digest, &blob).expect("kept");
        let names: Vec<String> = fs::read_dir(dir.join("blobs"))
            .expect("dir")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![digest.hex().to_string()]);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn only_what_this_installs_key_signed_is_recalled() {
        let dir = std::env::temp_dir().join(format!("wasmop-cache-key-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let key = CacheKey::new(&[7; 32]).expect("a key");
        let cache = Cache::open(&dir).expect("a cache").with_key(key.clone());
        let digest = Digest::of(b"component");
        cache.remember_ref("ghcr.io/acme/db:1", &digest);
        assert_eq!(cache.recall_ref("ghcr.io/acme/db:1"), Some(digest.clone()));
        // Another key (another install, or no key file and a restart) recalls nothing.
        let other = Cache::open(&dir)
            .expect("a cache")
            .with_key(CacheKey::new(&[8; 32]).expect("a key"));
        assert_eq!(other.recall_ref("ghcr.io/acme/db:1"), None);
        // A record edited to point elsewhere fails its tag.
        let path = cache.ref_path("ghcr.io/acme/db:1");
        let text = fs::read_to_string(&path).expect("the record");
        let forged = text.replace(digest.hex(), &"0".repeat(64));
        write_atomic(&path, forged.as_bytes()).expect("rewritten");
        assert_eq!(cache.recall_ref("ghcr.io/acme/db:1"), None);
        assert!(CacheKey::new(&[1; 16]).is_err(), "a short key is refused");
        let file = dir.join("key");
        fs::write(&file, "0123456789abcdef0123456789abcdef\n").expect("written");
        let err = CacheKey::from_file(&file).expect_err("32 hex digits are 16 bytes");
        assert!(err.to_string().contains("encode 16 bytes"), "{err}");
        fs::write(&file, "0123456789abcdef".repeat(4)).expect("written");
        assert!(CacheKey::from_file(&file).expect("64 hex digits").is_some());
        assert!(
            CacheKey::from_file(&dir.join("absent"))
                .expect("absent is not an error")
                .is_none()
        );
        let _ = fs::remove_dir_all(&dir);
    }
}
