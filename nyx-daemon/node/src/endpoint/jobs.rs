//! A circuit end's FEC work off its task: building a block's encoder, or decoding a block,
//! on tokio's blocking pool. Either takes milliseconds, during which every other packet of
//! the circuit would wait, its ACKs included (and on a node with one worker thread, every
//! other circuit too).
//!
//! At most one job per CPU core runs at once in the process ([`JobSlots`]), so streams
//! cannot pile up threads. Past that, an encoder job is skipped (its block builds the
//! encoder when its repair is due, as it would without jobs) and a decode runs on the task,
//! as it would without jobs: a decode is never dropped, or its block would wait for ever.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use nyx_overlay::stream::{FecJob, ResetReason};

use super::Endpoint;

/// Counts the jobs running in the process against a limit.
#[derive(Debug)]
pub(super) struct JobSlots {
    running: AtomicUsize,
    limit: usize,
}

/// One running job's place in its [`JobSlots`]; given back when dropped, however the job
/// ends.
#[derive(Debug)]
pub(super) struct Slot<'a>(&'a JobSlots);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where a job runs.
#[derive(Debug)]
pub(super) enum Placement<'a> {
    /// On the blocking pool, holding its slot.
    Pool(Slot<'a>),
    /// Here, on the circuit's task (a decode past the limit).
    Inline,
    /// Nowhere (an encoder past the limit).
    Skip,
}

impl JobSlots {
    pub(super) const fn new(limit: usize) -> Self {
        JobSlots {
            running: AtomicUsize::new(0),
            limit,
        }
    }

    /// Where a job runs: on the pool while a slot is free; past the limit a decode runs
    /// inline and an encoder is skipped.
    pub(super) fn place(&self, decode: bool) -> Placement<'_> {
        if self.running.fetch_add(1, Ordering::AcqRel) < self.limit {
            return Placement::Pool(Slot(self));
        }
        self.running.fetch_sub(1, Ordering::AcqRel);
        match decode {
            true => Placement::Inline,
            false => Placement::Skip,
        }
    }
}

/// The process's slots: one per CPU core.
fn slots() -> &'static JobSlots {
    static SLOTS: OnceLock<JobSlots> = OnceLock::new();
    SLOTS.get_or_init(|| JobSlots::new(std::thread::available_parallelism().map_or(1, |n| n.get())))
}

/// Run `job` where [`JobSlots::place`] says. An encoder goes back into the mux, whose next
/// repair symbol uses it; nothing waits for it. A decoded block is delivered, and the task
/// woken to tell its reader.
pub(super) fn run_job(ep: &Endpoint, job: FecJob) {
    match slots().place(job.is_decode()) {
        Placement::Pool(slot) => {
            let ep = ep.clone();
            tokio::task::spawn_blocking(move || {
                let _slot = slot;
                complete_job(&ep, job);
            });
        }
        Placement::Inline => complete_job(ep, job),
        Placement::Skip => {}
    }
}

/// Run `job` and give its result to the mux; for a decode, wake the task to tell the
/// reader. A job that panics (a bug in RaptorQ, or input it should have refused) loses its
/// result: an encoder is then built on the task when its repair is due, and a decode's
/// stream, whose block would otherwise wait for ever, is reset.
fn complete_job(ep: &Endpoint, job: FecJob) {
    let (stream, decode) = (job.stream(), job.is_decode());
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run())) {
        Ok(done) => ep.lock().mux.handle_job_done(done),
        Err(_) if decode => {
            tracing::warn!("a stream's FEC decode failed unexpectedly; resetting the stream");
            ep.reset(stream, ResetReason::Protocol);
        }
        Err(_) => tracing::warn!("building a FEC encoder failed unexpectedly"),
    }
    if decode {
        ep.notify.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn past_the_limit_a_decode_runs_inline_and_an_encoder_is_skipped() {
        let slots = JobSlots::new(2);
        let first = slots.place(false);
        let second = slots.place(true);
        assert!(matches!(first, Placement::Pool(_)), "{first:?}");
        assert!(matches!(second, Placement::Pool(_)), "{second:?}");
        assert!(matches!(slots.place(true), Placement::Inline));
        assert!(matches!(slots.place(false), Placement::Skip));
        // Neither refusal kept a slot; a finished job gives its own back.
        drop(first);
        let third = slots.place(false);
        assert!(matches!(third, Placement::Pool(_)), "{third:?}");
        assert!(matches!(slots.place(true), Placement::Inline));
        drop((second, third));
        assert_eq!(slots.running.load(Ordering::Acquire), 0);
    }
}
