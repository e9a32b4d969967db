//! Rate limiting: a lock-free GCRA limiter in one atomic word ([`Limiter`]) and a keyed
//! limiter with bounded memory ([`KeyedLimiter`]) for per-peer, per-prefix and per-circuit limits.
//!
//! # Semantics
//!
//! A [`Quota`] has an *emission interval* `T` (the time one token takes to come back; the rate
//! is `1/T`) and a *burst* `b` (how many tokens an idle limiter holds). The limiter implements
//! the Generic Cell Rate Algorithm: it stores the *theoretical arrival time* `tat`, the instant
//! at which the limiter would be full again, and admits a request of `n` tokens at `now` iff
//!
//! ```text
//! max(tat, now) + n·T  <=  now + b·T
//! ```
//!
//! in which case `tat` becomes `max(tat, now) + n·T`. Consequences, all tested:
//!
//! * an idle limiter admits `b` tokens at once, then one token per `T`;
//! * over **any** window of length `t`, at most `t/T + b` tokens are admitted;
//! * a request of more than `b` tokens can never succeed ([`Denied::ExceedsBurst`]);
//! * a refused request learns the earliest time it would succeed ([`Denied::RetryAt`]);
//! * a refused request consumes nothing.
//!
//! Time is an argument ([`Timestamp`](crate::Timestamp)), never read inside: the data path passes a
//! [`CoarseClock`](crate::time::CoarseClock) reading, tests pass whatever they like.
//!
//! ```
//! use nyx_core::rate::{Denied, Limiter, Quota};
//! use nyx_core::Timestamp;
//! use std::time::Duration;
//!
//! // 10 per second, bursts of up to 3.
//! let limiter = Limiter::new(Quota::per_second(10)?.with_burst(3)?);
//! let t0 = Timestamp::ZERO;
//! assert!(limiter.check(t0).is_ok());
//! assert!(limiter.check_n(t0, 2).is_ok());
//! // The burst is spent; the next token comes back 100 ms later.
//! assert_eq!(limiter.check(t0), Err(Denied::RetryAt(Timestamp::from_millis(100))));
//! assert!(limiter.check(t0 + Duration::from_millis(100)).is_ok());
//! # Ok::<(), nyx_core::Error>(())
//! ```

mod gcra;
mod keyed;
mod prefix;

pub use gcra::{Denied, Limiter, Quota};
pub use keyed::KeyedLimiter;
pub use prefix::IpPrefix;
