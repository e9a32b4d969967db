//! A relay forwards cells without a heap allocation per cell in steady state: counted with a
//! global allocator that tallies allocations made on the test's thread while it forwards
//! thousands of cells in both directions.

#![allow(clippy::unwrap_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::num::NonZeroU32;

use bytes::Bytes;
use nyx_core::rate::Quota;
use nyx_core::{NodeId, Timestamp};
use nyx_crypto::identity::IdentityKey;
use nyx_crypto::onion_keys::{OnionKeyRing, RotationPolicy};
use nyx_overlay::circuit::{Event, HopSpec, Output, Overlay, OverlayConfig};

struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the only addition is a
// thread-local counter, which does not allocate.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ON.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if ON.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    COUNT.with(|c| c.set(0));
    ON.with(|on| on.set(true));
    f();
    ON.with(|on| on.set(false));
    COUNT.with(Cell::get)
}

const UNIX: u64 = 1_800_000_000;

fn node(seed: u8) -> (Overlay, HopSpec) {
    let identity = IdentityKey::from_seed(&[seed; 32]);
    let mut ring = OnionKeyRing::new(RotationPolicy::default()).unwrap();
    ring.rotate(&identity, UNIX).unwrap();
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
    let overlay = Overlay::new(
        identity.node_id(),
        ring,
        config,
        [seed; 32],
        Timestamp::ZERO,
    )
    .unwrap();
    (overlay, spec)
}

/// Deliver everything `from` wants to send to the node it names among `nodes`.
fn pump(nodes: &mut [(NodeId, Overlay)], now: Timestamp) {
    loop {
        let mut moved = false;
        for i in 0..nodes.len() {
            let from = nodes[i].0;
            while let Some(out) = nodes[i].1.poll_output() {
                moved = true;
                match out {
                    Output::Cell { to, cell } => {
                        let j = nodes.iter().position(|n| n.0 == to).unwrap();
                        nodes[j].1.handle_cell(from, &cell, now);
                    }
                    Output::Control { to, msg } => {
                        let j = nodes.iter().position(|n| n.0 == to).unwrap();
                        nodes[j].1.handle_control(from, &msg, now);
                    }
                    Output::Connect { peer } => {
                        nodes[i].1.link_up(peer, now);
                        let j = nodes.iter().position(|n| n.0 == peer).unwrap();
                        nodes[j].1.link_up(from, now);
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

#[test]
fn forwarding_allocates_nothing_per_cell() {
    let now = Timestamp::from_secs(1);
    let (client, _) = node(1);
    let (relay, relay_spec) = node(2);
    let (exit, exit_spec) = node(3);
    let ids = [client.node_id(), relay.node_id(), exit.node_id()];
    let mut nodes = vec![(ids[0], client), (ids[1], relay), (ids[2], exit)];
    let circuit = nodes[0].1.build(vec![relay_spec, exit_spec], now).unwrap();
    pump(&mut nodes, now);
    assert_eq!(nodes[0].1.poll_event(), Some(Event::Built { circuit }));

    // The exit learns the circuit from a first payload; then cells are made up front:
    // forward ones the client wrapped, backward ones the exit sealed.
    let exit_handle = {
        nodes[0].1.send(circuit, b"hello").unwrap();
        pump(&mut nodes, now);
        match nodes[2].1.poll_event() {
            Some(Event::ExitData { exit, .. }) => exit,
            other => panic!("{other:?}"),
        }
    };
    const CELLS: usize = 5000;
    let mut forward: Vec<Bytes> = Vec::new();
    for i in 0..CELLS {
        nodes[0].1.send(circuit, &(i as u32).to_be_bytes()).unwrap();
        match nodes[0].1.poll_output() {
            Some(Output::Cell { cell, .. }) => forward.push(cell),
            other => panic!("{other:?}"),
        }
    }
    let mut backward: Vec<Bytes> = Vec::new();
    for i in 0..CELLS {
        nodes[2]
            .1
            .send_backward(exit_handle, &(i as u32).to_be_bytes(), now)
            .unwrap();
        match nodes[2].1.poll_output() {
            Some(Output::Cell { cell, .. }) => backward.push(cell),
            other => panic!("{other:?}"),
        }
    }

    let relay = &mut nodes[1].1;
    let before = relay.stats();
    // Warm up: the first cells may size the relay's queues and cell regions.
    let forward_cell = |relay: &mut Overlay, cell: &Bytes| {
        relay.handle_cell(ids[0], cell, now);
        while let Some(out) = relay.poll_output() {
            drop(out);
        }
    };
    for cell in &forward[..100] {
        forward_cell(relay, cell);
    }
    let n = allocations_during(|| {
        for cell in &forward[100..] {
            forward_cell(relay, cell);
        }
    });
    assert_eq!(
        relay.stats().relayed_forward - before.relayed_forward,
        CELLS as u64,
        "{:?}",
        relay.stats()
    );
    assert_eq!(n, 0, "allocations while forwarding {} cells", CELLS - 100);

    for cell in &backward[..100] {
        relay.handle_cell(ids[2], cell, now);
        while relay.poll_output().is_some() {}
    }
    let n = allocations_during(|| {
        for cell in &backward[100..] {
            relay.handle_cell(ids[2], cell, now);
            while let Some(out) = relay.poll_output() {
                drop(out);
            }
        }
    });
    assert_eq!(
        relay.stats().relayed_backward,
        CELLS as u64,
        "{:?}",
        relay.stats()
    );
    assert_eq!(
        n,
        0,
        "allocations while relaying {} cells back",
        CELLS - 100
    );
}
