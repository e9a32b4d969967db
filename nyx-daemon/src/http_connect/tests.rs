//! The HTTP CONNECT codec (targets, headers, credentials, every refusal and its status, the
//! size limit, responses), the outcome-to-status table, the handshake over an in-memory
//! pipe, and property tests (round trips through a test-side encoder; arbitrary bytes
//! never panic; no strict prefix of a head parses).

use std::net::SocketAddr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use proptest::prelude::*;

use super::proto::*;
use super::{handshake, status_for};
use crate::socks::proto::{Credentials, Reply, TargetAddr};
use crate::socks::{isolation_group, socks4_isolation_group};
use nyx_overlay::directory::ExitTarget;

/// A request head, written from RFC 9112 independently of the parser.
fn head(target: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut text = format!("CONNECT {target} HTTP/1.1\r\n");
    for (name, value) in headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str("\r\n");
    text.into_bytes()
}

fn basic(user: &[u8], pass: &[u8]) -> String {
    format!("Basic {}", STANDARD.encode([user, b":", pass].concat()))
}

/// Every strict prefix of `msg` is incomplete; the whole of it, followed by the tunnel's
/// first bytes, parses using all of it and no more.
fn parsed(msg: &[u8]) -> ConnectRequest {
    crate::entry::testing::check_prefixes(msg, b"\x16\x03 early bytes\r\n\r\n", parse_request)
}

#[test]
fn targets_parse_to_exit_targets() {
    let cases = [
        ("example.org:443", "example.org:443"),
        ("Example.ORG:1", "Example.ORG:1"),
        ("10.1.2.3:80", "10.1.2.3:80"),
        ("[::1]:65535", "[::1]:65535"),
        ("localhost:8080", "localhost:8080"),
    ];
    for (target, want) in cases {
        let r = parsed(&head(target, &[("Host", target)]));
        assert_eq!(r.target.to_string(), want);
        want.parse::<ExitTarget>().unwrap();
        assert_eq!(r.credentials, None);
    }
    let ip: SocketAddr = "10.1.2.3:80".parse().unwrap();
    assert_eq!(parsed(&head("10.1.2.3:80", &[])).target, TargetAddr::Ip(ip));
    // HTTP/1.0 and bare LF line ends are accepted too.
    let r = parsed(b"CONNECT a.org:1 HTTP/1.0\nUser-Agent: x\n\n");
    assert_eq!(r.target.to_string(), "a.org:1");
}

#[test]
fn basic_credentials_are_read_and_hidden() {
    let auth = basic(b"alice", b"pw:with:colons");
    let r = parsed(&head("a.org:443", &[("proxy-AUTHORIZATION", &auth)]));
    let creds = r.credentials.clone().unwrap();
    assert_eq!(creds.username, b"alice");
    assert_eq!(creds.password, b"pw:with:colons");
    assert!(!format!("{r:?}").contains("alice"), "{r:?}");
    // Empty ones too, and other headers are skipped.
    let auth = basic(b"", b"");
    let r = parsed(&head(
        "a.org:443",
        &[("X-A", "b"), ("Proxy-Authorization", &auth)],
    ));
    assert_eq!(
        r.credentials,
        Some(Credentials {
            username: vec![],
            password: vec![]
        })
    );
}

