//! Cron schedules for [`Backup`](crate::Backup) plugins: the standard
//! five-field syntax, evaluated in UTC against the host's `now`.
//!
//! A plugin parses its schedule on every call (each call gets a fresh
//! instance), so parsing is a few bit operations per field, not a table of
//! every possible year: general-purpose cron crates spent up to half of a
//! backup call just parsing `0 */6 * * *`.

use std::{fmt, str::FromStr};

use chrono::{DateTime, Datelike, NaiveDate, TimeDelta, Timelike, Utc};

/// How far [`Schedule::next_after`] and [`Schedule::latest_at_or_before`]
/// look: every schedule [`Schedule::from_str`] accepts fires within any
/// eight years (a 29 February can be eight years from the previous one).
const SEARCH_DAYS: u32 = 8 * 366;

/// A parsed cron schedule: `minute hour day-of-month month day-of-week`.
///
/// Each field takes `*`, a number, a range `a-b`, a step `*/n`, `a-b/n` or
/// `a/n`, and comma-separated lists of these. Months and weekdays also take
/// three-letter English names (`jan`, `mon`, any case); Sunday is `0` or
/// `7`. `@yearly` (`@annually`), `@monthly`, `@weekly`, `@daily`
/// (`@midnight`) and `@hourly` are shorthands. As in Vixie cron, when both
/// day fields are restricted a day matches if either does.
///
/// ```
/// use wasmop_sdk::Schedule;
/// use wasmop_sdk::chrono::{DateTime, Utc};
///
/// let every_six_hours: Schedule = "0 */6 * * *".parse().expect("valid");
/// let now: DateTime<Utc> = "2025-03-01T07:30:00Z".parse().expect("time");
/// let last = every_six_hours.latest_at_or_before(now).expect("fires");
/// assert_eq!(last.to_rfc3339(), "2025-03-01T06:00:00+00:00");
/// let next = every_six_hours.next_after(now).expect("fires");
/// assert_eq!(next.to_rfc3339(), "2025-03-01T12:00:00+00:00");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    day_of_month_restricted: bool,
    day_of_week_restricted: bool,
}

/// Why a text is not a schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleError(String);

impl fmt::Display for ScheduleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScheduleError {}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const WEEKDAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

/// One field's name, bounds and names (index 0 is the value `min`).
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY_OF_MONTH: Field = Field {
    name: "day of month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &MONTHS,
};
const DAY_OF_WEEK: Field = Field {
    name: "day of week",
    min: 0,
    max: 7,
    names: &WEEKDAYS,
};

impl FromStr for Schedule {
    type Err = ScheduleError;

    fn from_str(text: &str) -> Result<Self, ScheduleError> {
        let text = text.trim();
        let expanded = match text.to_ascii_lowercase().as_str() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            other if other.starts_with('@') => {
                return Err(ScheduleError(format!("unknown shorthand {text:?}")));
            }
            _ => text,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        let [minute, hour, day_of_month, month, day_of_week] = fields[..] else {
            return Err(ScheduleError(format!(
                "expected 5 fields (minute hour day-of-month month day-of-week), got {}",
                fields.len()
            )));
        };
        let mut days_of_week = parse_field(day_of_week, &DAY_OF_WEEK)?;
        // 7 is another name for Sunday.
        if days_of_week & (1 << 7) != 0 {
            days_of_week = (days_of_week & !(1 << 7)) | 1;
        }
        let schedule = Schedule {
            minutes: parse_field(minute, &MINUTE)?,
            hours: parse_field(hour, &HOUR)?,
            days_of_month: parse_field(day_of_month, &DAY_OF_MONTH)?,
            months: parse_field(month, &MONTH)?,
            days_of_week,
            day_of_month_restricted: !day_of_month.starts_with('*'),
            day_of_week_restricted: !day_of_week.starts_with('*'),
        };
        if !schedule.can_fire() {
            return Err(ScheduleError(format!(
                "{text:?} never fires: no month it names has the days it names"
            )));
        }
        Ok(schedule)
    }
}

fn parse_field(text: &str, field: &Field) -> Result<u64, ScheduleError> {
    let mut bits = 0u64;
    for item in text.split(',') {
        let bad = |why: &str| {
            ScheduleError(format!(
                "{} field {text:?}: {why} (allowed: {} to {})",
                field.name, field.min, field.max
            ))
        };
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => match step.parse::<u32>() {
                Ok(step) if step > 0 => (range, Some(step)),
                _ => return Err(bad(&format!("step {step:?} is not a positive number"))),
            },
            None => (item, None),
        };
        let value = |text: &str| -> Result<u32, ScheduleError> {
            if let Ok(number) = text.parse::<u32>() {
                return Ok(number);
            }
            field
                .names
                .iter()
                .position(|name| name.eq_ignore_ascii_case(text))
                .and_then(|index| u32::try_from(index).ok())
                .map(|index| index + field.min)
                .ok_or_else(|| bad(&format!("{text:?} is not a number or name")))
        };
        let (low, high) = if range == "*" {
            (field.min, field.max)
        } else if let Some((low, high)) = range.split_once('-') {
            (value(low)?, value(high)?)
        } else {
            let low = value(range)?;
            // `a/n` means from a to the end, every n.
            (low, if step.is_some() { field.max } else { low })
        };
        if low < field.min || high > field.max {
            return Err(bad(&format!("{range:?} is out of range")));
        }
        if low > high {
            return Err(bad(&format!("{range:?} runs backwards")));
        }
        let step = step.unwrap_or(1);
        let mut v = low;
        while v <= high {
            bits |= 1 << v;
            v += step;
        }
    }
    Ok(bits)
}

