//! The relay's forwarding core (sans-IO, no sockets): the cost of one forward cell (peel our
//! layer, queue for the next hop) and one backward cell (add our layer), and the per-cell
//! latency distribution while two other threads keep the CPUs busy, where allocation or
//! lock spikes would show in the tail.
//!
//! `cargo bench -p nyx-daemon --bench relay_core`

#![allow(clippy::unwrap_used)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use bytes::Bytes;
use criterion::{Criterion, Throughput};
use nyx_core::rate::Quota;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};
use nyx_overlay::circuit::{Event, ExitHandle, HopSpec, Output, Overlay, OverlayConfig};

const NOW: Timestamp = Timestamp::from_secs(1);

fn node(seed: u8) -> (Overlay, HopSpec) {
    let identity = IdentityKey::from_seed(&[seed; 32]);
    let mut ring = OnionKeyRing::new(RotationPolicy::default()).unwrap();
    ring.rotate(&identity, 1_800_000_000).unwrap();
    let spec = HopSpec {
        node: identity.node_id(),
        onion_key: ring.certs()[0].onion_key().clone(),
    };
    let fast = Quota::new(NonZeroU32::MAX, NonZeroU32::MAX);
    let config = OverlayConfig {
        link_cells: fast,
        circuit_cells: fast,
        ..OverlayConfig::default()
    };
    (
        Overlay::new(
            identity.node_id(),
            ring,
            config,
            [seed; 32],
            Timestamp::ZERO,
        )
        .unwrap(),
        spec,
    )
}

fn pump(nodes: &mut [(NodeId, Overlay)]) {
    loop {
        let mut moved = false;
        for i in 0..nodes.len() {
            let from = nodes[i].0;
            while let Some(out) = nodes[i].1.poll_output() {
                moved = true;
                let to = match &out {
                    Output::Cell { to, .. } | Output::Control { to, .. } => *to,
                    Output::Connect { peer } => *peer,
                    Output::Disconnect { peer } => *peer,
                };
                let j = nodes.iter().position(|n| n.0 == to).unwrap();
                match out {
                    Output::Cell { cell, .. } => nodes[j].1.handle_cell(from, &cell, NOW),
                    Output::Control { msg, .. } => nodes[j].1.handle_control(from, &msg, NOW),
                    Output::Connect { .. } => {
                        nodes[i].1.link_up(to, NOW);
                        nodes[j].1.link_up(from, NOW);
                    }
                    Output::Disconnect { .. } => {}
                }
            }
        }
        if !moved {
            return;
        }
    }
}

/// A client, the relay under test and an exit with a built circuit; returns them and the
/// exit's handle for the circuit.
fn setup() -> (
    Vec<(NodeId, Overlay)>,
    nyx_overlay::circuit::CircuitHandle,
    ExitHandle,
) {
    let (client, _) = node(1);
    let (relay, relay_spec) = node(2);
    let (exit, exit_spec) = node(3);
    let mut nodes = vec![
        (client.node_id(), client),
        (relay.node_id(), relay),
        (exit.node_id(), exit),
    ];
    let c = nodes[0].1.build(vec![relay_spec, exit_spec], NOW).unwrap();
    pump(&mut nodes);
    assert_eq!(nodes[0].1.poll_event(), Some(Event::Built { circuit: c }));
    nodes[0].1.send(c, b"hi").unwrap();
    pump(&mut nodes);
    let Some(Event::ExitData { exit, .. }) = nodes[2].1.poll_event() else {
        panic!("no exit data")
    };
    (nodes, c, exit)
}

fn cells(
    nodes: &mut [(NodeId, Overlay)],
    c: nyx_overlay::circuit::CircuitHandle,
    exit: ExitHandle,
    n: usize,
) -> (Vec<Bytes>, Vec<Bytes>) {
    let mut fwd = Vec::with_capacity(n);
    let mut bwd = Vec::with_capacity(n);
    for i in 0..n {
        nodes[0].1.send(c, &(i as u64).to_be_bytes()).unwrap();
        if let Some(Output::Cell { cell, .. }) = nodes[0].1.poll_output() {
            fwd.push(cell);
        }
        nodes[2]
            .1
            .send_backward(exit, &(i as u64).to_be_bytes(), NOW)
            .unwrap();
        if let Some(Output::Cell { cell, .. }) = nodes[2].1.poll_output() {
            bwd.push(cell);
        }
    }
    (fwd, bwd)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("relay_core");
    g.throughput(Throughput::Elements(1));
    // Forward cells are single-use (the replay window): make a large supply per run.
    g.bench_function("forward", |b| {
        b.iter_custom(|iters| {
            let (mut nodes, c, exit) = setup();
            let (fwd, _) = cells(&mut nodes, c, exit, iters as usize);
            let client = nodes[0].0;
            let relay = &mut nodes[1].1;
            let start = Instant::now();
            for cell in &fwd {
                relay.handle_cell(client, cell, NOW);
                black_box(relay.poll_output());
            }
            start.elapsed()
        });
    });
    g.bench_function("backward", |b| {
        b.iter_custom(|iters| {
            let (mut nodes, c, exit) = setup();
            let (_, bwd) = cells(&mut nodes, c, exit, iters as usize);
            let exit_id = nodes[2].0;
            let relay = &mut nodes[1].1;
            let start = Instant::now();
            for cell in &bwd {
                relay.handle_cell(exit_id, cell, NOW);
                black_box(relay.poll_output());
            }
            start.elapsed()
        });
    });
    g.finish();
}

/// Per-cell forwarding latency over 200 000 cells with two busy threads beside.
fn latency_distribution() {
    const N: usize = 200_000;
    let (mut nodes, c, exit) = setup();
    let (fwd, _) = cells(&mut nodes, c, exit, N);
    let client = nodes[0].0;
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 1u64;
                while !stop.load(Ordering::Relaxed) {
                    x = black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                }
            })
        })
        .collect();
    let relay = &mut nodes[1].1;
    let mut samples = Vec::with_capacity(N);
    for cell in &fwd {
        let t = Instant::now();
        relay.handle_cell(client, cell, NOW);
        black_box(relay.poll_output());
        samples.push(t.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    for t in busy {
        let _ = t.join();
    }
    samples.sort();
    let at = |q: f64| samples[((N as f64 * q) as usize).min(N - 1)];
    let p50 = at(0.5);
    let p999 = at(0.999);
    println!(
        "relay_core/forward latency over {N} cells, 2 busy threads: p50 {:?}  p99 {:?}  p99.9 {:?}  max {:?}  (p99.9/p50 = {:.2})",
        p50,
        at(0.99),
        p999,
        samples[N - 1],
        p999.as_secs_f64() / p50.as_secs_f64().max(1e-12)
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    bench(&mut c);
    c.final_summary();
    latency_distribution();
}
