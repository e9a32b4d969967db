//! The control socket: a Unix domain socket, mode 0600 in a directory of mode 0700, whose
//! connections are accepted only from the daemon's own user (checked with the peer
//! credentials the kernel reports, `SO_PEERCRED`), and the client side that dials it.
//!
//! A "path" starting with `@` names a Linux abstract socket instead (`@nyx` is the name
//! `nyx`): no file and no file permissions, so the peer credentials are its only guard;
//! for environments that cannot bind paths (the Shadow simulator).

use std::fs;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tokio::net::{UnixListener, UnixStream};
use tokio_stream::{Stream, StreamExt};
use tonic::transport::{Channel, Endpoint, Uri};

use super::pb::control_client::ControlClient;
use crate::Error;

/// A bound control socket; the socket file is removed when this is dropped.
#[derive(Debug)]
pub struct ControlListener {
    listener: Option<UnixListener>,
    path: PathBuf,
    /// The daemon's user; `None` where the system does not report credentials (then every
    /// connection is refused).
    owner: Option<u32>,
}

/// The abstract socket name `path` stands for, if it starts with `@`.
fn abstract_name(path: &Path) -> Option<&[u8]> {
    path.as_os_str().as_encoded_bytes().strip_prefix(b"@")
}

/// An abstract socket address for `name`.
fn abstract_addr(name: &[u8]) -> std::io::Result<std::os::unix::net::SocketAddr> {
    use std::os::linux::net::SocketAddrExt;
    std::os::unix::net::SocketAddr::from_abstract_name(name)
}

/// The user this process runs as, from the credentials of a socket pair's other end.
fn own_uid() -> Option<u32> {
    let (a, _b) = std::os::unix::net::UnixStream::pair().ok()?;
    a.set_nonblocking(true).ok()?;
    UnixStream::from_std(a)
        .ok()?
        .peer_cred()
        .ok()
        .map(|c| c.uid())
}

impl ControlListener {
    /// Bind `path`: its directory is created with mode 0700 if missing and must not be open
    /// to other users; a stale socket file (no daemon answering) is replaced; the socket
    /// gets mode 0600.
    pub fn bind(path: &Path) -> Result<Self, Error> {
        let fail = |reason: String| Error::Control {
            path: path.to_owned(),
            reason,
        };
        if let Some(name) = abstract_name(path) {
            let listener = abstract_addr(name)
                .and_then(|addr| std::os::unix::net::UnixListener::bind_addr(&addr))
                .and_then(|l| l.set_nonblocking(true).map(|()| l))
                .and_then(UnixListener::from_std)
                .map_err(|e| fail(e.to_string()))?;
            return Ok(ControlListener {
                listener: Some(listener),
                path: path.to_owned(),
                owner: own_uid(),
            });
        }
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        Self::check(path)?;
        if !parent.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| fail(format!("cannot create {}: {e}", parent.display())))?;
        }
        if fs::symlink_metadata(path).is_ok() {
            fs::remove_file(path).map_err(|e| fail(format!("cannot remove stale socket: {e}")))?;
        }
        let listener = UnixListener::bind(path).map_err(|e| fail(e.to_string()))?;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))
            .map_err(|e| fail(e.to_string()))?;
        let owner = fs::metadata(path).map_err(|e| fail(e.to_string()))?.uid();
        Ok(ControlListener {
            listener: Some(listener),
            path: path.to_owned(),
            owner: Some(owner),
        })
    }

    /// Whether [`bind`](Self::bind) could bind `path` now, changing nothing: an existing
    /// directory must not be open to other users, an existing file must be a socket that
    /// no daemon answers on, an abstract name must be free. (A missing directory is
    /// fine: `bind` creates it.)
    pub fn check(path: &Path) -> Result<(), Error> {
        let fail = |reason: String| Error::Control {
            path: path.to_owned(),
            reason,
        };
        if let Some(name) = abstract_name(path) {
            return abstract_addr(name)
                .and_then(|addr| std::os::unix::net::UnixListener::bind_addr(&addr))
                .map(drop)
                .map_err(|e| fail(e.to_string()));
        }
        let parent = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if let Ok(meta) = fs::metadata(parent) {
            let dir_mode = meta.permissions().mode();
            if dir_mode & 0o077 != 0 {
                return Err(fail(format!(
                    "its directory {} has mode {:o}; other users could reach the socket \
                     (use a directory of mode 0700)",
                    parent.display(),
                    dir_mode & 0o777
                )));
            }
        }
        if let Ok(meta) = fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                return Err(fail("exists and is not a socket".into()));
            }
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(fail("another daemon is already listening on it".into()));
            }
        }
        Ok(())
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The accepted connections of the daemon's own user, for
    /// `tonic::transport::Server::serve_with_incoming`; others are closed at once. Can be
    /// taken once.
    pub fn incoming(
        &mut self,
    ) -> Result<impl Stream<Item = std::io::Result<UnixStream>> + use<>, Error> {
        let owner = self.owner;
        let listener = self.listener.take().ok_or_else(|| Error::Control {
            path: self.path.clone(),
            reason: "its connections are already being served".into(),
        })?;
        Ok(
            tokio_stream::wrappers::UnixListenerStream::new(listener).filter_map(move |conn| {
                match conn {
                    Ok(conn) => match owner
                        .ok_or_else(|| "the system reports no user ids".to_owned())
                        .and_then(|owner| check_peer(&conn, owner))
                    {
                        Ok(()) => Some(Ok(conn)),
                        Err(reason) => {
                            tracing::warn!(%reason, "control connection refused");
                            None
                        }
                    },
                    Err(e) => {
                        tracing::debug!(error = %e, "control accept failed");
                        None
                    }
                }
            }),
        )
    }
}