impl Schedule {
    /// The first tick strictly after `time`.
    ///
    /// `None` only for a schedule that names 29 February and nothing else
    /// when no leap day falls in the next eight years, which cannot happen
    /// before 2096.
    pub fn next_after(&self, time: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = truncate_to_minute(time).checked_add_signed(TimeDelta::minutes(1))?;
        let mut date = start.date_naive();
        let mut from = start.hour() * 60 + start.minute();
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(date)
                && let Some(minute) = self.first_minute_from(from)
            {
                return at(date, minute);
            }
            date = date.succ_opt()?;
            from = 0;
        }
        None
    }

    /// The last tick at or before `time`: the slot that is due at `time`.
    ///
    /// `None` if the schedule did not fire in the eight years before `time`.
    pub fn latest_at_or_before(&self, time: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let start = truncate_to_minute(time);
        let mut date = start.date_naive();
        let mut upto = start.hour() * 60 + start.minute();
        for _ in 0..SEARCH_DAYS {
            if self.day_matches(date)
                && let Some(minute) = self.last_minute_upto(upto)
            {
                return at(date, minute);
            }
            date = date.pred_opt()?;
            upto = 24 * 60 - 1;
        }
        None
    }

    fn day_matches(&self, date: NaiveDate) -> bool {
        if self.months & (1 << date.month()) == 0 {
            return false;
        }
        let by_month = self.days_of_month & (1 << date.day()) != 0;
        let by_week = self.days_of_week & (1 << date.weekday().num_days_from_sunday()) != 0;
        // A field starting with `*` (`*`, `*/2`) is unrestricted and ANDs;
        // two restricted fields OR, as Vixie cron does.
        if self.day_of_month_restricted && self.day_of_week_restricted {
            by_month || by_week
        } else {
            by_month && by_week
        }
    }

    /// The first matching minute of the day at or after minute `from`.
    fn first_minute_from(&self, from: u32) -> Option<u32> {
        (from / 60..24)
            .filter(|hour| self.hours & (1 << hour) != 0)
            .find_map(|hour| {
                let start = if hour == from / 60 { from % 60 } else { 0 };
                let later = self.minutes >> start;
                (later != 0).then(|| hour * 60 + start + later.trailing_zeros())
            })
    }

    /// The last matching minute of the day at or before minute `upto`.
    fn last_minute_upto(&self, upto: u32) -> Option<u32> {
        (0..=upto / 60)
            .rev()
            .filter(|hour| self.hours & (1 << hour) != 0)
            .find_map(|hour| {
                let end = if hour == upto / 60 { upto % 60 } else { 59 };
                let earlier = self.minutes & (u64::MAX >> (63 - end));
                (earlier != 0).then(|| hour * 60 + 63 - earlier.leading_zeros())
            })
    }

    /// Whether some day can ever match: a day-of-month restriction alone may
    /// name only days its months never have (`0 0 31 2 *`).
    fn can_fire(&self) -> bool {
        if !self.day_of_month_restricted || self.day_of_week_restricted {
            return true;
        }
        // Leap years count: 29 February does come.
        const DAYS_IN_MONTH: [u32; 12] = [31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
        (1..=12u32).any(|month| {
            let days = DAYS_IN_MONTH[(month - 1) as usize];
            self.months & (1 << month) != 0 && self.days_of_month & ((2u64 << days) - 2) != 0
        })
    }
}

fn truncate_to_minute(time: DateTime<Utc>) -> DateTime<Utc> {
    time.with_second(0)
        .and_then(|t| t.with_nanosecond(0))
        .unwrap_or(time)
}

