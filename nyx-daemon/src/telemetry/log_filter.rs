//! The log filter grammar, parsed in one place: the configuration's `log.level`, a reload
//! and the control API's `SetLogLevel` all go through [`parse_log_filter`].

use tracing_subscriber::EnvFilter;

const LEVELS: [&str; 6] = ["trace", "debug", "info", "warn", "error", "off"];

/// The HTTP/2 and gRPC machinery under the control API and the OTLP exporter: at `debug`
/// they log every frame of every call, so a bare `debug` keeps them at `info`; `trace`, or
/// a directive that names one of them, lets them through.
const QUIET_AT_DEBUG: [&str; 5] = ["h2", "hyper", "hyper_util", "tonic", "tower"];

/// Parse log filter directives: a level, or comma-separated `target=level` items whose
/// targets are module paths (the subset of `RUST_LOG` syntax the daemon supports; spaces
/// around items and `=` are allowed). The error says which item is wrong and why. A bare
/// `debug` leaves the HTTP/2 and gRPC crates (`h2`, `hyper`, `hyper_util`, `tonic`,
/// `tower`) at `info` unless a directive names them.
///
/// ```
/// use nyx_daemon::telemetry::parse_log_filter;
/// assert!(parse_log_filter("nyx_node=debug, info").is_ok());
/// assert!(parse_log_filter("loud").unwrap_err().contains("\"loud\""));
/// ```
pub fn parse_log_filter(directives: &str) -> Result<EnvFilter, String> {
    if directives.trim().is_empty() {
        return Err(format!(
            "must not be empty; use one of {}",
            LEVELS.join(", ")
        ));
    }
    let mut normalized = Vec::new();
    for item in directives.split(',').map(str::trim) {
        let (target, level) = match item.split_once('=') {
            Some((t, l)) => (Some(t.trim()), l.trim()),
            None => (None, item),
        };
        if let Some(t) = target
            && (t.is_empty()
                || !t
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "_:-".contains(c)))
        {
            return Err(format!("{item:?}: {t:?} is not a module path"));
        }
        if !LEVELS.iter().any(|l| l.eq_ignore_ascii_case(level)) {
            return Err(format!(
                "{item:?}: {level:?} is not one of {}",
                LEVELS.join(", ")
            ));
        }
        normalized.push(match target {
            Some(t) => format!("{t}={level}"),
            None => level.to_owned(),
        });
    }
    let named = |quiet: &str| {
        normalized
            .iter()
            .any(|d| d.split_once('=').is_some_and(|(t, _)| t == quiet))
    };
    if normalized.iter().any(|d| d.eq_ignore_ascii_case("debug")) {
        let quieted: Vec<String> = QUIET_AT_DEBUG
            .iter()
            .filter(|quiet| !named(quiet))
            .map(|quiet| format!("{quiet}=info"))
            .collect();
        normalized.extend(quieted);
    }
    EnvFilter::builder()
        .parse(normalized.join(","))
        .map_err(|e| format!("{directives:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_and_directives() {
        for ok in [
            "info",
            "WARN",
            "nyx_core=debug,info",
            "nyx_daemon::relay=trace, off",
            " nyx_node = debug ",
        ] {
            assert!(parse_log_filter(ok).is_ok(), "{ok}");
        }
        for bad in ["", "loud", "=info", "a b=info", "x=verbose", "very=loud=x"] {
            assert!(parse_log_filter(bad).is_err(), "{bad}");
        }
    }
}
