//! File sources, for development: the component is read from the host's filesystem, only a
//! regular file below the directory the host was given (`--file-root`), and the file is
//! watched for changes (see `plugin::watch`). An App names the file; it must not be able to
//! name `/dev/zero`, a FIFO, or another tenant's files through `..` or a link.

use std::{io::Read, path::Path};

use super::{Fetched, SourceRef, fetch_error};
use crate::plugin::{LoadError, limits::DEFAULT_COMPONENT_BYTES};

/// Reads the component at `path`, which must resolve (links and `..` followed) to a regular
/// file below `root`.
pub async fn read(source: &SourceRef, root: &Path, path: &Path) -> Result<Fetched, LoadError> {
    let (owned, root, path) = (source.clone(), root.to_path_buf(), path.to_path_buf());
    tokio::task::spawn_blocking(move || read_below(&owned, &root, &path))
        .await
        .unwrap_or_else(|join| {
            Err(fetch_error(
                source,
                format!("reading the file failed: {join}"),
            ))
        })
}

fn read_below(source: &SourceRef, root: &Path, path: &Path) -> Result<Fetched, LoadError> {
    let shown = path.display();
    let failed = |what: String| fetch_error(source, what);
    let root = root
        .canonicalize()
        .map_err(|err| failed(format!("the file root {}: {err}", root.display())))?;
    let real = path
        .canonicalize()
        .map_err(|err| failed(format!("reading {shown}: {err}")))?;
    if !real.starts_with(&root) {
        return Err(failed(format!(
            "{shown} is not below the file root {}",
            root.display()
        )));
    }
    // Non-blocking, so that a FIFO cannot hold the thread before the check below; no links,
    // so that the name checked above is the file opened.
    let file = {
        use std::os::unix::fs::OpenOptionsExt;
        let flags = rustix::fs::OFlags::NONBLOCK | rustix::fs::OFlags::NOFOLLOW;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags.bits() as i32)
            .open(&real)
            .map_err(|err| failed(format!("reading {shown}: {err}")))?
    };
    // Checked on the opened file, so that it cannot be swapped for a device in between.
    let meta = file
        .metadata()
        .map_err(|err| failed(format!("reading {shown}: {err}")))?;
    if !meta.is_file() {
        return Err(failed(format!("{shown} is not a regular file")));
    }
    if meta.len() > DEFAULT_COMPONENT_BYTES as u64 {
        return Err(failed(format!(
            "{shown} is {} bytes, over the {DEFAULT_COMPONENT_BYTES} byte limit",
            meta.len()
        )));
    }
    let mut bytes = Vec::new();
    file.take(DEFAULT_COMPONENT_BYTES as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|err| failed(format!("reading {shown}: {err}")))?;
    if bytes.len() > DEFAULT_COMPONENT_BYTES {
        return Err(failed(format!(
            "{shown} grew over the {DEFAULT_COMPONENT_BYTES} byte limit while read"
        )));
    }
    Ok(Fetched::new(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_regular_files_below_the_root_are_read() {
        let base = std::env::temp_dir().join(format!("wasmop-file-root-{}", std::process::id()));
        let root = base.join("root");
        std::fs::create_dir_all(&root).expect("a root");
        std::fs::write(root.join("p.wasm"), b"\0asm").expect("a file");
        std::fs::write(base.join("outside.wasm"), b"\0asm").expect("a file");
        let source = SourceRef::File("p.wasm".into());
        let read = |path: &Path| read_below(&source, &root, path).map(|f| f.bytes.len());
        assert_eq!(read(&root.join("p.wasm")).expect("inside"), 4);
        for (path, words) in [
            (root.join("../outside.wasm"), "not below the file root"),
            (
                Path::new("/etc/hostname").to_path_buf(),
                "not below the file root",
            ),
            (root.clone(), "not a regular file"),
        ] {
            let err = read(&path).expect_err("refused").to_string();
            assert!(err.contains(words), "{}: {err}", path.display());
        }
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/dev/zero", root.join("zero.wasm")).expect("a link");
            let err = read(&root.join("zero.wasm"))
                .expect_err("a device")
                .to_string();
            assert!(err.contains("not below the file root"), "{err}");
        }
        let _ = std::fs::remove_dir_all(&base);
    }
}
