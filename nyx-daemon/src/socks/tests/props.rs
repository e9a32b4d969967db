//! Property tests: messages made by the test-side encoders parse back to what was encoded
//! (and no strict prefix of them parses), and arbitrary bytes never panic a parser.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::super::proto::*;
use super::{auth, greeting, request};
use nyx_overlay::directory::ExitTarget;

fn target() -> impl Strategy<Value = TargetAddr> {
    prop_oneof![
        (any::<u32>(), 1..=u16::MAX)
            .prop_map(|(ip, port)| TargetAddr::Ip(SocketAddr::from((Ipv4Addr::from(ip), port)))),
        (any::<u128>(), 1..=u16::MAX)
            .prop_map(|(ip, port)| TargetAddr::Ip(SocketAddr::from((Ipv6Addr::from(ip), port)))),
        ("[a-zA-Z0-9.-]{1,253}", 1..=u16::MAX)
            .prop_map(|(host, port)| TargetAddr::Domain { host, port }),
    ]
}

fn encode(target: &TargetAddr) -> Vec<u8> {
    match target {
        TargetAddr::Ip(SocketAddr::V4(a)) => {
            request(CMD_CONNECT, ATYP_IPV4, &a.ip().octets(), a.port())
        }
        TargetAddr::Ip(SocketAddr::V6(a)) => {
            request(CMD_CONNECT, ATYP_IPV6, &a.ip().octets(), a.port())
        }
        TargetAddr::Domain { host, port } => {
            request(CMD_CONNECT, ATYP_DOMAIN, host.as_bytes(), *port)
        }
    }
}

/// `parse(msg)` uses all of `msg` and gives `want`; no strict prefix parses.
fn round_trip<T: PartialEq + std::fmt::Debug>(
    msg: &[u8],
    parse: fn(&[u8]) -> Parsed<T>,
    want: &T,
) -> Result<(), TestCaseError> {
    let (got, used) = parse(msg)
        .map_err(|e| TestCaseError::fail(format!("{e}")))?
        .ok_or_else(|| TestCaseError::fail("incomplete"))?;
    prop_assert_eq!(used, msg.len());
    prop_assert_eq!(&got, want);
    for n in 0..msg.len() {
        prop_assert!(matches!(parse(&msg[..n]), Ok(None)), "prefix {}", n);
    }
    Ok(())
}

/// Arbitrary input: a result, never a panic; a message found is at most the input and
/// parses the same on its own.
fn total<T: PartialEq + std::fmt::Debug>(
    bytes: &[u8],
    parse: fn(&[u8]) -> Parsed<T>,
) -> Result<(), TestCaseError> {
    if let Ok(Some((value, used))) = parse(bytes) {
        prop_assert!(used <= bytes.len());
        let again = parse(&bytes[..used]);
        prop_assert_eq!(again, Ok(Some((value, used))));
    }
    Ok(())
}

proptest! {
    #[test]
    fn greetings_round_trip(methods in proptest::collection::vec(any::<u8>(), 0..=255)) {
        round_trip(&greeting(&methods), parse_greeting, &Greeting { methods: methods.clone() })?;
    }

    #[test]
    fn credentials_round_trip(
        username in proptest::collection::vec(any::<u8>(), 0..=255),
        password in proptest::collection::vec(any::<u8>(), 0..=255),
    ) {
        let want = Credentials { username: username.clone(), password: password.clone() };
        round_trip(&auth(&username, &password), parse_auth, &want)?;
    }

    #[test]
    fn requests_round_trip_to_exit_targets(target in target()) {
        round_trip(&encode(&target), parse_request, &Request { target: target.clone() })?;
        let text = target.to_string();
        prop_assert!(text.parse::<ExitTarget>().is_ok(), "{}", text);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
        total(&bytes, parse_greeting)?;
        total(&bytes, parse_auth)?;
        total(&bytes, parse_request)?;
    }

    #[test]
    fn near_valid_requests_never_panic(
        target in target(),
        flip in any::<(usize, u8)>(),
        cut in any::<usize>(),
    ) {
        let mut msg = encode(&target);
        let at = flip.0 % msg.len();
        msg[at] = flip.1;
        msg.truncate(cut % (msg.len() + 1));
        total(&msg, parse_request)?;
    }
}
