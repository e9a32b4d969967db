//! Loading a [`NodeConfig`] from TOML: unknown keys, wrong types and invalid values are all
//! refused with the key name and the reason, never silently ignored.

use std::path::{Path, PathBuf};

use nyx_core::config::NodeConfig;

use crate::Error;

/// Read, parse and validate the TOML configuration at `path`.
pub fn load(path: &Path) -> Result<NodeConfig, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ConfigRead {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}

/// Parse and validate TOML text; `origin` names it in errors.
pub fn parse(text: &str, origin: &Path) -> Result<NodeConfig, Error> {
    let config: NodeConfig = toml::from_str(text).map_err(|e| Error::ConfigSyntax {
        path: origin.to_owned(),
        message: e.to_string().trim_end().to_owned(),
    })?;
    config.validate().map_err(|problems| Error::ConfigInvalid {
        path: origin.to_owned(),
        problems,
    })?;
    Ok(config)
}

/// The origin used in errors for text that did not come from a file.
pub fn string_origin() -> PathBuf {
    PathBuf::from("<string>")
}

#[cfg(test)]
mod tests {
    use super::*;
    use nyx_core::config::TransportKind;

    fn parse_str(text: &str) -> Result<NodeConfig, Error> {
        parse(text, &string_origin())
    }

    #[test]
    fn empty_file_gives_defaults() {
        assert_eq!(parse_str("").unwrap(), NodeConfig::default());
    }

    #[test]
    fn full_file_parses() {
        let c = parse_str(
            r#"
            listen = ["127.0.0.2:4433", "[::1]:4433"]
            transport = "udp"
            data_dir = "/var/lib/nyx"
            [control]
            socket = "/run/nyx/control.sock"
            [limits]
            max_circuits = 100
            link_cells = { per_second = 1000.0, burst = 100 }
            [log]
            level = "nyx_daemon=debug,info"
            format = "json"
            [telemetry]
            otlp_endpoint = "http://127.0.0.1:4317"
            export_interval = "2s 500ms"
            "#,
        )
        .unwrap();
        assert_eq!(c.transport, TransportKind::Udp);
        assert_eq!(c.listen.len(), 2);
        assert_eq!(c.limits.max_circuits, 100);
        assert_eq!(c.limits.link_cells.burst, 100);
        assert_eq!(
            c.telemetry.export_interval,
            std::time::Duration::from_millis(2500)
        );
    }

    #[test]
    fn misspelled_key_is_named() {
        let err = parse_str("[limits]\nmax_circuts = 5\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("max_circuts") && err.contains("<string>"),
            "{err}"
        );
    }

    #[test]
    fn wrong_type_is_named() {
        let err = parse_str("[limits]\nmax_circuits = \"many\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("max_circuits") && err.contains("invalid type"),
            "{err}"
        );
        let err = parse_str("transport = \"tcp\"\n").unwrap_err().to_string();
        assert!(err.contains("transport") && err.contains("tcp"), "{err}");
    }

    #[test]
    fn invalid_values_are_all_listed() {
        let err = parse_str("listen = []\n[limits]\nmax_links = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("listen: at least one address"), "{err}");
        assert!(
            err.contains("limits.max_links: must be at least 1"),
            "{err}"
        );
    }

    #[test]
    fn missing_file_is_a_clear_error() {
        let err = load(Path::new("/nonexistent/nyx.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("cannot read config file /nonexistent/nyx.toml"),
            "{err}"
        );
    }
}
