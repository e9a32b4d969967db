//! The daemon's files: the data directory (mode 0700), the long-term keys in it (mode 0600,
//! created on first start), the descriptor it publishes and the directory it reads.
//!
//! ```text
//! <data_dir>/                  0700
//!   keys/                      0700
//!     identity.key             0600  Ed25519 identity (the node id is its hash)
//!     link.key                 0600  hybrid X25519 + ML-KEM-768 key of the UDP link handshake
//!   descriptor.txt             this node's signed descriptor, as a one-relay directory document
//!   directory.txt              the relays to use (default name; `[directory] file`)
//!   control.sock               the control socket (default; `[control] socket`)
//! ```
//!
//! Onion keys are not stored: each start generates a fresh one and publishes it in a new
//! descriptor, so a stolen disk never exposes past circuits.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use nyx_crypto::keyfile;
use nyx_crypto::link::LinkKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};

use crate::Error;
use nyx_node::NodeKeys;
use nyx_overlay::directory::Directory;
use nyx_overlay::path::SampledGuard;

/// File names inside the data directory.
pub const IDENTITY_FILE: &str = "keys/identity.key";
/// The link key's file.
pub const LINK_KEY_FILE: &str = "keys/link.key";
/// The published descriptor.
pub const DESCRIPTOR_FILE: &str = "descriptor.txt";
/// The default control socket name.
pub const CONTROL_SOCKET: &str = "control.sock";
/// The entry guards in use, kept across restarts: `guard <node id> <sampled at>` lines.
pub const GUARDS_FILE: &str = "guards.txt";

/// The data directory when none is configured: the first entry of `$STATE_DIRECTORY` (set
/// by systemd's `StateDirectory=`), else `$XDG_STATE_HOME/nyx`, else
/// `$HOME/.local/state/nyx`.
pub fn default_data_dir() -> Result<PathBuf, Error> {
    let var = |name| std::env::var_os(name);
    data_dir_from(var("STATE_DIRECTORY"), var("XDG_STATE_HOME"), var("HOME"))
}

/// [`default_data_dir`] from the values of `STATE_DIRECTORY`, `XDG_STATE_HOME` and `HOME`
/// (empty ones count as unset).
fn data_dir_from(
    state_directory: Option<OsString>,
    xdg_state_home: Option<OsString>,
    home: Option<OsString>,
) -> Result<PathBuf, Error> {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty());
    // systemd joins several StateDirectory= entries with ':'; the first is the daemon's.
    let first_state_dir = set(state_directory).and_then(|dirs| {
        dirs.as_bytes()
            .split(|&b| b == b':')
            .next()
            .filter(|first| !first.is_empty())
            .map(|first| PathBuf::from(OsStr::from_bytes(first)))
    });
    if let Some(dir) = first_state_dir {
        return Ok(dir);
    }
    if let Some(state) = set(xdg_state_home) {
        return Ok(PathBuf::from(state).join("nyx"));
    }
    if let Some(home) = set(home) {
        return Ok(PathBuf::from(home).join(".local/state/nyx"));
    }
    Err(Error::DataDir {
        path: PathBuf::new(),
        reason: "no data_dir configured and none of STATE_DIRECTORY, XDG_STATE_HOME and HOME \
                 is set"
            .into(),
    })
}

/// Create `dir` (and its parents) if missing and make it (and `keys/`) private: mode 0700.
pub fn prepare_data_dir(dir: &Path) -> Result<(), Error> {
    let fail = |what, path: &Path| {
        let path = path.to_owned();
        move |source| Error::File { what, path, source }
    };
    for d in [dir.to_owned(), dir.join("keys")] {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&d)
            .map_err(fail("create directory", &d))?;
        let meta = fs::metadata(&d).map_err(fail("inspect", &d))?;
        if !meta.is_dir() {
            return Err(Error::DataDir {
                path: d,
                reason: "exists and is not a directory".into(),
            });
        }
        if meta.permissions().mode() & 0o077 != 0 {
            fs::set_permissions(&d, fs::Permissions::from_mode(0o700))
                .map_err(fail("make private", &d))?;
        }
    }
    Ok(())
}

