//! nyx-crypto data-path benches: the AEAD primitive, a full session round, and the replay
//! window. Baselines (`openssl speed`) are recorded beside the figures in docs/benchmarks.md.

use std::hint::black_box;

use chacha20poly1305::aead::{AeadInOut, KeyInit};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use nyx_core::Timestamp;
use nyx_crypto::replay::ReplayWindow;
use nyx_crypto::session::{HEADER_LEN, OVERHEAD, RekeyPolicy, Role, Session, SessionSecret};

const SIZES: [usize; 4] = [64, 1024, 1280, 16384];

fn aead(c: &mut Criterion) {
    let ours = nyx_crypto::aead::ChaCha20Poly1305::new(&[7u8; 32]);
    let nonce = [1u8; 12];
    let mut g = c.benchmark_group("aead");
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0x5au8; size];
        g.bench_with_input(BenchmarkId::new("seal", size), &size, |b, _| {
            b.iter(|| black_box(ours.seal_in_place(&nonce, b"", &mut buf).expect("seal")))
        });
        let mut ct = vec![0x5au8; size];
        let tag = ours.seal_in_place(&nonce, b"", &mut ct).expect("seal");
        g.bench_with_input(BenchmarkId::new("open", size), &size, |b, _| {
            b.iter_batched_ref(
                || ct.clone(),
                |buf| {
                    ours.open_in_place(&nonce, b"", buf, &tag).expect("open");
                    black_box(buf[0])
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

/// The same operations with RustCrypto's `chacha20poly1305` crate, the baseline our AEAD
/// replaced (same run, same machine).
fn aead_rustcrypto(c: &mut Criterion) {
    let cipher = ChaCha20Poly1305::new(&Key::from([7u8; 32]));
    let nonce = Nonce::from([1u8; 12]);
    let mut g = c.benchmark_group("aead_rustcrypto");
    for size in SIZES {
        g.throughput(Throughput::Bytes(size as u64));
        let mut buf = vec![0x5au8; size];
        g.bench_with_input(BenchmarkId::new("seal", size), &size, |b, _| {
            b.iter(|| {
                black_box(
                    cipher
                        .encrypt_inout_detached(&nonce, b"", buf.as_mut_slice().into())
                        .expect("seal"),
                )
            })
        });
        let mut ct = vec![0x5au8; size];
        let tag = cipher
            .encrypt_inout_detached(&nonce, b"", ct.as_mut_slice().into())
            .expect("seal");
        g.bench_with_input(BenchmarkId::new("open", size), &size, |b, _| {
            b.iter_batched_ref(
                || ct.clone(),
                |buf| {
                    cipher
                        .decrypt_inout_detached(&nonce, b"", buf.as_mut_slice().into(), &tag)
                        .expect("open");
                    black_box(buf[0])
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn session(c: &mut Criterion) {
    let secret = SessionSecret::from_bytes([9u8; 32]);
    let mut g = c.benchmark_group("session");
    for size in SIZES {
        let mut tx = Session::new(
            &secret,
            Role::Initiator,
            RekeyPolicy::default(),
            Timestamp::ZERO,
        );
        let mut rx = Session::new(
            &secret,
            Role::Responder,
            RekeyPolicy::default(),
            Timestamp::ZERO,
        );
        let mut buf = vec![0x5au8; size + OVERHEAD];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("seal_open", size), &size, |b, &size| {
            b.iter(|| {
                let n = tx.seal(Timestamp::ZERO, &mut buf, size).expect("seal");
                let range = rx.open(Timestamp::ZERO, &mut buf[..n]).expect("open");
                black_box(range.len() + HEADER_LEN)
            })
        });
    }
    g.finish();
}

fn replay(c: &mut Criterion) {
    let mut g = c.benchmark_group("replay");
    let mut w = ReplayWindow::new();
    let mut pn = 0u64;
    g.bench_function("check/in_order", |b| {
        b.iter(|| {
            pn += 1;
            let ok = w.check(pn).is_ok();
            w.commit(pn);
            black_box(ok)
        })
    });
    let mut w = ReplayWindow::new();
    let mut i = 0u64;
    g.bench_function("check/out_of_order", |b| {
        b.iter(|| {
            i += 1;
            // A permutation within each block of 64: never a repeat, always inside the window.
            let pn = (i & !63) | ((i & 63).reverse_bits() >> 58);
            let ok = w.check(pn).is_ok();
            w.commit(pn);
            black_box(ok)
        })
    });
    g.finish();
}

criterion_group!(benches, aead, aead_rustcrypto, session, replay);
criterion_main!(benches);
