//! The directory as a client sees it: signed descriptors in a text document, each refused on
//! its own for every reason, testnets that parse back cleanly, and codecs that never panic.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use nyx_core::NodeId;
use nyx_core::config::TransportKind;
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::{HybridSecretKey, SEED_LEN};
use nyx_crypto::onion_cert::OnionKeyCert;
use nyx_overlay::directory::request::MAX_DESCRIPTOR_LEN;
use nyx_overlay::directory::testnet::{self, TestnetSpec};
use nyx_overlay::directory::{
    Descriptor, DescriptorBuilder, DescriptorError, Directory, DirectoryError, ExitPolicy,
    ExitTarget, MAX_CLOCK_SKEW, MAX_FAMILY, MAX_NICKNAME_LEN, SIGNATURE_CONTEXT,
};
use proptest::prelude::*;

const T0: u64 = 1_800_000_000;
const NOW: u64 = T0 + 100;
const SIG: usize = 64;

/// A descriptor by identity `seed`, valid `[published, valid_until)`, whose onion key is
/// certified by `onion_signer` (the same identity unless testing a foreign certificate).
fn builder(id: &IdentityKey, published: u64, valid_until: u64) -> DescriptorBuilder {
    let onion = HybridSecretKey::from_seed(&[5; SEED_LEN]);
    DescriptorBuilder {
        nickname: "relay".into(),
        quic_addr: Some("192.0.2.1:443".parse().unwrap()),
        udp_addr: None,
        link_key: HybridSecretKey::from_seed(&[4; SEED_LEN]).public().clone(),
        onion_certs: vec![
            OnionKeyCert::sign(id, onion.public(), published, valid_until + 3600).unwrap(),
        ],
        exit_policy: "accept *:80, accept *:443, reject *:*".parse().unwrap(),
        family: Vec::new(),
        bandwidth: 500,
        published,
        valid_until,
    }
}

fn make(seed: u8, published: u64, valid_until: u64) -> (IdentityKey, Descriptor) {
    let id = IdentityKey::from_seed(&[seed; 32]);
    let d = builder(&id, published, valid_until).sign(&id).unwrap();
    (id, d)
}

/// Re-sign edited descriptor bytes (the signature is the last 64 bytes).
fn resign(id: &IdentityKey, mut bytes: Vec<u8>) -> Vec<u8> {
    let signed = bytes.len() - SIG;
    let sig = id.sign(SIGNATURE_CONTEXT, &bytes[..signed]);
    bytes[signed..].copy_from_slice(&sig);
    bytes
}

fn find(haystack: &[u8], needle: &[u8]) -> usize {
    haystack
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap()
}

fn line(bytes: &[u8]) -> String {
    format!("descriptor {}\n", STANDARD.encode(bytes))
}

#[test]
fn a_signed_descriptor_round_trips() {
    let (id, d) = make(1, T0, T0 + 3600);
    let back = Descriptor::decode(d.as_bytes(), NOW).unwrap();
    assert_eq!(back, d);
    assert_eq!(back.node_id(), id.node_id());
    assert_eq!(back.identity(), &id.public());
    assert_eq!(back.nickname(), "relay");
    assert_eq!(back.quic_addr(), Some("192.0.2.1:443".parse().unwrap()));
    assert!(back.offers(TransportKind::Quic) && !back.offers(TransportKind::Udp));
    assert!(back.exit_policy().allows(&ExitTarget::Host {
        name: "example.org".into(),
        port: 443
    }));
    assert!(back.onion_key(NOW).is_some());
    let dir = Directory::from_descriptors(vec![d.clone()]).unwrap();
    let (parsed, rejected) = Directory::parse(&dir.to_text(), NOW).unwrap();
    assert!(rejected.is_empty());
    assert_eq!(parsed, dir);
    assert_eq!(parsed.get(&id.node_id()), Some(&d));
    assert!(parsed.contains(&id.node_id()) && parsed.len() == 1 && !parsed.is_empty());
    assert_eq!(parsed.iter().count(), 1);
    assert_eq!(
        Directory::from_descriptors(vec![d.clone(), d.clone()]),
        Err(DescriptorError::DuplicateNodeId {
            node_id: id.node_id()
        })
    );
}

