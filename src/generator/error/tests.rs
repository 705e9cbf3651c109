//! Whether each error says retrying can help.

use super::*;
use std::io;

#[test]
fn each_error_says_whether_retrying_can_help() {
    let io = |kind| IoCause::from(io::Error::from(kind));
    let high_water = |kind| HighWaterError::Io {
        path: "m".into(),
        action: "write",
        cause: io(kind),
    };
    let transient = [
        MintError::SequenceExhausted {
            tick: 1,
            retry_after: Duration::from_millis(1),
        },
        MintError::MarkPending {
            retry_after: Duration::from_millis(2),
        },
        MintError::Store(StoreError::failed("away").retrying_in(Duration::from_millis(3))),
        MintError::Store(StoreError::lapsed("lapsed").retrying_in(Duration::from_millis(4))),
        MintError::Store(
            StoreError::failed(high_water(io::ErrorKind::StorageFull)).retrying_in(Duration::from_millis(5)),
        ),
    ];
    let permanent = [
        MintError::ClockOutOfSpan(RangeError::TimeBeforeEpoch {
            unix_ms: 1,
            epoch_ms: 2,
        }),
        MintError::SpanSpent { end_ms: 1 },
        MintError::Store(StoreError::lost("taken").retrying_in(Duration::from_millis(3))),
        MintError::Store(
            StoreError::failed(high_water(io::ErrorKind::PermissionDenied))
                .retrying_in(Duration::from_millis(3)),
        ),
        MintError::Forked { parent: 1, child: 2 },
        MintError::KeeperPanicked { message: "m".into() },
    ];
    // Each transient one says when to try again (as the keeper's store errors do), and
    // no permanent one does.
    let retry_after: Vec<_> = transient.iter().map(MintError::retry_after).collect();
    let ms = |ms| Some(Duration::from_millis(ms));
    assert_eq!(retry_after, [ms(1), ms(2), ms(3), ms(4), ms(5)]);
    for error in &transient {
        assert!(error.is_transient(), "{error:?}");
        assert!(crate::Error::from(error.clone()).is_transient(), "{error:?}");
    }
    for error in &permanent {
        assert!(!error.is_transient(), "{error:?}");
        assert_eq!(error.retry_after(), None, "{error:?}");
    }
    assert_eq!(
        StoreError::failed("away").retry_after(),
        None,
        "a store's own error says nothing"
    );
    let transient = [
        BuildError::HighWater(high_water(io::ErrorKind::Interrupted)),
        BuildError::Store(StoreError::failed("away")),
        BuildError::Ahead {
            store: "s".into(),
            mark_ms: 2,
            clock_ms: 1,
            max_wait: Duration::from_secs(10),
        },
        BuildError::KeeperSpawn {
            cause: io(io::ErrorKind::WouldBlock),
        },
    ];
    let permanent = [
        BuildError::NodeOutOfRange {
            node: 1024,
            max: 1023,
        },
        BuildError::NoNodes,
        BuildError::DuplicateNode { node: 1 },
        BuildError::NodeNotHeld {
            node: 1,
            held: vec![2],
        },
        BuildError::LeadOutOfRange {
            lead: Duration::from_nanos(1),
            tick_ms: 1,
            max: Duration::from_secs(60),
        },
        BuildError::HighWater(HighWaterError::Locked { path: "m".into() }),
        BuildError::HighWater(high_water(io::ErrorKind::PermissionDenied)),
        BuildError::Store(StoreError::lost("taken")),
    ];
    // Each transient one says when to build again: the clock's lag behind the mark, or
    // the default when nothing says.
    let retry_after: Vec<_> = transient.iter().map(BuildError::retry_after).collect();
    let unknown = Some(BuildError::RETRY_AFTER_UNKNOWN);
    assert_eq!(retry_after, [unknown, unknown, ms(1), unknown]);
    for error in &transient {
        assert!(error.is_transient(), "{error:?}");
        assert!(!error.is_invalid_input(), "{error:?}");
    }
    for error in &permanent {
        assert!(!error.is_transient(), "{error:?}");
        assert!(!crate::Error::from(error.clone()).is_transient(), "{error:?}");
        assert_eq!(error.retry_after(), None, "{error:?}");
    }
    // The caller's input: the first five; a locked, unwritable or lost store is the world's.
    let invalid_input: Vec<bool> = permanent.iter().map(BuildError::is_invalid_input).collect();
    assert_eq!(invalid_input, [true, true, true, true, true, false, false, false]);
}
