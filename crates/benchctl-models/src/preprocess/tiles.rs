//! InternVL's dynamic tiling, as `t2v_metrics`' InternVL scorer (and the model cards'
//! `load_image`) compute it: `dynamic_preprocess` picks the grid of `tile × tile` tiles whose
//! aspect ratio is nearest the image's, at most `max_tiles` of them, resizes the whole image to
//! that grid (Pillow, one resize) and cuts it into tiles row by row; where the grid has more
//! than one tile, the whole image resized to one tile follows as a thumbnail.
//!
//! A preprocessor hands a model one image, so the tiles travel packed: the resized grid
//! (`columns · tile` × `rows · tile`), and below it one more band of `tile` rows whose first
//! `tile` columns hold the thumbnail (the rest black). [`TileLayout::of`] reads the grid back
//! from the packed size alone: a single tile is `tile × tile`, and every larger grid has a
//! thumbnail band.

use benchctl_cpu::Tier;

use super::resample::{resize_window, Filter};

/// `dynamic_preprocess`'s grid for a `width × height` image: `(columns, rows)`.
///
/// The candidates are every `(columns, rows)` with at most `max_tiles` tiles, in order of
/// their tile count; the first of the smallest aspect-ratio difference wins, except that a
/// later candidate of an equal difference (the same ratio, more tiles) replaces it while the
/// image's area exceeds half the candidate's pixels. Python orders candidates of one tile
/// count by its set's iteration; two of them never tie at the smallest difference (their
/// ratios differ and no midpoint between two is nearer to them than to every other
/// candidate), so their order here is columns first.
pub fn tile_grid(width: usize, height: usize, tile: usize, max_tiles: usize) -> (usize, usize) {
    let aspect = width as f64 / height as f64;
    let area = (width * height) as f64;
    let mut candidates: Vec<(usize, usize)> =
        (1..=max_tiles).flat_map(|columns| (1..=max_tiles / columns).map(move |rows| (columns, rows))).collect();
    candidates.sort_by_key(|&(columns, rows)| (columns * rows, columns));
    let (mut best, mut best_difference) = ((1, 1), f64::INFINITY);
    for (columns, rows) in candidates {
        let difference = (aspect - columns as f64 / rows as f64).abs();
        if difference < best_difference {
            (best, best_difference) = ((columns, rows), difference);
        } else if difference == best_difference && area > 0.5 * (tile * tile * columns * rows) as f64 {
            best = (columns, rows);
        }
    }
    best
}

/// Where the tiles lie in a packed image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileLayout {
    pub columns: usize,
    pub rows: usize,
    /// Whether a thumbnail band follows the grid (every grid of more than one tile).
    pub thumbnail: bool,
}

impl TileLayout {
    /// The layout of a `width × height` image's tiles.
    pub fn for_image(width: usize, height: usize, tile: usize, max_tiles: usize) -> Self {
        let (columns, rows) = tile_grid(width, height, tile, max_tiles);
        Self { columns, rows, thumbnail: columns * rows > 1 }
    }

    /// The layout a packed image of `width × height` holds; `None` where no layout packs to it.
    pub fn of(width: usize, height: usize, tile: usize) -> Option<Self> {
        if tile == 0 || width == 0 || height == 0 || !width.is_multiple_of(tile) || !height.is_multiple_of(tile) {
            return None;
        }
        if (width, height) == (tile, tile) {
            return Some(Self { columns: 1, rows: 1, thumbnail: false });
        }
        let (columns, rows) = (width / tile, height / tile - 1);
        (rows > 0 && columns * rows > 1).then_some(Self { columns, rows, thumbnail: true })
    }

    /// The packed image's `(width, height)`.
    pub fn packed_size(&self, tile: usize) -> (usize, usize) {
        (self.columns * tile, (self.rows + usize::from(self.thumbnail)) * tile)
    }

    /// The tiles a model sees: the grid's, row by row, then the thumbnail.
    pub fn tiles(&self) -> usize {
        self.columns * self.rows + usize::from(self.thumbnail)
    }

    /// Each tile's `(left, top)` in the packed image, in the model's order.
    pub fn origins(&self, tile: usize) -> Vec<(usize, usize)> {
        let grid = (0..self.columns * self.rows).map(|i| ((i % self.columns) * tile, (i / self.columns) * tile));
        grid.chain(self.thumbnail.then_some((0, self.rows * tile))).collect()
    }
}

/// The packed RGB8 image of a `w × h` RGB8 image's tiles (see the module's docs), each resize
/// Pillow's.
pub fn pack(tier: Tier, rgb: &[u8], (w, h): (usize, usize), tile: usize, max_tiles: usize, filter: Filter) -> Vec<u8> {
    let layout = TileLayout::for_image(w, h, tile, max_tiles);
    let (grid_w, grid_h) = (layout.columns * tile, layout.rows * tile);
    let mut packed = resize_window(tier, rgb, 3, (w, h), (grid_w, grid_h), 0..grid_w, 0..grid_h, filter);
    if layout.thumbnail {
        let thumbnail = resize_window(tier, rgb, 3, (w, h), (tile, tile), 0..tile, 0..tile, filter);
        let mut band = vec![0u8; grid_w * tile * 3];
        for (row, pixels) in thumbnail.chunks_exact(tile * 3).enumerate() {
            band[row * grid_w * 3..row * grid_w * 3 + tile * 3].copy_from_slice(pixels);
        }
        packed.extend_from_slice(&band);
    }
    packed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_layout_reads_back_from_its_packed_size() {
        for (w, h) in [(50, 50), (200, 90), (33, 90), (640, 640), (90, 70), (1, 1000), (1000, 1)] {
            let layout = TileLayout::for_image(w, h, 448, 12);
            let (pw, ph) = layout.packed_size(448);
            assert_eq!(TileLayout::of(pw, ph, 448), Some(layout), "{w}×{h}");
            assert_eq!(layout.origins(448).len(), layout.tiles());
        }
        assert_eq!(TileLayout::of(448, 896, 448), None, "a lone tile has no thumbnail band");
        assert_eq!(TileLayout::of(448, 449, 448), None);
    }
}