#[test]
fn clock_skew_of_five_minutes_is_allowed() {
    let (_, d) = make(1, NOW + MAX_CLOCK_SKEW, NOW + 3600);
    assert_eq!(MAX_CLOCK_SKEW, 300);
    assert!(Descriptor::decode(d.as_bytes(), NOW).is_err()); // no onion key valid yet
    let id = IdentityKey::from_seed(&[1; 32]);
    let mut b = builder(&id, NOW + MAX_CLOCK_SKEW, NOW + 3600);
    b.onion_certs = builder(&id, NOW, NOW + 3600).onion_certs;
    let d = b.sign(&id).unwrap();
    assert!(Descriptor::decode(d.as_bytes(), NOW).is_ok());
    assert_eq!(
        Descriptor::decode(d.as_bytes(), NOW - 1).unwrap_err(),
        DescriptorError::NotYetValid {
            published: NOW + MAX_CLOCK_SKEW,
            now: NOW - 1
        }
    );
}

#[test]
fn every_rejection_reason_leaves_the_other_descriptors_in_use() {
    let (_, good_a) = make(1, T0, T0 + 3600);
    let (_, good_b) = make(6, T0, T0 + 3600);
    let (id, base) = make(2, T0, T0 + 3600);
    let bytes = base.as_bytes().to_vec();

    // One flipped byte inside the link key (signed; parsed only after the signature).
    let mut flipped = bytes.clone();
    flipped[find(&bytes, base.link_key().to_bytes()) + 100] ^= 0x01;

    // Version 1 (before the family field) is refused by its version byte.
    let mut wrong_version = bytes.clone();
    wrong_version[0] = 1;
    let wrong_version = resign(&id, wrong_version);

    let mut trailing = bytes.clone();
    trailing.push(0);

    // A certificate by another identity, in a descriptor properly signed by this one.
    let stranger = IdentityKey::from_seed(&[9; 32]);
    let foreign_cert = builder(&stranger, T0, T0 + 3600).onion_certs.remove(0);
    let mut foreign = bytes.clone();
    let at = find(&bytes, base.onion_certs()[0].to_bytes());
    foreign[at..at + foreign_cert.to_bytes().len()].copy_from_slice(foreign_cert.to_bytes());
    let foreign = resign(&id, foreign);

    let (_, expired) = make(3, T0 - 1000, NOW);
    let (_, early) = make(4, NOW + MAX_CLOCK_SKEW + 1, NOW + 5000);
    let (_, again) = make(1, T0 + 10, T0 + 3000);

    let cases: Vec<(String, DescriptorError)> = vec![
        (line(&flipped), DescriptorError::BadSignature),
        (
            line(expired.as_bytes()),
            DescriptorError::Expired {
                valid_until: NOW,
                now: NOW,
            },
        ),
        (
            line(early.as_bytes()),
            DescriptorError::NotYetValid {
                published: NOW + MAX_CLOCK_SKEW + 1,
                now: NOW,
            },
        ),
        (
            line(again.as_bytes()),
            DescriptorError::DuplicateNodeId {
                node_id: again.node_id(),
            },
        ),
        (
            line(&wrong_version),
            DescriptorError::UnsupportedVersion { version: 1 },
        ),
        (
            line(&bytes[..bytes.len() - 10]),
            DescriptorError::Truncated {
                field: "signature",
                needed: SIG,
                remaining: SIG - 10,
            },
        ),
        (
            line(&bytes[..36]),
            DescriptorError::Truncated {
                field: "nickname",
                needed: 5,
                remaining: 2,
            },
        ),
        (
            "descriptor not*base64\n".into(),
            DescriptorError::BadBase64 {
                reason: String::new(),
            },
        ),
        (line(&trailing), DescriptorError::TrailingBytes { count: 1 }),
        (
            line(&foreign),
            DescriptorError::BadOnionCert {
                index: 0,
                reason: nyx_crypto::Error::WrongIdentity,
            },
        ),
    ];
    for (bad, expected) in cases {
        let text = format!(
            "# a test directory\nnyx-directory 1\n\n{}{bad}{}",
            line(good_a.as_bytes()),
            line(good_b.as_bytes()),
        );
        let (dir, rejected) = Directory::parse(&text, NOW).unwrap();
        assert_eq!(dir.len(), 2, "{expected}");
        assert!(dir.contains(&good_a.node_id()) && dir.contains(&good_b.node_id()));
        assert_eq!(rejected.len(), 1, "{expected}: {rejected:?}");
        assert_eq!(rejected[0].line, 5, "{expected}");
        match (&rejected[0].reason, &expected) {
            (DescriptorError::BadBase64 { .. }, DescriptorError::BadBase64 { .. }) => {}
            (got, want) => assert_eq!(got, want),
        }
        let named = matches!(expected, DescriptorError::DuplicateNodeId { .. });
        assert_eq!(rejected[0].node_id.is_some(), named, "{expected}");
        assert!(!rejected[0].reason.to_string().is_empty());
    }
}