impl Drop for ControlListener {
    fn drop(&mut self) {
        if abstract_name(&self.path).is_none() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Dial the socket at `path` (a file, or `@name`).
async fn dial(path: &Path) -> std::io::Result<UnixStream> {
    match abstract_name(path) {
        None => UnixStream::connect(path).await,
        Some(name) => {
            let stream = std::os::unix::net::UnixStream::connect_addr(&abstract_addr(name)?)?;
            stream.set_nonblocking(true)?;
            UnixStream::from_std(stream)
        }
    }
}

/// Accept `conn` only if the process at the other end runs as `owner`.
pub fn check_peer(conn: &UnixStream, owner: u32) -> Result<(), String> {
    let cred = conn
        .peer_cred()
        .map_err(|e| format!("peer credentials unavailable: {e}"))?;
    if cred.uid() == owner {
        Ok(())
    } else {
        Err(format!(
            "peer runs as uid {}, the daemon as uid {owner}",
            cred.uid()
        ))
    }
}

/// Dial the control socket at `path`. A missing socket or a refused connection means the
/// daemon is not running, and the error says so.
pub async fn connect(path: &Path) -> Result<ControlClient<Channel>, Error> {
    let fail = |reason: String| Error::Control {
        path: path.to_owned(),
        reason,
    };
    // Try once directly, for a clear error before tonic wraps it.
    match dial(path).await {
        Ok(_) => {}
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Err(fail(format!(
                "cannot connect ({e}); is nyx-daemon running? (start it with `nyx-daemon`, \
                 or point to its socket with --control)"
            )));
        }
        Err(e) => return Err(fail(format!("cannot connect: {e}"))),
    }
    let owned = path.to_owned();
    // The URI is required by the API and ignored by the connector.
    let channel = Endpoint::from_static("http://nyx.control.local")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = owned.clone();
            async move { dial(&path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|e| fail(format!("cannot connect: {e}")))?;
    Ok(ControlClient::new(channel).max_decoding_message_size(16 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn peer_of_another_uid_is_refused() {
        let (a, _b) = UnixStream::pair().unwrap();
        let me = own_uid().unwrap();
        assert_eq!(me, fs::metadata("/proc/self").unwrap().uid());
        assert!(check_peer(&a, me).is_ok());
        let err = check_peer(&a, me.wrapping_add(1)).unwrap_err();
        assert!(err.contains(&format!("uid {me}")), "{err}");
    }

    /// An `@name` binds an abstract socket: no file appears, the daemon's own user gets
    /// through, and a second daemon cannot take the name.
    #[tokio::test]
    async fn an_abstract_name_serves_without_a_file() {
        let path = PathBuf::from(format!("@nyx-test-{}", std::process::id()));
        let mut listener = ControlListener::bind(&path).unwrap();
        assert!(!path.exists(), "no file for an abstract name");
        let err = ControlListener::bind(&path).unwrap_err().to_string();
        assert!(err.contains("in use"), "{err}");
        let err = ControlListener::check(&path).unwrap_err().to_string();
        assert!(err.contains("in use"), "check finds it taken: {err}");
        let mut incoming = Box::pin(listener.incoming().unwrap());
        let _client = dial(&path).await.unwrap();
        let accepted = tokio::time::timeout(std::time::Duration::from_secs(5), incoming.next())
            .await
            .unwrap();
        assert!(matches!(accepted, Some(Ok(_))), "own user accepted");
        drop(incoming);
        drop(listener);
        assert!(ControlListener::check(&path).is_ok());
        assert!(
            ControlListener::bind(&path).is_ok(),
            "the name is free again"
        );
    }

    #[tokio::test]
    async fn socket_is_private_stale_replaced_and_removed() {
        let dir = std::env::temp_dir().join(format!("nyx-uds-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let path = dir.join("sub/control.sock");
        // A check creates nothing.
        ControlListener::check(&path).unwrap();
        assert!(!dir.exists());
        let first = ControlListener::bind(&path).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(path.parent().unwrap()), 0o700);
        // A live daemon on the socket is detected.
        let err = ControlListener::bind(&path).unwrap_err().to_string();
        assert!(err.contains("already listening"), "{err}");
        let err = ControlListener::check(&path).unwrap_err().to_string();
        assert!(err.contains("already listening"), "{err}");
        drop(first);
        // A stale file (left by a crash: nothing listens) is replaced, and a check leaves
        // it.
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        ControlListener::check(&path).unwrap();
        assert!(path.exists());
        let second = ControlListener::bind(&path).unwrap();
        drop(second);
        // An open directory is refused.
        let open = dir.join("open");
        fs::create_dir_all(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
        let err = ControlListener::bind(&open.join("c.sock"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("mode 755"), "{err}");
        let err = ControlListener::check(&open.join("c.sock")).unwrap_err();
        assert!(err.to_string().contains("mode 755"), "{err}");
        // Dropping removes the file.
        let other = dir.join("sub/other.sock");
        let l = ControlListener::bind(&other).unwrap();
        assert!(other.exists());
        drop(l);
        assert!(!other.exists());
        let err = connect(&other).await.unwrap_err().to_string();
        assert!(err.contains("is nyx-daemon running"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }
}
