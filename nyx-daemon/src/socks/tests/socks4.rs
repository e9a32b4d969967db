//! SOCKS4 and SOCKS4a: the codec (prefixes, every malformed case, the reply), the user id's
//! isolation group, the handshake told apart from SOCKS5 by its first byte, and property
//! tests (round trips through a test-side encoder; arbitrary bytes never panic).

use std::net::{Ipv4Addr, SocketAddr};

use proptest::prelude::*;

use super::super::proto::{Credentials, MAX_HOST_LEN, Reply, SocksError, TargetAddr};
use super::super::proto4::*;
use super::super::{isolation_group, socks4_isolation_group};
use super::{check_prefixes, run_handshake};
use nyx_node::IsolationGroup;
use nyx_overlay::directory::ExitTarget;

/// A SOCKS4 request, written from the SOCKS4 and SOCKS4a specifications independently of
/// the parser: with `host`, the SOCKS4a form (address 0.0.0.1, the name after the user id).
fn request4(cmd: u8, port: u16, ip: [u8; 4], userid: &[u8], host: Option<&[u8]>) -> Vec<u8> {
    let mut v = vec![4, cmd];
    v.extend_from_slice(&port.to_be_bytes());
    v.extend_from_slice(&ip);
    v.extend_from_slice(userid);
    v.push(0);
    if let Some(host) = host {
        v.extend_from_slice(host);
        v.push(0);
    }
    v
}

fn v4a(port: u16, userid: &[u8], host: &[u8]) -> Vec<u8> {
    request4(CMD_CONNECT, port, [0, 0, 0, 1], userid, Some(host))
}

#[test]
fn socks4_and_socks4a_requests_parse_to_exit_targets() {
    let r = check_prefixes(
        &request4(CMD_CONNECT, 80, [10, 1, 2, 3], b"", None),
        parse_request,
    );
    let ip: SocketAddr = "10.1.2.3:80".parse().unwrap();
    assert_eq!(r.target, TargetAddr::Ip(ip));
    assert!(r.userid.is_empty());
    let r = check_prefixes(&v4a(8080, b"alice", b"Example.org"), parse_request);
    assert_eq!(r.target.to_string(), "Example.org:8080");
    assert_eq!(r.userid, b"alice");
    let shown = format!("{r:?}");
    assert!(!shown.contains("alice"), "Debug shows the user id: {shown}");
    // 0.0.0.x with x = 255 is SOCKS4a too.
    let r = check_prefixes(
        &request4(CMD_CONNECT, 1, [0, 0, 0, 255], b"u", Some(b"::1")),
        parse_request,
    );
    assert_eq!(r.target.to_string(), "[::1]:1");
    // The longest user id and name.
    let name = "a".repeat(MAX_HOST_LEN);
    let long = vec![0xab; MAX_USERID_LEN];
    let msg = v4a(443, &long, name.as_bytes());
    assert_eq!(msg.len(), 518);
    let r = check_prefixes(&msg, parse_request);
    r.target.to_string().parse::<ExitTarget>().unwrap();
    assert_eq!(r.userid.len(), MAX_USERID_LEN);
}