#[test]
fn a_document_without_its_header_is_refused_whole() {
    let (_, d) = make(1, T0, T0 + 3600);
    let text = line(d.as_bytes());
    assert!(matches!(
        Directory::parse(&text, NOW),
        Err(DirectoryError::BadHeader { line: 1, .. })
    ));
    let (loaded, rejected) = Directory::parse(&format!("nyx-directory 1\n{text}"), NOW).unwrap();
    assert!(rejected.is_empty() && loaded.contains(&d.node_id()));
}

#[test]
fn a_generated_testnet_parses_back_without_rejections() {
    let spec = TestnetSpec {
        nodes: 4,
        ..TestnetSpec::default()
    };
    let (nodes, dir) = testnet::generate(&spec, T0).unwrap();
    let (parsed, rejected) = Directory::parse(&dir.to_text(), T0 + 60).unwrap();
    assert!(rejected.is_empty(), "{rejected:?}");
    assert_eq!(parsed, dir);
    assert_eq!(nodes.len(), 4);
    let loopback = ExitTarget::Addr("127.0.0.1:8080".parse().unwrap());
    assert!(parsed.iter().all(|d| d.exit_policy().allows(&loopback)));

    let addrs: Vec<(Option<SocketAddr>, Option<SocketAddr>)> = vec![
        (Some("127.0.0.1:40001".parse().unwrap()), None),
        (None, Some("127.0.0.1:40002".parse().unwrap())),
        (
            Some("[::1]:40003".parse().unwrap()),
            Some("[::1]:40004".parse().unwrap()),
        ),
    ];
    let (nodes, dir) = testnet::generate_with_addrs(&addrs, &ExitPolicy::accept_all(), T0).unwrap();
    let (parsed, rejected) = Directory::parse(&dir.to_text(), T0).unwrap();
    assert!(rejected.is_empty() && parsed.len() == 3);
    for (node, (quic, udp)) in nodes.iter().zip(&addrs) {
        let d = parsed.get(&node.identity.node_id()).unwrap();
        assert_eq!((d.quic_addr(), d.udp_addr()), (*quic, *udp));
        assert_eq!(d.onion_certs(), node.onion_keys.certs());
        assert_eq!(d.exit_policy(), &ExitPolicy::accept_all());
    }
}

#[test]
fn the_largest_descriptor_is_max_descriptor_len_bytes() {
    let id = IdentityKey::from_seed(&[1; 32]);
    let mut b = builder(&id, T0, T0 + 3600);
    b.nickname = "n".repeat(MAX_NICKNAME_LEN);
    b.quic_addr = Some("[2001:db8::1]:443".parse().unwrap());
    b.udp_addr = Some("[2001:db8::2]:443".parse().unwrap());
    let next = HybridSecretKey::from_seed(&[6; SEED_LEN]);
    b.onion_certs
        .push(OnionKeyCert::sign(&id, next.public(), T0 + 60, T0 + 7200).unwrap());
    let rules: Vec<String> = (1..=256)
        .map(|port| format!("reject [2001:db8::]/32:{port}"))
        .collect();
    b.exit_policy = rules.join(", ").parse().unwrap();
    b.family = (1..=MAX_FAMILY as u8)
        .map(|i| NodeId::from_bytes([i; 32]))
        .collect();
    let d = b.sign(&id).unwrap();
    assert_eq!(d.as_bytes().len(), MAX_DESCRIPTOR_LEN);
    assert_eq!(d.family().len(), MAX_FAMILY);
}

