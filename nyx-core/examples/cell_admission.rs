//! The admission path of a relay in miniature: cells from many peers arrive, each peer has a
//! rate limit, each admitted cell takes a buffer from a capped pool until it is "sent".
//!
//! One peer floods at 10x its quota; the others stay within theirs. Time is simulated (the
//! sans-IO way: `now` is passed in), so the run is deterministic and instant.
//!
//! Run with `cargo run -p nyx-core --example cell_admission`.

use std::collections::VecDeque;
use std::time::Duration;

use nyx_core::buf::{BufferPool, PoolConfig, PooledBuf};
use nyx_core::rate::{KeyedLimiter, Quota};
use nyx_core::{Error, NodeId, Timestamp};

const CELL: usize = 1280;

fn main() -> Result<(), Error> {
    // Each peer: 1000 cells/s sustained, bursts of 100.
    let per_peer = KeyedLimiter::new(Quota::per_second(1000)?.with_burst(100)?, 10_000)?;
    // At most 256 cells in flight.
    let pool = BufferPool::new(PoolConfig {
        max_bytes: 256 * CELL,
        ..PoolConfig::new(CELL)
    })?;

    let flooder = NodeId::from_bytes([0xf1; 32]);
    let polite: Vec<NodeId> = (1..=9u8).map(|i| NodeId::from_bytes([i; 32])).collect();

    let mut queue: VecDeque<PooledBuf> = VecDeque::new();
    let (mut admitted, mut limited, mut exhausted) = ([0u64; 2], [0u64; 2], 0u64);
    let mut now = Timestamp::ZERO;
    // One simulated second in 1 ms steps.
    for _ms in 0..1000 {
        now += Duration::from_millis(1);
        // Per millisecond: the flooder sends 10 cells, each polite peer 1.
        let arrivals = std::iter::repeat_n((0, flooder), 10).chain(polite.iter().map(|p| (1, *p)));
        for (class, peer) in arrivals {
            if per_peer.check(&peer, now).is_err() {
                limited[class] += 1; // dropped before any work is spent on it
                continue;
            }
            match pool.acquire() {
                Ok(mut cell) => {
                    cell[..NodeId::LEN].copy_from_slice(peer.as_bytes());
                    queue.push_back(cell);
                    admitted[class] += 1;
                }
                Err(Error::PoolExhausted { .. }) => exhausted += 1, // backpressure
                Err(e) => return Err(e),
            }
        }
        // The link sends up to 12 cells per millisecond; sending returns the buffer.
        for _ in 0..12 {
            drop(queue.pop_front());
        }
    }
    println!("after {now} of simulated traffic:");
    println!(
        "  flooder: {} admitted, {} rate-limited",
        admitted[0], limited[0]
    );
    println!(
        "  9 polite peers: {} admitted, {} rate-limited",
        admitted[1], limited[1]
    );
    println!("  dropped for lack of buffers: {exhausted}");
    println!("  pool: {:?}", pool.stats());
    // The flooder got its quota (burst + 1000/s), the polite peers everything they sent.
    assert!(admitted[0] <= 1100 && limited[0] >= 8900);
    assert_eq!((admitted[1], limited[1]), (9000, 0));
    Ok(())
}
