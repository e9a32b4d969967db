//! [`DaemonConfig::validate`]: every value checked, every problem reported at once with its
//! key.

use std::path::Path;
use std::time::Duration;

use nyx_core::config::{ConfigProblem, RateConfig};
use nyx_core::rate::Quota;

use super::{DaemonConfig, MAX_WORKER_THREADS};
use crate::Error;
use nyx_overlay::directory::MAX_NICKNAME_LEN;

impl DaemonConfig {
    /// Check every value; all problems are reported at once, each with its key.
    pub fn validate(&self, origin: &Path) -> Result<(), Error> {
        let mut problems: Vec<ConfigProblem> = Vec::new();
        let mut add = |field: &str, reason: String| {
            problems.push(ConfigProblem {
                field: field.to_owned(),
                reason,
            })
        };
        if self.relay.enabled
            && self.relay.advertise.is_none()
            && let Some(addr) = self.listen.first()
            && addr.ip().to_canonical().is_unspecified()
        {
            add(
                "listen",
                format!(
                    "a relay on {} must say where others reach it: set relay.advertise",
                    addr.ip()
                ),
            );
        }
        if let Some(addr) = self.relay.advertise
            && addr.ip().to_canonical().is_unspecified()
        {
            add(
                "relay.advertise",
                format!(
                    "{} reaches nobody: give the address others reach",
                    addr.ip()
                ),
            );
        }
        for (i, addr) in self.listen.iter().enumerate() {
            if self.listen[..i].contains(addr) {
                add("listen", format!("{addr} is listed twice"));
            }
        }
        if self.listen.len() > 1 {
            add(
                "listen",
                format!(
                    "{} addresses given; this version listens on one",
                    self.listen.len()
                ),
            );
        }
        if let Some(dir) = &self.data_dir
            && dir.as_os_str().is_empty()
        {
            add(
                "data_dir",
                "must not be empty (leave it unset for the default)".to_owned(),
            );
        }
        if let Err(reason) = check_nickname(&self.nickname) {
            add("nickname", reason);
        }
        if self.worker_threads > MAX_WORKER_THREADS {
            add(
                "worker_threads",
                format!(
                    "{} is more than {MAX_WORKER_THREADS} (0 means one per CPU core)",
                    self.worker_threads
                ),
            );
        }
        for (field, reason) in self.control.problems() {
            add(field, reason);
        }
        if self.socks.handshake_timeout < Duration::from_millis(10) {
            add(
                "socks.handshake_timeout",
                format!("{:?} is shorter than 10ms", self.socks.handshake_timeout),
            );
        }
        if self.socks.max_connections == 0 {
            add("socks.max_connections", "must be at least 1".to_owned());
        }
        for (field, reason) in self.http_connect.problems() {
            add(field, reason);
        }
        if self.directory.file.as_os_str().is_empty() {
            add("directory.file", "must not be empty".to_owned());
        }
        if let Err(reason) = crate::daemon::trust::parse_authorities(&self.directory.authorities) {
            add("directory.authorities", reason);
        }
        // Clients refuse onion keys certified for longer than MAX_ONION_KEY_LIFETIME (a
        // period plus an overlap shorter than it): a period of at most half of it fits.
        let max_onion = nyx_overlay::directory::MAX_ONION_KEY_LIFETIME / 2;
        if self.relay.onion_key_period < Duration::from_secs(10)
            || self.relay.onion_key_period > Duration::from_secs(max_onion)
        {
            add(
                "relay.onion_key_period",
                format!(
                    "{:?} is shorter than 10s or longer than {} days (clients refuse longer keys)",
                    self.relay.onion_key_period,
                    max_onion / 86_400
                ),
            );
        }
        if self.relay.link_key_period < Duration::from_secs(10) {
            add(
                "relay.link_key_period",
                format!("{:?} is shorter than 10s", self.relay.link_key_period),
            );
        }
        // Both keys' overlaps: above zero and shorter than their period.
        for (kind, overlap, period) in [
            (
                "onion",
                self.relay.onion_key_overlap,
                self.relay.onion_key_period,
            ),
            (
                "link",
                self.relay.link_key_overlap,
                self.relay.link_key_period,
            ),
        ] {
            if overlap.is_zero() || overlap >= period {
                add(
                    &format!("relay.{kind}_key_overlap"),
                    format!(
                        "{overlap:?} must be above zero and shorter than relay.{kind}_key_period"
                    ),
                );
            }
        }
        let min_period = nyx_overlay::directory::authority::MIN_PERIOD;
        // A consensus is valid for three periods; clients refuse longer than
        // MAX_CONSENSUS_LIFETIME.
        let max_period = nyx_overlay::directory::consensus::MAX_CONSENSUS_LIFETIME / 3;
        if self.authority.period < Duration::from_secs(min_period)
            || self.authority.period > Duration::from_secs(max_period)
        {
            add(
                "authority.period",
                format!(
                    "{:?} is shorter than {min_period}s or longer than {}h (clients refuse \
                     consensuses valid for longer than three of them)",
                    self.authority.period,
                    max_period / 3600
                ),
            );
        }
        if self.authority.enabled && !self.relay.enabled {
            add(
                "authority.enabled",
                "an authority is reached and probes relays as a relay: set relay.enabled"
                    .to_owned(),
            );
        }
        if self.authority.enabled && self.directory.authorities.is_empty() {
            add(
                "authority.enabled",
                "an authority needs directory.authorities (its own key among them)".to_owned(),
            );
        }
        if self.directory.consensus.as_os_str().is_empty() {
            add("directory.consensus", "must not be empty".to_owned());
        }
        if let Err(e) = self.exit_policy() {
            add("relay.exit_policy", e.to_string());
        }
        if let Err(reason) = self.family() {
            add("relay.family", reason);
        }
        if self.relay.bandwidth == 0 {
            add("relay.bandwidth", "must be at least 1".to_owned());
        }
        let max_validity = nyx_overlay::directory::authority::MAX_DESCRIPTOR_VALIDITY;
        if self.relay.descriptor_validity < Duration::from_secs(600)
            || self.relay.descriptor_validity > Duration::from_secs(max_validity)
        {
            add(
                "relay.descriptor_validity",
                format!(
                    "{:?} is shorter than 10 minutes or longer than {} days (what \
                     authorities accept)",
                    self.relay.descriptor_validity,
                    max_validity / 86_400
                ),
            );
        }
        if let Err(limits) = self.limits.validate() {
            for p in limits.iter() {
                add(&p.field, p.reason.clone());
            }
        }
        for (field, reason) in self
            .log
            .problems()
            .into_iter()
            .chain(self.telemetry.problems())
        {
            add(field, reason);
        }
        if problems.is_empty() {
            return Ok(());
        }
        Err(Error::ConfigInvalid {
            path: origin.to_owned(),
            problems: nyx_core::config::ConfigProblems::from_vec(problems),
        })
    }
}

pub(super) fn quota(rate: RateConfig) -> Result<Quota, String> {
    Quota::from_rate(rate.per_second, rate.burst).map_err(|e| e.to_string())
}

fn check_nickname(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NICKNAME_LEN {
        return Err(format!(
            "{name:?} must be 1 to {MAX_NICKNAME_LEN} characters long"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '_'))
    {
        return Err(format!(
            "{name:?} contains {c:?}; use only A-Z, a-z, 0-9, '-' and '_'"
        ));
    }
    Ok(())
}