fn rule() -> impl Strategy<Value = String> {
    let action = prop_oneof![Just("accept"), Just("reject")];
    let addr = prop_oneof![
        Just("*".to_owned()),
        (any::<u32>(), 0u8..=32).prop_map(|(ip, prefix)| {
            let masked = if prefix == 0 {
                0
            } else {
                ip & (u32::MAX << (32 - prefix))
            };
            format!("{}/{prefix}", std::net::Ipv4Addr::from(masked))
        }),
        (any::<u128>(), 0u8..=128).prop_map(|(ip, prefix)| {
            let masked = if prefix == 0 {
                0
            } else {
                ip & (u128::MAX << (128 - prefix))
            };
            format!("[{}]/{prefix}", std::net::Ipv6Addr::from(masked))
        }),
    ];
    let ports = prop_oneof![
        Just("*".to_owned()),
        (1u16..=u16::MAX).prop_map(|p| p.to_string()),
        (1u16..=u16::MAX, 1u16..=u16::MAX).prop_map(|(a, b)| format!("{}-{}", a.min(b), a.max(b))),
    ];
    (action, addr, ports).prop_map(|(a, addr, ports)| format!("{a} {addr}:{ports}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decode_never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4000)) {
        let _ = Descriptor::decode(&bytes, NOW);
    }

    #[test]
    fn decode_never_panics_on_a_damaged_descriptor(
        cut in 0usize..5000,
        edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8),
    ) {
        let (_, d) = make(1, T0, T0 + 3600);
        let mut bytes = d.as_bytes().to_vec();
        for (at, value) in edits {
            let at = at % bytes.len();
            bytes[at] = value;
        }
        bytes.truncate(cut);
        if let Ok(back) = Descriptor::decode(&bytes, NOW) {
            prop_assert_eq!(back.as_bytes(), d.as_bytes());
        }
    }

    #[test]
    fn descriptors_round_trip_with_any_family(
        family in proptest::collection::btree_set(any::<[u8; 32]>(), 0..=MAX_FAMILY),
        rotate in any::<usize>(),
        nickname in "[A-Za-z0-9_-]{1,32}",
        bandwidth in 1u32..,
        udp in any::<bool>(),
    ) {
        let id = IdentityKey::from_seed(&[1; 32]);
        let sorted: Vec<NodeId> = family.into_iter().map(NodeId::from_bytes).collect();
        let mut b = builder(&id, T0, T0 + 3600);
        b.family = sorted.clone();
        if !b.family.is_empty() {
            let at = rotate % b.family.len();
            b.family.rotate_left(at);
        }
        b.nickname = nickname.clone();
        b.bandwidth = bandwidth;
        if udp {
            b.udp_addr = Some("198.51.100.7:9001".parse().unwrap());
        }
        let d = b.clone().sign(&id).unwrap();
        let back = Descriptor::decode(d.as_bytes(), NOW).unwrap();
        prop_assert_eq!(&back, &d);
        prop_assert_eq!(back.family(), &sorted[..]);
        prop_assert!(sorted.iter().all(|m| back.declares(m)));
        prop_assert!(!back.declares(&id.node_id()));
        prop_assert_eq!(back.nickname(), nickname.as_str());
        prop_assert_eq!(back.bandwidth(), bandwidth);
        prop_assert_eq!((back.quic_addr(), back.udp_addr()), (b.quic_addr, b.udp_addr));
        prop_assert_eq!(back.exit_policy(), &b.exit_policy);
        prop_assert_eq!(back.onion_certs(), &b.onion_certs[..]);
        // The family is signed: changing a byte of it breaks the signature.
        if let Some(first) = sorted.first() {
            let mut bytes = d.as_bytes().to_vec();
            let at = find(&bytes, first.as_bytes());
            bytes[at + 31] ^= 1;
            prop_assert_eq!(
                Descriptor::decode(&bytes, NOW).unwrap_err(),
                DescriptorError::BadSignature
            );
        }
    }

    #[test]
    fn exit_policies_round_trip_through_text(rules in proptest::collection::vec(rule(), 0..12)) {
        let text = rules.join(", ");
        let policy: ExitPolicy = text.parse().unwrap();
        prop_assert_eq!(policy.rules().len(), rules.len());
        let shown = policy.to_string();
        prop_assert_eq!(shown.parse::<ExitPolicy>().unwrap(), policy.clone());
        prop_assert_eq!(shown.parse::<ExitPolicy>().unwrap().to_string(), shown);
        // And through the descriptor encoding.
        let id = IdentityKey::from_seed(&[1; 32]);
        let mut b = builder(&id, T0, T0 + 3600);
        b.exit_policy = policy.clone();
        let d = b.sign(&id).unwrap();
        let back = Descriptor::decode(d.as_bytes(), NOW).unwrap();
        prop_assert_eq!(back.exit_policy(), &policy);
    }
}
