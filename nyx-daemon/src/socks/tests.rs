//! The SOCKS5 codec message by message (every reply code, truncation, each malformed case),
//! the error and isolation rules, and the handshake over an in-memory pipe. SOCKS4 and 4a:
//! [`socks4`].

use std::net::SocketAddr;

use super::proto::*;
use super::{handshake, isolation_group, reply_for_error};
use nyx_node::Error;
use nyx_node::IsolationGroup;
use nyx_overlay::directory::ExitTarget;
use nyx_overlay::path::PathError;
use nyx_overlay::stream::ResetReason;

mod props;
mod socks4;

/// Test-side encoders, written from the RFCs independently of the parsers.
pub(super) fn greeting(methods: &[u8]) -> Vec<u8> {
    let mut v = vec![5, methods.len() as u8];
    v.extend_from_slice(methods);
    v
}

pub(super) fn auth(user: &[u8], pass: &[u8]) -> Vec<u8> {
    let mut v = vec![1, user.len() as u8];
    v.extend_from_slice(user);
    v.push(pass.len() as u8);
    v.extend_from_slice(pass);
    v
}

pub(super) fn request(cmd: u8, atyp: u8, addr: &[u8], port: u16) -> Vec<u8> {
    let mut v = vec![5, cmd, 0, atyp];
    if atyp == ATYP_DOMAIN {
        v.push(addr.len() as u8);
    }
    v.extend_from_slice(addr);
    v.extend_from_slice(&port.to_be_bytes());
    v
}

/// Every strict prefix of `msg` is incomplete; the whole of it parses using all of it.
pub(super) fn check_prefixes<T: std::fmt::Debug>(msg: &[u8], parse: fn(&[u8]) -> Parsed<T>) -> T {
    crate::entry::testing::check_prefixes(msg, b"next", parse)
}

#[test]
fn greetings_parse_and_the_method_choice_prefers_credentials() {
    let g = check_prefixes(&greeting(&[0, 2]), parse_greeting);
    assert_eq!(g.methods, vec![0, 2]);
    assert_eq!(choose_method(&g), Some(Method::UserPassword));
    let g = check_prefixes(&greeting(&[2, 0]), parse_greeting);
    assert_eq!(choose_method(&g), Some(Method::UserPassword));
    let g = check_prefixes(&greeting(&[0]), parse_greeting);
    assert_eq!(choose_method(&g), Some(Method::NoAuth));
    let g = check_prefixes(&greeting(&[1, 3, 0x80]), parse_greeting);
    assert_eq!(choose_method(&g), None);
    let g = check_prefixes(&greeting(&[]), parse_greeting);
    assert_eq!(choose_method(&g), None);
    assert_eq!(encode_method(Some(Method::NoAuth)), [5, 0]);
    assert_eq!(encode_method(Some(Method::UserPassword)), [5, 2]);
    assert_eq!(encode_method(None), [5, 0xff]);
}

#[test]
fn a_greeting_of_another_version_is_refused_at_once() {
    assert_eq!(parse_greeting(&[4]), Err(SocksError::BadVersion { got: 4 }));
    assert_eq!(
        parse_greeting(b"GET / HTTP/1.1\r\n"),
        Err(SocksError::BadVersion { got: b'G' })
    );
}

#[test]
fn credentials_parse_including_empty_ones_and_debug_hides_them() {
    let c = check_prefixes(&auth(b"alice", b"secret"), parse_auth);
    assert_eq!(c.username, b"alice");
    assert_eq!(c.password, b"secret");
    let shown = format!("{c:?}");
    assert!(
        !shown.contains("alice") && !shown.contains("secret"),
        "{shown}"
    );
    let c = check_prefixes(&auth(b"", b""), parse_auth);
    assert!(c.username.is_empty() && c.password.is_empty());
    let long = [0xabu8; 255];
    let c = check_prefixes(&auth(&long, &long), parse_auth);
    assert_eq!(c.username.len(), 255);
    assert_eq!(
        parse_auth(&[5, 1, b'a', 0]),
        Err(SocksError::BadAuthVersion { got: 5 })
    );
    assert_eq!(encode_auth_status(true), [1, 0]);
    assert_eq!(encode_auth_status(false), [1, 1]);
}

