//! Secret key files: versioned, checksummed, written atomically with mode 0600, and loaded
//! with a distinct error for each way they can be wrong.
//!
//! ```text
//! offset 0   magic     8 bytes  "NYXKEY" 0x00 0x01   (format version 1)
//! offset 8   kind      u8       1 = identity (Ed25519 seed), 2 = hybrid KEM key (96-byte seed)
//! offset 9   length    u16      length of the secret
//! offset 11  secret    length bytes
//! then       check     16 bytes  SHA-256("nyx/v1/keyfile" || all preceding bytes)[..16]
//! ```
//!
//! Writing goes to a temporary file in the same directory (created with mode 0600, never
//! wider), is synced, renamed over the target and the directory synced, so a crash leaves
//! either the old file or the new one. Loading refuses a file that group or others can access,
//! one of the wrong length, with a bad magic, a bad checksum or another kind of key.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::Error;
use crate::identity::IdentityKey;
use crate::kem::{HybridSecretKey, SEED_LEN};

const MAGIC: [u8; 8] = *b"NYXKEY\x00\x01";
const CHECK_LABEL: &[u8] = b"nyx/v1/keyfile";
const CHECK_LEN: usize = 16;
const HEADER_LEN: usize = 11;
/// No key file NyxNet writes is larger; anything bigger is refused before it is read.
const MAX_FILE_LEN: u64 = 4096;

/// What a key file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    /// A node identity (Ed25519 seed, 32 bytes).
    Identity,
    /// A hybrid KEM key, an onion or link key (its 96-byte seed).
    HybridKem,
}

impl KeyKind {
    fn code(self) -> u8 {
        match self {
            KeyKind::Identity => 1,
            KeyKind::HybridKem => 2,
        }
    }

    fn secret_len(self) -> usize {
        match self {
            KeyKind::Identity => 32,
            KeyKind::HybridKem => SEED_LEN,
        }
    }
}

/// Write `key` to `path` atomically with mode 0600.
pub fn write_identity(path: &Path, key: &IdentityKey) -> Result<(), Error> {
    write_secret(path, KeyKind::Identity, key.seed().as_slice())
}

/// Load an identity key written by [`write_identity`].
pub fn read_identity(path: &Path) -> Result<IdentityKey, Error> {
    let secret = read_secret(path, KeyKind::Identity)?;
    let mut seed = Zeroizing::new([0u8; 32]);
    seed.copy_from_slice(&secret);
    Ok(IdentityKey::from_seed(&seed))
}

/// Write a hybrid KEM key (onion or link key) to `path` atomically with mode 0600.
pub fn write_hybrid(path: &Path, key: &HybridSecretKey) -> Result<(), Error> {
    write_secret(path, KeyKind::HybridKem, key.seed())
}

/// Load a hybrid KEM key written by [`write_hybrid`].
pub fn read_hybrid(path: &Path) -> Result<HybridSecretKey, Error> {
    let secret = read_secret(path, KeyKind::HybridKem)?;
    let mut seed = Zeroizing::new([0u8; SEED_LEN]);
    seed.copy_from_slice(&secret);
    Ok(HybridSecretKey::from_seed(&seed))
}

