//! Where OTLP export goes and how often: the `[telemetry]` keys first, then the standard
//! `OTEL_*` environment variables, then the defaults.
//!
//! What it is for: one pure function, [`OtlpSettings::resolve`], that both the exporter
//! setup and `nyx-daemon --check-config` use, so what is printed is what runs. It reads
//! the environment through a lookup function, so tests pass their own.
//!
//! What it is not for: the variables the exporter reads by itself and that need no decision
//! here (`OTEL_EXPORTER_OTLP_HEADERS`, `..._COMPRESSION`, and the per-signal forms of both);
//! they are listed in docs/telemetry.md.

use std::time::Duration;

use crate::daemon::config::TelemetryConfig;

/// `service.name` when neither the configuration nor the environment names the service.
pub const DEFAULT_SERVICE_NAME: &str = "nyx-daemon";
/// How often metrics are exported when neither the configuration nor
/// `OTEL_METRIC_EXPORT_INTERVAL` says.
pub const DEFAULT_EXPORT_INTERVAL: Duration = Duration::from_secs(10);
/// The shortest export interval accepted, from either source.
pub const MIN_EXPORT_INTERVAL: Duration = Duration::from_millis(100);
/// The longest export interval accepted, from either source: a day (an interval of
/// centuries would overflow the runtime's clock when the timer is set).
pub const MAX_EXPORT_INTERVAL: Duration = Duration::from_secs(24 * 3600);
/// The longest one export may take (connect included) unless `OTEL_EXPORTER_OTLP_TIMEOUT`
/// says otherwise.
const MAX_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The collector's address, generic and per signal (the exporter prefers the per-signal one).
const ENDPOINT_VARS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
];
const PROTOCOL_VARS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_PROTOCOL",
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
];
const TIMEOUT_VARS: [&str; 3] = [
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
];

/// The process environment, as [`OtlpSettings::resolve`] reads it.
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// The OTLP export to run, once the configuration and the environment are combined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// `telemetry.otlp_endpoint`; `None` when the environment names the collector, which
    /// the exporter then reads per signal (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` before
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, and the same for metrics).
    pub endpoint: Option<String>,
    /// The collector as an operator reads it (the configured one, else the environment's).
    pub shown_endpoint: String,
    /// `telemetry.service_name`, else `OTEL_SERVICE_NAME`, else a `service.name` in
    /// `OTEL_RESOURCE_ATTRIBUTES`, else [`DEFAULT_SERVICE_NAME`].
    pub service_name: String,
    /// Whether `service_name` must be set on the resource (false when the SDK's resource
    /// detectors find it in the environment themselves).
    pub set_service_name: bool,
    /// `telemetry.export_interval`, else `OTEL_METRIC_EXPORT_INTERVAL` (ms), else
    /// [`DEFAULT_EXPORT_INTERVAL`].
    pub interval: Duration,
    /// The bound on one export; `None` when an `OTEL_EXPORTER_OTLP_*TIMEOUT` variable sets it.
    pub timeout: Option<Duration>,
}

impl OtlpSettings {
    /// The export `t` and `env` ask for: `Ok(None)` when no collector is named (or
    /// `OTEL_SDK_DISABLED=true`), an error naming the key or variable when one is unusable.
    pub fn resolve(
        t: &TelemetryConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<OtlpSettings>, String> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        // Checked below, with every endpoint variable the exporter could pick.
        let from_env = ENDPOINT_VARS.iter().find_map(|name| var(name));
        let shown_endpoint = match (&t.otlp_endpoint, &from_env) {
            (Some(configured), _) => configured.clone(),
            (None, Some(value)) => value.clone(),
            (None, None) => return Ok(None),
        };
        // Every endpoint the exporter could pick from the environment must be usable too.
        if t.otlp_endpoint.is_none() {
            for name in ENDPOINT_VARS {
                if let Some(value) = var(name) {
                    check_endpoint(&value).map_err(|reason| format!("{name}: {reason}"))?;
                }
            }
        }
        for name in PROTOCOL_VARS {
            if let Some(p) = var(name).filter(|p| p.trim() != "grpc") {
                return Err(format!(
                    "{name}={p:?}: only \"grpc\" is supported (OTLP over gRPC, e.g. port 4317)"
                ));
            }
        }
        let (service_name, set_service_name) = match &t.service_name {
            Some(name) => (name.clone(), true),
            None => match var("OTEL_SERVICE_NAME").or_else(|| resource_service_name(&var)) {
                Some(name) => (name, false),
                None => (DEFAULT_SERVICE_NAME.to_owned(), true),
            },
        };
        let interval = match (t.export_interval, var("OTEL_METRIC_EXPORT_INTERVAL")) {
            (Some(interval), _) => interval,
            (None, Some(ms)) => {
                let interval = ms
                    .trim()
                    .parse::<u64>()
                    .map(Duration::from_millis)
                    .map_err(|_| {
                        format!("OTEL_METRIC_EXPORT_INTERVAL={ms:?} is not a whole number of ms")
                    })?;
                if interval < MIN_EXPORT_INTERVAL {
                    return Err(format!(
                        "OTEL_METRIC_EXPORT_INTERVAL={ms:?} is shorter than 100 ms"
                    ));
                }
                if interval > MAX_EXPORT_INTERVAL {
                    return Err(format!(
                        "OTEL_METRIC_EXPORT_INTERVAL={ms:?} is longer than a day"
                    ));
                }
                interval
            }
            (None, None) => DEFAULT_EXPORT_INTERVAL,
        };
        let timeout = if TIMEOUT_VARS.iter().any(|name| var(name).is_some()) {
            None
        } else {
            Some(interval.min(MAX_EXPORT_TIMEOUT))
        };
        Ok(Some(OtlpSettings {
            endpoint: t.otlp_endpoint.clone(),
            shown_endpoint,
            service_name,
            set_service_name,
            interval,
            timeout,
        }))
    }
}

