//! What a reload changes: [`DaemonConfig::diff`] sorts the changed keys into those applied
//! live ([`LIVE_KEYS`]) and those that need a restart.

use super::DaemonConfig;

impl DaemonConfig {
    /// Keys of `self` that differ in `new` and can change while the daemon runs, and those
    /// that need a restart. The keys are found by comparing the two configurations as TOML
    /// (top-level keys, and the keys of each section), so a key added to the file format is
    /// never missed; it needs a restart unless it is listed in [`LIVE_KEYS`].
    pub fn diff(&self, new: &DaemonConfig) -> ConfigDiff {
        let mut changed = Vec::new();
        match (toml::Value::try_from(self), toml::Value::try_from(new)) {
            (Ok(toml::Value::Table(a)), Ok(toml::Value::Table(b))) => {
                changed_keys(&a, &b, "", 2, &mut changed);
            }
            // Plain data always serializes; if it ever did not, claim nothing was applied.
            _ => changed.push("*".to_owned()),
        }
        let (live, restart) = changed
            .into_iter()
            .partition(|key| LIVE_KEYS.contains(&key.as_str()));
        ConfigDiff { live, restart }
    }
}

/// The keys a running daemon applies on reload (SIGHUP or the control API): the directory
/// file is re-read, the exit policy applied, the descriptor republished (with the new exit
/// policy, family, bandwidth or validity), the overlay's limits and the log filter changed in
/// place. Every other key takes effect after a restart.
pub const LIVE_KEYS: [&str; 13] = [
    "directory.file",
    "directory.authorities",
    "directory.consensus",
    "relay.exit_policy",
    "relay.family",
    "relay.bandwidth",
    "relay.descriptor_validity",
    "limits.link_cells",
    "limits.circuit_cells",
    "limits.circuit_creates",
    "limits.max_circuits",
    "log.level",
    "log.log_sensitive",
];

/// Append to `out` the dotted keys whose values differ between `a` and `b` (present in one
/// only counts), descending into tables `depth - 1` more levels.
fn changed_keys(
    a: &toml::Table,
    b: &toml::Table,
    prefix: &str,
    depth: usize,
    out: &mut Vec<String>,
) {
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    for key in keys {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match (a.get(key), b.get(key)) {
            (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) if depth > 1 => {
                changed_keys(x, y, &path, depth - 1, out);
            }
            (x, y) if x != y => out.push(path),
            _ => {}
        }
    }
}

/// What a reload changes: keys applied live, and keys that only take effect after a restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    /// Changed keys applied while running.
    pub live: Vec<String>,
    /// Changed keys that need a restart (the running daemon keeps the old value).
    pub restart: Vec<String>,
}