#[test]
fn each_refused_head_gets_its_status() {
    let auth = basic(b"a", b"b");
    let cases: Vec<(Vec<u8>, Status)> = vec![
        (
            b"GET http://a.org/ HTTP/1.1\r\n\r\n".to_vec(),
            Status::MethodNotAllowed,
        ),
        (
            b"connect a.org:1 HTTP/1.1\r\n\r\n".to_vec(),
            Status::MethodNotAllowed,
        ),
        (
            b"CONNECT a.org:1 HTTP/2.0\r\n\r\n".to_vec(),
            Status::VersionNotSupported,
        ),
        (b"CONNECT a.org:1\r\n\r\n".to_vec(), Status::BadRequest),
        (
            b"CONNECT  a.org:1 HTTP/1.1\r\n\r\n".to_vec(),
            Status::BadRequest,
        ),
        (
            b"CONNECT a.org:1 FTP/1.1\r\n\r\n".to_vec(),
            Status::BadRequest,
        ),
        (b"\r\n\r\n".to_vec(), Status::BadRequest),
        (b"\x05\x01\x00\n\n".to_vec(), Status::BadRequest),
        (head("a.org", &[]), Status::BadRequest),
        (head("a.org:0", &[]), Status::BadRequest),
        (head("a.org:65536", &[]), Status::BadRequest),
        (head("a.org:+80", &[]), Status::BadRequest),
        (head(":80", &[]), Status::BadRequest),
        (head("::1:80", &[]), Status::BadRequest),
        (head("a]b:80", &[]), Status::BadRequest),
        (
            head(&format!("{}:80", "a".repeat(254)), &[]),
            Status::BadRequest,
        ),
        (head("a.org:1", &[("Bad Name", "x")]), Status::BadRequest),
        (
            b"CONNECT a.org:1 HTTP/1.1\r\nX\r\n\r\n".to_vec(),
            Status::BadRequest,
        ),
        (
            b"CONNECT a.org:1 HTTP/1.1\r\nA: b\r\n c\r\n\r\n".to_vec(),
            Status::BadRequest,
        ),
        (
            head("a.org:1", &[("Proxy-Authorization", "Bearer x")]),
            Status::BadRequest,
        ),
        (
            head("a.org:1", &[("Proxy-Authorization", "Basic !!")]),
            Status::BadRequest,
        ),
        (
            head(
                "a.org:1",
                &[(
                    "Proxy-Authorization",
                    &format!("Basic {}", STANDARD.encode("nocolon")),
                )],
            ),
            Status::BadRequest,
        ),
        (
            head(
                "a.org:1",
                &[
                    ("Proxy-Authorization", &auth),
                    ("Proxy-Authorization", &auth),
                ],
            ),
            Status::BadRequest,
        ),
    ];
    for (msg, status) in cases {
        let err = parse_request(&msg).unwrap_err();
        assert_eq!(
            err.status(),
            status,
            "{:?}: {err}",
            String::from_utf8_lossy(&msg)
        );
        let want_reply = match status {
            Status::MethodNotAllowed => Reply::CommandNotSupported,
            _ => Reply::GeneralFailure,
        };
        assert_eq!(err.reply(), want_reply);
    }
}

#[test]
fn heads_are_limited_to_8_kib() {
    let filler = |n: usize| ("X-Filler", "f".repeat(n));
    let base = head("a.org:1", &[]).len() + "X-Filler: \r\n".len();
    // Exactly the limit: accepted.
    let (name, value) = filler(MAX_HEAD_LEN - base);
    let msg = head("a.org:1", &[(name, &value)]);
    assert_eq!(msg.len(), MAX_HEAD_LEN);
    assert!(parse_request(&msg).unwrap().is_some());
    // One byte more: refused whole, and refused as soon as the limit is passed without an
    // empty line.
    let (name, value) = filler(MAX_HEAD_LEN - base + 1);
    let msg = head("a.org:1", &[(name, &value)]);
    assert_eq!(parse_request(&msg), Err(HttpConnectError::HeadTooLarge));
    assert_eq!(parse_request(&msg[..MAX_HEAD_LEN]), Ok(None));
    assert_eq!(
        parse_request(&msg[..MAX_HEAD_LEN + 1]),
        Err(HttpConnectError::HeadTooLarge)
    );
    assert_eq!(
        HttpConnectError::HeadTooLarge.status(),
        Status::HeadTooLarge
    );
}