fn write_secret(path: &Path, kind: KeyKind, secret: &[u8]) -> Result<(), Error> {
    let io_err = |e: io::Error| Error::KeyFileIo {
        path: path.display().to_string(),
        reason: e.to_string(),
    };
    let mut contents = Zeroizing::new(Vec::with_capacity(HEADER_LEN + secret.len() + CHECK_LEN));
    contents.extend_from_slice(&MAGIC);
    contents.push(kind.code());
    let len = u16::try_from(secret.len()).map_err(|_| Error::KeyFileCorrupt {
        path: path.display().to_string(),
        reason: "secret too long",
    })?;
    contents.extend_from_slice(&len.to_be_bytes());
    contents.extend_from_slice(secret);
    let check = checksum(&contents);
    contents.extend_from_slice(&check);

    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let file_name = path.file_name().ok_or_else(|| Error::KeyFileIo {
        path: path.display().to_string(),
        reason: "path has no file name".to_owned(),
    })?;
    let mut tmp_name = file_name.to_owned();
    tmp_name.push(format!(".tmp{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let _ = fs::remove_file(&tmp); // a leftover from a crashed write
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&contents)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(io_err)
}

fn read_secret(path: &Path, kind: KeyKind) -> Result<Zeroizing<Vec<u8>>, Error> {
    let shown = || path.display().to_string();
    let corrupt = |reason: &'static str| Error::KeyFileCorrupt {
        path: shown(),
        reason,
    };
    let mut f = File::open(path).map_err(|e| Error::KeyFileIo {
        path: shown(),
        reason: e.to_string(),
    })?;
    let meta = f.metadata().map_err(|e| Error::KeyFileIo {
        path: shown(),
        reason: e.to_string(),
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(Error::KeyFilePermissions {
            path: shown(),
            mode,
        });
    }
    if meta.len() > MAX_FILE_LEN {
        return Err(corrupt("file is larger than any key file"));
    }
    let mut contents = Zeroizing::new(Vec::new());
    f.read_to_end(&mut contents).map_err(|e| Error::KeyFileIo {
        path: shown(),
        reason: e.to_string(),
    })?;

    if contents.len() < HEADER_LEN + CHECK_LEN {
        return Err(corrupt("file is too short"));
    }
    if contents[..8] != MAGIC {
        return Err(corrupt(
            "not a NyxNet key file (bad magic or unknown version)",
        ));
    }
    let body_len = contents.len() - CHECK_LEN;
    if checksum(&contents[..body_len])[..] != contents[body_len..] {
        return Err(corrupt("checksum mismatch"));
    }
    let found = contents[8];
    if found != kind.code() {
        return Err(Error::KeyFileKind {
            path: shown(),
            expected: kind.code(),
            found,
        });
    }
    let len = usize::from(u16::from_be_bytes([contents[9], contents[10]]));
    if len != kind.secret_len() || HEADER_LEN + len != body_len {
        return Err(corrupt("wrong secret length"));
    }
    Ok(Zeroizing::new(contents[HEADER_LEN..body_len].to_vec()))
}

fn checksum(bytes: &[u8]) -> [u8; CHECK_LEN] {
    let mut h = Sha256::new();
    h.update(CHECK_LABEL);
    h.update(bytes);
    let digest: [u8; 32] = h.finalize().into();
    let mut out = [0u8; CHECK_LEN];
    out.copy_from_slice(&digest[..CHECK_LEN]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, std::path::PathBuf, IdentityKey) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("identity.key");
        let key = IdentityKey::from_seed(&[5; 32]);
        write_identity(&path, &key).unwrap();
        (dir, path, key)
    }

    #[test]
    fn round_trip_with_mode_0600() {
        let (dir, path, key) = setup();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(read_identity(&path).unwrap().node_id(), key.node_id());
        // Overwriting is atomic and leaves no temporary file behind.
        write_identity(&path, &IdentityKey::from_seed(&[6; 32])).unwrap();
        assert_ne!(read_identity(&path).unwrap().node_id(), key.node_id());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn loose_permissions_are_refused() {
        let (_dir, path, _) = setup();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let err = read_identity(&path).unwrap_err();
        assert!(
            matches!(err, Error::KeyFilePermissions { mode: 0o644, .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("0644") || err.to_string().contains("644"),
            "{err}"
        );
    }

    #[test]
    fn every_kind_of_damage_has_its_own_error() {
        let (_dir, path, _) = setup();
        let good = fs::read(&path).unwrap();
        let write = |bytes: &[u8]| {
            fs::write(&path, bytes).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
            read_identity(&path).unwrap_err().to_string()
        };
        assert!(write(&good[..20]).contains("too short"));
        assert!(write(&good[..good.len() - 1]).contains("checksum"));
        let mut v2 = good.clone();
        v2[7] = 2;
        assert!(write(&v2).contains("bad magic"));
        for i in 8..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            assert!(write(&bad).contains("checksum"), "byte {i}");
        }
        assert!(write(&vec![0u8; 5000]).contains("larger than any key file"));
        // Another kind of key with a valid checksum.
        let mut other = good[..HEADER_LEN + 32].to_vec();
        other[8] = 9;
        let check = checksum(&other);
        other.extend_from_slice(&check);
        assert!(write(&other).contains("expected kind 1, found 9"));
    }

    #[test]
    fn hybrid_keys_round_trip_and_kinds_are_not_confused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("onion.key");
        let key = HybridSecretKey::from_seed(&[7; SEED_LEN]);
        write_hybrid(&path, &key).unwrap();
        let loaded = read_hybrid(&path).unwrap();
        assert_eq!(loaded.public(), key.public());
        // The loaded key decapsulates what was encapsulated to the original.
        let (ct, secrets) = key.public().encapsulate().unwrap();
        let theirs = loaded.decapsulate(&ct).unwrap();
        assert_eq!(*theirs.combine(b"l", b"c"), *secrets.combine(b"l", b"c"));
        let err = read_identity(&path).unwrap_err().to_string();
        assert!(err.contains("expected kind 1, found 2"), "{err}");
        let (_dir2, id_path, _) = setup();
        let err = read_hybrid(&id_path).unwrap_err().to_string();
        assert!(err.contains("expected kind 2, found 1"), "{err}");
    }

    #[test]
    fn missing_file_and_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_identity(&dir.path().join("nope.key"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("nope.key") && err.contains("No such file"),
            "{err}"
        );
        let key = IdentityKey::from_seed(&[1; 32]);
        let err = write_identity(&dir.path().join("no/such/dir/k.key"), &key).unwrap_err();
        assert!(matches!(err, Error::KeyFileIo { .. }), "{err}");
    }
}
