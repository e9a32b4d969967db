//! Onion cell layers on full cells: the client's work (`wrap3`, `unwrap3`: three layers) and
//! one relay's (`peel` forward, `wrap_backward`, `seal_backward`), with the bare AEAD over the
//! same bytes as the baseline in the same run (`aead_cell`). docs/benchmarks.md has figures.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use nyx_crypto::aead::ChaCha20Poly1305;
use nyx_crypto::onion::{CELL_LEN, ClientCircuit, ClientHop, FORWARD_PAYLOAD_OFFSET, RelayHop};
use nyx_crypto::session::SessionSecret;

fn circuit() -> (ClientCircuit, Vec<RelayHop>) {
    let mut client = ClientCircuit::new().expect("rng");
    let mut relays = Vec::new();
    for i in 0..3u8 {
        let secret = SessionSecret::from_bytes([i + 1; 32]);
        client.push(ClientHop::new(&secret)).expect("hop");
        relays.push(RelayHop::new(&secret));
    }
    (client, relays)
}

fn onion(c: &mut Criterion) {
    let mut g = c.benchmark_group("onion");
    g.throughput(Throughput::Bytes(CELL_LEN as u64));
    let (mut client, mut relays) = circuit();
    let mut cell = vec![0x5au8; CELL_LEN];
    g.bench_function("wrap3", |b| {
        b.iter(|| {
            cell[FORWARD_PAYLOAD_OFFSET] = 1;
            client.wrap(2, &mut cell).expect("wrap");
            black_box(cell[0])
        })
    });
    g.bench_function("peel", |b| {
        b.iter_batched_ref(
            || {
                let mut cell = vec![0u8; CELL_LEN];
                client.wrap(2, &mut cell).expect("wrap");
                cell
            },
            |cell| black_box(relays[0].peel(cell).expect("peel")),
            BatchSize::SmallInput,
        )
    });
    g.bench_function("wrap_backward", |b| {
        b.iter(|| {
            relays[1].wrap_backward(&mut cell).expect("wrap");
            black_box(cell[0])
        })
    });
    g.bench_function("seal_backward", |b| {
        b.iter(|| {
            relays[2].seal_backward(&mut cell).expect("seal");
            black_box(cell[0])
        })
    });
    g.bench_function("unwrap3", |b| {
        b.iter_batched_ref(
            || {
                let mut cell = vec![0u8; CELL_LEN];
                relays[2].seal_backward(&mut cell).expect("seal");
                relays[1].wrap_backward(&mut cell).expect("wrap");
                relays[0].wrap_backward(&mut cell).expect("wrap");
                cell
            },
            |cell| black_box(client.unwrap(cell).expect("unwrap").hop),
            BatchSize::SmallInput,
        )
    });
    // Baseline: one AEAD seal over the bytes one layer covers.
    let aead = ChaCha20Poly1305::new(&[7; 32]);
    g.bench_function("aead_cell", |b| {
        b.iter(|| {
            let (head, body) = cell.split_at_mut(24);
            black_box(
                aead.seal_in_place(&[0; 12], &head[..8], body)
                    .expect("seal"),
            )
        })
    });
    g.finish();
}

criterion_group!(benches, onion);
criterion_main!(benches);
