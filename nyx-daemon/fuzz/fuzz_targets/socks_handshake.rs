//! Arbitrary bytes as a SOCKS client's side of the handshake: each of the SOCKS5 greeting,
//! username/password and request parsers and the SOCKS4/4a request parser on the whole
//! input, then the way the server reads them (a first byte of 4: the SOCKS4 request; else
//! the three SOCKS5 messages in sequence, each on what the previous one left). Typed errors
//! or "need more", never a panic; a parsed message never claims more bytes than it was
//! given, parses the same on its own, and a request's target is one `ExitTarget` accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nyx_overlay::directory::ExitTarget;
use nyx_daemon::socks::proto::{self, Parsed, TargetAddr};
use nyx_daemon::socks::proto4;

/// Parse `bytes`; check what a result promises; return the value and the rest.
fn check<T: PartialEq + Clone + std::fmt::Debug>(
    bytes: &[u8],
    parse: fn(&[u8]) -> Parsed<T>,
) -> Option<(T, &[u8])> {
    let (value, used) = parse(bytes).ok()??;
    assert!(used <= bytes.len());
    let (msg, rest) = bytes.split_at(used);
    assert_eq!(parse(msg), Ok(Some((value.clone(), used))));
    if let Some(shorter) = used.checked_sub(1) {
        assert_eq!(parse(&msg[..shorter]), Ok(None), "a strict prefix parsed");
    }
    Some((value, rest))
}

fn exit_target(target: &TargetAddr) {
    let text = target.to_string();
    assert!(
        text.parse::<ExitTarget>().is_ok(),
        "{text:?} is not an exit target"
    );
}

fn request(bytes: &[u8]) {
    if let Some((req, _)) = check(bytes, proto::parse_request) {
        exit_target(&req.target);
    }
}

fn request4(bytes: &[u8]) {
    if let Some((req, _)) = check(bytes, proto4::parse_request) {
        exit_target(&req.target);
        let _ = nyx_daemon::socks::socks4_isolation_group(&req.userid);
    }
}

fuzz_target!(|data: &[u8]| {
    let _ = check(data, proto::parse_greeting);
    let _ = check(data, proto::parse_auth);
    request(data);
    request4(data);
    // As the server does: SOCKS4 on a first byte of 4, else SOCKS5 in sequence.
    if data.first() == Some(&proto4::VERSION) {
        return;
    }
    let Some((greeting, rest)) = check(data, proto::parse_greeting) else {
        return;
    };
    let rest = match proto::choose_method(&greeting) {
        None => return,
        Some(proto::Method::NoAuth) => rest,
        Some(proto::Method::UserPassword) => {
            let Some((creds, rest)) = check(rest, proto::parse_auth) else {
                return;
            };
            let _ = nyx_daemon::socks::isolation_group(Some(&creds));
            rest
        }
    };
    request(rest);
});
