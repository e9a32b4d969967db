//! `handshake/hop`: one complete circuit-hop handshake (client start, relay respond, client
//! finish) next to the primitive operations it is made of, measured in the same run, so the
//! overhead of the protocol around the primitives is visible (docs/benchmarks.md sums them).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use hkdf::Hkdf;
use ml_kem::array::Array;
use ml_kem::{Decapsulate, DecapsulationKey, MlKem768, Seed};
use nyx_core::NodeId;
use nyx_crypto::hop::{HopInitiator, HopResponder, OnionKey, ReplayCache};
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::kem::HybridSecretKey;
use sha2::{Digest, Sha256};
use x25519_dalek::{PublicKey, StaticSecret};

fn handshake(c: &mut Criterion) {
    let relay = NodeId::from_bytes([7; 32]);
    let keys = [OnionKey::new(HybridSecretKey::generate().expect("key"))];
    let onion = keys[0].public().clone();
    let mut g = c.benchmark_group("handshake");
    g.bench_function("hop", |b| {
        b.iter(|| {
            let (sent, create) = HopInitiator::new(relay, onion.clone())
                .start()
                .expect("start");
            let mut cache = ReplayCache::new(1);
            let (_, created) = HopResponder::new(relay, &keys)
                .respond(&create[..], &mut cache)
                .expect("respond");
            black_box(sent.finish(&created).expect("finish"))
        })
    });
    g.finish();

    let mut g = c.benchmark_group("primitive");
    let dk = DecapsulationKey::<MlKem768>::from_seed(Seed::from([3u8; 64]));
    let ek = dk.encapsulation_key().clone();
    let (ct, _) = ek.encapsulate_deterministic(&Array::from([4u8; 32]));
    g.bench_function("mlkem768/encaps", |b| {
        b.iter(|| black_box(ek.encapsulate_deterministic(&Array::from([5u8; 32]))))
    });
    g.bench_function("mlkem768/decaps", |b| {
        b.iter(|| black_box(dk.decapsulate(&ct)))
    });
    let secret = StaticSecret::from([9u8; 32]);
    let peer = PublicKey::from(&StaticSecret::from([10u8; 32]));
    g.bench_function("x25519/public_key", |b| {
        b.iter(|| black_box(PublicKey::from(&secret)))
    });
    g.bench_function("x25519/diffie_hellman", |b| {
        b.iter(|| black_box(secret.diffie_hellman(&peer)))
    });
    let identity = IdentityKey::from_seed(&[11u8; 32]);
    let public = identity.public();
    let sig = identity.sign(b"nyx/v1/bench", &[0u8; 64]);
    g.bench_function("ed25519/sign_64", |b| {
        b.iter(|| black_box(identity.sign(b"nyx/v1/bench", &[0u8; 64])))
    });
    g.bench_function("ed25519/verify_64", |b| {
        b.iter(|| black_box(public.verify(b"nyx/v1/bench", &[0u8; 64], &sig)))
    });
    let data = vec![0x5au8; 1024];
    g.throughput(criterion::Throughput::Bytes(1024));
    g.bench_function("sha256/1024", |b| {
        b.iter(|| black_box(Sha256::digest(&data)))
    });
    g.throughput(criterion::Throughput::Elements(1));
    g.bench_function("hkdf_sha256/extract_expand_32", |b| {
        b.iter(|| {
            let (_, hk) = Hkdf::<Sha256>::extract(Some(b"salt"), &[1u8; 64]);
            let mut out = [0u8; 32];
            let _ = hk.expand(b"info", &mut out);
            black_box(out)
        })
    });
    g.finish();
}

criterion_group!(benches, handshake);
criterion_main!(benches);
