//! Tables as benchctl prints them: one style, fitted to the terminal. On a terminal, a table
//! wider than it wraps its cells to its width (or to `COLUMNS` where that is set, for a pipe
//! or a CI log); `--wide` keeps every row on one line.

use std::sync::atomic::{AtomicBool, Ordering};

use comfy_table::{presets::UTF8_FULL_CONDENSED, Cell, CellAlignment, ContentArrangement, Table};

static WIDE: AtomicBool = AtomicBool::new(false);

/// Keeps every row on one line, whatever the terminal's width (`--wide`).
pub fn set_wide(wide: bool) {
    WIDE.store(wide, Ordering::Relaxed);
}

/// The width to fit tables to: `COLUMNS` where set, else the terminal's (`None`: unlimited).
fn columns() -> Option<u16> {
    std::env::var("COLUMNS").ok()?.trim().parse().ok().filter(|&w| w >= 20)
}

/// A table with `header`, in benchctl's style and fitted to the output's width.
pub fn new<S: Into<Cell>>(header: impl IntoIterator<Item = S>) -> Table {
    let mut table = Table::new();
    table.load_style(UTF8_FULL_CONDENSED).set_header(header);
    if !WIDE.load(Ordering::Relaxed) {
        table.set_content_arrangement(ContentArrangement::Dynamic);
        if let Some(width) = columns() {
            table.set_width(width);
        }
    }
    table
}

/// A right-aligned cell (numbers).
pub fn right(text: impl Into<String>) -> Cell {
    Cell::new(text.into()).set_alignment(CellAlignment::Right)
}