#[test]
fn requests_for_each_address_type_parse_to_exit_targets() {
    let cases: [(Vec<u8>, &str); 6] = [
        (request(1, ATYP_IPV4, &[10, 1, 2, 3], 80), "10.1.2.3:80"),
        (
            request(1, ATYP_IPV6, &std::net::Ipv6Addr::LOCALHOST.octets(), 443),
            "[::1]:443",
        ),
        (
            request(1, ATYP_DOMAIN, b"Example.org", 8080),
            "Example.org:8080",
        ),
        (request(1, ATYP_DOMAIN, b"127.0.0.1", 1), "127.0.0.1:1"),
        (request(1, ATYP_DOMAIN, b"::1", 65535), "[::1]:65535"),
        (request(1, ATYP_DOMAIN, b"[fe80::2]", 22), "[fe80::2]:22"),
    ];
    for (msg, want) in cases {
        let req = check_prefixes(&msg, parse_request);
        let text = req.target.to_string();
        assert_eq!(text, want);
        text.parse::<ExitTarget>().unwrap();
    }
    let name = "a".repeat(MAX_HOST_LEN);
    let req = check_prefixes(&request(1, ATYP_DOMAIN, name.as_bytes(), 80), parse_request);
    assert_eq!(req.target.port(), 80);
    req.target.to_string().parse::<ExitTarget>().unwrap();
    let ip: SocketAddr = "10.1.2.3:80".parse().unwrap();
    assert_eq!(
        parse_request(&request(1, ATYP_IPV4, &[10, 1, 2, 3], 80))
            .unwrap()
            .unwrap()
            .0
            .target,
        TargetAddr::Ip(ip)
    );
}