/// Why `endpoint` cannot be used by this exporter (plain gRPC, no TLS), if it cannot.
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    if endpoint.starts_with("https://") {
        return Err(format!(
            "{endpoint:?}: https is not supported; use a local collector over http:// (e.g. \
             http://127.0.0.1:4317)"
        ));
    }
    if endpoint
        .strip_prefix("http://")
        .is_none_or(|h| h.is_empty() || h.starts_with('/'))
    {
        return Err(format!("{endpoint:?} is not an http:// URL with a host"));
    }
    Ok(())
}

/// The `service.name` in `OTEL_RESOURCE_ATTRIBUTES` (`key=value` pairs separated by commas).
fn resource_service_name(var: &dyn Fn(&str) -> Option<String>) -> Option<String> {
    var("OTEL_RESOURCE_ATTRIBUTES")?
        .split(',')
        .filter_map(|pair| pair.split_once('='))
        .find(|(k, _)| k.trim() == "service.name")
        .map(|(_, v)| v.trim().to_owned())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(t: &TelemetryConfig, vars: &[(&str, &str)]) -> Result<Option<OtlpSettings>, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        OtlpSettings::resolve(t, &move |name| map.get(name).cloned())
    }

    fn configured() -> TelemetryConfig {
        TelemetryConfig {
            otlp_endpoint: Some("http://127.0.0.1:4317".to_owned()),
            ..TelemetryConfig::default()
        }
    }

    #[test]
    fn without_a_collector_nothing_is_exported() {
        assert_eq!(resolve(&TelemetryConfig::default(), &[]), Ok(None));
        // Naming the service alone does not turn export on.
        assert_eq!(
            resolve(&TelemetryConfig::default(), &[("OTEL_SERVICE_NAME", "x")]),
            Ok(None)
        );
    }

    #[test]
    fn the_environment_names_the_collector_when_the_file_does_not() {
        let s = resolve(
            &TelemetryConfig::default(),
            &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, None, "the exporter reads the variable itself");
        assert_eq!(s.shown_endpoint, "http://collector:4317");
        assert_eq!(s.service_name, DEFAULT_SERVICE_NAME);
        assert!(s.set_service_name);
        assert_eq!(s.interval, DEFAULT_EXPORT_INTERVAL);
        assert_eq!(s.timeout, Some(MAX_EXPORT_TIMEOUT));
        // A per-signal variable alone turns export on too.
        let s = resolve(
            &TelemetryConfig::default(),
            &[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:4317")],
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.shown_endpoint, "http://t:4317");
    }

    #[test]
    fn the_file_wins_over_the_environment() {
        let t = TelemetryConfig {
            service_name: Some("from-file".to_owned()),
            export_interval: Some(Duration::from_secs(3)),
            ..configured()
        };
        let s = resolve(
            &t,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
                ("OTEL_SERVICE_NAME", "from-env"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:4317"));
        assert_eq!(s.service_name, "from-file");
        assert!(s.set_service_name);
        assert_eq!(s.interval, Duration::from_secs(3));
        assert_eq!(s.timeout, Some(Duration::from_secs(3)));
    }

    #[test]
    fn the_environment_fills_what_the_file_leaves_unset() {
        let s = resolve(
            &configured(),
            &[
                ("OTEL_SERVICE_NAME", "relay-7"),
                ("OTEL_METRIC_EXPORT_INTERVAL", "2500"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "1000"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.service_name, "relay-7");
        assert!(
            !s.set_service_name,
            "the SDK's detectors read it themselves"
        );
        assert_eq!(s.interval, Duration::from_millis(2500));
        assert_eq!(s.timeout, None, "the exporter reads the timeout variable");
        let s = resolve(
            &configured(),
            &[(
                "OTEL_RESOURCE_ATTRIBUTES",
                "deployment.environment=lab, service.name = relay-9 ",
            )],
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.service_name, "relay-9");
        assert!(!s.set_service_name);
    }

    #[test]
    fn sdk_disabled_turns_export_off_even_when_configured() {
        assert_eq!(
            resolve(&configured(), &[("OTEL_SDK_DISABLED", "TRUE")]),
            Ok(None)
        );
        assert!(
            resolve(&configured(), &[("OTEL_SDK_DISABLED", "false")])
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn unusable_variables_are_named_in_the_error() {
        let none = TelemetryConfig::default();
        let err = resolve(&none, &[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4317")]).unwrap_err();
        assert!(err.contains("OTEL_EXPORTER_OTLP_ENDPOINT") && err.contains("https"));
        let err = resolve(
            &none,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
                ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "c:4317"),
            ],
        )
        .unwrap_err();
        assert!(err.contains("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"), "{err}");
        let err = resolve(
            &configured(),
            &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")],
        )
        .unwrap_err();
        assert!(err.contains("only \"grpc\""), "{err}");
        assert!(resolve(&configured(), &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).is_ok());
        for bad in ["soon", "50", "-1", "86400001", "18446744073709551615"] {
            let err = resolve(&configured(), &[("OTEL_METRIC_EXPORT_INTERVAL", bad)]).unwrap_err();
            assert!(err.contains("OTEL_METRIC_EXPORT_INTERVAL"), "{err}");
        }
    }
}
