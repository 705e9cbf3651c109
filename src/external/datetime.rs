//! An ID's creation time as a time type: [`SystemTime`], and with the `chrono` and `time`
//! features `chrono::DateTime<Utc>` and `time::OffsetDateTime`.
//!
//! Each is the start of the ID's tick, read through [`Layout::try_decode`], so an ID with
//! bits above the layout's width is an error rather than a date past the layout's end.

use crate::RangeError;
use crate::format::id::Id;
use crate::format::layout::Layout;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

impl Layout {
    /// The start of the ID's tick as a [`SystemTime`].
    ///
    /// # Errors
    ///
    /// [`RangeError::IdOutOfLayout`] for an ID with bits set above the layout's width;
    /// [`RangeError::TimeOutOfRange`] where the platform's `SystemTime` cannot hold the time
    /// (never for the presets).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout};
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let created = Layout::TWITTER.system_time(Id::new(1050118621198921728))?;
    /// assert_eq!(created, UNIX_EPOCH + Duration::from_millis(1539202764211));
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    pub fn system_time(&self, id: Id) -> Result<SystemTime, RangeError> {
        after(UNIX_EPOCH, self.try_decode(id)?.unix_ms)
    }

    /// The start of the ID's tick as a `chrono::DateTime<Utc>` (feature `chrono`).
    ///
    /// # Errors
    ///
    /// [`RangeError::IdOutOfLayout`] for an ID with bits set above the layout's width;
    /// [`RangeError::TimeOutOfRange`] for a time past chrono's last date (only custom layouts
    /// reach it).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout};
    ///
    /// let created = Layout::DISCORD.chrono_utc(Id::new(175928847299117063))?;
    /// assert_eq!(created.to_rfc3339_opts(chrono::SecondsFormat::Millis, true), "2016-04-30T11:18:25.796Z");
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    #[cfg(feature = "chrono")]
    pub fn chrono_utc(&self, id: Id) -> Result<chrono::DateTime<chrono::Utc>, RangeError> {
        let unix_ms = self.try_decode(id)?.unix_ms;
        i64::try_from(unix_ms)
            .ok()
            .and_then(chrono::DateTime::from_timestamp_millis)
            .ok_or(RangeError::TimeOutOfRange {
                unix_ms,
                target: "chrono::DateTime<Utc>",
            })
    }

    /// The start of the ID's tick as a `time::OffsetDateTime` in UTC (feature `time`).
    ///
    /// # Errors
    ///
    /// [`RangeError::IdOutOfLayout`] for an ID with bits set above the layout's width;
    /// [`RangeError::TimeOutOfRange`] for a time past the `time` crate's last date (year 9999
    /// without its `large-dates` feature; only custom layouts reach it).
    ///
    /// # Examples
    ///
    /// ```
    /// use atomflake::{Id, Layout};
    ///
    /// let created = Layout::DISCORD.offset_date_time(Id::new(175928847299117063))?;
    /// assert_eq!(created.unix_timestamp_nanos(), 1_462_015_105_796_000_000);
    /// assert_eq!((created.year(), created.millisecond()), (2016, 796));
    /// # Ok::<(), atomflake::Error>(())
    /// ```
    #[cfg(feature = "time")]
    pub fn offset_date_time(&self, id: Id) -> Result<time::OffsetDateTime, RangeError> {
        let unix_ms = self.try_decode(id)?.unix_ms;
        time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(unix_ms) * 1_000_000).map_err(|_| {
            RangeError::TimeOutOfRange {
                unix_ms,
                target: "time::OffsetDateTime",
            }
        })
    }
}

/// `unix_ms` milliseconds after `base`, or [`RangeError::TimeOutOfRange`].
fn after(base: SystemTime, unix_ms: u64) -> Result<SystemTime, RangeError> {
    base.checked_add(Duration::from_millis(unix_ms))
        .ok_or(RangeError::TimeOutOfRange {
            unix_ms,
            target: "SystemTime",
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A layout whose times are past chrono's and time's last dates.
    #[cfg(any(feature = "chrono", feature = "time"))]
    fn far_future() -> Layout {
        Layout::builder()
            .timestamp_bits(41)
            .node_bits(10)
            .sequence_bits(12)
            .epoch_ms(u64::MAX - (1 << 41))
            .build()
            .unwrap()
    }

    #[test]
    fn system_time_is_the_tick_start() {
        let l = Layout::SONYFLAKE;
        let id = l.last_id_at(l.epoch_ms() + 25).unwrap();
        assert_eq!(
            l.system_time(id),
            Ok(UNIX_EPOCH + Duration::from_millis(l.epoch_ms() + 20))
        );
    }

    #[test]
    fn system_time_errors() {
        assert_eq!(
            Layout::TWITTER.system_time(Id::new(u64::MAX)),
            Err(RangeError::IdOutOfLayout {
                id: u64::MAX,
                max: i64::MAX as u64
            })
        );
        // Linux's SystemTime holds every u64 of ms after 1970; one near its end does not.
        let near_the_end = UNIX_EPOCH + Duration::from_secs(i64::MAX as u64 - 1000);
        let err = after(near_the_end, u64::MAX).unwrap_err();
        assert_eq!(
            err,
            RangeError::TimeOutOfRange {
                unix_ms: u64::MAX,
                target: "SystemTime"
            }
        );
        assert_eq!(
            err.to_string(),
            "time 18446744073709551615 ms is out of range for SystemTime"
        );
    }

    /// The errors every conversion shares: an ID outside the layout, a time past the
    /// target type's last date.
    #[cfg(any(feature = "chrono", feature = "time"))]
    fn check_errors<T: core::fmt::Debug + PartialEq>(
        convert: impl Fn(&Layout, Id) -> Result<T, RangeError>,
        target: &'static str,
    ) {
        assert_eq!(
            convert(&Layout::TWITTER, Id::new(u64::MAX)),
            Err(RangeError::IdOutOfLayout {
                id: u64::MAX,
                max: i64::MAX as u64
            })
        );
        let far = far_future();
        let err = convert(&far, Id::new(0)).unwrap_err();
        assert_eq!(
            err,
            RangeError::TimeOutOfRange {
                unix_ms: far.epoch_ms(),
                target
            }
        );
        assert_eq!(
            err.to_string(),
            format!("time 18446741874686296063 ms is out of range for {target}")
        );
    }

    #[cfg(feature = "chrono")]
    #[test]
    fn chrono_utc() {
        let t = Layout::TWITTER.chrono_utc(Id::new(1_050_118_621_198_921_728));
        assert_eq!(t.map(|t| t.timestamp_millis()), Ok(1_539_202_764_211));
        check_errors(Layout::chrono_utc, "chrono::DateTime<Utc>");
    }

    #[cfg(feature = "time")]
    #[test]
    fn offset_date_time() {
        let t = Layout::TWITTER
            .offset_date_time(Id::new(1_050_118_621_198_921_728))
            .unwrap();
        assert_eq!(t.unix_timestamp_nanos(), 1_539_202_764_211_000_000);
        assert_eq!(t.offset(), time::UtcOffset::UTC);
        check_errors(Layout::offset_date_time, "time::OffsetDateTime");
    }
}
