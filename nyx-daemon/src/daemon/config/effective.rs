//! What a configuration's unset keys stand for (the data directory, the control socket, the
//! node's address), and which of its listeners anyone on the network could reach.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::DaemonConfig;
use crate::Error;
use crate::daemon::files;
use crate::telemetry::{DEFAULT_EXPORT_INTERVAL, DEFAULT_SERVICE_NAME, OtlpSettings};

/// What a listener of [`DaemonConfig::exposed_listeners`] risks (logged at start, printed
/// by `--check-config`).
pub(crate) const OPEN_LISTENER: &str = "not a loopback address: anyone who reaches it can use \
     it (a SOCKS or HTTP CONNECT entry there is an open proxy; metrics tell what this node \
     carries)";

impl DaemonConfig {
    /// The data directory: `data_dir`, else the user's default
    /// ([`files::default_data_dir`]).
    pub fn effective_data_dir(&self) -> Result<PathBuf, Error> {
        match &self.data_dir {
            Some(dir) => Ok(dir.clone()),
            None => files::default_data_dir(),
        }
    }

    /// The control socket: `control.socket`, else [`files::CONTROL_SOCKET`] in `data_dir`.
    pub fn effective_control_socket(&self, data_dir: &Path) -> PathBuf {
        self.control
            .socket
            .clone()
            .unwrap_or_else(|| data_dir.join(files::CONTROL_SOCKET))
    }

    /// This configuration with its unset keys replaced by what they stand for: `data_dir`,
    /// `control.socket` (when the socket is on), `listen`, and the `[telemetry]` keys the
    /// `OTEL_*` variables fill in (what `nyx-daemon --check-config` prints). Keys that stay
    /// unset (`relay.advertise`, `telemetry.prometheus_listen`, `telemetry.otlp_endpoint`)
    /// mean "off".
    pub fn effective(&self) -> Result<DaemonConfig, Error> {
        self.effective_with(&crate::telemetry::process_env)
    }

