use nyx_crypto::kem::{HybridSecretKey, SEED_LEN};

use super::*;

const T0: u64 = 1_800_000_000;

fn builder(id: &IdentityKey) -> DescriptorBuilder {
    let onion = HybridSecretKey::from_seed(&[7; SEED_LEN]);
    let next = HybridSecretKey::from_seed(&[8; SEED_LEN]);
    DescriptorBuilder {
        nickname: "relay-1_a".into(),
        quic_addr: Some("127.0.0.1:9000".parse().unwrap()),
        udp_addr: Some("[::1]:9001".parse().unwrap()),
        link_key: HybridSecretKey::from_seed(&[6; SEED_LEN]).public().clone(),
        onion_certs: vec![
            OnionKeyCert::sign(id, onion.public(), T0 - 10, T0 + 100).unwrap(),
            OnionKeyCert::sign(id, next.public(), T0 + 50, T0 + 200).unwrap(),
        ],
        exit_policy: ExitPolicy::loopback_only(),
        family: vec![NodeId::from_bytes([9; 32]), NodeId::from_bytes([3; 32])],
        bandwidth: 100,
        published: T0,
        valid_until: T0 + 150,
    }
}

#[test]
fn signed_descriptor_decodes_with_every_field() {
    let id = IdentityKey::from_seed(&[1; 32]);
    let b = builder(&id);
    let d = b.clone().sign(&id).unwrap();
    let back = Descriptor::decode(d.as_bytes(), T0 + 60).unwrap();
    assert_eq!(back, d);
    assert_eq!(back.node_id(), id.node_id());
    assert_eq!(back.identity(), &id.public());
    assert_eq!(back.nickname(), "relay-1_a");
    assert_eq!(back.addr(TransportKind::Quic), b.quic_addr);
    assert_eq!(back.udp_addr(), b.udp_addr);
    assert!(back.offers(TransportKind::Udp));
    assert_eq!(back.link_key(), &b.link_key);
    assert_eq!(back.onion_certs(), &b.onion_certs[..]);
    assert_eq!(back.exit_policy(), &ExitPolicy::loopback_only());
    // Signed sorted, whatever the builder's order.
    let family = [NodeId::from_bytes([3; 32]), NodeId::from_bytes([9; 32])];
    assert_eq!(back.family(), family);
    assert!(back.declares(&family[1]) && !back.declares(&id.node_id()));
    assert_eq!(
        (back.bandwidth(), back.published(), back.valid_until()),
        (100, T0, T0 + 150)
    );
    // The newest key valid at the time is used.
    assert_eq!(back.onion_key(T0), Some(b.onion_certs[0].onion_key()));
    assert_eq!(back.onion_key(T0 + 60), Some(b.onion_certs[1].onion_key()));
    assert_eq!(back.onion_key(T0 + 150), Some(b.onion_certs[1].onion_key()));
    assert_eq!(back.onion_key(T0 + 200), None);
    assert!(back.is_valid_at(T0 - MAX_CLOCK_SKEW) && !back.is_valid_at(T0 - MAX_CLOCK_SKEW - 1));
    assert!(back.is_valid_at(T0 + 149) && !back.is_valid_at(T0 + 150));
    let text = format!("{back:?}");
    assert!(
        text.contains("relay-1_a") && !text.contains("link_key"),
        "{text}"
    );
}

#[test]
fn the_builder_refuses_what_decode_would_refuse() {
    let id = IdentityKey::from_seed(&[1; 32]);
    let err = |f: &dyn Fn(&mut DescriptorBuilder)| {
        let mut b = builder(&id);
        f(&mut b);
        b.sign(&id).unwrap_err()
    };
    assert!(matches!(
        err(&|b| b.nickname = "bad name".into()),
        DescriptorError::Malformed {
            field: "nickname",
            ..
        }
    ));
    assert!(matches!(
        err(&|b| b.nickname = "x".repeat(33)),
        DescriptorError::Malformed {
            field: "nickname",
            ..
        }
    ));
    assert!(matches!(
        err(&|b| b.nickname.clear()),
        DescriptorError::Malformed {
            field: "nickname",
            ..
        }
    ));
    assert!(matches!(
        err(&|b| b.onion_certs.clear()),
        DescriptorError::Malformed {
            field: "onion certs",
            ..
        }
    ));
    assert!(matches!(
        err(&|b| b.udp_addr = Some("0.0.0.0:5".parse().unwrap())),
        DescriptorError::Malformed {
            field: "udp address",
            ..
        }
    ));
    assert_eq!(
        err(&|b| {
            b.quic_addr = None;
            b.udp_addr = None
        }),
        DescriptorError::NoAddress
    );
    assert_eq!(err(&|b| b.bandwidth = 0), DescriptorError::ZeroBandwidth);
    assert_eq!(
        err(&|b| b.valid_until = T0),
        DescriptorError::BadValidity {
            published: T0,
            valid_until: T0
        }
    );
    assert_eq!(
        err(&|b| {
            b.published = T0 + 100;
            b.onion_certs.truncate(1);
        }),
        DescriptorError::NoValidOnionKey { now: T0 + 100 }
    );
    // Clients cap the lifetimes they accept: of the descriptor and of each onion key.
    assert_eq!(
        err(&|b| b.valid_until = b.published + MAX_DESCRIPTOR_VALIDITY + 1),
        DescriptorError::ValidityTooLong {
            published: T0,
            valid_until: T0 + MAX_DESCRIPTOR_VALIDITY + 1,
            max: MAX_DESCRIPTOR_VALIDITY
        }
    );
    let lasting = HybridSecretKey::from_seed(&[9; SEED_LEN]);
    let lasting = lasting.public();
    assert_eq!(
        err(&|b| {
            b.onion_certs[1] =
                OnionKeyCert::sign(&id, lasting, T0, T0 + MAX_ONION_KEY_LIFETIME + 1).unwrap();
        }),
        DescriptorError::OnionKeyTooLong {
            index: 1,
            lifetime: MAX_ONION_KEY_LIFETIME + 1,
            max: MAX_ONION_KEY_LIFETIME
        }
    );
    let own = id.node_id();
    for bad_family in [
        vec![own],
        vec![NodeId::from_bytes([4; 32]); 2],
        (0..=32).map(|i| NodeId::from_bytes([i; 32])).collect(),
    ] {
        assert!(matches!(
            err(&|b| b.family = bad_family.clone()),
            DescriptorError::Malformed {
                field: "family",
                ..
            }
        ));
    }
    let other = IdentityKey::from_seed(&[2; 32]);
    let foreign = builder(&other).onion_certs;
    assert!(matches!(
        err(&|b| b.onion_certs = foreign.clone()),
        DescriptorError::BadOnionCert {
            index: 0,
            reason: nyx_crypto::Error::WrongIdentity
        }
    ));
}