fn at(date: NaiveDate, minute_of_day: u32) -> Option<DateTime<Utc>> {
    date.and_hms_opt(minute_of_day / 60, minute_of_day % 60, 0)
        .map(|t| t.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn time(text: &str) -> DateTime<Utc> {
        text.parse().expect("RFC 3339")
    }

    fn schedule(text: &str) -> Schedule {
        text.parse().expect("valid schedule")
    }

    #[test]
    fn next_and_latest_ticks() {
        // (schedule, now, latest at or before, next after)
        let cases = [
            (
                "0 */6 * * *",
                "2025-03-01T07:30:00Z",
                "2025-03-01T06:00:00Z",
                "2025-03-01T12:00:00Z",
            ),
            (
                "0 */6 * * *",
                "2025-03-01T06:00:00Z",
                "2025-03-01T06:00:00Z",
                "2025-03-01T12:00:00Z",
            ),
            (
                "*/15 * * * *",
                "2025-03-01T07:59:59Z",
                "2025-03-01T07:45:00Z",
                "2025-03-01T08:00:00Z",
            ),
            (
                "30 2 * * *",
                "2025-03-01T01:00:00Z",
                "2025-02-28T02:30:00Z",
                "2025-03-01T02:30:00Z",
            ),
            (
                "@hourly",
                "2025-12-31T23:30:00Z",
                "2025-12-31T23:00:00Z",
                "2026-01-01T00:00:00Z",
            ),
            (
                "@yearly",
                "2025-06-15T00:00:00Z",
                "2025-01-01T00:00:00Z",
                "2026-01-01T00:00:00Z",
            ),
            (
                "0 0 29 2 *",
                "2025-01-01T00:00:00Z",
                "2024-02-29T00:00:00Z",
                "2028-02-29T00:00:00Z",
            ),
            // 2025-03-01 is a Saturday.
            (
                "0 9 * * mon-fri",
                "2025-03-01T12:00:00Z",
                "2025-02-28T09:00:00Z",
                "2025-03-03T09:00:00Z",
            ),
            (
                "0 0 * * 7",
                "2025-03-01T12:00:00Z",
                "2025-02-23T00:00:00Z",
                "2025-03-02T00:00:00Z",
            ),
            // Both day fields restricted: the 15th or any Monday.
            (
                "0 0 15 * 1",
                "2025-03-04T00:00:00Z",
                "2025-03-03T00:00:00Z",
                "2025-03-10T00:00:00Z",
            ),
            (
                "0 0 15 * 1",
                "2025-03-14T00:00:00Z",
                "2025-03-10T00:00:00Z",
                "2025-03-15T00:00:00Z",
            ),
            (
                "5,10-12,50/5 3 1 JAN,jul *",
                "2025-07-01T03:11:30Z",
                "2025-07-01T03:11:00Z",
                "2025-07-01T03:12:00Z",
            ),
            (
                "5,10-12,50/5 3 1 JAN,jul *",
                "2025-07-01T03:13:00Z",
                "2025-07-01T03:12:00Z",
                "2025-07-01T03:50:00Z",
            ),
            (
                "5,10-12,50/5 3 1 JAN,jul *",
                "2025-07-01T03:59:00Z",
                "2025-07-01T03:55:00Z",
                "2026-01-01T03:05:00Z",
            ),
            // `*/2` starts with `*`: it still restricts, and ANDs with the weekday.
            (
                "0 0 */2 * *",
                "2025-03-02T12:00:00Z",
                "2025-03-01T00:00:00Z",
                "2025-03-03T00:00:00Z",
            ),
        ];
        for (text, now, latest, next) in cases {
            let s = schedule(text);
            assert_eq!(
                s.latest_at_or_before(time(now)),
                Some(time(latest)),
                "{text} latest before {now}"
            );
            assert_eq!(
                s.next_after(time(now)),
                Some(time(next)),
                "{text} next after {now}"
            );
        }
    }

    #[test]
    fn a_tick_is_its_own_latest_but_not_its_next() {
        let s = schedule("0 0 * * *");
        let midnight = time("2025-03-01T00:00:00Z");
        assert_eq!(s.latest_at_or_before(midnight), Some(midnight));
        assert_eq!(s.next_after(midnight), Some(time("2025-03-02T00:00:00Z")));
    }

    #[test]
    fn bad_schedules_say_which_field_and_why() {
        let cases = [
            ("every day", "expected 5 fields"),
            ("61 * * * *", "minute field \"61\""),
            ("* 24 * * *", "hour field"),
            ("* * 0 * *", "day of month field"),
            ("* * * 13 *", "month field"),
            ("* * * * 8", "day of week field"),
            ("*/0 * * * *", "step \"0\""),
            ("5-1 * * * *", "runs backwards"),
            ("* * * foo *", "\"foo\" is not a number or name"),
            ("@fortnightly", "unknown shorthand"),
            ("0 0 31 2 *", "never fires"),
            ("0 0 30,31 2 *", "never fires"),
        ];
        for (text, expected) in cases {
            let err = text.parse::<Schedule>().expect_err(text);
            assert!(err.to_string().contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn a_day_either_field_names_can_fire_in_a_short_month() {
        // The 31st never comes in February, but Mondays do.
        let s = schedule("0 0 31 2 mon");
        assert_eq!(
            s.next_after(time("2025-01-01T00:00:00Z")),
            Some(time("2025-02-03T00:00:00Z"))
        );
    }
}
