//! Rates held per connection: requests, and IDs.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A token bucket: `rate` tokens a second on average, bursts of `rate`.
#[derive(Debug)]
pub(crate) struct Bucket {
    rate: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    pub(crate) fn new(rate: f64) -> Bucket {
        Bucket {
            rate,
            tokens: rate,
            last: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let refill = now.duration_since(self.last).as_secs_f64() * self.rate;
        self.tokens = (self.tokens + refill).min(self.rate);
        self.last = now;
    }

    /// Takes `count` tokens if there are as many now.
    pub(crate) fn take(&mut self, count: f64) -> bool {
        self.refill();
        if self.tokens >= count {
            self.tokens -= count;
            true
        } else {
            false
        }
    }

    /// Takes up to `most` whole tokens (at least one), or says how long until one is there.
    fn take_up_to(&mut self, most: u64) -> Result<u64, Duration> {
        self.refill();
        if self.tokens < 1.0 {
            return Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate));
        }
        // Whole tokens below 2^53: exact in an f64.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let taken = (self.tokens.floor() as u64).min(most);
        #[allow(clippy::cast_precision_loss)]
        let spent = taken as f64;
        self.tokens -= spent;
        Ok(taken)
    }
}

/// The IDs one connection may still take: `--ids-rate` a second, bursts of as many.
#[derive(Clone, Debug)]
pub(crate) struct IdBudget {
    rate: u64,
    bucket: Arc<Mutex<Bucket>>,
}

impl IdBudget {
    pub(crate) fn new(rate: u64) -> IdBudget {
        #[allow(clippy::cast_precision_loss)]
        let bucket = Bucket::new(rate as f64);
        IdBudget {
            rate,
            bucket: Arc::new(Mutex::new(bucket)),
        }
    }

    /// The IDs a second.
    pub(crate) fn rate(&self) -> u64 {
        self.rate
    }

    /// Takes `count` IDs for a request that hands them out at once, if there are as many.
    pub(crate) fn take(&self, count: u64) -> bool {
        #[allow(clippy::cast_precision_loss)]
        let count = count as f64;
        self.bucket
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(count)
    }

    /// Gives back `count` IDs taken and not handed out.
    pub(crate) fn give_back(&self, count: u64) {
        let mut bucket = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        #[allow(clippy::cast_precision_loss)]
        let count = count as f64;
        bucket.tokens = (bucket.tokens + count).min(bucket.rate);
    }

    /// Takes up to `most` IDs for a stream (at least one), waiting for the first.
    pub(crate) async fn take_up_to(&self, most: u64) -> u64 {
        loop {
            let wait = self
                .bucket
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take_up_to(most);
            match wait {
                Ok(taken) => return taken,
                Err(wait) => tokio::time::sleep(wait.max(Duration::from_millis(1))).await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_gives_a_burst_of_its_rate_then_no_more() {
        let budget = IdBudget::new(1_000);
        assert!(budget.take(600));
        assert!(!budget.take(600), "1,200 IDs within a moment at 1,000 a second");
        assert!(budget.take(300));
    }

    #[test]
    fn ids_given_back_can_be_taken_again() {
        let budget = IdBudget::new(1_000);
        assert!(budget.take(1_000));
        budget.give_back(400);
        assert!(budget.take(400));
        assert!(!budget.take(100));
    }

    #[tokio::test]
    async fn a_stream_takes_what_is_there_and_waits_for_more() {
        let budget = IdBudget::new(1_000);
        assert_eq!(budget.take_up_to(5_000).await, 1_000);
        let start = Instant::now();
        let more = budget.take_up_to(5_000).await;
        assert!(more >= 1);
        // At least one ID's worth of time (1 ms) passed for the first to come back.
        assert!(
            start.elapsed() >= Duration::from_micros(900),
            "{:?}",
            start.elapsed()
        );
    }
}