#[test]
fn each_malformed_request_gets_its_error_and_reply_code() {
    let v4 = |cmd| request(cmd, ATYP_IPV4, &[127, 0, 0, 1], 80);
    let cases: Vec<(Vec<u8>, SocksError, u8)> = vec![
        (vec![4, 1, 0, 1], SocksError::BadVersion { got: 4 }, 0x01),
        (
            v4(CMD_BIND),
            SocksError::UnsupportedCommand { cmd: 2 },
            0x07,
        ),
        (
            v4(CMD_UDP_ASSOCIATE),
            SocksError::UnsupportedCommand { cmd: 3 },
            0x07,
        ),
        (v4(0x09), SocksError::UnsupportedCommand { cmd: 9 }, 0x07),
        // BIND is refused before its address arrives.
        (vec![5, 2], SocksError::UnsupportedCommand { cmd: 2 }, 0x07),
        (
            vec![5, 1, 0, 2],
            SocksError::UnsupportedAddressType { atyp: 2 },
            0x08,
        ),
        (
            vec![5, 1, 0, 0xff, 1, 2],
            SocksError::UnsupportedAddressType { atyp: 0xff },
            0x08,
        ),
        (
            vec![5, 1, 0, 3, 0, 0, 80],
            SocksError::BadHostName { reason: "empty" },
            0x01,
        ),
        (
            vec![5, 1, 0, 3, 254],
            SocksError::BadHostName {
                reason: "longer than 253 bytes",
            },
            0x01,
        ),
        (
            request(1, ATYP_IPV4, &[1, 2, 3, 4], 0),
            SocksError::ZeroPort,
            0x01,
        ),
        (
            request(1, ATYP_DOMAIN, b"a.org", 0),
            SocksError::ZeroPort,
            0x01,
        ),
    ];
    for (msg, err, code) in cases {
        assert_eq!(parse_request(&msg), Err(err.clone()), "{msg:?}");
        assert_eq!(err.reply().code(), code, "{err}");
    }
    for bad in [
        &b"a b.org"[..],
        b"a:b",
        b"a]",
        b"\xff\xfe",
        "caf\u{e9}.org".as_bytes(),
        b"\x00",
    ] {
        match parse_request(&request(1, ATYP_DOMAIN, bad, 80)) {
            Err(e @ SocksError::BadHostName { .. }) => assert_eq!(e.reply(), Reply::GeneralFailure),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // Greeting and sub-negotiation errors have no REP; the table still answers.
    assert_eq!(
        SocksError::NoAcceptableMethod.reply(),
        Reply::GeneralFailure
    );
    assert_eq!(
        SocksError::BadAuthVersion { got: 0 }.reply(),
        Reply::GeneralFailure
    );
}

#[test]
fn replies_carry_every_code_and_a_zero_bound_address() {
    for (i, reply) in Reply::ALL.into_iter().enumerate() {
        assert_eq!(usize::from(reply.code()), i);
        assert_eq!(encode_reply(reply), [5, i as u8, 0, 1, 0, 0, 0, 0, 0, 0]);
    }
}

#[test]
fn connect_errors_map_to_the_documented_replies() {
    use nyx_overlay::Error as O;
    let reset = |reason| Error::from(O::StreamReset { reason });
    let cases = [
        (reset(ResetReason::Refused), Reply::ConnectionRefused),
        (reset(ResetReason::Policy), Reply::NotAllowed),
        (reset(ResetReason::Unreachable), Reply::HostUnreachable),
        (reset(ResetReason::Timeout), Reply::TtlExpired),
        (reset(ResetReason::CircuitLost), Reply::GeneralFailure),
        (reset(ResetReason::ResourceLimit), Reply::GeneralFailure),
        (
            O::Path(PathError::NoExit {
                target: "10.1.2.3:80".into(),
            })
            .into(),
            Reply::NotAllowed,
        ),
        (
            O::Path(PathError::NoGuard).into(),
            Reply::NetworkUnreachable,
        ),
        (
            O::BuildFailed {
                attempts: 3,
                reason: nyx_overlay::circuit::DestroyReason::Timeout,
            }
            .into(),
            Reply::NetworkUnreachable,
        ),
        (
            O::BadTarget {
                target: "x".into(),
                reason: "bad",
            }
            .into(),
            Reply::AddressTypeNotSupported,
        ),
        (Error::NodeStopped, Reply::GeneralFailure),
    ];
    for (error, reply) in cases {
        assert_eq!(reply_for_error(&error), reply, "{error}");
    }
}

#[test]
fn credentials_name_isolation_groups_unambiguously() {
    let group = |u: &[u8], p: &[u8]| {
        isolation_group(Some(&Credentials {
            username: u.to_vec(),
            password: p.to_vec(),
        }))
    };
    assert_eq!(isolation_group(None), IsolationGroup::default());
    assert_eq!(group(b"a", b"b"), group(b"a", b"b"));
    assert_eq!(group(b"a", b"b"), IsolationGroup::new("socks5:61:62:"));
    let distinct = [
        group(b"a", b"b"),
        group(b"ab", b""),
        group(b"", b"ab"),
        group(b"a", b"c"),
        group(b"b", b"a"),
        group(b"", b""),
        group(b"a:", b""),
        isolation_group(None),
    ];
    assert_eq!(isolation_group(None), IsolationGroup::default());
    for (i, x) in distinct.iter().enumerate() {
        for y in &distinct[i + 1..] {
            assert_ne!(x, y);
        }
    }
}

/// The server side of the handshake against `client_bytes`: its outcome and all it wrote.
pub(super) async fn run_handshake(client_bytes: &[u8]) -> (Result<String, String>, Vec<u8>) {
    crate::entry::testing::run_handshake(client_bytes, |mut server| async move {
        (handshake(&mut server).await, server)
    })
    .await
}

#[tokio::test]
async fn handshake_without_credentials_keeps_pipelined_data() {
    let mut bytes = greeting(&[0]);
    bytes.extend(request(1, ATYP_DOMAIN, b"localhost", 8080));
    bytes.extend_from_slice(b"GET / HTTP/1.0\r\n\r\n");
    let (outcome, written) = run_handshake(&bytes).await;
    assert_eq!(
        outcome.unwrap(),
        format!(
            "localhost:8080 {:?} early=\"GET / HTTP/1.0\\r\\n\\r\\n\" Socks5",
            IsolationGroup::default()
        )
    );
    // Method 0 only: success is the caller's to send.
    assert_eq!(written, [5, 0]);
}

#[tokio::test]
async fn handshake_with_credentials_answers_the_sub_negotiation() {
    let mut bytes = greeting(&[0, 2]);
    bytes.extend(auth(b"u", b"p"));
    bytes.extend(request(1, ATYP_IPV4, &[127, 0, 0, 1], 80));
    let (outcome, written) = run_handshake(&bytes).await;
    assert!(outcome.unwrap().starts_with("127.0.0.1:80"));
    assert_eq!(written, [5, 2, 1, 0]);
}

#[tokio::test]
async fn handshake_failures_answer_what_the_phase_allows() {
    // No acceptable method: 0xFF.
    let (outcome, written) = run_handshake(&greeting(&[1])).await;
    assert!(outcome.unwrap_err().starts_with("no acceptable"));
    assert_eq!(written, [5, 0xff]);
    // A version other than 4 and 5: closed without a word.
    let (outcome, written) = run_handshake(&[6, 1, 0, 80, 127, 0, 0, 1, 0]).await;
    assert!(outcome.unwrap_err().starts_with("version byte 6"));
    assert!(written.is_empty());
    // Bad sub-negotiation version: status 1.
    let mut bytes = greeting(&[2]);
    bytes.extend([2, 0, 0]);
    let (outcome, written) = run_handshake(&bytes).await;
    assert!(outcome.unwrap_err().contains("username/password version"));
    assert_eq!(written, [5, 2, 1, 1]);
    // BIND: reply 0x07.
    let mut bytes = greeting(&[0]);
    bytes.extend(request(CMD_BIND, ATYP_IPV4, &[0, 0, 0, 0], 1));
    let (outcome, written) = run_handshake(&bytes).await;
    assert!(outcome.unwrap_err().ends_with("Some(CommandNotSupported)"));
    assert_eq!(written[..2], [5, 0]);
    assert_eq!(written[2..], encode_reply(Reply::CommandNotSupported));
    // Unknown address type: reply 0x08.
    let mut bytes = greeting(&[0]);
    bytes.extend([5, 1, 0, 7]);
    let (_, written) = run_handshake(&bytes).await;
    assert_eq!(written[2..], encode_reply(Reply::AddressTypeNotSupported));
    // A client that leaves mid-request.
    let mut bytes = greeting(&[0]);
    bytes.extend([5, 1, 0, 1, 127]);
    let (outcome, written) = run_handshake(&bytes).await;
    assert_eq!(outcome.unwrap_err(), "gone");
    assert_eq!(written, [5, 0]);
}