/// Load the node's keys from `dir`, creating the files on first start; `created` tells
/// whether they were new. The onion key ring is always fresh (certified from `now_unix`)
/// and rotates by `rotation`. A client (`relay` false) keeps only its identity on disk (its
/// local name, never shown on links): no link key file is made, and the link and onion keys
/// it gets are never used (the node drops them when it binds as a client).
pub fn load_or_create_keys(
    dir: &Path,
    now_unix: u64,
    rotation: RotationPolicy,
    relay: bool,
) -> Result<(NodeKeys, bool), Error> {
    let id_path = dir.join(IDENTITY_FILE);
    let link_path = dir.join(LINK_KEY_FILE);
    let mut created = false;
    let identity = if id_path.exists() {
        keyfile::read_identity(&id_path)?
    } else {
        let key = IdentityKey::generate()?;
        keyfile::write_identity(&id_path, &key)?;
        created = true;
        key
    };
    let link = if link_path.exists() && relay {
        keyfile::read_hybrid(&link_path)?
    } else {
        let key = HybridSecretKey::generate()?;
        if relay {
            keyfile::write_hybrid(&link_path, &key)?;
            created = true;
        }
        key
    };
    let mut onion_keys = OnionKeyRing::new(rotation)?;
    if relay {
        onion_keys.rotate(&identity, now_unix)?;
    }
    Ok((
        NodeKeys {
            identity: Arc::new(identity),
            link_key: LinkKey::new(link),
            onion_keys,
        },
        created,
    ))
}

/// Write `contents` to `path` atomically (temporary file, then rename).
pub fn write_atomic(path: &Path, contents: impl AsRef<[u8]>) -> Result<(), Error> {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, contents).map_err(|source| Error::File {
        what: "write",
        path: tmp.clone(),
        source,
    })?;
    fs::rename(&tmp, path).map_err(|source| Error::File {
        what: "replace",
        path: path.to_owned(),
        source,
    })
}

/// The guards saved at `path`, in order. A missing file is none; a line that does not parse
/// is skipped with a warning (the file is a cache: the node samples new guards).
pub fn read_guards(path: &Path) -> Result<Vec<SampledGuard>, Error> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(Error::File {
                what: "read",
                path: path.to_owned(),
                source,
            });
        }
    };
    let mut guards = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parsed = match line.split_whitespace().collect::<Vec<_>>()[..] {
            ["guard", node, at] => node
                .parse::<nyx_core::NodeId>()
                .ok()
                .zip(at.parse::<u64>().ok()),
            _ => None,
        };
        match parsed {
            Some((node, sampled_at)) => guards.push(SampledGuard { node, sampled_at }),
            None => tracing::warn!(
                line = i + 1,
                "guards file: line skipped (not `guard ID TIME`)"
            ),
        }
    }
    Ok(guards)
}

/// Save `guards` to `path` (atomically), in order.
pub fn write_guards(path: &Path, guards: &[SampledGuard]) -> Result<(), Error> {
    let mut text = String::from(
        "# Entry guards of this node, in order of preference. Written by nyx-daemon.\n",
    );
    for g in guards {
        text.push_str(&format!("guard {} {}\n", g.node, g.sampled_at));
    }
    write_atomic(path, text)
}