    /// [`effective`](Self::effective), reading the `OTEL_*` variables through `env`.
    pub fn effective_with(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<DaemonConfig, Error> {
        let mut config = self.clone();
        let t = &mut config.telemetry;
        match OtlpSettings::resolve(&self.telemetry, env) {
            Ok(Some(s)) => {
                t.otlp_endpoint = Some(s.shown_endpoint);
                t.service_name = Some(s.service_name);
                t.export_interval = Some(s.interval);
            }
            Ok(None) => {
                // Off (no collector named, or OTEL_SDK_DISABLED): the other keys apply to
                // nothing, but are shown with the values they would take.
                t.otlp_endpoint = None;
                t.service_name
                    .get_or_insert_with(|| DEFAULT_SERVICE_NAME.to_owned());
                t.export_interval.get_or_insert(DEFAULT_EXPORT_INTERVAL);
            }
            Err(reason) => {
                return Err(Error::Telemetry {
                    what: "otlp",
                    reason,
                });
            }
        }
        let data_dir = self.effective_data_dir()?;
        if config.control.enabled {
            config.control.socket = Some(self.effective_control_socket(&data_dir));
        }
        config.data_dir = Some(data_dir);
        config.listen = vec![self.node_settings().listen];
        Ok(config)
    }

    /// The listeners that serve whoever reaches them and are not on a loopback address, as
    /// `(key, address)`: a SOCKS or HTTP CONNECT entry there is an open proxy, a metrics
    /// endpoint tells anyone what this node carries.
    pub fn exposed_listeners(&self) -> Vec<(&'static str, SocketAddr)> {
        let socks = self
            .socks
            .enabled
            .then_some(("socks.listen", self.socks.listen));
        let http_connect = self
            .http_connect
            .enabled
            .then_some(("http_connect.listen", self.http_connect.listen));
        let metrics = self
            .telemetry
            .prometheus_listen
            .map(|addr| ("telemetry.prometheus_listen", addr));
        [socks, http_connect, metrics]
            .into_iter()
            .flatten()
            .filter(|(_, addr)| !addr.ip().to_canonical().is_loopback())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_keys_are_filled_in() {
        let mut config = DaemonConfig {
            data_dir: Some(PathBuf::from("/srv/nyx")),
            ..DaemonConfig::default()
        };
        let shown = config.effective().unwrap();
        assert_eq!(shown.data_dir, Some(PathBuf::from("/srv/nyx")));
        assert_eq!(
            shown.control.socket,
            Some(PathBuf::from("/srv/nyx/control.sock"))
        );
        assert_eq!(shown.listen, ["0.0.0.0:0".parse().unwrap()]);
        config.relay.enabled = true;
        config.control.socket = Some(PathBuf::from("@nyx"));
        let shown = config.effective().unwrap();
        assert_eq!(shown.listen, ["127.0.0.1:0".parse().unwrap()]);
        assert_eq!(shown.control.socket, Some(PathBuf::from("@nyx")));
        config.control.enabled = false;
        config.control.socket = None;
        assert_eq!(config.effective().unwrap().control.socket, None);
    }

    #[test]
    fn telemetry_shows_what_the_environment_fills_in() {
        let config = DaemonConfig::default();
        let no_env = |_: &str| None;
        let shown = config.effective_with(&no_env).unwrap().telemetry;
        assert_eq!(shown.otlp_endpoint, None);
        assert_eq!(shown.service_name.as_deref(), Some(DEFAULT_SERVICE_NAME));
        assert_eq!(shown.export_interval, Some(DEFAULT_EXPORT_INTERVAL));
        let env = |name: &str| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://10.0.0.5:4317".to_owned()),
            "OTEL_SERVICE_NAME" => Some("relay-3".to_owned()),
            "OTEL_METRIC_EXPORT_INTERVAL" => Some("30000".to_owned()),
            _ => None,
        };
        let shown = config.effective_with(&env).unwrap();
        let text = shown.to_toml();
        assert!(
            text.contains("otlp_endpoint = \"http://10.0.0.5:4317\"")
                && text.contains("service_name = \"relay-3\"")
                && text.contains("export_interval = \"30s\""),
            "{text}"
        );
        let bad = |name: &str| match name {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => Some("http://10.0.0.5:4317".to_owned()),
            "OTEL_EXPORTER_OTLP_PROTOCOL" => Some("http/json".to_owned()),
            _ => None,
        };
        let err = config.effective_with(&bad).unwrap_err().to_string();
        assert!(err.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{err}");
    }

    #[test]
    fn only_non_loopback_listeners_are_exposed() {
        let mut config = DaemonConfig::default();
        assert!(config.exposed_listeners().is_empty(), "defaults: loopback");
        for local in ["[::1]:9050", "[::ffff:127.0.0.1]:9050", "127.0.0.2:9050"] {
            config.socks.listen = local.parse().unwrap();
            assert!(config.exposed_listeners().is_empty(), "{local}");
        }
        config.socks.listen = "0.0.0.0:9050".parse().unwrap();
        config.telemetry.prometheus_listen = Some("192.0.2.7:9100".parse().unwrap());
        assert_eq!(
            config.exposed_listeners(),
            [
                ("socks.listen", "0.0.0.0:9050".parse().unwrap()),
                (
                    "telemetry.prometheus_listen",
                    "192.0.2.7:9100".parse().unwrap()
                )
            ]
        );
        config.socks.enabled = false;
        assert_eq!(
            config.exposed_listeners().len(),
            1,
            "a SOCKS entry that is off"
        );
        // The HTTP CONNECT entry: off by default, so not exposed until it is on.
        config.http_connect.listen = "0.0.0.0:9080".parse().unwrap();
        assert_eq!(config.exposed_listeners().len(), 1, "an entry that is off");
        config.http_connect.enabled = true;
        assert_eq!(
            config.exposed_listeners()[0],
            ("http_connect.listen", "0.0.0.0:9080".parse().unwrap())
        );
        config.http_connect.listen = "127.0.0.1:9080".parse().unwrap();
        assert_eq!(config.exposed_listeners().len(), 1, "on loopback");
    }
}