#[test]
fn responses_and_the_outcome_table() {
    assert_eq!(
        encode_response(Status::Established),
        b"HTTP/1.1 200 Connection established\r\n\r\n"
    );
    assert_eq!(
        encode_response(Status::MethodNotAllowed),
        b"HTTP/1.1 405 Method Not Allowed\r\nAllow: CONNECT\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(
        encode_response(Status::GatewayTimeout),
        b"HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    let codes: Vec<u16> = Status::ALL.iter().map(|s| s.code_and_reason().0).collect();
    assert_eq!(codes, [200, 400, 403, 405, 431, 502, 503, 504, 505]);
    let table = [
        (Reply::Succeeded, 200),
        (Reply::GeneralFailure, 502),
        (Reply::NotAllowed, 403),
        (Reply::NetworkUnreachable, 503),
        (Reply::HostUnreachable, 502),
        (Reply::ConnectionRefused, 502),
        (Reply::TtlExpired, 504),
        (Reply::CommandNotSupported, 405),
        (Reply::AddressTypeNotSupported, 400),
    ];
    for (reply, code) in table {
        assert_eq!(status_for(reply).code_and_reason().0, code, "{reply:?}");
    }
}

/// The server side of the handshake against `client_bytes`: its outcome and all it wrote.
async fn run_handshake(client_bytes: &[u8]) -> (Result<String, String>, Vec<u8>) {
    crate::entry::testing::run_handshake(client_bytes, |mut server| async move {
        (handshake(&mut server).await, server)
    })
    .await
}

#[tokio::test]
async fn the_handshake_keeps_early_data_and_isolates_like_socks5() {
    let auth = basic(b"u", b"p");
    let mut bytes = head("localhost:8080", &[("Proxy-Authorization", &auth)]);
    bytes.extend_from_slice(b"GET / HTTP/1.0\r\n\r\n");
    let (outcome, written) = run_handshake(&bytes).await;
    let same_as_socks5 = isolation_group(Some(&Credentials {
        username: b"u".to_vec(),
        password: b"p".to_vec(),
    }));
    assert_ne!(same_as_socks5, socks4_isolation_group(b"u"));
    let want =
        format!("localhost:8080 {same_as_socks5:?} early=\"GET / HTTP/1.0\\r\\n\\r\\n\" Http");
    assert_eq!(outcome.unwrap(), want);
    assert!(written.is_empty(), "success is the entry server's to send");
    // Without credentials: the default group.
    let (outcome, _) = run_handshake(&head("a.org:443", &[])).await;
    assert!(
        outcome
            .unwrap()
            .contains(&format!("{:?}", isolation_group(None)))
    );
}

#[tokio::test]
async fn refused_heads_are_answered_with_their_status() {
    let (outcome, written) = run_handshake(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert!(outcome.unwrap_err().ends_with("Some(CommandNotSupported)"));
    assert_eq!(written, encode_response(Status::MethodNotAllowed));
    // 431 even though the client sent more than the proxy reads before deciding.
    let big = head("a.org:1", &[("X", &"x".repeat(20_000))]);
    let (outcome, written) = run_handshake(&big).await;
    assert!(outcome.unwrap_err().starts_with("request head longer"));
    assert_eq!(written, encode_response(Status::HeadTooLarge));
    let (outcome, written) = run_handshake(b"CONNECT a.org:1 HTT").await;
    assert_eq!(outcome.unwrap_err(), "gone");
    assert!(written.is_empty());
}

fn target() -> impl Strategy<Value = TargetAddr> {
    prop_oneof![
        (any::<[u8; 4]>(), 1..=u16::MAX).prop_map(|(ip, port)| TargetAddr::Ip((ip, port).into())),
        (any::<[u8; 16]>(), 1..=u16::MAX).prop_map(|(ip, port)| TargetAddr::Ip((ip, port).into())),
        ("[a-zA-Z][a-zA-Z0-9.-]{0,252}", 1..=u16::MAX)
            .prop_map(|(host, port)| TargetAddr::Domain { host, port }),
    ]
}

proptest! {
    #[test]
    fn heads_round_trip(
        target in target(),
        creds in proptest::option::of((proptest::collection::vec(any::<u8>(), 0..64)
            .prop_filter("no colon in a user id", |u| !u.contains(&b':')),
            proptest::collection::vec(any::<u8>(), 0..64))),
        other in proptest::collection::vec(("[A-Za-z-]{1,20}", "[ -~]{0,40}"), 0..5),
    ) {
        let auth = creds.as_ref().map(|(u, p)| basic(u, p));
        let mut headers: Vec<(&str, &str)> = other
            .iter()
            .filter(|(n, _)| !n.eq_ignore_ascii_case("proxy-authorization"))
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        if let Some(auth) = &auth {
            headers.insert(headers.len() / 2, ("Proxy-Authorization", auth));
        }
        let msg = head(&target.to_string(), &headers);
        prop_assume!(msg.len() <= MAX_HEAD_LEN);
        let want = ConnectRequest {
            target: target.clone(),
            credentials: creds.map(|(username, password)| Credentials { username, password }),
        };
        prop_assert_eq!(parse_request(&msg), Ok(Some((want, msg.len()))));
        for n in 0..msg.len() {
            prop_assert_eq!(parse_request(&msg[..n]), Ok(None), "prefix {}", n);
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..1200)) {
        if let Ok(Some((value, used))) = parse_request(&bytes) {
            prop_assert!(used <= bytes.len());
            prop_assert_eq!(parse_request(&bytes[..used]), Ok(Some((value, used))));
        }
    }

    #[test]
    fn near_valid_heads_never_panic(
        target in target(),
        flip in any::<(usize, u8)>(),
        cut in any::<usize>(),
    ) {
        let mut msg = head(&target.to_string(), &[("Proxy-Authorization", &basic(b"u", b"p"))]);
        let at = flip.0 % msg.len();
        msg[at] = flip.1;
        msg.truncate(cut % (msg.len() + 1));
        if let Ok(Some((value, used))) = parse_request(&msg) {
            prop_assert!(value.target.to_string().parse::<ExitTarget>().is_ok());
            prop_assert_eq!(parse_request(&msg[..used]), Ok(Some((value, used))));
        }
    }
}