#[test]
fn each_malformed_socks4_request_gets_its_error_and_reply_91() {
    let cases: Vec<(Vec<u8>, SocksError)> = vec![
        (vec![5, 1], SocksError::BadVersion { got: 5 }),
        // BIND is refused before the rest arrives.
        (vec![4, CMD_BIND], SocksError::UnsupportedCommand { cmd: 2 }),
        (vec![4, 9], SocksError::UnsupportedCommand { cmd: 9 }),
        (vec![4, 1, 0, 0], SocksError::ZeroPort),
        // 0.0.0.0 is neither an address nor SOCKS4a's marker (Tor refuses it too).
        (
            vec![4, 1, 0, 80, 0, 0, 0, 0],
            SocksError::UnspecifiedAddress,
        ),
        (
            request4(CMD_CONNECT, 80, [1, 2, 3, 4], &[b'u'; 256], None),
            SocksError::UserIdTooLong,
        ),
        // Too long is known before the NUL comes.
        (
            [&[4u8, 1, 0, 80, 1, 2, 3, 4][..], &[b'u'; 256]].concat(),
            SocksError::UserIdTooLong,
        ),
        (
            v4a(80, b"", b""),
            SocksError::BadHostName { reason: "empty" },
        ),
        (
            [&v4a(80, b"", b"")[..9], &[b'a'; 254]].concat(),
            SocksError::BadHostName {
                reason: "longer than 253 bytes",
            },
        ),
    ];
    for (msg, err) in cases {
        assert_eq!(parse_request(&msg), Err(err.clone()), "{msg:?}");
        assert_eq!(encode_reply(err.reply()), [0, REJECTED, 0, 0, 0, 0, 0, 0]);
    }
    for bad in [&b"a b.org"[..], b"a:b", b"\xff", "caf\u{e9}".as_bytes()] {
        match parse_request(&v4a(80, b"", bad)) {
            Err(SocksError::BadHostName { .. }) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn replies_are_90_for_success_and_91_for_every_failure() {
    for reply in Reply::ALL {
        let code = if reply == Reply::Succeeded { 90 } else { 91 };
        assert_eq!(
            encode_reply(reply),
            [0, code, 0, 0, 0, 0, 0, 0],
            "{reply:?}"
        );
    }
}

#[test]
fn user_ids_name_groups_apart_from_socks5_credentials() {
    assert_eq!(socks4_isolation_group(b""), IsolationGroup::default());
    assert_eq!(
        socks4_isolation_group(b"alice"),
        IsolationGroup::new("socks4:616c696365:")
    );
    let socks5 = |u: &[u8], p: &[u8]| {
        isolation_group(Some(&Credentials {
            username: u.to_vec(),
            password: p.to_vec(),
        }))
    };
    let groups = [
        socks4_isolation_group(b"alice"),
        socks4_isolation_group(b"bob"),
        socks4_isolation_group(b"alice:"),
        socks5(b"alice", b""),
        socks5(b"", b"alice"),
        isolation_group(None),
    ];
    for (i, x) in groups.iter().enumerate() {
        for y in &groups[i + 1..] {
            assert_ne!(x, y);
        }
    }
}

#[tokio::test]
async fn the_first_byte_picks_socks4_which_keeps_pipelined_data() {
    let mut bytes = v4a(8080, b"u", b"localhost");
    bytes.extend_from_slice(b"GET / HTTP/1.0\r\n\r\n");
    let (outcome, written) = run_handshake(&bytes).await;
    let want = format!(
        "localhost:8080 {:?} early=\"GET / HTTP/1.0\\r\\n\\r\\n\" Socks4",
        socks4_isolation_group(b"u")
    );
    assert_eq!(outcome.unwrap(), want);
    // Nothing before the stream is open: success is the entry server's to send.
    assert!(written.is_empty());
    // BIND: reply 91, counted as "command not supported".
    let bind = request4(CMD_BIND, 80, [127, 0, 0, 1], b"", None);
    let (outcome, written) = run_handshake(&bind).await;
    assert!(outcome.unwrap_err().ends_with("Some(CommandNotSupported)"));
    assert_eq!(written, [0, 91, 0, 0, 0, 0, 0, 0]);
    // A client that leaves mid-request.
    let (outcome, written) = run_handshake(&[4, 1, 0, 80, 127]).await;
    assert_eq!(outcome.unwrap_err(), "gone");
    assert!(written.is_empty());
}

fn target4() -> impl Strategy<Value = (TargetAddr, Vec<u8>)> {
    let ip = (any::<u32>(), 1..=u16::MAX)
        .prop_filter("not 0.0.0.0 nor a SOCKS4a address", |(ip, _)| *ip > 255)
        .prop_map(|(ip, port)| TargetAddr::Ip(SocketAddr::from((Ipv4Addr::from(ip), port))));
    let host = ("[a-zA-Z0-9.-]{1,253}", 1..=u16::MAX)
        .prop_map(|(host, port)| TargetAddr::Domain { host, port });
    let userid = proptest::collection::vec(1u8..=255, 0..=MAX_USERID_LEN);
    (prop_oneof![ip, host], userid)
}

fn encode4(target: &TargetAddr, userid: &[u8]) -> Vec<u8> {
    match target {
        TargetAddr::Ip(SocketAddr::V4(a)) => {
            request4(CMD_CONNECT, a.port(), a.ip().octets(), userid, None)
        }
        TargetAddr::Ip(SocketAddr::V6(_)) => unreachable!("SOCKS4 has no IPv6"),
        TargetAddr::Domain { host, port } => v4a(*port, userid, host.as_bytes()),
    }
}

proptest! {
    #[test]
    fn socks4_requests_round_trip((target, userid) in target4()) {
        let msg = encode4(&target, &userid);
        let want = Request4 { target: target.clone(), userid };
        prop_assert_eq!(parse_request(&msg), Ok(Some((want, msg.len()))));
        for n in 0..msg.len() {
            prop_assert!(matches!(parse_request(&msg[..n]), Ok(None)), "prefix {}", n);
        }
        prop_assert!(target.to_string().parse::<ExitTarget>().is_ok());
    }

    #[test]
    fn arbitrary_socks4_bytes_never_panic(
        head in proptest::collection::vec(any::<u8>(), 0..12),
        rest in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut bytes = vec![4, 1];
        bytes.extend(head);
        bytes.extend(rest);
        if let Ok(Some((value, used))) = parse_request(&bytes) {
            prop_assert!(used <= bytes.len() && used <= 518);
            prop_assert_eq!(parse_request(&bytes[..used]), Ok(Some((value, used))));
        }
    }
}
