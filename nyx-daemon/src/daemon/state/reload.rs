//! Reloading the configuration while the daemon runs (SIGHUP, or `ReloadConfig` over the
//! control API): what changes live, what waits for a restart, and the sd_notify frame.

use std::sync::Arc;

use nyx_node::unix_now;

use super::{Bundle, DaemonState, ReloadOutcome, lock};
use crate::Error;
use crate::daemon::config::DaemonConfig;

impl DaemonState {
    /// Re-read the configuration file and the directory, and apply what can change live:
    /// exit policy and family (republishing the descriptor), rate limits, log filter,
    /// directory.
    /// Keys that need a restart are reported and keep their old values. A file that does
    /// not parse or validate changes nothing.
    ///
    /// With a notifier ([`set_notifier`](Self::set_notifier)) the reload is framed by
    /// `RELOADING=1` and `READY=1`, whether SIGHUP or the control API asked for it.
    pub async fn reload(&self) -> Result<ReloadOutcome, Error> {
        let _one = self.adopting.lock().await;
        let notifier = self.notifier.get();
        if let Some(n) = notifier {
            n.reloading();
        }
        let outcome = self.reload_locked().await;
        if let Some(n) = notifier {
            n.ready();
        }
        outcome
    }

    /// [`reload`](Self::reload)'s work, with `adopting` held.
    async fn reload_locked(&self) -> Result<ReloadOutcome, Error> {
        let new = match &self.config_path {
            Some(path) => DaemonConfig::load(path)?,
            None => self.config(),
        };
        let old = self.config();
        let diff = old.diff(&new);
        // Everything that can fail is checked before anything changes.
        let policy = new
            .exit_policy()
            .map_err(|e| nyx_overlay::Error::OverlayConfig {
                reason: e.to_string(),
            })?;
        let family = new
            .family()
            .map_err(|reason| nyx_overlay::Error::OverlayConfig { reason })?;
        let limits = new
            .live_limits()
            .map_err(|reason| nyx_overlay::Error::OverlayConfig { reason })?;
        let held = *lock(&self.consensus_valid_after);
        let trusted = new.trusted(&self.endpoints.data_dir, unix_now(), held)?;
        let bundle = trusted
            .consensus
            .and_then(|c| Bundle::new(c, &trusted.directory))
            .map(Arc::new);
        let (directory, consensus_valid_after, consensus_valid_until) = (
            trusted.directory,
            trusted.consensus_valid_after,
            trusted.consensus_valid_until,
        );
        if new.log.level != old.log.level
            && let Err(reason) = self.set_log_level(&new.log.level)
        {
            return Err(Error::ConfigInvalid {
                path: self.config_path.clone().unwrap_or_default(),
                problems: nyx_core::config::ConfigProblems::from_vec(vec![
                    nyx_core::config::ConfigProblem {
                        field: "log.level".into(),
                        reason,
                    },
                ]),
            });
        }
        nyx_core::redact::set_sensitive_logging(new.log.log_sensitive);
        self.node.set_limits(limits).await?;
        let relays = directory.len();
        let republish = diff.live.iter().any(|k| k.starts_with("relay."));
        if republish && lock(&self.descriptor).is_some() {
            self.node.set_exit_policy(policy.clone()).await?;
            let own = self.identity.node_id();
            let bandwidth = new.relay.bandwidth;
            self.update_descriptor(new.relay.descriptor_validity, |b| {
                b.exit_policy = policy;
                b.family = family.into_iter().filter(|id| *id != own).collect();
                b.bandwidth = bandwidth;
            })?;
        }
        // Keys that need a restart keep their running values.
        let mut applied = old;
        applied.directory = new.directory;
        applied.relay.exit_policy = new.relay.exit_policy;
        applied.relay.family = new.relay.family;
        applied.relay.bandwidth = new.relay.bandwidth;
        applied.relay.descriptor_validity = new.relay.descriptor_validity;
        applied.limits.link_cells = new.limits.link_cells;
        applied.limits.circuit_cells = new.limits.circuit_cells;
        applied.limits.circuit_creates = new.limits.circuit_creates;
        applied.limits.max_circuits = new.limits.max_circuits;
        applied.log.level = new.log.level;
        applied.log.log_sensitive = new.log.log_sensitive;
        *lock(&self.config) = applied;
        // Last, so that its DirectoryChanged event tells subscribers the whole reload is
        // in force.
        *lock(&self.consensus_valid_after) = consensus_valid_after;
        *lock(&self.consensus_valid_until) = consensus_valid_until;
        *lock(&self.bundle) = bundle;
        *lock(&self.directory) = directory.clone();
        self.node.set_directory(directory).await?;
        tracing::info!(
            applied = diff.live.len(),
            need_restart = diff.restart.len(),
            relays,
            "configuration reloaded"
        );
        Ok(ReloadOutcome { diff, relays })
    }
}
