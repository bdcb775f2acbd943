//! Lines on standard error that can never stop the program: `eprintln!` panics when stderr
//! is closed (`benchctl check … 2>&1 | head -1`), and a closed stream is the reader going
//! away, not an error of the run. [`stderr_line!`](crate::stderr_line) writes and drops any
//! failure.

use std::io::Write;

/// Writes `args` and a line break to standard error, ignoring a failure to write.
pub fn write_line(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// `eprintln!` that never panics: a line on standard error, dropped when stderr is closed.
#[macro_export]
macro_rules! stderr_line {
    ($($arg:tt)*) => {
        $crate::stderr::write_line(format_args!($($arg)*))
    };
}
