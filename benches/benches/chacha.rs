//! nyx-chacha's hot paths on every backend this CPU runs, with RustCrypto's crates and ring's
//! ChaCha20-Poly1305 (what the link sessions seal datagrams with) as baselines in the same run
//! (`openssl speed` figures go beside them in docs/benchmarks.md).
//!
//! * `seal/<backend>/<size>`: one seal in place.
//! * `seal_open/<backend>/<size>`: one seal and one open of the same buffer, the round a
//!   cell makes (the 1280-byte target is this at ≥ 1.2 GB/s).
//! * `keystream/<backend>/<size>`: a fresh ChaCha20 at block 1, XORed over `size` bytes;
//!   `keystream/one_call/<backend>/<size>`: the same through `xor_keystream_with`.

use std::hint::black_box;

use chacha20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
use chacha20poly1305::aead::{AeadInOut, KeyInit};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nyx_chacha::{Backend, ChaCha20};

/// 1152 bytes is one onion cell (`nyx_crypto::onion::CELL_LEN`).
const SIZES: [usize; 5] = [64, 1024, 1152, 1280, 16384];
const KEY: [u8; 32] = [7; 32];
const NONCE: [u8; 12] = [1; 12];

fn backends() -> Vec<Backend> {
    Backend::ALL
        .into_iter()
        .filter(|b| b.is_available())
        .collect()
}

fn aead(c: &mut Criterion) {
    let mut g = c.benchmark_group("chacha20poly1305");
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0x5au8; size];
        for backend in backends() {
            let id = |op: &str| BenchmarkId::new(format!("{op}/{}", backend.name()), size);
            g.bench_function(id("seal"), |b| {
                b.iter(|| {
                    nyx_chacha::seal_in_place_with(backend, &KEY, &NONCE, b"", &mut buf)
                        .expect("seal")
                })
            });
            g.bench_function(id("seal_open"), |b| {
                b.iter(|| {
                    let tag = nyx_chacha::seal_in_place_with(backend, &KEY, &NONCE, b"", &mut buf)
                        .expect("seal");
                    nyx_chacha::open_in_place_with(backend, &KEY, &NONCE, b"", &mut buf, &tag)
                        .expect("open");
                    black_box(buf[0])
                })
            });
        }
        let reference = chacha20poly1305::ChaCha20Poly1305::new(&KEY.into());
        let nonce = NONCE.into();
        g.bench_function(BenchmarkId::new("seal/rustcrypto", size), |b| {
            b.iter(|| {
                reference
                    .encrypt_inout_detached(&nonce, b"", buf.as_mut_slice().into())
                    .expect("seal")
            })
        });
        let ring_key = ring::aead::LessSafeKey::new(
            ring::aead::UnboundKey::new(&ring::aead::CHACHA20_POLY1305, &KEY).expect("key"),
        );
        let ring_nonce = || ring::aead::Nonce::assume_unique_for_key(NONCE);
        g.bench_function(BenchmarkId::new("seal/ring", size), |b| {
            b.iter(|| {
                ring_key
                    .seal_in_place_separate_tag(ring_nonce(), ring::aead::Aad::empty(), &mut buf)
                    .expect("seal")
            })
        });
        g.bench_function(BenchmarkId::new("seal_open/ring", size), |b| {
            b.iter(|| {
                let tag = ring_key
                    .seal_in_place_separate_tag(ring_nonce(), ring::aead::Aad::empty(), &mut buf)
                    .expect("seal");
                ring_key
                    .open_in_place_separate_tag(
                        ring_nonce(),
                        ring::aead::Aad::empty(),
                        tag,
                        &mut buf,
                        0..,
                    )
                    .expect("open");
                black_box(buf[0])
            })
        });
        g.bench_function(BenchmarkId::new("seal_open/rustcrypto", size), |b| {
            b.iter(|| {
                let tag = reference
                    .encrypt_inout_detached(&nonce, b"", buf.as_mut_slice().into())
                    .expect("seal");
                reference
                    .decrypt_inout_detached(&nonce, b"", buf.as_mut_slice().into(), &tag)
                    .expect("open");
                black_box(buf[0])
            })
        });
    }
    g.finish();
}

fn keystream(c: &mut Criterion) {
    let mut g = c.benchmark_group("keystream");
    for size in [64, 1024, 1152, 1280] {
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0x5au8; size];
        for backend in backends() {
            g.bench_function(BenchmarkId::new(backend.name(), size), |b| {
                b.iter(|| {
                    let mut stream = ChaCha20::with_backend(backend, &KEY, &NONCE);
                    stream.seek(64);
                    stream.apply_keystream(&mut buf).expect("keystream");
                    black_box(buf[0])
                })
            });
            g.bench_function(
                BenchmarkId::new(format!("one_call/{}", backend.name()), size),
                |b| {
                    b.iter(|| {
                        nyx_chacha::xor_keystream_with(backend, &KEY, &NONCE, 64, &mut buf)
                            .expect("keystream");
                        black_box(buf[0])
                    })
                },
            );
        }
        g.bench_function(BenchmarkId::new("rustcrypto", size), |b| {
            b.iter(|| {
                let mut stream = chacha20::ChaCha20::new(&KEY.into(), &NONCE.into());
                stream.seek(64u64);
                stream.apply_keystream(&mut buf);
                black_box(buf[0])
            })
        });
    }
    g.finish();
}

criterion_group!(benches, aead, keystream);
criterion_main!(benches);
