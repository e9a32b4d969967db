//! FEC work a driver may run off the packet path: building a block's RaptorQ encoder
//! (`nyx_fec::Sender::poll_prepare`). The mux stays sans-IO: it hands out [`FecJob`]s and
//! takes their results back; where they run is the driver's choice. A driver that never
//! asks loses nothing but the overlap (the encoder is then built when repair is due).

use nyx_fec::{EncoderJob, PreparedEncoder};

use super::StreamMux;
use crate::stream::StreamId;

/// One stream's FEC work, to [`run`](Self::run) on any thread.
#[derive(Debug)]
pub struct FecJob {
    stream: StreamId,
    job: EncoderJob,
}

impl FecJob {
    /// Do the work (milliseconds of CPU for a large block).
    pub fn run(self) -> FecJobDone {
        FecJobDone {
            stream: self.stream,
            prepared: self.job.run(),
        }
    }

    /// The stream it is for.
    pub fn stream(&self) -> StreamId {
        self.stream
    }
}

/// A finished [`FecJob`], for [`StreamMux::handle_job_done`].
#[derive(Debug)]
pub struct FecJobDone {
    stream: StreamId,
    prepared: PreparedEncoder,
}

impl StreamMux {
    /// FEC work of a stream that can run elsewhere while the stream's packets go out; give
    /// its result to [`handle_job_done`](Self::handle_job_done).
    pub fn poll_job(&mut self) -> Option<FecJob> {
        self.streams
            .iter_mut()
            .filter(|(_, s)| s.reset.is_none() && !s.peer_done)
            .find_map(|(id, s)| s.tx.poll_prepare().map(|job| FecJob { stream: *id, job }))
    }

    /// A job is done: its stream takes the result (if the stream is gone, or no longer
    /// needs it, it is dropped).
    pub fn handle_job_done(&mut self, done: FecJobDone) {
        if let Some(s) = self.streams.get_mut(&done.stream)
            && s.reset.is_none()
        {
            s.tx.handle_prepared(done.prepared);
        }
    }
}