/// Read the directory at `path`; a missing file is an empty directory (no relays yet).
/// Rejected descriptor lines are logged (counted) and skipped; a file whose header is wrong
/// is refused whole.
pub fn read_directory(path: &Path, now_unix: u64) -> Result<Directory, Error> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Directory::default()),
        Err(source) => {
            return Err(Error::DirectoryRead {
                path: path.to_owned(),
                source,
            });
        }
    };
    let (directory, rejected) =
        Directory::parse(&text, now_unix).map_err(|source| Error::DirectoryInvalid {
            path: path.to_owned(),
            source,
        })?;
    if !rejected.is_empty() {
        tracing::warn!(
            rejected = rejected.len(),
            "directory lines skipped (expired, bad signature or malformed)"
        );
    }
    Ok(directory)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nyx-files-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn keys_are_created_private_and_reloaded() {
        let dir = temp_dir("keys");
        prepare_data_dir(&dir).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        assert_eq!(mode(&dir.join("keys")), 0o700);
        let (keys, created) =
            load_or_create_keys(&dir, 1_000_000, RotationPolicy::default(), true).unwrap();
        assert!(created);
        assert_eq!(mode(&dir.join(IDENTITY_FILE)), 0o600);
        assert_eq!(mode(&dir.join(LINK_KEY_FILE)), 0o600);
        let (again, created) =
            load_or_create_keys(&dir, 1_000_000, RotationPolicy::default(), true).unwrap();
        assert!(!created);
        assert_eq!(again.identity.node_id(), keys.identity.node_id());
        assert_eq!(again.link_key.public(), keys.link_key.public());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn loose_directory_is_tightened_and_loose_key_refused() {
        let dir = temp_dir("loose");
        fs::create_dir_all(&dir).unwrap();
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        prepare_data_dir(&dir).unwrap();
        assert_eq!(
            fs::metadata(&dir).unwrap().permissions().mode() & 0o777,
            0o700
        );
        load_or_create_keys(&dir, 1, RotationPolicy::default(), true).unwrap();
        let id = dir.join(IDENTITY_FILE);
        fs::set_permissions(&id, fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_create_keys(&dir, 1, RotationPolicy::default(), true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("identity.key"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn guards_round_trip_and_bad_lines_are_skipped() {
        let dir = temp_dir("guards");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(GUARDS_FILE);
        assert!(read_guards(&path).unwrap().is_empty(), "missing file: none");
        let guards = vec![
            SampledGuard {
                node: nyx_core::NodeId::from_bytes([7; 32]),
                sampled_at: 1_800_000_000,
            },
            SampledGuard {
                node: nyx_core::NodeId::from_bytes([3; 32]),
                sampled_at: 1_800_000_100,
            },
        ];
        write_guards(&path, &guards).unwrap();
        assert_eq!(read_guards(&path).unwrap(), guards);
        let text = fs::read_to_string(&path).unwrap();
        fs::write(
            &path,
            format!("guard zz 1\nnonsense\n{text}guard {} x\n", guards[0].node),
        )
        .unwrap();
        assert_eq!(read_guards(&path).unwrap(), guards);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn missing_directory_file_is_empty() {
        let d = read_directory(Path::new("/nonexistent/dir.txt"), 1).unwrap();
        assert!(d.is_empty());
    }

    #[test]
    fn a_directory_file_without_its_header_is_refused_and_a_good_one_loads() {
        use nyx_overlay::directory::testnet::{self, TestnetSpec};
        let now = 1_000_000;
        let (_, generated) = testnet::generate(&TestnetSpec::default(), now).unwrap();
        let document = generated.to_text();
        let body = document.split_once('\n').unwrap().1;
        let dir = temp_dir("directory");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("directory.txt");
        fs::write(&path, body).unwrap();
        let err = read_directory(&path, now).unwrap_err();
        assert!(matches!(err, Error::DirectoryInvalid { .. }), "{err}");
        assert!(err.to_string().contains("directory.txt"), "{err}");
        fs::write(&path, &document).unwrap();
        let loaded = read_directory(&path, now).unwrap();
        assert_eq!(loaded.len(), generated.len());
        fs::set_permissions(&path, fs::Permissions::from_mode(0o000)).unwrap();
        if fs::read(&path).is_err() {
            // Not root: an unreadable file is an error, not an empty directory.
            let err = read_directory(&path, now).unwrap_err();
            assert!(matches!(err, Error::DirectoryRead { .. }), "{err}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_data_dir_default_prefers_systemd_state_directory() {
        let os = |s: &str| Some(OsString::from(s));
        let dir = |s, x, h| data_dir_from(s, x, h).unwrap();
        assert_eq!(
            dir(os("/var/lib/nyx"), os("/x"), os("/h")),
            PathBuf::from("/var/lib/nyx")
        );
        // Several StateDirectory= entries: the first one.
        assert_eq!(
            dir(os("/var/lib/nyx:/var/lib/other"), None, None),
            PathBuf::from("/var/lib/nyx")
        );
        // Unset or empty: the XDG default, then HOME's.
        assert_eq!(dir(os(""), os("/x"), os("/h")), PathBuf::from("/x/nyx"));
        assert_eq!(dir(None, os("/x"), os("/h")), PathBuf::from("/x/nyx"));
        assert_eq!(
            dir(None, None, os("/h")),
            PathBuf::from("/h/.local/state/nyx")
        );
        let err = data_dir_from(os(":"), os(""), None).unwrap_err();
        assert!(err.to_string().contains("STATE_DIRECTORY"), "{err}");
    }
}
