//! FEC work a driver may run off the packet path: building a block's RaptorQ encoder
//! (`nyx_fec::Sender::poll_prepare`) and, once the driver asks for it
//! ([`StreamMux::offload_decodes`]), decoding a block that lost source symbols
//! (`nyx_fec::Receiver::poll_decode`). The mux stays sans-IO: it hands out [`FecJob`]s and
//! takes their results back; where they run is the driver's choice. A driver that never
//! asks for decode jobs decodes inline; one that skips an encoder job loses nothing but the
//! overlap (the encoder is then built when repair is due). A decode job must be run.

use nyx_fec::{DecodeJob, DecodedBlock, EncoderJob, PreparedEncoder};

use super::StreamMux;
use crate::stream::StreamId;

/// One stream's FEC work, to [`run`](Self::run) on any thread.
#[derive(Debug)]
pub struct FecJob {
    stream: StreamId,
    work: Work,
}

#[derive(Debug)]
enum Work {
    Encode(EncoderJob),
    Decode(DecodeJob),
}

impl FecJob {
    /// Do the work (milliseconds of CPU for a large block).
    pub fn run(self) -> FecJobDone {
        let result = match self.work {
            Work::Encode(job) => Done::Encoded(job.run()),
            Work::Decode(job) => Done::Decoded(job.run()),
        };
        FecJobDone {
            stream: self.stream,
            result,
        }
    }

    /// The stream it is for.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// A decode: its block is delivered only once the result is back, so it must be run
    /// (an encoder job may be dropped).
    pub fn is_decode(&self) -> bool {
        matches!(self.work, Work::Decode(_))
    }
}

/// A finished [`FecJob`], for [`StreamMux::handle_job_done`].
#[derive(Debug)]
pub struct FecJobDone {
    stream: StreamId,
    result: Done,
}

#[derive(Debug)]
enum Done {
    Encoded(PreparedEncoder),
    Decoded(DecodedBlock),
}

impl StreamMux {
    /// From now on every stream's receiver hands its decodes out as jobs
    /// ([`poll_job`](Self::poll_job)) instead of running them while packets wait; the
    /// caller must then run every decode job and give back its result.
    pub fn offload_decodes(&mut self) {
        self.offload_decodes = true;
        for s in self.streams.values_mut() {
            s.rx.offload_decodes();
        }
    }

    /// FEC work of a stream that can run elsewhere while the stream's packets go out:
    /// decodes first (the reader waits for them), then encoders. Give its result to
    /// [`handle_job_done`](Self::handle_job_done).
    pub fn poll_job(&mut self) -> Option<FecJob> {
        let decode = self
            .streams
            .iter_mut()
            .filter(|(_, s)| s.reset.is_none())
            .find_map(|(id, s)| {
                s.rx.poll_decode().map(|job| FecJob {
                    stream: *id,
                    work: Work::Decode(job),
                })
            });
        decode.or_else(|| {
            self.streams
                .iter_mut()
                .filter(|(_, s)| s.reset.is_none() && !s.peer_done)
                .find_map(|(id, s)| {
                    s.tx.poll_prepare().map(|job| FecJob {
                        stream: *id,
                        work: Work::Encode(job),
                    })
                })
        })
    }

    /// A job is done: its stream takes the result (if the stream is gone, or no longer
    /// needs it, it is dropped). A decoded block is delivered in order, and its reader
    /// told.
    pub fn handle_job_done(&mut self, done: FecJobDone) {
        let Some(s) = self.streams.get_mut(&done.stream) else {
            return;
        };
        if s.reset.is_some() {
            return;
        }
        match done.result {
            Done::Encoded(prepared) => s.tx.handle_prepared(prepared),
            Done::Decoded(decoded) => {
                s.rx.handle_decoded(decoded);
                self.after_input();
            }
        }
    }
}
