//! What the process does for its service manager before a node starts: it refuses to run
//! as root unless told to, and raises its open-file limit. sd_notify is [`super::sd_notify`].

use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};

use crate::Error;

/// The effective user id of this process.
pub fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Whether a process with effective uid `euid` may run: root (uid 0) only with
/// `allow_root` (`--allow-root`). A node as root would write its keys as root and expose
/// every file of the machine to a bug in its network code; a dedicated user (or systemd's
/// `DynamicUser=yes`) is the way to run it.
pub fn check_user(euid: u32, allow_root: bool) -> Result<(), Error> {
    match euid == 0 && !allow_root {
        true => Err(Error::RunAsRoot),
        false => Ok(()),
    }
}

/// What the soft open-file limit should become given the current `soft` and `hard` limits
/// (`None` is unlimited): the hard limit when it is finite and higher, else nothing to do.
pub fn nofile_target(soft: Option<u64>, hard: Option<u64>) -> Option<u64> {
    match (soft, hard) {
        (_, None) | (None, _) => None,
        (Some(soft), Some(hard)) => (hard > soft).then_some(hard),
    }
}

/// Raise the soft RLIMIT_NOFILE to the hard limit (every link, stream and SOCKS client is
/// a descriptor) and log what it was and what it became. A failure is logged, not fatal:
/// the node runs with fewer descriptors.
pub fn raise_nofile_limit() {
    let Rlimit { current, maximum } = getrlimit(Resource::Nofile);
    let Some(target) = nofile_target(current, maximum) else {
        tracing::info!(
            soft = ?current,
            hard = ?maximum,
            "open-file limit left as it is"
        );
        return;
    };
    let raised = Rlimit {
        current: Some(target),
        maximum,
    };
    match setrlimit(Resource::Nofile, raised) {
        Ok(()) => tracing::info!(was = ?current, now = target, "open-file limit raised"),
        Err(e) => tracing::warn!(
            error = %e,
            soft = ?current,
            hard = ?maximum,
            "cannot raise the open-file limit"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_is_refused_unless_allowed() {
        assert!(matches!(check_user(0, false), Err(Error::RunAsRoot)));
        assert!(check_user(0, true).is_ok());
        assert!(check_user(1000, false).is_ok());
        assert!(check_user(1000, true).is_ok());
        let message = Error::RunAsRoot.to_string();
        assert!(message.contains("--allow-root"), "{message}");
    }

    #[test]
    fn the_soft_limit_goes_up_to_a_finite_hard_limit_only() {
        assert_eq!(nofile_target(Some(1024), Some(524_288)), Some(524_288));
        assert_eq!(nofile_target(Some(4096), Some(4096)), None);
        assert_eq!(nofile_target(Some(1024), None), None);
        assert_eq!(nofile_target(None, None), None);
        assert_eq!(nofile_target(None, Some(4096)), None);
    }

    #[test]
    fn raising_leaves_the_soft_limit_at_the_hard_limit() {
        raise_nofile_limit();
        let now = getrlimit(Resource::Nofile);
        if let Some(hard) = now.maximum {
            assert_eq!(now.current, Some(hard));
        }
    }
}
