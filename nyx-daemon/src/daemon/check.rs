//! What `nyx-daemon --check-config` checks beyond the file: that every socket a start
//! would bind can be bound now. Each is bound and released (the control socket is only
//! looked at), so an address in use, or one that is not on this machine, fails the check
//! with the error the start would meet, rather than the start.

use std::net::{SocketAddr, TcpListener, UdpSocket};

use super::DaemonConfig;
use crate::Error;
use crate::control::ControlListener;

/// Every listener of `config` that could not be bound now, each as the error a start
/// would report. The sockets are held until all are tried, so two listeners on one
/// address are found too.
pub(crate) fn check_listeners(config: &DaemonConfig) -> Vec<Error> {
    let mut problems = Vec::new();
    let mut held_tcp = Vec::new();
    let node = config.node_settings().listen;
    let held_udp = match UdpSocket::bind(node) {
        Ok(socket) => Some(socket),
        Err(source) => {
            problems.push(Error::Listen {
                what: "the node (UDP)",
                addr: node,
                source,
            });
            None
        }
    };
    let tcp: [(&'static str, Option<SocketAddr>); 3] = [
        (
            "SOCKS5",
            config.socks.enabled.then_some(config.socks.listen),
        ),
        (
            "HTTP CONNECT",
            config
                .http_connect
                .enabled
                .then_some(config.http_connect.listen),
        ),
        ("Prometheus metrics", config.telemetry.prometheus_listen),
    ];
    for (what, addr) in tcp {
        let Some(addr) = addr else { continue };
        match TcpListener::bind(addr) {
            Ok(listener) => held_tcp.push(listener),
            Err(source) => problems.push(Error::Listen { what, addr, source }),
        }
    }
    if config.control.enabled {
        let socket = config
            .effective_data_dir()
            .map(|dir| config.effective_control_socket(&dir))
            .and_then(|path| ControlListener::check(&path));
        if let Err(e) = socket {
            problems.push(e);
        }
    }
    drop((held_udp, held_tcp));
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> DaemonConfig {
        DaemonConfig::parse(text, std::path::Path::new("<test>")).unwrap()
    }

    #[test]
    fn free_addresses_pass() {
        let c = config(
            "listen = [\"0.0.0.0:0\"]\ndata_dir = \"/nonexistent/nyx\"\n\
             [socks]\nlisten = \"127.0.0.1:0\"\n\
             [http_connect]\nenabled = true\nlisten = \"127.0.0.1:0\"\n\
             [telemetry]\nprometheus_listen = \"127.0.0.1:0\"\n",
        );
        let problems = check_listeners(&c);
        assert!(problems.is_empty(), "{problems:?}");
    }

    #[test]
    fn every_address_in_use_is_reported_as_the_start_would() {
        let taken_tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tcp = taken_tcp.local_addr().unwrap();
        let udp = taken_udp.local_addr().unwrap();
        // The node on a taken UDP port; SOCKS, HTTP CONNECT and metrics on one taken TCP
        // port.
        let c = config(&format!(
            "listen = [\"{udp}\"]\ndata_dir = \"/nonexistent/nyx\"\n\
             [socks]\nlisten = \"{tcp}\"\n\
             [http_connect]\nenabled = true\nlisten = \"{tcp}\"\n\
             [telemetry]\nprometheus_listen = \"{tcp}\"\n"
        ));
        let problems: Vec<String> = check_listeners(&c).iter().map(|e| e.to_string()).collect();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems[0].starts_with(&format!("cannot listen on {udp} for the node")));
        assert!(problems[1].starts_with(&format!("cannot listen on {tcp} for SOCKS5")));
        assert!(problems[2].starts_with(&format!("cannot listen on {tcp} for HTTP CONNECT")));
        assert!(problems[3].contains("for Prometheus metrics"));
        // SOCKS and HTTP CONNECT on one free address: the second bind fails.
        let free = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let c = config(&format!(
            "data_dir = \"/nonexistent/nyx\"\n[socks]\nlisten = \"{free}\"\n\
             [http_connect]\nenabled = true\nlisten = \"{free}\"\n"
        ));
        let problems: Vec<String> = check_listeners(&c).iter().map(|e| e.to_string()).collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("for HTTP CONNECT"), "{problems:?}");
        // An address of no interface here (TEST-NET-1).
        let c = config("data_dir = \"/nonexistent\"\n[socks]\nlisten = \"192.0.2.1:9050\"\n");
        let problems = check_listeners(&c);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .to_string()
                .contains("192.0.2.1:9050 for SOCKS5")
        );
    }
}
